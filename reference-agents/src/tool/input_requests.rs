//! `mcpServerRequestGuard`'s reading of both revisions' questions, and
//! the 2026-07-28 retry check.
//!
//! **The questions of a reply** ([`judge`]): every message is read through
//! [`crate::mcp::shapes`]. A 2025-11-25 server request on the call's
//! stream and each entry of a 2026-07-28 result's `inputRequests` (in a
//! `tools/call`, `prompts/get` or `resources/read` result, or a task's
//! status) are decided by the same checks
//! ([`server_checks::decide`](super::server_checks::decide): the route's
//! rules per caller, secret form fields, URL elicitation hosts and ports).
//! A 2026 question for a capability the request did not declare in its
//! `_meta` is refused too (rule `capability_not_declared`, the field names
//! the capability). A reply the reader cannot read the way the SDKs do (an
//! unknown `resultType`, `inputRequests` that is not an object, ...) is
//! refused (rule `unreadable_reply`). One refused question refuses the
//! whole message: the client gets a JSON-RPC error with its request's id,
//! and nothing of what was asked.
//!
//! **The retry** ([`check_retry`]): the keys of the questions a caller was
//! allowed to be asked are kept per caller and call (the caller's
//! principal, the endpoint, the method, the target and a digest of the
//! arguments), in the agent's session store (memory, or Redis with
//! `tool-agent --redis-url` for a fleet), for `pending_ttl_s`. A retry's
//! `inputResponses` may answer only those, once each: a key never asked of
//! this caller for this call, or one that was refused, is refused (403,
//! reason `unsolicited_input_response`) before the server sees it. The
//! gateway's own question (an approval, [`crate::mcp::state::APPROVAL_KEY`])
//! is `mcpToolAuthorization`'s to check, and is left to it. A task's
//! questions (the tasks extension: in `tasks/get` results) are kept per
//! caller and task, and `tasks/update`'s `inputResponses` checked the same
//! way.

use std::time::Duration;

use serde_json::{json, Value};

use super::deny;
use super::events;
use super::server_checks::{decide, Checks, Verdict};
use crate::approvals::binding::{digest, principal};
use crate::mcp::shapes::{self, Asked, Call, Capabilities, Item, INPUT_METHODS};
use crate::planner::SessionStore;
use crate::rules::Caller;
use policy_agents::{Deny, Metadata, PolicyError, RequestContext, RequestOutcome};

/// Metadata: the store key of a 2026-07-28 call's questions (request phase
/// to reply).
pub const CALL_KEY: &str = "mcp.input_call";
/// Metadata: the capabilities a 2026-07-28 request declared
/// ([`Capabilities::to_metadata`]).
pub const CAPABILITIES: &str = "mcp.client_capabilities";

/// The rule of a reply the reader could not read.
pub const UNREADABLE: &str = "unreadable_reply";
/// The rule of a question for a capability the client did not declare.
pub const NOT_DECLARED: &str = "capability_not_declared";

/// The store key of questions asked of `caller` at endpoint `path` about
/// `what`: the digest of the principal, the path (no query) and `what`.
fn questions_key(path: &str, caller: &Caller, what: &[Value]) -> String {
    let path = path.split(['?', '#']).next().unwrap_or(path);
    let mut parts = vec![json!(principal(caller)), json!(path)];
    parts.extend_from_slice(what);
    format!("mcp-input {}", digest(&Value::Array(parts)))
}

/// The store key of a call's questions.
pub fn call_key(path: &str, caller: &Caller, call: &Call<'_>) -> String {
    questions_key(
        path,
        caller,
        &[json!(call.method), json!(call.target), json!(call.arguments)],
    )
}

/// The store key of a task's questions (tasks extension).
pub fn task_key(path: &str, caller: &Caller, task: &str) -> String {
    questions_key(path, caller, &[json!("task"), json!(task)])
}

/// What the questions of one reply document came to.
#[derive(Debug, Default)]
pub struct Judged {
    /// The 2025 requests allowed: their ids, as JSON text.
    pub ids: Vec<String>,
    /// The 2026 questions allowed: their keys.
    pub keys: Vec<String>,
    /// Every question decided, in order: its method and verdict.
    pub decided: Vec<(String, Verdict)>,
    /// The refusal, if any: the method, the verdict, and the question's
    /// key (2026) or `None` (2025).
    pub refused: Option<(String, Verdict, Option<String>)>,
}

fn verdict(allowed: bool, rule: &str, detail: Option<String>) -> Verdict {
    Verdict {
        allowed,
        rule: rule.to_string(),
        detail,
    }
}

/// Decides the questions of one reply document (a message or a batch),
/// for `caller`, whose request declared `caps` (2026-07-28; `None`: not
/// said, an older request).
pub fn judge(checks: &Checks, caller: &Caller, caps: Option<Capabilities>, doc: &Value) -> Judged {
    let mut out = Judged::default();
    let items = match shapes::read_reply(doc) {
        Ok(items) => items,
        Err(e) => {
            let v = verdict(false, UNREADABLE, Some(e.0));
            out.decided.push(("reply".into(), v.clone()));
            out.refused = Some(("reply".into(), v, None));
            return out;
        }
    };
    for item in items {
        let questions = match item {
            Item::Question(q) => vec![q],
            Item::Result(r) => r.questions,
            Item::Other => continue,
        };
        for q in questions {
            let v = match (caps, q.asked) {
                (Some(c), Asked::Key(_)) => match c.missing_for(&q) {
                    Some(cap) => verdict(false, NOT_DECLARED, Some(cap.to_string())),
                    None => decide(checks, caller, q.method, q.params),
                },
                _ => decide(checks, caller, q.method, q.params),
            };
            super::metrics::question(matches!(q.asked, Asked::Key(_)), v.allowed);
            out.decided.push((q.method.to_string(), v.clone()));
            let key = match q.asked {
                Asked::Key(k) => Some(k.to_string()),
                Asked::Id(_) => None,
            };
            if !v.allowed {
                out.refused = Some((q.method.to_string(), v, key));
                return out;
            }
            match q.asked {
                Asked::Key(k) => out.keys.push(k.to_string()),
                Asked::Id(id) => out.ids.extend(events::id_text(id)),
            }
        }
    }
    out
}

/// The JSON-RPC error that answers request `id` in place of a refused
/// question: the method, the rule and the field, nothing of the question.
pub fn refusal(id: Value, code: i64, method: &str, v: &Verdict, key: Option<&str>) -> Value {
    let mut data = json!({"method": method, "rule": v.rule, "field": v.detail});
    if let Some(k) = key {
        data["input_request"] = json!(super::metadata_text(k));
    }
    let message = if v.rule == UNREADABLE {
        "the server's reply could not be read as MCP and was refused by policy".to_string()
    } else {
        format!("the server's {method} request was refused by policy")
    };
    deny::error_object(id, code, &message, Some(&data))
}

/// Keeps the keys a call's questions were allowed under (the retry may
/// answer them).
pub async fn remember(
    store: &SessionStore,
    metadata: &Metadata,
    keys: &[String],
    ttl: Duration,
) -> Result<(), PolicyError> {
    let Some(call) = metadata.get(CALL_KEY) else {
        return Ok(());
    };
    for k in keys {
        store
            .remember_request(call, k, ttl)
            .await
            .map_err(|e| e.policy_error(super::server_requests::NAME))?;
    }
    Ok(())
}

/// The request phase for one 2026-07-28 call of a method that may be
/// answered `input_required`: its metadata, and its retry checked.
/// `Ok(Err(refusal))` refuses the retry.
pub async fn check_retry(
    store: &SessionStore,
    ttl: Duration,
    ctx: &RequestContext<'_>,
    call: &Call<'_>,
    id: &Value,
    check: bool,
) -> Result<Result<Vec<(&'static str, String)>, RequestOutcome>, PolicyError> {
    if !call.is_2026() {
        return Ok(Ok(Vec::new()));
    }
    let caller = Caller::from_metadata(ctx.metadata);
    let key = match call.method {
        m if INPUT_METHODS.contains(&m) => call_key(ctx.request.path(), &caller, call),
        // A task's questions come in `tasks/get` results, their answers in
        // `tasks/update`: both are the task's.
        "tasks/get" | "tasks/update" => task_key(ctx.request.path(), &caller, call.target.unwrap_or_default()),
        _ => return Ok(Ok(Vec::new())),
    };
    let caps = call.capabilities.unwrap_or_default().to_metadata();
    if check {
        for answered in call.input_responses.into_iter().flat_map(|r| r.keys()) {
            if crate::mcp::state::is_gateway_key(answered) {
                continue;
            }
            let asked = store
                .take_request(&key, answered, ttl)
                .await
                .map_err(|e| e.policy_error(super::server_requests::NAME))?;
            if !asked {
                super::metrics::unsolicited_input_response();
                tracing::warn!(policy = super::server_requests::NAME, request_id = %ctx.call.request_id,
                    input = %super::metadata_text(answered), "input response to a question this caller was not asked: refused");
                let body = deny::error_object(
                    id.clone(),
                    crate::jsonrpc::INVALID_PARAMS,
                    "inputResponses answers a question the server did not ask of this caller for this call",
                    Some(
                        &json!({"input_request": super::metadata_text(answered), "rule": "unsolicited_input_response"}),
                    ),
                );
                let out = RequestOutcome::denied_with(Deny::json(403, &body).reason("unsolicited_input_response"))
                    .set_metadata("mcp.decision", "deny")
                    .set_metadata("mcp.rule", "unsolicited_input_response");
                return Ok(Err(out));
            }
        }
    }
    Ok(Ok(vec![(CALL_KEY, key), (CAPABILITIES, caps)]))
}

#[cfg(test)]
#[path = "input_requests_tests.rs"]
mod tests;
