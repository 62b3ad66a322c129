//! What an A2A request asks: the operation, the binding it came over, the
//! tasks it addresses, its message and the URLs it hands the agent.
//!
//! Both bindings of the official SDKs over HTTP are read:
//! * **JSON-RPC**: a POST whose JSON body has `jsonrpc` and `method`. The
//!   A2A 1.0 names (`SendMessage`, `GetTask`, ...) and the 0.3 names
//!   (`message/send`, `tasks/get`, ...) map to one [`Op`] each;
//! * **HTTP+JSON**: the path, after any prefix (a tenant, a mount point):
//!   `POST /message:send`, `POST /message:stream`, `GET /tasks/{id}`,
//!   `GET /tasks`, `POST /tasks/{id}:cancel`, `GET|POST
//!   /tasks/{id}:subscribe`, `/tasks/{id}/pushNotificationConfigs[/{id}]`,
//!   `GET /extendedAgentCard`; and the card itself, `GET
//!   /.well-known/agent-card.json` (also the older `agent.json`).
//!
//! Field names are read in both spellings, camelCase (protobuf JSON, what
//! the SDKs send) and snake_case, as the official server accepts both; a
//! body naming one field in both spellings is refused as invalid
//! ([`ambiguous`]), since the server would take whichever comes last.

use serde_json::Value;

use crate::jsonrpc::{self, BodyError, Kind};

/// An A2A operation, named by its A2A 1.0 method name ([`Op::name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `SendMessage` (0.3 `message/send`).
    SendMessage,
    /// `SendStreamingMessage` (0.3 `message/stream`).
    SendStreamingMessage,
    /// `GetTask` (0.3 `tasks/get`).
    GetTask,
    /// `ListTasks` (0.3 `tasks/list`).
    ListTasks,
    /// `CancelTask` (0.3 `tasks/cancel`).
    CancelTask,
    /// `SubscribeToTask` (0.3 `tasks/resubscribe`).
    SubscribeToTask,
    /// `CreateTaskPushNotificationConfig` (0.3 `tasks/pushNotificationConfig/set`).
    CreatePushConfig,
    /// `GetTaskPushNotificationConfig` (0.3 `.../get`).
    GetPushConfig,
    /// `ListTaskPushNotificationConfigs` (0.3 `.../list`).
    ListPushConfigs,
    /// `DeleteTaskPushNotificationConfig` (0.3 `.../delete`).
    DeletePushConfig,
    /// `GetExtendedAgentCard` (0.3 `agent/getAuthenticatedExtendedCard`).
    GetExtendedAgentCard,
    /// The public card: `GET /.well-known/agent-card.json`.
    GetAgentCard,
}

impl Op {
    /// The A2A 1.0 name, which the rules' `methods` match.
    pub fn name(self) -> &'static str {
        match self {
            Op::SendMessage => "SendMessage",
            Op::SendStreamingMessage => "SendStreamingMessage",
            Op::GetTask => "GetTask",
            Op::ListTasks => "ListTasks",
            Op::CancelTask => "CancelTask",
            Op::SubscribeToTask => "SubscribeToTask",
            Op::CreatePushConfig => "CreateTaskPushNotificationConfig",
            Op::GetPushConfig => "GetTaskPushNotificationConfig",
            Op::ListPushConfigs => "ListTaskPushNotificationConfigs",
            Op::DeletePushConfig => "DeleteTaskPushNotificationConfig",
            Op::GetExtendedAgentCard => "GetExtendedAgentCard",
            Op::GetAgentCard => "GetAgentCard",
        }
    }

    /// The operation of a JSON-RPC method name, 1.0 or 0.3.
    pub fn of_method(method: &str) -> Option<Op> {
        Some(match method {
            "SendMessage" | "message/send" => Op::SendMessage,
            "SendStreamingMessage" | "message/stream" => Op::SendStreamingMessage,
            "GetTask" | "tasks/get" => Op::GetTask,
            "ListTasks" | "tasks/list" => Op::ListTasks,
            "CancelTask" | "tasks/cancel" => Op::CancelTask,
            "SubscribeToTask" | "tasks/resubscribe" => Op::SubscribeToTask,
            "CreateTaskPushNotificationConfig" | "tasks/pushNotificationConfig/set" => Op::CreatePushConfig,
            "GetTaskPushNotificationConfig" | "tasks/pushNotificationConfig/get" => Op::GetPushConfig,
            "ListTaskPushNotificationConfigs" | "tasks/pushNotificationConfig/list" => Op::ListPushConfigs,
            "DeleteTaskPushNotificationConfig" | "tasks/pushNotificationConfig/delete" => Op::DeletePushConfig,
            "GetExtendedAgentCard" | "agent/getAuthenticatedExtendedCard" => Op::GetExtendedAgentCard,
            _ => return None,
        })
    }

    /// True for the operations that send a message.
    pub fn sends(self) -> bool {
        matches!(self, Op::SendMessage | Op::SendStreamingMessage)
    }

    /// True for the operations on one task that only its owner may make.
    pub fn on_task(self) -> bool {
        matches!(
            self,
            Op::GetTask
                | Op::CancelTask
                | Op::SubscribeToTask
                | Op::CreatePushConfig
                | Op::GetPushConfig
                | Op::ListPushConfigs
                | Op::DeletePushConfig
        )
    }
}

/// How the call came.
#[derive(Debug, Clone, PartialEq)]
pub enum Binding {
    /// JSON-RPC 2.0, with the request's id.
    JsonRpc {
        /// The id (`null` for a notification).
        id: Value,
    },
    /// HTTP+JSON (REST).
    Rest,
}

/// One A2A call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The binding.
    pub binding: Binding,
    /// The operation; `None` for a method or path A2A does not define.
    pub op: Option<Op>,
    /// The A2A 1.0 name of the operation; for one A2A does not define, the
    /// method as sent (a JSON-RPC method, or `METHOD /path` for REST), at
    /// most 128 characters.
    pub method: String,
    /// The params (JSON-RPC) or the body (REST), `Null` when none.
    pub params: Value,
    /// The task the call addresses, from the params or the path.
    pub task_id: Option<String>,
}

/// Why a request is not a readable A2A call: the binding's error answers it.
#[derive(Debug, Clone, PartialEq)]
pub struct Unreadable {
    /// The binding (JSON-RPC when the body looked like it).
    pub binding: Binding,
    /// The JSON-RPC code (-32700 or -32600) or the REST status (400).
    pub code: i64,
    /// What is wrong.
    pub message: String,
}

/// The first string of `v` under one of `keys`.
pub fn field<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().find_map(|k| v.get(*k))
}

/// The first string field of `v` among `keys`.
pub fn text_field<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|k| v.get(*k).and_then(Value::as_str))
}

const TASK_ID: &[&str] = &["taskId", "task_id"];

/// Drops empty ids and repeats, keeping the first of each.
pub(super) fn unique(ids: &mut Vec<&str>) {
    let mut seen: Vec<&str> = Vec::with_capacity(ids.len());
    ids.retain(|t| {
        let keep = !t.is_empty() && !seen.contains(t);
        if keep {
            seen.push(t);
        }
        keep
    });
}

impl Call {
    /// Reads a request: `None` when it is neither a JSON-RPC body nor an
    /// A2A path (the rules see it as method `METHOD /path`, which no rule
    /// of A2A names: default deny).
    pub fn read(method: &str, path: &str, body: Option<&[u8]>) -> Result<Call, Unreadable> {
        let path = path.split(['?', '#']).next().unwrap_or(path);
        let body = body.filter(|b| !b.iter().all(u8::is_ascii_whitespace));
        if method.eq_ignore_ascii_case("POST") {
            if let Some(b) = body {
                if looks_jsonrpc(b) {
                    return jsonrpc_call(b);
                }
            }
        }
        let params = match body {
            Some(b) => serde_json::from_slice(b).map_err(|e| Unreadable {
                binding: Binding::Rest,
                code: 400,
                message: format!("body is not JSON: {e}"),
            })?,
            None => Value::Null,
        };
        if let Some(field) = ambiguous(&params) {
            return Err(Unreadable {
                binding: Binding::Rest,
                code: 400,
                message: format!("the body names {field} in two spellings"),
            });
        }
        let (op, task_id) = rest_op(method, path);
        let shown: String = format!("{} {}", method.to_ascii_uppercase(), path)
            .chars()
            .take(128)
            .collect();
        Ok(Call {
            binding: Binding::Rest,
            op,
            method: op.map_or(shown, |o| o.name().to_string()),
            params,
            task_id,
        })
    }

    /// The message a send carries (`params.message`).
    pub fn message(&self) -> Option<&Value> {
        self.op.filter(|o| o.sends())?;
        self.params.get("message").filter(|m| m.is_object())
    }

    /// Every task the call touches: the one it addresses, and for a send
    /// the task it continues (`message.taskId`) and those it references
    /// (`referenceTaskIds`).
    pub fn tasks(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self.task_id.iter().map(String::as_str).collect();
        if let Some(m) = self.message() {
            out.extend(text_field(m, TASK_ID));
            if let Some(Value::Array(refs)) = field(m, &["referenceTaskIds", "reference_task_ids"]) {
                out.extend(refs.iter().filter_map(Value::as_str));
            }
        }
        super::call::unique(&mut out);
        out
    }

    /// The push-notification URLs the call gives the agent: a send's
    /// `configuration.taskPushNotificationConfig.url` (0.3
    /// `pushNotificationConfig`), a config's own `url`.
    pub fn push_urls(&self) -> Vec<&str> {
        let mut out = Vec::new();
        match self.op {
            Some(o) if o.sends() => {
                let conf = field(&self.params, &["configuration"]).and_then(|c| {
                    field(
                        c,
                        &[
                            "taskPushNotificationConfig",
                            "task_push_notification_config",
                            "pushNotificationConfig",
                            "push_notification_config",
                        ],
                    )
                });
                if let Some(c) = conf {
                    config_urls(c, &mut out);
                }
            }
            Some(Op::CreatePushConfig) => config_urls(&self.params, &mut out),
            _ => {}
        }
        out
    }

    /// The URLs of a send's file parts: `parts[].url` (1.0), `parts[].file.uri` (0.3).
    pub fn file_urls(&self) -> Vec<&str> {
        let Some(Value::Array(parts)) = self.message().and_then(|m| m.get("parts")) else {
            return Vec::new();
        };
        parts
            .iter()
            .filter_map(|p| {
                text_field(p, &["url", "uri"]).or_else(|| p.get("file").and_then(|f| text_field(f, &["uri", "url"])))
            })
            .collect()
    }
}

/// The `url` of a push-notification config, and of the config nested in
/// it (0.3 `pushNotificationConfig`).
fn config_urls<'v>(c: &'v Value, out: &mut Vec<&'v str>) {
    out.extend(text_field(c, &["url"]));
    for nested in ["pushNotificationConfig", "push_notification_config", "config"] {
        out.extend(c.get(nested).and_then(|n| text_field(n, &["url"])));
    }
}

/// The first member of an object (at any depth, up to 32 levels) present
/// in both spellings, camelCase and snake_case: the official server accepts
/// both and takes the last, so a call naming a task (or a URL) twice could
/// show the policy one value and the agent another.
pub fn ambiguous(v: &Value) -> Option<String> {
    fn walk(v: &Value, depth: usize) -> Option<String> {
        if depth > 32 {
            return None;
        }
        match v {
            Value::Object(map) => {
                for (k, child) in map {
                    if k.bytes().any(|b| b.is_ascii_uppercase()) {
                        let snake: String = k
                            .chars()
                            .flat_map(|c| {
                                let lower = c.to_ascii_lowercase();
                                (c.is_ascii_uppercase().then_some('_'))
                                    .into_iter()
                                    .chain(std::iter::once(lower))
                            })
                            .collect();
                        if map.contains_key(&snake) {
                            return Some(k.clone());
                        }
                    }
                    if let Some(found) = walk(child, depth + 1) {
                        return Some(found);
                    }
                }
                None
            }
            Value::Array(items) => items.iter().find_map(|i| walk(i, depth + 1)),
            _ => None,
        }
    }
    walk(v, 0)
}

/// True when a body is JSON-RPC (an object or array with `jsonrpc`) by a
/// cheap look at its first bytes and a search for the member.
fn looks_jsonrpc(body: &[u8]) -> bool {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    matches!(first, Some(b'{') | Some(b'[')) && body.windows(9).any(|w| w == b"\"jsonrpc\"")
}

fn jsonrpc_call(body: &[u8]) -> Result<Call, Unreadable> {
    let unreadable = |e: BodyError| Unreadable {
        binding: Binding::JsonRpc { id: Value::Null },
        code: e.code,
        message: e.message,
    };
    let env = jsonrpc::parse(body).map_err(unreadable)?;
    if env.batch {
        return Err(unreadable(BodyError {
            code: jsonrpc::INVALID_REQUEST,
            message: "A2A does not define batches".into(),
        }));
    }
    let Some(m) = env.messages.into_iter().next() else {
        return Err(unreadable(BodyError {
            code: jsonrpc::INVALID_REQUEST,
            message: "empty body".into(),
        }));
    };
    let id = m.id.clone().unwrap_or(Value::Null);
    let (Kind::Request | Kind::Notification, Some(method)) = (m.kind, m.method) else {
        return Err(Unreadable {
            binding: Binding::JsonRpc { id },
            code: jsonrpc::INVALID_REQUEST,
            message: "a JSON-RPC response is not an A2A call".into(),
        });
    };
    let op = Op::of_method(&method);
    let params = m.params.unwrap_or(Value::Null);
    if let Some(field) = ambiguous(&params) {
        return Err(Unreadable {
            binding: Binding::JsonRpc { id },
            code: jsonrpc::INVALID_PARAMS,
            message: format!("params name {field} in two spellings"),
        });
    }
    let task_id = match op {
        Some(Op::GetTask | Op::CancelTask | Op::SubscribeToTask) => text_field(&params, &["id"]),
        // 1.0 names the task `taskId`; 0.3's get/list/delete name it `id`.
        Some(Op::CreatePushConfig | Op::GetPushConfig | Op::ListPushConfigs | Op::DeletePushConfig) => {
            text_field(&params, TASK_ID).or_else(|| {
                if method.starts_with("tasks/") {
                    text_field(&params, &["id"])
                } else {
                    None
                }
            })
        }
        _ => None,
    }
    .map(String::from);
    Ok(Call {
        binding: Binding::JsonRpc { id },
        op,
        method: op.map_or_else(|| method.chars().take(128).collect(), |o| o.name().to_string()),
        params,
        task_id,
    })
}

/// The operation and task of an HTTP+JSON path (after any prefix).
fn rest_op(method: &str, path: &str) -> (Option<Op>, Option<String>) {
    let get = method.eq_ignore_ascii_case("GET");
    let post = method.eq_ignore_ascii_case("POST");
    let delete = method.eq_ignore_ascii_case("DELETE");
    if get && (path.ends_with("/.well-known/agent-card.json") || path.ends_with("/.well-known/agent.json")) {
        return (Some(Op::GetAgentCard), None);
    }
    if get && (path.ends_with("/extendedAgentCard") || path.ends_with("/card")) {
        return (Some(Op::GetExtendedAgentCard), None);
    }
    if post && path.ends_with("/message:send") {
        return (Some(Op::SendMessage), None);
    }
    if post && path.ends_with("/message:stream") {
        return (Some(Op::SendStreamingMessage), None);
    }
    if get && path.ends_with("/tasks") {
        return (Some(Op::ListTasks), None);
    }
    // `.../tasks/{id}[:verb][/pushNotificationConfigs[/{id}]]`
    let Some(at) = path.rfind("/tasks/") else {
        return (None, None);
    };
    let rest = &path[at + "/tasks/".len()..];
    let (task, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let (task, verb) = task.split_once(':').unwrap_or((task, ""));
    if task.is_empty() {
        return (None, None);
    }
    let task = percent_decode(task);
    let op = match (verb, tail.split('/').collect::<Vec<_>>().as_slice()) {
        ("", [""]) if get => Op::GetTask,
        ("cancel", [""]) if post => Op::CancelTask,
        ("subscribe", [""]) if get || post => Op::SubscribeToTask,
        ("", ["pushNotificationConfigs"]) if post => Op::CreatePushConfig,
        ("", ["pushNotificationConfigs"]) if get => Op::ListPushConfigs,
        ("", ["pushNotificationConfigs", id]) if get && !id.is_empty() => Op::GetPushConfig,
        ("", ["pushNotificationConfigs", id]) if delete && !id.is_empty() => Op::DeletePushConfig,
        _ => return (None, Some(task)),
    };
    (Some(op), Some(task))
}

/// `%XX` escapes of a path segment decoded (lossy UTF-8).
fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned()
}

#[cfg(test)]
#[path = "call_tests.rs"]
mod tests;
