//! JSON-RPC 2.0 bodies of MCP's streamable HTTP transport: one message or a
//! batch (an array), each a request, a notification or a response.
//!
//! Parsing refuses what a server might read differently from a policy: a
//! body that is not UTF-8 or not JSON (-32700), a message without
//! `"jsonrpc": "2.0"`, a `method` that is not a string, `params` that are
//! neither object nor array, an id that is not a string or an integer, an id
//! longer than [`MAX_ID_LEN`], an empty batch or one above [`MAX_BATCH`]
//! messages (-32600). Nesting deeper than serde_json's limit (128) is a parse
//! error.

use serde_json::Value;

/// Parse error: the body is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// Invalid request: JSON, but not a JSON-RPC 2.0 message.
pub const INVALID_REQUEST: i64 = -32600;
/// Invalid params.
pub const INVALID_PARAMS: i64 = -32602;
/// Internal error (used for a policy's own configuration errors).
pub const INTERNAL_ERROR: i64 = -32603;
/// Server-defined error: the call was refused by policy.
pub const DENIED: i64 = -32001;

/// Most messages in one batch.
pub const MAX_BATCH: usize = 1000;
/// Longest string id, in bytes.
pub const MAX_ID_LEN: usize = 256;

/// A body that is not valid JSON-RPC: the error code and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyError {
    /// [`PARSE_ERROR`] or [`INVALID_REQUEST`].
    pub code: i64,
    /// Why (never the body's content).
    pub message: String,
    /// The id of the request, when the body was one JSON object whose `id`
    /// is a string or an integer (JSON-RPC 2.0 section 5: an error answers
    /// with the request's id when it could be read); else `null`.
    pub id: Value,
}

impl BodyError {
    /// An error with `code` and `message`, answered with id `null`.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        BodyError {
            code,
            message: message.into(),
            id: Value::Null,
        }
    }

    fn parse(message: impl Into<String>) -> Self {
        BodyError::new(PARSE_ERROR, message)
    }

    fn invalid(message: impl Into<String>) -> Self {
        BodyError::new(INVALID_REQUEST, message)
    }

    /// The same error, answered with `id`.
    pub fn with_id(mut self, id: Value) -> Self {
        self.id = id;
        self
    }
}

/// The id a reply to `message` can carry even when the message is not
/// valid JSON-RPC: its `id` when that is a string (at most [`MAX_ID_LEN`]
/// bytes) or an integer, else `null`. What the official servers echo.
pub fn readable_id(message: &Value) -> Value {
    match message.get("id") {
        Some(id) if valid_id(id).is_ok() => id.clone(),
        _ => Value::Null,
    }
}

/// What a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A method call with an id: it gets a reply.
    Request,
    /// A method call without an id: no reply.
    Notification,
    /// A reply (to a request the server sent).
    Response,
}

/// One JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Request, notification or response.
    pub kind: Kind,
    /// The id (a string or an integer), absent for notifications.
    pub id: Option<Value>,
    /// The method, absent for responses.
    pub method: Option<String>,
    /// The params (object or array), if any.
    pub params: Option<Value>,
}

/// How the rules see a method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MethodClass {
    /// `initialize`, `server/discover`, `ping`, `notifications/*`: always let through.
    Open,
    /// `tools/call`, `prompts/get` (the `name` param) and `resources/read`
    /// (the `uri` param): the rules decide on the method and that target.
    Targeted(&'static str),
    /// Any other method: the rules decide on the method alone.
    Plain,
}

/// The class of `method`.
pub fn classify(method: &str) -> MethodClass {
    match method {
        "initialize" | "server/discover" | "ping" => MethodClass::Open,
        m if m.starts_with("notifications/") => MethodClass::Open,
        "tools/call" | "prompts/get" => MethodClass::Targeted("name"),
        "resources/read" => MethodClass::Targeted("uri"),
        _ => MethodClass::Plain,
    }
}

impl Message {
    /// The target of a targeted method: `Ok(None)` for other methods,
    /// `Err` when a targeted method lacks a string target.
    pub fn target(&self) -> Result<Option<&str>, String> {
        let Some(method) = self.method.as_deref() else {
            return Ok(None);
        };
        match classify(method) {
            MethodClass::Targeted(key) => self
                .params
                .as_ref()
                .and_then(|p| p.get(key))
                .and_then(Value::as_str)
                .map(Some)
                .ok_or_else(|| format!("{method} needs a string params.{key}")),
            _ => Ok(None),
        }
    }

    /// The `arguments` of a `tools/call` (absent: `None`).
    pub fn tool_arguments(&self) -> Option<&Value> {
        if self.method.as_deref() != Some("tools/call") {
            return None;
        }
        self.params.as_ref()?.get("arguments")
    }
}

/// A parsed body: its messages, and whether it was a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// The messages, in order.
    pub messages: Vec<Message>,
    /// True when the body was a JSON array.
    pub batch: bool,
}

impl Envelope {
    /// The ids of the requests, in order (what a batch reply answers).
    pub fn request_ids(&self) -> impl Iterator<Item = &Value> {
        self.messages
            .iter()
            .filter_map(|m| m.id.as_ref().filter(|_| m.kind == Kind::Request))
    }
}

/// Parses a request body.
pub fn parse(body: &[u8]) -> Result<Envelope, BodyError> {
    let text = std::str::from_utf8(body).map_err(|_| BodyError::parse("body is not UTF-8"))?;
    if text.trim().is_empty() {
        return Err(BodyError::parse("empty body"));
    }
    let value: Value = serde_json::from_str(text).map_err(|e| BodyError::parse(format!("body is not JSON: {e}")))?;
    match value {
        Value::Array(items) => {
            if items.is_empty() {
                return Err(BodyError::invalid("empty batch"));
            }
            if items.len() > MAX_BATCH {
                return Err(BodyError::invalid(format!(
                    "batch of {} messages is above the limit of {MAX_BATCH}",
                    items.len()
                )));
            }
            let mut messages = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                let m = message(item).map_err(|e| BodyError::invalid(format!("batch message {i}: {}", e.message)))?;
                messages.push(m);
            }
            Ok(Envelope { messages, batch: true })
        }
        other => {
            let id = readable_id(&other);
            Ok(Envelope {
                messages: vec![message(other).map_err(|e| e.with_id(id))?],
                batch: false,
            })
        }
    }
}

fn valid_id(id: &Value) -> Result<(), BodyError> {
    match id {
        Value::String(s) if s.len() <= MAX_ID_LEN => Ok(()),
        Value::String(_) => Err(BodyError::invalid(format!("id longer than {MAX_ID_LEN} bytes"))),
        Value::Number(n) if n.is_i64() || n.is_u64() => Ok(()),
        Value::Number(_) => Err(BodyError::invalid("id must be an integer or a string")),
        _ => Err(BodyError::invalid("id must be an integer or a string")),
    }
}

/// Validates one message.
fn message(value: Value) -> Result<Message, BodyError> {
    let Value::Object(mut obj) = value else {
        return Err(BodyError::invalid("a message must be a JSON object"));
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(BodyError::invalid("\"jsonrpc\" must be \"2.0\""));
    }
    let id = obj.remove("id");
    if let Some(id) = &id {
        valid_id(id)?;
    }
    let params = obj.remove("params");
    if let Some(p) = &params {
        if !p.is_object() && !p.is_array() {
            return Err(BodyError::invalid("params must be an object or an array"));
        }
    }
    match obj.remove("method") {
        Some(Value::String(method)) if !method.is_empty() => Ok(Message {
            kind: if id.is_some() {
                Kind::Request
            } else {
                Kind::Notification
            },
            id,
            method: Some(method),
            params,
        }),
        Some(_) => Err(BodyError::invalid("method must be a non-empty string")),
        None => {
            let has_result = obj.contains_key("result");
            let has_error = obj.contains_key("error");
            if id.is_none() || has_result == has_error {
                return Err(BodyError::invalid(
                    "a message needs a method, or an id with one of result and error",
                ));
            }
            Ok(Message {
                kind: Kind::Response,
                id,
                method: None,
                params: None,
            })
        }
    }
}

#[cfg(test)]
#[path = "jsonrpc_tests.rs"]
mod tests;
