//! MCP replies on the kernel's streamed response path: one JSON-RPC message
//! per server-sent event (`data:` lines), read and rewritten one event at a
//! time, and the error that answers the client's own request when a
//! server-to-client request on its stream is refused.
//!
//! The request phase of `mcpToolAuthorization` (and `mcpServerRequestGuard`)
//! records the id of the POSTed request in metadata [`PENDING_ID`] (as JSON
//! text), so that a streaming hook, which sees no request body, can answer
//! that request.

use bytes::Bytes;
use serde_json::{json, Value};

use policy_agents::stream::sse;

/// Metadata key: the JSON-RPC id of the POSTed request whose reply is being
/// streamed, as JSON text (`5`, `"a"`); unset for a GET stream, a batch or
/// a POST that is not a request.
pub const PENDING_ID: &str = "mcp.request_id";

/// What one event holds.
#[derive(Debug, Clone, PartialEq)]
pub enum EventMessage {
    /// No data, or an empty one (an SSE priming event, a keep-alive).
    None,
    /// One JSON-RPC message (or a batch: a JSON array).
    Message(Value),
    /// Data that is not JSON.
    NotJson(String),
}

/// Reads the message of one event.
pub fn read(event: &[u8]) -> EventMessage {
    let Some(data) = sse::data(event) else {
        return EventMessage::None;
    };
    if data.trim().is_empty() {
        return EventMessage::None;
    }
    match serde_json::from_str(&data) {
        Ok(v) => EventMessage::Message(v),
        Err(e) => EventMessage::NotJson(format!("event data is not JSON: {e}")),
    }
}

/// `event` with its message replaced by `msg` (other lines kept).
pub fn with_message(event: &[u8], msg: &Value) -> Bytes {
    sse::with_data(event, &msg.to_string())
}

/// The messages of an event's value: itself, or the items of a batch.
pub fn messages(v: &Value) -> Vec<&Value> {
    match v {
        Value::Array(items) => items.iter().collect(),
        one => vec![one],
    }
}

/// A server-to-client request: a message with a string `method` and an `id`.
pub fn server_request(msg: &Value) -> Option<(&str, &Value)> {
    let method = msg.get("method")?.as_str()?;
    let id = msg.get("id").filter(|id| !id.is_null())?;
    Some((method, id))
}

/// The id of the client's pending request, from metadata [`PENDING_ID`].
pub fn pending_id(metadata: &policy_agents::Metadata) -> Option<Value> {
    let raw = metadata.get(PENDING_ID)?;
    serde_json::from_str::<Value>(raw)
        .ok()
        .filter(|v| v.is_string() || v.is_i64() || v.is_u64())
}

/// The id of a request as metadata text (JSON), at most 256 bytes.
pub fn id_text(id: &Value) -> Option<String> {
    let text = id.to_string();
    ((id.is_string() || id.is_i64() || id.is_u64()) && text.len() <= 258).then_some(text)
}

/// The event that answers the client's pending request `id` with a JSON-RPC
/// error (`code`, `message`, `data`): sent in place of a refused server
/// request, before the stream ends, so the client's call fails at once
/// instead of waiting for a reply that will not come.
pub fn refusal_event(id: &Value, code: i64, message: &str, data: &Value) -> Bytes {
    let doc = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message, "data": data}});
    sse::event("message", &doc.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_read_and_rewritten_in_place() {
        let ev = b"event: message\nid: 7\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"roots/list\"}\n\n";
        let EventMessage::Message(v) = read(ev) else {
            panic!("a message")
        };
        assert_eq!(server_request(&v).map(|(m, _)| m), Some("roots/list"));
        let out = with_message(ev, &json!({"a": 1}));
        assert_eq!(&out[..], b"event: message\nid: 7\ndata: {\"a\":1}\n\n");
        assert_eq!(read(b"id: 1\ndata: \n\n"), EventMessage::None);
        assert_eq!(read(b": keep-alive\n\n"), EventMessage::None);
        assert!(matches!(read(b"data: {oops\n\n"), EventMessage::NotJson(_)));
        let note = json!({"jsonrpc": "2.0", "method": "notifications/progress"});
        assert!(server_request(&note).is_none());
    }

    #[test]
    fn the_pending_id_comes_from_metadata() {
        let mut md = policy_agents::Metadata::new();
        assert_eq!(pending_id(&md), None);
        md.insert(PENDING_ID, "5");
        assert_eq!(pending_id(&md), Some(json!(5)));
        md.insert(PENDING_ID, "\"abc\"");
        assert_eq!(pending_id(&md), Some(json!("abc")));
        md.insert(PENDING_ID, "{\"x\":1}");
        assert_eq!(pending_id(&md), None);
        assert_eq!(id_text(&json!(3)), Some("3".into()));
        assert_eq!(id_text(&json!([1])), None);
        let ev = refusal_event(&json!(5), -32001, "refused", &json!({"rule": "r"}));
        let EventMessage::Message(v) = read(&ev) else {
            panic!("a message")
        };
        assert_eq!((v["id"].as_i64(), v["error"]["code"].as_i64()), (Some(5), Some(-32001)));
    }
}
