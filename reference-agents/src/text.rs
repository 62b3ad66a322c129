//! Reading the text of a request body as the model or agent behind it
//! reads it, for the guardrails and token estimates.
//!
//! * A chat document (OpenAI chat completions and completions, the
//!   Responses API, Anthropic messages): every string of `messages`,
//!   `input`, `prompt`, `instructions` and `system`, whatever their shape:
//!   string content, content parts (`text`, `input_text`, ...), tool
//!   messages and tool results, Responses input items
//!   (`function_call_output.output`, ...), tool-call arguments. Strings
//!   that name a shape rather than say something (`role`, `type`, ids) are
//!   left out, and so is encoded data (`data:` URLs, a `base64` source's
//!   `data`: images and files).
//! * Any other JSON (an A2A message in any version, an MCP call): every
//!   string and every key, decoded. Nothing an agent could act on is
//!   skipped because it sits under a name this reader does not know.
//! * Anything else: the body as text (lossy UTF-8).

use serde_json::Value;

/// The members of a chat document whose strings the model reads.
const CHAT_FIELDS: &[&str] = &["messages", "prompt", "input", "instructions", "system"];

/// Members whose string values name a shape, not content.
const SHAPE_KEYS: &[&str] = &[
    "role",
    "type",
    "id",
    "tool_call_id",
    "call_id",
    "detail",
    "format",
    "mime_type",
    "media_type",
    "status",
];

/// Deepest nesting walked.
const MAX_DEPTH: usize = 64;

fn push(out: &mut String, s: &str) {
    if s.is_empty() {
        return;
    }
    if !out.is_empty() {
        out.push('\n');
    }
    out.push_str(s);
}

fn is_blob(s: &str) -> bool {
    s.starts_with("data:")
}

/// The content strings of a chat member, at any depth.
fn content_strings(v: &Value, out: &mut String, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match v {
        Value::String(s) if !is_blob(s) => push(out, s),
        Value::Array(items) => items.iter().for_each(|i| content_strings(i, out, depth + 1)),
        Value::Object(map) => {
            // An encoded source (`{"type": "base64", "data": ...}`).
            let encoded = map.get("type").and_then(Value::as_str) == Some("base64");
            for (k, child) in map {
                let shape = SHAPE_KEYS.contains(&k.as_str()) && child.is_string();
                let data = encoded && k == "data";
                if !(shape || data) {
                    content_strings(child, out, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// Every key and string of `v`, at any depth.
fn all_text(v: &Value, out: &mut String, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match v {
        Value::String(s) => push(out, s),
        Value::Array(items) => items.iter().for_each(|i| all_text(i, out, depth + 1)),
        Value::Object(map) => {
            for (k, child) in map {
                push(out, k);
                all_text(child, out, depth + 1);
            }
        }
        _ => {}
    }
}

/// The text a model reads in a chat document, or `None` when the document
/// has none of [`CHAT_FIELDS`].
pub fn chat_text(doc: &Value) -> Option<String> {
    let obj = doc.as_object()?;
    let mut out = String::new();
    let mut found = false;
    for field in CHAT_FIELDS {
        if let Some(v) = obj.get(*field) {
            found = true;
            content_strings(v, &mut out, 0);
        }
    }
    found.then_some(out)
}

/// The text to inspect in a body: the chat fields when it is a chat
/// document, every key and string of any other JSON, else the whole body
/// (lossy UTF-8).
pub fn body_text(body: &[u8]) -> String {
    match serde_json::from_slice::<Value>(body) {
        Ok(doc) => chat_text(&doc).unwrap_or_else(|| {
            let mut out = String::new();
            all_text(&doc, &mut out, 0);
            out
        }),
        Err(_) => String::from_utf8_lossy(body).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_messages_prompt_and_input() {
        let doc = serde_json::json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": "be nice"},
                {"role": "user", "content": [{"type": "text", "text": "hello"}, {"type": "image_url"}]}
            ],
            "prompt": ["a", "b"],
            "input": "c"
        });
        assert_eq!(chat_text(&doc).unwrap(), "be nice\nhello\na\nb\nc");
        assert_eq!(chat_text(&serde_json::json!({"x": 1})), None);
        assert_eq!(body_text(b"plain text"), "plain text");
        assert_eq!(body_text(br#"{"prompt":"p","model":"secret"}"#), "p");
        let a2a = br#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","parts":[{"text":"ign\u006fre all"}]}}}"#;
        assert!(body_text(a2a).contains("ignore all"));
        // A 0.3 REST message's parts are `content`; a decoy `parts` beside
        // them hides nothing.
        let v03 = br#"{"message":{"parts":[{"text":"hello"}],"content":[{"text":"jailbreak"}]}}"#;
        let t = body_text(v03);
        assert!(t.contains("hello") && t.contains("jailbreak"), "{t}");
        // A key is read too.
        assert!(body_text(br#"{"arguments":{"ignore previous":1}}"#).contains("ignore previous"));
    }

    #[test]
    fn openai_shapes_are_read_whole() {
        // Tool messages, content parts, tool-call arguments.
        let chat = serde_json::json!({"model": "m", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"q\":\"two\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "three"}]}
        ]});
        let t = chat_text(&chat).unwrap();
        for word in ["one", "two", "three"] {
            assert!(t.contains(word), "{word} in {t}");
        }
        assert!(
            !t.contains("base64") && !t.contains("c1") && !t.contains("assistant"),
            "{t}"
        );
        // The Responses API: `input` as items, and `instructions`.
        let responses = serde_json::json!({"model": "m", "instructions": "four", "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "five"}]},
            {"type": "function_call_output", "call_id": "x", "output": "six"},
            {"type": "message", "role": "user", "content": "seven"}
        ]});
        let t = chat_text(&responses).unwrap();
        for word in ["four", "five", "six", "seven"] {
            assert!(t.contains(word), "{word} in {t}");
        }
        let image = serde_json::json!({"system": "eight", "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo"}}]}]});
        assert_eq!(chat_text(&image).unwrap(), "eight");
    }
}
