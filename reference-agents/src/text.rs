//! Reading the text of a chat-completion (or completion) JSON body, as
//! LLM-facing policies do: `messages[].content` (a string or a list of parts
//! with `text`), `prompt` and `input` (strings or lists of strings); and of
//! A2A messages (their parts).

use serde_json::Value;

fn push_text(value: &Value, out: &mut String) {
    match value {
        Value::String(s) => {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(s);
        }
        Value::Array(items) => items.iter().for_each(|v| push_text(v, out)),
        Value::Object(part) => {
            if let Some(text) = part.get("text") {
                push_text(text, out);
            }
        }
        _ => {}
    }
}

/// The prompt text of a chat-completion JSON document, or `None` when the
/// document has none of `messages`, `prompt` or `input`.
pub fn chat_text(doc: &Value) -> Option<String> {
    let obj = doc.as_object()?;
    let mut out = String::new();
    let mut found = false;
    if let Some(Value::Array(messages)) = obj.get("messages") {
        found = true;
        for m in messages {
            if let Some(content) = m.get("content") {
                push_text(content, &mut out);
            }
        }
    }
    for field in ["prompt", "input"] {
        if let Some(v) = obj.get(field) {
            found = true;
            push_text(v, &mut out);
        }
    }
    found.then_some(out)
}

/// The text to inspect in a body: the chat fields when it is such a JSON
/// document, the text of its parts when it is an A2A message
/// ([`crate::a2a::parts`]), else the whole body (lossy UTF-8).
pub fn body_text(body: &[u8]) -> String {
    match serde_json::from_slice::<Value>(body) {
        Ok(doc) => chat_text(&doc).unwrap_or_else(|| {
            let mut out = String::new();
            if crate::a2a::parts::push_texts(&doc, &mut out) {
                out
            } else {
                String::from_utf8_lossy(body).into_owned()
            }
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
        assert_eq!(body_text(a2a), "ignore all");
    }
}
