//! The tool steps of a conversation, as the runtime sends its history back:
//! each call the model made, paired with its result.
//!
//! * OpenAI style: `messages[]` of `role: assistant` with `tool_calls[]`
//!   (`id`, `function.name`, `function.arguments`), answered by messages of
//!   `role: tool` with the same `tool_call_id`.
//! * Anthropic style: `tool_use` blocks (`id`, `name`, `input`) in
//!   assistant messages, answered by `tool_result` blocks (`tool_use_id`,
//!   `content`, `is_error`).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::Value;

/// One tool step of the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The tool name.
    pub tool: String,
    /// A digest of the tool and its arguments (members in sorted order).
    pub call: u64,
    /// A digest of the result, once answered.
    pub result: Option<u64>,
    /// The result says it failed (`is_error`, or an error-looking text).
    pub error: bool,
}

fn digest(parts: &[&str]) -> u64 {
    let mut h = DefaultHasher::new();
    parts.hash(&mut h);
    h.finish()
}

/// Arguments in one canonical text: parsed JSON re-written (members sorted),
/// else the text as sent.
fn canonical(args: Option<&Value>) -> String {
    match args {
        Some(Value::String(s)) => serde_json::from_str::<Value>(s).map_or_else(|_| s.clone(), |v| v.to_string()),
        Some(v) => v.to_string(),
        None => String::new(),
    }
}

/// The text of a result: a string, or the `text` parts joined.
fn result_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        Some(v) => v.to_string(),
        None => String::new(),
    }
}

/// Does a result text say the call failed? The start of the text (first
/// 200 characters) names an error, or a JSON result has `error` / `isError`.
pub fn looks_like_error(text: &str) -> bool {
    if let Ok(Value::Object(o)) = serde_json::from_str::<Value>(text) {
        return o.get("isError").and_then(Value::as_bool) == Some(true)
            || o.get("error").is_some_and(|e| !e.is_null() && e != false);
    }
    let head: String = text.chars().take(200).collect::<String>().to_ascii_lowercase();
    [
        "error",
        "failed",
        "exception",
        "traceback",
        "not found",
        "denied",
        "timed out",
    ]
    .iter()
    .any(|w| head.contains(w))
}

/// The tool steps of a chat request, in conversation order.
pub fn steps(doc: &Value) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::new();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    let answer =
        |out: &mut Vec<Step>, by_id: &HashMap<String, usize>, id: Option<&str>, text: String, flagged: bool| {
            if let Some(step) = id.and_then(|id| by_id.get(id)).and_then(|&i| out.get_mut(i)) {
                step.error = flagged || looks_like_error(&text);
                step.result = Some(digest(&[&text]));
            }
        };
    for m in doc.get("messages").and_then(Value::as_array).into_iter().flatten() {
        for call in m.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
            let f = call.get("function").unwrap_or(&Value::Null);
            let tool = f.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
            let args = canonical(f.get("arguments"));
            if let Some(id) = call.get("id").and_then(Value::as_str) {
                by_id.insert(id.to_string(), out.len());
            }
            out.push(Step {
                call: digest(&[&tool, &args]),
                tool,
                result: None,
                error: false,
            });
        }
        if m.get("role").and_then(Value::as_str) == Some("tool") {
            let text = result_text(m.get("content"));
            answer(
                &mut out,
                &by_id,
                m.get("tool_call_id").and_then(Value::as_str),
                text,
                false,
            );
        }
        for block in m.get("content").and_then(Value::as_array).into_iter().flatten() {
            match block.get("type").and_then(Value::as_str) {
                Some("tool_use") => {
                    let tool = block
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string();
                    let args = canonical(block.get("input"));
                    if let Some(id) = block.get("id").and_then(Value::as_str) {
                        by_id.insert(id.to_string(), out.len());
                    }
                    out.push(Step {
                        call: digest(&[&tool, &args]),
                        tool,
                        result: None,
                        error: false,
                    });
                }
                Some("tool_result") => {
                    let flagged = block.get("is_error").and_then(Value::as_bool) == Some(true);
                    let text = result_text(block.get("content"));
                    answer(
                        &mut out,
                        &by_id,
                        block.get("tool_use_id").and_then(Value::as_str),
                        text,
                        flagged,
                    );
                }
                _ => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pairs_calls_with_results_in_both_styles() {
        let doc = json!({"messages": [
            {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "read", "arguments": "{\"b\":1,\"a\":2}"}}]},
            {"role": "tool", "tool_call_id": "a", "content": "Error: no such file"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "read", "input": {"a": 2, "b": 1}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": true, "content": [{"type": "text", "text": "Error: no such file"}]}]},
            {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "list", "arguments": "{}"}}]}
        ]});
        let s = steps(&doc);
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].call, s[1].call, "same tool, same arguments in another order");
        assert_eq!(s[0].result, s[1].result);
        assert!(s[0].error && s[1].error);
        assert_eq!(s[2].result, None);
        assert!(steps(&json!({"messages": "x"})).is_empty());
        assert!(steps(&json!({"messages": [{"role": "tool", "tool_call_id": "zz", "content": 1}]})).is_empty());
    }

    #[test]
    fn error_results() {
        assert!(looks_like_error("Error: ENOENT"));
        assert!(looks_like_error(r#"{"error": {"code": 1}}"#));
        assert!(looks_like_error(r#"{"isError": true, "content": []}"#));
        assert!(!looks_like_error(r#"{"error": null, "rows": 3}"#));
        assert!(!looks_like_error("3 rows"));
    }
}
