//! `approve` rules on A2A sends: the send is bound (its params in the 1.0
//! shape, without the message's own `messageId`, which each retry renews)
//! and checked against the agent's approvals; a send waiting for a
//! decision, or denied by an approver, is refused in the binding's error
//! form, with `approval_id` and `approval_url` in the error's metadata.

use serde_json::{json, Value};

use super::call::Call;
use super::errors::{Kind, Refusal};
use crate::approvals::{Approvals, Check};
use crate::rules::{ApprovalNeed, Caller};
use policy_agents::{PolicyError, RequestContext};

/// What a send is bound by: its params without the message's id.
fn arguments(call: &Call) -> Value {
    let mut p = call.params.clone();
    if let Some(m) = p.get_mut("message").and_then(Value::as_object_mut) {
        m.remove("messageId");
    }
    p
}

/// Checks a send that `need` governs.
pub(super) async fn check(
    approvals: Option<&Approvals>,
    need: &ApprovalNeed<'_>,
    caller: &Caller,
    ctx: &RequestContext<'_>,
    call: &Call,
    skill: &str,
) -> Result<Check, PolicyError> {
    let args = arguments(call);
    let session = call.message().and_then(|m| m.get("contextId")).and_then(Value::as_str);
    crate::approvals::check_call(approvals, need, caller, ctx, &call.method, skill, &args, session).await
}

/// The refusal for a check that did not grant, and the HTTP status it
/// asks for instead of the binding's (429 beyond the pending bounds).
pub(super) fn refusal(check: &Check, rule: &str, skill: &str, page: &str) -> Option<(Refusal<'static>, Option<u16>)> {
    match check {
        Check::Granted { .. } => None,
        Check::Pending { id, expires_ms, .. } => {
            let url = format!("{page}#id={id}");
            Some((
                Refusal {
                    kind: Kind::Denied,
                    reason: "APPROVAL_REQUIRED",
                    message: format!("approval required for skill {skill}: open {url}"),
                    metadata: json!({"rule": rule, "skill": skill, "approval_id": id, "approval_url": url,
                        "expires_ms": expires_ms.to_string()}),
                },
                None,
            ))
        }
        Check::Denied {
            id,
            reason,
            alternative,
        } => Some((
            Refusal {
                kind: Kind::Denied,
                reason: "APPROVAL_DENIED",
                message: match reason {
                    Some(r) => format!("skill {skill} denied: {r}"),
                    None => format!("skill {skill} denied by an approver"),
                },
                metadata: json!({"rule": rule, "skill": skill, "approval_id": id,
                    "alternative": alternative.clone().unwrap_or_default()}),
            },
            None,
        )),
        Check::Limited(scope) => Some((
            Refusal {
                kind: Kind::Denied,
                reason: "APPROVAL_LIMIT",
                message: format!("too many sends wait for approval ({scope}): try again later"),
                metadata: json!({"rule": rule, "skill": skill, "limit": scope}),
            },
            Some(429),
        )),
    }
}
