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
//! The binding is the server's: a path that names an HTTP+JSON operation
//! is read as HTTP+JSON whatever its body holds (the server routes by
//! path), any other POST with a JSON-RPC body as JSON-RPC. The path is
//! read percent-decoded, as the server matches it. The protocol version is
//! the method name's (JSON-RPC) or the path's (`/v1/...` is 0.3 over
//! HTTP+JSON); an `A2A-Version: 1.x` header on a 0.3 path is refused, since
//! a server without 0.3 could read it as 1.0 under a tenant `v1`.
//!
//! The params are read by [`super::shapes`], in the version's and
//! binding's own field names and spellings, into the A2A 1.0 shape that
//! every policy reads: a field named twice is refused, and so (with
//! `strict`) is a member the version does not define in a governed place.

use serde_json::Value;

use super::shapes::{self, Dialect};
use crate::jsonrpc::{self, BodyError, Kind};
use policy_agents::RequestView;

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
    /// The protocol version and binding whose field names the call used.
    pub dialect: Dialect,
    /// The operation; `None` for a method or path A2A does not define.
    pub op: Option<Op>,
    /// The A2A 1.0 name of the operation; for one A2A does not define, the
    /// method as sent (a JSON-RPC method, or `METHOD /path` for REST), at
    /// most 128 characters.
    pub method: String,
    /// The params (JSON-RPC) or the body (REST), `Null` when none; for a
    /// send and a push config, read into the A2A 1.0 shape
    /// ([`shapes::read_params`]), whatever version and binding carried them.
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

/// The name of the A2A version header.
pub const VERSION_HEADER: &str = "a2a-version";

impl Call {
    /// Reads a request as the policies do ([`Call::read_with`]), members
    /// the version does not define refused (`strict`).
    pub fn read(method: &str, path: &str, body: Option<&[u8]>) -> Result<Call, Unreadable> {
        Call::read_with(method, path, None, body, true)
    }

    /// Reads the request a policy sees; `strict` as its `unknown_fields`
    /// param says.
    pub fn of(request: &RequestView<'_>, strict: bool) -> Result<Call, Unreadable> {
        Call::read_with(
            request.method(),
            request.path(),
            request.header(VERSION_HEADER),
            request.body(),
            strict,
        )
    }

    /// Reads a request: `method`, `path`, the `A2A-Version` header and the
    /// body. A request that names no A2A operation reads as method `METHOD
    /// /path`, which no rule of A2A names (default deny).
    pub fn read_with(
        method: &str,
        path: &str,
        version: Option<&str>,
        body: Option<&[u8]>,
        strict: bool,
    ) -> Result<Call, Unreadable> {
        let raw_path = path.split(['?', '#']).next().unwrap_or(path);
        // The server matches the decoded path.
        let decoded = percent_decode(raw_path);
        let body = body.filter(|b| !b.iter().all(u8::is_ascii_whitespace));
        let rest = rest_op(method, &decoded);
        if rest.op.is_none() && method.eq_ignore_ascii_case("POST") {
            if let Some(b) = body {
                if looks_jsonrpc(b) {
                    return jsonrpc_call(b, strict);
                }
            }
        }
        let bad = |message: String| Unreadable {
            binding: Binding::Rest,
            code: 400,
            message,
        };
        if rest.v03 && version.is_some_and(|v| v.trim().starts_with('1')) {
            return Err(bad(format!(
                "an A2A 0.3 path with {VERSION_HEADER}: {}",
                version.unwrap_or_default().trim()
            )));
        }
        let mut params = match body {
            Some(b) => serde_json::from_slice(b).map_err(|e| bad(format!("body is not JSON: {e}")))?,
            None => Value::Null,
        };
        let dialect = if rest.v03 { Dialect::V03Rest } else { Dialect::V10 };
        // The server reads the body of a send and of a new push config;
        // the other calls take everything from the path and the query.
        if let Some(op @ (Op::SendMessage | Op::SendStreamingMessage | Op::CreatePushConfig)) = rest.op {
            params = shapes::read_params(op, dialect, &params, strict).map_err(bad)?;
            if op == Op::CreatePushConfig {
                if let Some(t) = &rest.task {
                    // The path's task wins over the body's.
                    params["taskId"] = Value::String(t.clone());
                }
            }
        } else if let Some(field) = ambiguous(&params) {
            return Err(bad(format!("the body names {field} in two spellings")));
        }
        let shown: String = format!("{} {}", method.to_ascii_uppercase(), raw_path)
            .chars()
            .take(128)
            .collect();
        Ok(Call {
            binding: Binding::Rest,
            dialect,
            op: rest.op,
            method: rest.op.map_or(shown, |o| o.name().to_string()),
            params,
            task_id: rest.task,
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
            out.extend(text_field(m, &["taskId"]));
            if let Some(Value::Array(refs)) = m.get("referenceTaskIds") {
                out.extend(refs.iter().filter_map(Value::as_str));
            }
        }
        super::call::unique(&mut out);
        out
    }

    /// The push-notification URLs the call gives the agent: a send's
    /// `configuration.taskPushNotificationConfig.url` (0.3
    /// `pushNotificationConfig`, `pushNotification`), a new config's `url`.
    pub fn push_urls(&self) -> Vec<&str> {
        let conf = match self.op {
            Some(o) if o.sends() => self
                .params
                .get("configuration")
                .and_then(|c| c.get("taskPushNotificationConfig")),
            Some(Op::CreatePushConfig) => Some(&self.params),
            _ => None,
        };
        conf.and_then(|c| text_field(c, &["url"])).into_iter().collect()
    }

    /// The URLs of a send's file parts: `parts[].url` (0.3 `file.uri`,
    /// `file.fileWithUri`).
    pub fn file_urls(&self) -> Vec<&str> {
        let Some(Value::Array(parts)) = self.message().and_then(|m| m.get("parts")) else {
            return Vec::new();
        };
        parts.iter().filter_map(|p| text_field(p, &["url"])).collect()
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

fn jsonrpc_call(body: &[u8], strict: bool) -> Result<Call, Unreadable> {
    let unreadable = |e: BodyError| Unreadable {
        binding: Binding::JsonRpc { id: e.id },
        code: e.code,
        message: e.message,
    };
    let env = jsonrpc::parse(body).map_err(unreadable)?;
    if env.batch {
        return Err(unreadable(BodyError::new(
            jsonrpc::INVALID_REQUEST,
            "A2A does not define batches",
        )));
    }
    let Some(m) = env.messages.into_iter().next() else {
        return Err(unreadable(BodyError::new(jsonrpc::INVALID_REQUEST, "empty body")));
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
    let dialect = if method.contains('/') {
        Dialect::V03JsonRpc
    } else {
        Dialect::V10
    };
    let invalid_params = |message: String| Unreadable {
        binding: Binding::JsonRpc { id: id.clone() },
        code: jsonrpc::INVALID_PARAMS,
        message,
    };
    let raw = m.params.unwrap_or(Value::Null);
    let params = match op {
        Some(op) => shapes::read_params(op, dialect, &raw, strict).map_err(invalid_params)?,
        None => {
            if let Some(field) = ambiguous(&raw) {
                return Err(invalid_params(format!("params name {field} in two spellings")));
            }
            raw
        }
    };
    let task_id = match op {
        Some(Op::GetTask | Op::CancelTask | Op::SubscribeToTask) => text_field(&params, &["id"]),
        // 1.0 names the task `taskId` (a new config's, in the 1.0 shape,
        // too); 0.3's get/list/delete name it `id`.
        Some(Op::CreatePushConfig) => text_field(&params, &["taskId"]),
        Some(Op::GetPushConfig | Op::ListPushConfigs | Op::DeletePushConfig) => match dialect {
            Dialect::V10 => text_field(&params, TASK_ID),
            _ => text_field(&params, &["id"]),
        },
        _ => None,
    }
    .map(String::from);
    Ok(Call {
        binding: Binding::JsonRpc { id },
        dialect,
        op,
        method: op.map_or_else(|| method.chars().take(128).collect(), |o| o.name().to_string()),
        params,
        task_id,
    })
}

/// What an HTTP+JSON path names.
#[derive(Debug, Default)]
struct RestOp {
    op: Option<Op>,
    task: Option<String>,
    /// Under `/v1/`: the 0.3 binding.
    v03: bool,
}

/// The operation and task of a (decoded) HTTP+JSON path, after any prefix.
fn rest_op(method: &str, path: &str) -> RestOp {
    let get = method.eq_ignore_ascii_case("GET");
    let post = method.eq_ignore_ascii_case("POST");
    let delete = method.eq_ignore_ascii_case("DELETE");
    let v03 = |base: &str| base.ends_with("/v1") || base == "v1";
    let at = |op: Op, suffix: &str| RestOp {
        op: Some(op),
        task: None,
        v03: v03(&path[..path.len() - suffix.len()]),
    };
    if get && (path.ends_with("/.well-known/agent-card.json") || path.ends_with("/.well-known/agent.json")) {
        return RestOp {
            op: Some(Op::GetAgentCard),
            ..RestOp::default()
        };
    }
    if get && path.ends_with("/extendedAgentCard") {
        return at(Op::GetExtendedAgentCard, "/extendedAgentCard");
    }
    if get && path.ends_with("/card") {
        return at(Op::GetExtendedAgentCard, "/card");
    }
    if post && path.ends_with("/message:send") {
        return at(Op::SendMessage, "/message:send");
    }
    if post && path.ends_with("/message:stream") {
        return at(Op::SendStreamingMessage, "/message:stream");
    }
    if get && path.ends_with("/tasks") {
        return at(Op::ListTasks, "/tasks");
    }
    // `.../tasks/{id}[:verb][/pushNotificationConfigs[/{id}]]`
    let Some(at) = path.rfind("/tasks/") else {
        return RestOp::default();
    };
    let rest = &path[at + "/tasks/".len()..];
    let (task, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let (task, verb) = task.split_once(':').unwrap_or((task, ""));
    if task.is_empty() {
        return RestOp::default();
    }
    let op = match (verb, tail.split('/').collect::<Vec<_>>().as_slice()) {
        ("", [""]) if get => Some(Op::GetTask),
        ("cancel", [""]) if post => Some(Op::CancelTask),
        ("subscribe", [""]) if get || post => Some(Op::SubscribeToTask),
        ("", ["pushNotificationConfigs"]) if post => Some(Op::CreatePushConfig),
        ("", ["pushNotificationConfigs"]) if get => Some(Op::ListPushConfigs),
        ("", ["pushNotificationConfigs", id]) if get && !id.is_empty() => Some(Op::GetPushConfig),
        ("", ["pushNotificationConfigs", id]) if delete && !id.is_empty() => Some(Op::DeletePushConfig),
        _ => None,
    };
    RestOp {
        op,
        task: Some(task.to_string()),
        v03: v03(&path[..at]),
    }
}

/// `%XX` escapes of a path segment decoded (lossy UTF-8).
fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned()
}

#[cfg(test)]
#[path = "call_tests.rs"]
mod tests;
