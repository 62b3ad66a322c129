//! `a2aAuthorization`: who may delegate what to an agent.
//!
//! Request phase, with the body. The call is read ([`super::call`]); then:
//! * the public card (`GET /.well-known/agent-card.json`) is always
//!   allowed (what it shows is `a2aCardFilter`'s);
//! * a send (`SendMessage`, `SendStreamingMessage`, 0.3 `message/send`,
//!   `message/stream`) is decided by the first rule matching the method,
//!   the skill and the caller. The skill is the one the message names in
//!   its metadata (`message.metadata.<skill_metadata_key>`, else the
//!   request's `metadata.<key>`), or the route's (`skill`); a message
//!   naming another skill than the route's is refused (`skill_mismatch`);
//! * any other method, by its A2A 1.0 name (`GetTask`, `ListTasks`, ...),
//!   and any method or path A2A does not define, as sent: the first rule
//!   matching the method and the caller (rules with `skills` never match).
//!
//! No matching rule: denied (`default_deny`). A request that is not a
//! readable call is refused as the binding refuses it: JSON-RPC -32700,
//! -32600 or -32602 (a field in two spellings), HTTP+JSON 400.
//!
//! Metadata: `a2a.method`, `a2a.binding` (`jsonrpc`/`rest`), `a2a.skill`,
//! `a2a.task_id`, `a2a.decision`, `a2a.rule`.

use std::sync::Arc;

use serde_json::json;

use super::call::{text_field, Binding, Call, Op};
use super::errors::{self, Kind, Refusal};
use super::{denial, metadata_text, unknown_fields, SEND_METHODS};
use crate::approvals::{Approvals, Check};
use crate::param_cache::ParamCache;
use crate::rules::{ApprovalNeed, Caller, Rules};
use crate::tool::{deny::config_error, Style};
use policy_agents::{describe, ParamError, Params, Policy, PolicyError, RequestContext, RequestOutcome};

const NAME: &str = "a2aAuthorization";
const KEYS: &[&str] = &[
    "rules",
    "skill",
    "skill_metadata_key",
    "denial",
    "jsonrpc_error_code",
    "unknown_fields",
    "approval_page",
];

/// The rule name of the public card.
pub const ALWAYS_ALLOWED: &str = "always_allowed";

/// Parsed params.
#[derive(Debug)]
pub(super) struct AuthzParams {
    pub(super) rules: Rules,
    skill: Option<String>,
    skill_key: String,
    pub(super) style: Style,
    pub(super) code: i64,
    strict: bool,
}

impl AuthzParams {
    pub(super) fn parse(p: &Params) -> Result<Self, ParamError> {
        Ok(AuthzParams {
            rules: Rules::parse_with_default("rules", p.required("rules")?, SEND_METHODS)?,
            skill: p
                .get("skill")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from),
            skill_key: p
                .get("skill_metadata_key")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .unwrap_or("skill")
                .to_string(),
            style: denial(p)?,
            code: p.parse_or("jsonrpc_error_code", errors::DENIED)?,
            strict: unknown_fields(p)?,
        })
    }
}

/// The skill a send names: the message's metadata, else the request's.
pub(super) fn named_skill<'c>(call: &'c Call, key: &str) -> Option<&'c str> {
    let from =
        |v: Option<&'c serde_json::Value>| v.and_then(|m| m.get("metadata")).and_then(|md| text_field(md, &[key]));
    from(call.message()).or_else(|| from(Some(&call.params)))
}

/// The `a2aAuthorization` policy.
pub struct A2aAuthorization {
    cache: ParamCache<AuthzParams>,
    approvals: Option<Arc<Approvals>>,
}

impl Default for A2aAuthorization {
    fn default() -> Self {
        A2aAuthorization {
            cache: ParamCache::new(KEYS),
            approvals: None,
        }
    }
}

impl A2aAuthorization {
    /// A policy whose `approve` rules ask `approvals` (without: sends they
    /// govern fail, closed).
    pub fn with_approvals(approvals: Arc<Approvals>) -> Self {
        A2aAuthorization {
            cache: ParamCache::new(KEYS),
            approvals: Some(approvals),
        }
    }
}

/// The metadata name of a binding.
pub(super) fn binding_name(b: &Binding) -> &'static str {
    match b {
        Binding::JsonRpc { .. } => "jsonrpc",
        Binding::Rest => "rest",
    }
}

/// The outcome for a request that is not a readable call.
pub(super) fn unreadable(u: &super::call::Unreadable, style: Style, code: i64) -> RequestOutcome {
    let deny = match &u.binding {
        // The binding's own code for parse errors, invalid requests and
        // params, on HTTP 200 as the binding answers its errors.
        Binding::JsonRpc { id } => {
            let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": u.code, "message": u.message}});
            policy_agents::Deny::json(200, &body).reason("a2a_invalid_request")
        }
        Binding::Rest => {
            let r = Refusal {
                kind: Kind::Invalid,
                reason: "INVALID_REQUEST",
                message: u.message.clone(),
                metadata: json!({}),
            };
            errors::render(&u.binding, style, code, &r)
        }
    };
    RequestOutcome::denied_with(deny)
        .set_metadata("a2a.decision", "deny")
        .set_metadata("a2a.rule", "invalid_request")
}

impl A2aAuthorization {
    /// Decides a readable call: allowed, the rule, the skill, and the
    /// approval an `approve` rule needs (sends only).
    fn decide<'c>(
        &self,
        cfg: &'c AuthzParams,
        call: &'c Call,
        caller: &Caller,
    ) -> (bool, &'c str, Option<&'c str>, Option<ApprovalNeed<'c>>) {
        match call.op {
            Some(Op::GetAgentCard) => (true, ALWAYS_ALLOWED, None, None),
            Some(op) if op.sends() => {
                let named = named_skill(call, &cfg.skill_key);
                let skill = match (cfg.skill.as_deref(), named) {
                    (Some(fixed), Some(n)) if n != fixed => return (false, "skill_mismatch", Some(n), None),
                    (Some(fixed), _) => Some(fixed),
                    (None, n) => n,
                };
                let d = cfg.rules.decide(op.name(), skill, caller);
                (d.allowed, d.rule, skill, d.approval_need())
            }
            _ => {
                // Only sends carry what an approval binds: elsewhere an
                // `approve` rule refuses.
                let d = cfg.rules.decide(&call.method, None, caller);
                (d.allowed, d.rule, None, None)
            }
        }
    }
}

impl Policy for A2aAuthorization {
    type Params = Params;
    describe! { name: NAME, params: KEYS, required: &["rules"], body: true }

    async fn on_request(&self, params: &Params, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let cfg = self
            .cache
            .get(params, AuthzParams::parse)
            .map_err(|e| config_error(NAME, &e))?;
        let call = match Call::of(&ctx.request, cfg.strict) {
            Ok(c) => c,
            Err(u) => return Ok(unreadable(&u, cfg.style, cfg.code)),
        };
        let caller = Caller::from_metadata(ctx.metadata);
        let (mut allowed, rule, skill, need) = self.decide(&cfg, &call, &caller);
        let mut approval: Option<(Check, String)> = None;
        if let Some(need) = need {
            let target = skill.unwrap_or("-");
            let check = super::approve::check(self.approvals.as_deref(), &need, &caller, ctx, &call, target).await?;
            let page = crate::approvals::page_url(params, &ctx.request);
            allowed = matches!(check, Check::Granted { .. });
            approval = Some((check, page));
        }
        let approval_refusal = approval
            .as_ref()
            .and_then(|(check, page)| super::approve::refusal(check, rule, skill.unwrap_or("-"), page));
        let out = if allowed {
            RequestOutcome::proceed()
        } else if let Some((r, status)) = &approval_refusal {
            let mut d = errors::render(&call.binding, cfg.style, cfg.code, r);
            if let Some(s) = status {
                d.status = *s;
            }
            RequestOutcome::denied_with(d)
        } else {
            let what = match skill {
                Some(s) => format!("skill {s}"),
                None => call.method.clone(),
            };
            tracing::info!(policy = NAME, request_id = %ctx.call.request_id, method = %call.method, rule, "A2A call denied");
            let r = Refusal {
                kind: Kind::Denied,
                reason: if skill.is_some() {
                    "SKILL_NOT_ALLOWED"
                } else {
                    "METHOD_NOT_ALLOWED"
                },
                message: format!("{} denied by policy", metadata_text(&what)),
                metadata: json!({"rule": rule, "method": call.method, "skill": skill.unwrap_or("")}),
            };
            RequestOutcome::denied_with(errors::render(&call.binding, cfg.style, cfg.code, &r))
        };
        let mut out = out
            .set_metadata("a2a.method", metadata_text(&call.method))
            .set_metadata("a2a.binding", binding_name(&call.binding))
            .set_metadata("a2a.skill", skill.map_or_else(|| "-".to_string(), metadata_text))
            .set_metadata(
                "a2a.decision",
                match (allowed, &approval) {
                    (true, _) => "allow",
                    (false, Some((Check::Pending { .. }, _))) => "approve",
                    (false, _) => "deny",
                },
            )
            .set_metadata("a2a.rule", rule.to_string());
        match &approval {
            Some((Check::Granted { approval, grant, .. }, _)) => {
                out = out
                    .set_metadata("approval.id", approval.clone())
                    .set_metadata("approval.grant", grant.as_str());
            }
            Some((Check::Pending { id, .. } | Check::Denied { id, .. }, _)) => {
                out = out.set_metadata("approval.id", id.clone());
            }
            _ => {}
        }
        if let Some(t) = call.tasks().first() {
            out = out.set_metadata("a2a.task_id", metadata_text(t));
        }
        Ok(out)
    }
}

#[cfg(test)]
#[path = "authorize_tests.rs"]
mod tests;
