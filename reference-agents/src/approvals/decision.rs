//! A decision on a request, the same for both stores: its checks, and what
//! it makes of the request.

use super::binding::principal;
use super::rule::GrantKind;
use super::store::{may_view, refused, Approval, DecideBody, Decided, Refused, State};
use crate::rules::Caller;

impl Approval {
    /// The request once `by` decided it with `body` at `now`.
    pub(super) fn apply_decision(&mut self, by: &str, body: &DecideBody, now: u64) {
        self.state = if body.grant == GrantKind::Deny {
            State::Denied
        } else {
            State::Allowed
        };
        self.version += 1;
        self.decision = Some(Decided {
            by: by.to_string(),
            grant: body.grant,
            reason: body.reason.clone(),
            alternative: body.alternative.clone(),
            constraints: body.constraints.clone(),
            at_ms: now,
        });
    }
}

/// The checks of a decision on request `a`, in order (404, 403, 409, 412,
/// 400), for both stores: the grant's key, its expiry and the approver's
/// principal.
pub(super) fn decision(
    a: &Approval,
    id: &str,
    approver: &Caller,
    body: &DecideBody,
    if_match: Option<&str>,
    now: u64,
) -> Result<(String, u64, String), Refused> {
    if !may_view(a, approver) {
        return Err(refused(404, "unknown_approval", format!("no approval {id}")));
    }
    let who = principal(approver);
    if !a.terms.approvers.admit(approver) {
        return Err(refused(
            403,
            "not_an_approver",
            format!("{who} may not decide approval {id} (rule {})", a.rule),
        ));
    }
    if who == a.binding.principal && !a.terms.self_approve {
        return Err(refused(
            403,
            "self_approval",
            format!("{who} asked for approval {id} and may not decide it (rule {})", a.rule),
        ));
    }
    match a.state {
        State::Pending => {}
        State::Expired => return Err(refused(409, "expired", format!("approval {id} expired undecided"))),
        _ => {
            return Err(refused(
                409,
                "already_decided",
                format!("approval {id} was already decided ({})", a.state.as_str()),
            ))
        }
    }
    if let Some(tag) = if_match {
        if tag.trim() != "*" && tag.trim() != a.etag() {
            return Err(refused(
                412,
                "stale_view",
                format!(
                    "approval {id} changed since it was read (ETag {}): read it again",
                    a.etag()
                ),
            ));
        }
    }
    if !a.terms.grants.contains(&body.grant) {
        return Err(refused(
            400,
            "grant_not_offered",
            format!(
                "rule {} does not offer {} for approval {id}",
                a.rule,
                body.grant.as_str()
            ),
        ));
    }
    match (body.grant, &body.constraints) {
        (GrantKind::AllowConstrained, None) => {
            return Err(refused(400, "bad_decision", "allow_constrained needs constraints"))
        }
        (GrantKind::AllowConstrained, Some(c)) => c.validate().map_err(|e| refused(400, "bad_decision", e))?,
        (_, Some(_)) => {
            return Err(refused(
                400,
                "bad_decision",
                "constraints are only for allow_constrained",
            ))
        }
        _ => {}
    }
    if body.grant == GrantKind::AllowSession && a.binding.session.is_none() {
        return Err(refused(
            400,
            "no_session",
            format!("approval {id}'s call has no session: allow_session cannot apply"),
        ));
    }
    let long = |ttl_s: Option<u64>| {
        let cap = a.terms.always_max.as_millis() as u64;
        now.saturating_add(ttl_s.map_or(cap, |s| (s.saturating_mul(1000)).min(cap)))
    };
    let (key, expires_ms) = match body.grant {
        GrantKind::AllowOnce => (a.binding.call_key(), now.saturating_add(a.terms.ttl.as_millis() as u64)),
        GrantKind::Deny => (a.binding.call_key(), a.expires_ms.max(now.saturating_add(1))),
        GrantKind::AllowSession => (
            a.binding.session_key().unwrap_or_default(),
            now.saturating_add(a.terms.always_max.as_millis() as u64),
        ),
        GrantKind::AllowAlways | GrantKind::AllowConstrained => (a.binding.tool_key(), long(body.ttl_s)),
    };
    Ok((key, expires_ms, who))
}

/// Who decides a request its rule denies at expiry (`on_expiry: deny`).
pub(super) const AT_EXPIRY: &str = "expiry";

/// The denial of request `a` at its expiry (`on_expiry: deny`), at `now`:
/// the decision, the grant's key (the exact call) and its expiry (one more
/// `ttl_s`, so the caller's retry hears the reason).
pub(super) fn expiry_denial(a: &Approval, now: u64) -> (DecideBody, String, u64) {
    let body = DecideBody {
        grant: GrantKind::Deny,
        reason: Some(a.terms.expiry_reason()),
        alternative: None,
        constraints: None,
        ttl_s: None,
    };
    let until = now.saturating_add(a.terms.ttl.as_millis() as u64).max(now + 1);
    (body, a.binding.call_key(), until)
}
