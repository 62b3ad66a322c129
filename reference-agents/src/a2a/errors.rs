//! Refusals in each binding's own error form, so that an SDK client raises
//! what it would raise for the agent's own errors:
//! * **JSON-RPC**: a JSON-RPC error with the request's id, `data` a list
//!   holding one `google.rpc.ErrorInfo` (`reason`, `domain`, `metadata`), as
//!   the SDK servers answer; HTTP 200 (the binding's convention; param
//!   `denial: http_403` answers 403 instead);
//! * **HTTP+JSON**: the status of the refusal with a `google.rpc.Status`
//!   body: `{"error": {"code", "status", "message", "details": [ErrorInfo]}}`.
//!
//! A task the caller does not own is refused as the agent refuses a task
//! it does not know (JSON-RPC -32001, REST 404 `TASK_NOT_FOUND`, domain
//! `a2a-protocol.org`): whether another principal's task exists is not
//! told.

use serde_json::{json, Value};

use super::call::Binding;
use crate::tool::Style;
use policy_agents::Deny;

/// The `@type` of an ErrorInfo detail.
pub const ERROR_INFO: &str = "type.googleapis.com/google.rpc.ErrorInfo";
/// The domain of the kernel's own refusals.
pub const DOMAIN: &str = "policy-kernel";
/// The domain of the A2A errors the refusals imitate.
pub const A2A_DOMAIN: &str = "a2a-protocol.org";
/// A2A's JSON-RPC code for an unknown task.
pub const TASK_NOT_FOUND: i64 = -32001;
/// The default JSON-RPC code of a policy refusal (A2A uses -32001..-32009).
pub const DENIED: i64 = -32050;

/// What kind of refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Not allowed for this caller: REST 403 `PERMISSION_DENIED`.
    Denied,
    /// The task is not the caller's: answered as an unknown task.
    TaskNotFound,
    /// The request is not a readable call: REST 400 `INVALID_ARGUMENT`.
    Invalid,
}

/// A refusal, before rendering.
#[derive(Debug, Clone)]
pub struct Refusal<'a> {
    /// The kind.
    pub kind: Kind,
    /// The ErrorInfo reason (`PERMISSION_DENIED`, `SKILL_NOT_ALLOWED`, ...).
    pub reason: &'a str,
    /// The message.
    pub message: String,
    /// The ErrorInfo metadata (strings).
    pub metadata: Value,
}

/// Renders `r` for `binding`. `code` is the JSON-RPC code of [`Kind::Denied`]
/// refusals; `style` their HTTP status on JSON-RPC.
pub fn render(binding: &Binding, style: Style, code: i64, r: &Refusal<'_>) -> Deny {
    let (status, grpc, domain, jsonrpc_code, reason) = match r.kind {
        Kind::Denied => (403, "PERMISSION_DENIED", DOMAIN, code, r.reason),
        Kind::TaskNotFound => (404, "NOT_FOUND", A2A_DOMAIN, TASK_NOT_FOUND, "TASK_NOT_FOUND"),
        Kind::Invalid => (
            400,
            "INVALID_ARGUMENT",
            DOMAIN,
            crate::jsonrpc::INVALID_REQUEST,
            r.reason,
        ),
    };
    let metadata = match r.kind {
        // Nothing about the task beyond what the caller sent.
        Kind::TaskNotFound => json!({}),
        _ => r.metadata.clone(),
    };
    let message = match r.kind {
        Kind::TaskNotFound => "Task not found".to_string(),
        _ => r.message.clone(),
    };
    let info = json!([{"@type": ERROR_INFO, "reason": reason, "domain": domain, "metadata": metadata}]);
    let deny_reason = match r.kind {
        Kind::Denied => "a2a_denied",
        Kind::TaskNotFound => "a2a_task_not_owned",
        Kind::Invalid => "a2a_invalid_request",
    };
    match binding {
        Binding::JsonRpc { id } => {
            let body =
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": jsonrpc_code, "message": message, "data": info}});
            let http = match (r.kind, style) {
                (Kind::Denied, Style::Http403) => 403,
                (Kind::Invalid, _) => 400,
                _ => 200,
            };
            Deny::json(http, &body).reason(deny_reason)
        }
        Binding::Rest => {
            let body = json!({"error": {"code": status, "status": grpc, "message": message, "details": info}});
            Deny::json(status, &body).reason(deny_reason)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(d: &Deny) -> Value {
        serde_json::from_slice(&d.body).unwrap()
    }

    #[test]
    fn each_binding_gets_its_own_error_form() {
        let r = Refusal {
            kind: Kind::Denied,
            reason: "SKILL_NOT_ALLOWED",
            message: "skill admin_reset is not allowed".into(),
            metadata: json!({"rule": "default_deny", "skill": "admin_reset"}),
        };
        let d = render(&Binding::JsonRpc { id: json!(7) }, Style::JsonRpcError, DENIED, &r);
        assert_eq!(d.status, 200);
        let b = body(&d);
        assert_eq!((b["id"].clone(), b["error"]["code"].clone()), (json!(7), json!(DENIED)));
        assert_eq!(b["error"]["data"][0]["reason"], "SKILL_NOT_ALLOWED");
        assert_eq!(b["error"]["data"][0]["metadata"]["skill"], "admin_reset");
        let d = render(&Binding::JsonRpc { id: json!(7) }, Style::Http403, DENIED, &r);
        assert_eq!(d.status, 403);
        let d = render(&Binding::Rest, Style::JsonRpcError, DENIED, &r);
        assert_eq!(d.status, 403);
        assert_eq!(body(&d)["error"]["status"], "PERMISSION_DENIED");
    }

    #[test]
    fn another_principals_task_looks_unknown() {
        let r = Refusal {
            kind: Kind::TaskNotFound,
            reason: "NOT_OWNER",
            message: "task t1 belongs to sub:alice".into(),
            metadata: json!({"owner": "sub:alice"}),
        };
        let d = render(&Binding::JsonRpc { id: json!("a") }, Style::Http403, DENIED, &r);
        let b = body(&d);
        assert_eq!((d.status, b["error"]["code"].clone()), (200, json!(TASK_NOT_FOUND)));
        assert_eq!(b["error"]["message"], "Task not found");
        assert!(!b.to_string().contains("alice"), "{b}");
        let d = render(&Binding::Rest, Style::Http403, DENIED, &r);
        assert_eq!(d.status, 404);
        assert_eq!(body(&d)["error"]["details"][0]["reason"], "TASK_NOT_FOUND");
    }
}
