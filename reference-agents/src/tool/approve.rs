//! `approve` rules on MCP calls: each message an `approve` rule governs is
//! checked against the agent's approvals ([`crate::approvals`]) before the
//! body is decided, and its outcome becomes a pass, a rewrite or a refusal.
//!
//! A call waiting for a decision is answered with JSON-RPC error `-32042`
//! (URLElicitationRequired, MCP 2025-11-25) whose `data.elicitations` names
//! the approval page, when the client declared URL elicitation: per request
//! (`_meta` `io.modelcontextprotocol/clientCapabilities`, revision
//! 2026-07-28), or, where requests do not say, as param `url_elicitation`
//! assumes (`auto`, the default: assume it). Otherwise the error is
//! `-32001` with the same `data`. Either way `data` carries `approval_id`
//! and `approval_url`, the message names the URL, and the HTTP status is
//! 200 so every SDK surfaces the JSON-RPC error to the application.

use serde_json::{json, Value};

use super::deny::Refusal;
use crate::approvals::{Approvals, Check};
use crate::jsonrpc::{Message, DENIED};
use crate::rules::{ApprovalNeed, Caller};
use policy_agents::{ParamError, Params, PolicyError, RequestContext};

/// JSON-RPC error `URLElicitationRequired` (MCP 2025-11-25).
pub const URL_ELICITATION_REQUIRED: i64 = -32042;
/// The reason of a refusal for too many pending approvals.
pub const APPROVAL_LIMIT: &str = "approval_limit";

/// Whether clients that do not say are taken to handle URL elicitation
/// (param `url_elicitation`: `auto` / `always` assume so, `never` not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlElicitation {
    /// As the request says; assumed where it does not.
    Auto,
    /// Always `-32042`.
    Always,
    /// Never `-32042`: always `-32001`.
    Never,
}

impl UrlElicitation {
    /// Reads param `url_elicitation`.
    pub fn parse(p: &Params) -> Result<Self, ParamError> {
        match p.get("url_elicitation").map(str::trim) {
            None | Some("") | Some("auto") => Ok(UrlElicitation::Auto),
            Some("always") => Ok(UrlElicitation::Always),
            Some("never") => Ok(UrlElicitation::Never),
            Some(other) => Err(ParamError::invalid(
                "url_elicitation",
                other,
                "expected auto, always or never",
            )),
        }
    }

    fn applies(self, m: &Message) -> bool {
        let declared = m
            .params
            .as_ref()
            .and_then(|p| p.get("_meta"))
            .and_then(|meta| meta.get("io.modelcontextprotocol/clientCapabilities"))
            .map(|caps| caps.get("elicitation").and_then(|e| e.get("url")).is_some());
        match (self, declared) {
            (UrlElicitation::Never, _) => false,
            (UrlElicitation::Always, _) => true,
            (UrlElicitation::Auto, Some(d)) => d,
            (UrlElicitation::Auto, None) => true,
        }
    }
}

/// The arguments of a message an approval binds: `params.arguments` of a
/// call or prompt, `params.uri` of a resource read, else the params.
fn arguments(m: &Message) -> Value {
    let Some(p) = m.params.as_ref() else {
        return Value::Null;
    };
    match m.method.as_deref() {
        Some("tools/call") | Some("prompts/get") => p.get("arguments").cloned().unwrap_or(Value::Null),
        Some("resources/read") => p.get("uri").cloned().unwrap_or(Value::Null),
        _ => {
            let mut p = p.clone();
            if let Some(o) = p.as_object_mut() {
                o.remove("_meta");
            }
            p
        }
    }
}

/// Checks one message an `approve` rule governs.
pub async fn check(
    approvals: Option<&Approvals>,
    need: &ApprovalNeed<'_>,
    caller: &Caller,
    ctx: &RequestContext<'_>,
    m: &Message,
    target: &str,
) -> Result<Check, PolicyError> {
    let args = arguments(m);
    let method = m.method.as_deref().unwrap_or("-");
    let session = ctx.request.header("mcp-session-id");
    crate::approvals::check_call(approvals, need, caller, ctx, method, target, &args, session).await
}

/// The refusal of message `index` for a check that did not grant, with
/// the HTTP status it asks for (429 beyond the pending bounds).
pub fn refusal(
    index: usize,
    m: &Message,
    check: &Check,
    rule: &str,
    target: &str,
    page: &str,
    style: UrlElicitation,
) -> Option<(Refusal, u16)> {
    match check {
        Check::Granted { .. } => None,
        Check::Pending { id, expires_ms, .. } => {
            let url = format!("{page}#id={id}");
            let message = format!("approval required for {target}: open {url}");
            let code = if style.applies(m) {
                URL_ELICITATION_REQUIRED
            } else {
                DENIED
            };
            let data = json!({
                "elicitations": [{
                    "mode": "url",
                    "elicitationId": id,
                    "url": url,
                    "message": format!("Approve {} {target} (rule {rule})", m.method.as_deref().unwrap_or("call")),
                }],
                "reason": "approval_required",
                "approval_id": id,
                "approval_url": url,
                "expires_ms": expires_ms,
                "rule": rule,
                "target": target,
            });
            Some((
                Refusal {
                    index,
                    code,
                    message,
                    data,
                },
                200,
            ))
        }
        Check::Denied {
            id,
            reason,
            alternative,
        } => Some((
            Refusal {
                index,
                code: DENIED,
                message: match reason {
                    Some(r) => format!("{target} denied by an approver: {r}"),
                    None => format!("{target} denied by an approver"),
                },
                data: json!({"reason": "approval_denied", "approval_id": id, "rule": rule, "target": target,
                    "denial_reason": reason, "alternative": alternative}),
            },
            200,
        )),
        Check::Limited(scope) => Some((
            Refusal {
                index,
                code: DENIED,
                message: format!("too many calls wait for approval ({scope}): try again later"),
                data: json!({"reason": APPROVAL_LIMIT, "limit": scope, "rule": rule, "target": target}),
            },
            429,
        )),
    }
}

/// The body with message `index`'s arguments replaced by `args` (a
/// constrained grant's form); `None` when the body cannot be rewritten.
pub fn rewrite(body: &[u8], batch: bool, index: usize, args: &Value) -> Option<Vec<u8>> {
    let mut doc: Value = serde_json::from_slice(body).ok()?;
    let msg = if batch { doc.get_mut(index)? } else { &mut doc };
    let params = msg.get_mut("params")?.as_object_mut()?;
    params.insert("arguments".into(), args.clone());
    serde_json::to_vec(&doc).ok()
}
