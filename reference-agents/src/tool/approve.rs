//! `approve` rules on MCP calls: each message an `approve` rule governs is
//! checked against the agent's approvals ([`crate::approvals`]) before the
//! body is decided, and its outcome becomes a pass, a rewrite or a refusal.
//!
//! A call of MCP 2026-07-28 waiting for a decision is answered with an
//! `input_required` result: a URL elicitation to the approval page and
//! the gateway's sealed `requestState` ([`modern`], [`ask`]); its retry
//! is read, the gateway's question and state taken out (the server's state
//! put back), and released, asked again or refused as the approval says.
//!
//! Any other call waiting for a decision is answered with JSON-RPC error `-32042`
//! (URLElicitationRequired, MCP 2025-11-25) whose `data.elicitations` names
//! the approval page, when the client declared URL elicitation: per request
//! (`_meta` `io.modelcontextprotocol/clientCapabilities`, revision
//! 2026-07-28), or, where requests do not say, as param `url_elicitation`
//! assumes (`auto`, the default: assume it). Otherwise the error is
//! `-32001` with the same `data`. Either way `data` carries `approval_id`
//! and `approval_url`, the message names the URL, and the HTTP status is
//! 200 so every SDK surfaces the JSON-RPC error to the application.

use serde_json::{json, Map, Value};

use super::deny::Refusal;
use crate::approvals::{Approvals, Check};
use crate::jsonrpc::{Envelope, Message, DENIED};
use crate::mcp::shapes::{self, Capabilities};
use crate::mcp::state::{is_gateway_key, GatewayState, Sealer, APPROVAL_KEY};
use crate::rules::{ApprovalNeed, Caller};
use policy_agents::{Deny, ParamError, Params, PolicyError, RequestContext};

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
                    Some(r) => format!("{target} denied: {r}"),
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

/// A single MCP 2026-07-28 request, as the approvals answer it: never
/// -32042 (which that revision forbids), but an `input_required` result
/// whose question is a URL elicitation to the approval page, with the
/// gateway's own sealed `requestState` ([`crate::mcp::state`]).
#[derive(Debug)]
pub struct Modern<'a> {
    /// The request's id.
    pub id: Value,
    /// The capabilities it declared.
    pub caps: Capabilities,
    /// Its binding: caller, endpoint, method, target, arguments.
    pub call: String,
    /// The server's own state the client carried (given back on release,
    /// kept inside the gateway's state while the call waits).
    pub server_state: Option<String>,
    /// The answers to the server's own questions the client carried (given
    /// back on release, kept inside the gateway's state while the call
    /// waits: the client answers only the latest round's questions).
    pub server_answers: Option<Map<String, Value>>,
    /// What seals the gateway's state.
    pub sealer: &'a Sealer,
    /// The body to forward when the retry carried the gateway's own
    /// question and state (taken out, the server's state put back).
    pub stripped: Option<Vec<u8>>,
}

/// Reads a single 2026-07-28 request for the approvals (`Ok(None)` for any
/// other body), with the body to forward when the retry carried the
/// gateway's own question and state; `Err` (400, -32602, as the SDK servers answer) when that state is
/// forged, altered, expired or issued for another call.
pub fn modern<'a>(
    sealer: &'a Sealer,
    caller: &Caller,
    ctx: &RequestContext<'_>,
    env: &Envelope,
) -> Result<Option<Modern<'a>>, Deny> {
    let [m] = env.messages.as_slice() else {
        return Ok(None);
    };
    let (false, Some(id)) = (env.batch, m.id.clone()) else {
        return Ok(None);
    };
    let Ok(Some(call)) = shapes::read_call(m) else {
        return Ok(None);
    };
    if !call.is_2026() {
        return Ok(None);
    }
    let binding = super::input_requests::call_key(ctx.request.path(), caller, &call);
    let bad_state = |why: &str| {
        Deny::json(
            400,
            &super::deny::error_object(
                id.clone(),
                crate::jsonrpc::INVALID_PARAMS,
                "Invalid or expired requestState",
                Some(&json!({"reason": "invalid_request_state", "detail": why})),
            ),
        )
        .reason("invalid_request_state")
    };
    let ours = match call.request_state.map(|s| sealer.open(s, crate::approvals::now_ms())) {
        None | Some(Ok(None)) => None,
        Some(Err(why)) => return Err(bad_state(why)),
        Some(Ok(Some(st))) if st.call != binding => return Err(bad_state("issued for another call")),
        Some(Ok(Some(st))) => Some(st),
    };
    let ours_asked = call
        .input_responses
        .is_some_and(|r| r.keys().any(|k| is_gateway_key(k)));
    let answers = |r: &Map<String, Value>| {
        let mut r = r.clone();
        r.retain(|k, _| !is_gateway_key(k));
        (!r.is_empty()).then_some(r)
    };
    let mut modern = Modern {
        id,
        caps: call.capabilities.unwrap_or_default(),
        call: binding,
        server_state: call.request_state.map(String::from),
        server_answers: call.input_responses.and_then(answers),
        sealer,
        stripped: None,
    };
    if ours.is_none() && !ours_asked {
        return Ok(Some(modern));
    }
    if let Some(st) = ours {
        modern.server_state = st.server;
        // The server's answers held with the call, under what the client
        // sent now.
        let mut kept = st.answers.unwrap_or_default();
        kept.extend(modern.server_answers.take().unwrap_or_default());
        modern.server_answers = (!kept.is_empty()).then_some(kept);
    }
    let body = ctx.request.body().unwrap_or_default();
    let Ok(mut doc) = serde_json::from_slice::<Value>(body) else {
        return Ok(Some(modern));
    };
    if let Some(params) = doc.get_mut("params").and_then(Value::as_object_mut) {
        match &modern.server_answers {
            Some(a) => params.insert("inputResponses".into(), Value::Object(a.clone())),
            None => params.remove("inputResponses"),
        };
        match &modern.server_state {
            Some(s) => params.insert("requestState".into(), Value::String(s.clone())),
            None => params.remove("requestState"),
        };
    }
    modern.stripped = serde_json::to_vec(&doc).ok();
    Ok(Some(modern))
}

/// The answer to a 2026-07-28 call waiting for approval `id` (until
/// `expires_ms`): an `input_required` result asking the client to open
/// the page at `url`, with the gateway's sealed state; -32021 with
/// `requiredCapabilities` when the request did not declare URL
/// elicitation.
pub fn ask(m: &Modern<'_>, approval: &str, expires_ms: u64, url: &str, message: &str) -> Deny {
    let data = json!({"reason": "approval_required", "approval_id": approval, "approval_url": url});
    ask_for(m, APPROVAL_KEY, approval, expires_ms, url, message, data)
}

/// The gateway's question `key` of a 2026-07-28 call (a URL elicitation to
/// `url`), its sealed state naming `waits_for` until `expires_ms`; -32021
/// with `requiredCapabilities` and `data` (its `reason` the denial's)
/// when the request did not declare URL elicitation.
pub(crate) fn ask_for(
    m: &Modern<'_>,
    key: &str,
    waits_for: &str,
    expires_ms: u64,
    url: &str,
    message: &str,
    data: Value,
) -> Deny {
    let reason = data
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or("input_required")
        .to_string();
    if !m.caps.url {
        let mut data = data;
        if let Some(o) = data.as_object_mut() {
            o.insert("requiredCapabilities".into(), json!({"elicitation": {"url": {}}}));
        }
        let body = super::deny::error_object(
            m.id.clone(),
            crate::mcp::MISSING_CAPABILITY,
            &format!(
                "{}: open {url} (the client did not declare elicitation.url)",
                reason.replace('_', " ")
            ),
            Some(&data),
        );
        return Deny::json(400, &body).reason(&reason);
    }
    let state = m.sealer.seal(&GatewayState {
        approval: waits_for.to_string(),
        call: m.call.clone(),
        // Good for the retry after a decision made at the last moment.
        expires_ms: expires_ms.saturating_add(STATE_GRACE_MS),
        server: m.server_state.clone(),
        answers: m.server_answers.clone(),
    });
    let body = json!({"jsonrpc": "2.0", "id": m.id, "result": {
        "resultType": "input_required",
        "inputRequests": {key: {"method": "elicitation/create",
            "params": {"mode": "url", "message": message, "url": url}}},
        "requestState": state,
    }});
    Deny::json(200, &body).reason(&reason)
}

/// How long after its approval's expiry the gateway's state still opens.
const STATE_GRACE_MS: u64 = 10 * 60 * 1000;

#[cfg(test)]
#[path = "approve_tests.rs"]
mod tests;
