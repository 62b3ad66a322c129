//! The planned tool calls of a completion, and the tools its request declared.
//!
//! * OpenAI-style chat completions: `choices[].message.tool_calls[]`, each
//!   `{id, type: "function", function: {name, arguments}}` where
//!   `arguments` is JSON text (an object is accepted too).
//! * Anthropic-style messages: `content[]` blocks of `type: "tool_use"`,
//!   each `{id, name, input}`.
//!
//! Declared tools: OpenAI `tools[].function.{name, parameters}` (and the
//! legacy `functions[].{name, parameters}`), Anthropic
//! `tools[].{name, input_schema}`.

use std::collections::HashMap;

use serde_json::Value;

/// Where a call sits in the completion body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// `choices[choice].message.tool_calls[call]`.
    OpenAi {
        /// Index in `choices`.
        choice: usize,
        /// Index in `tool_calls`.
        call: usize,
    },
    /// `content[block]`.
    Anthropic {
        /// Index in `content`.
        block: usize,
    },
}

/// The arguments of a call, as the model wrote them.
#[derive(Debug, Clone, PartialEq)]
pub enum Arguments {
    /// JSON text (OpenAI `function.arguments`, or streamed fragments joined).
    Text(String),
    /// Already a JSON value (Anthropic `input`).
    Value(Value),
    /// Not given.
    Missing,
    /// Streamed fragments that grew past the critic's limit (dropped).
    TooLarge,
    /// Streamed fragments that were not valid UTF-8.
    NotUtf8,
}

/// One planned tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedCall {
    /// The call's position in the plan: 0, 1, ... over the whole body.
    pub index: usize,
    /// The call id the model gave, if any.
    pub id: Option<String>,
    /// The tool name.
    pub name: String,
    /// The arguments.
    pub arguments: Arguments,
    /// Where the call is.
    pub location: Location,
}

/// The tools a request declared: name -> input schema (if one was given).
pub type Declared = HashMap<String, Option<Value>>;

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(String::from)
}

/// The planned calls of a completion body, in body order.
pub fn planned_calls(doc: &Value) -> Vec<PlannedCall> {
    let mut out = Vec::new();
    if let Some(choices) = doc.get("choices").and_then(Value::as_array) {
        for (c, choice) in choices.iter().enumerate() {
            let Some(calls) = choice.pointer("/message/tool_calls").and_then(Value::as_array) else {
                continue;
            };
            for (k, call) in calls.iter().enumerate() {
                let f = call.get("function").unwrap_or(&Value::Null);
                let arguments = match f.get("arguments") {
                    Some(Value::String(s)) => Arguments::Text(s.clone()),
                    None | Some(Value::Null) => Arguments::Missing,
                    Some(v) => Arguments::Value(v.clone()),
                };
                out.push(PlannedCall {
                    index: out.len(),
                    id: text(call, "id"),
                    name: text(f, "name").unwrap_or_default(),
                    arguments,
                    location: Location::OpenAi { choice: c, call: k },
                });
            }
        }
    }
    if let Some(blocks) = doc.get("content").and_then(Value::as_array) {
        for (b, block) in blocks.iter().enumerate() {
            if block.get("type").and_then(Value::as_str) != Some("tool_use") {
                continue;
            }
            let arguments = match block.get("input") {
                None | Some(Value::Null) => Arguments::Missing,
                Some(v) => Arguments::Value(v.clone()),
            };
            out.push(PlannedCall {
                index: out.len(),
                id: text(block, "id"),
                name: text(block, "name").unwrap_or_default(),
                arguments,
                location: Location::Anthropic { block: b },
            });
        }
    }
    out
}

/// The tools a request body declared; `None` when it declared none.
pub fn declared_tools(request: &Value) -> Option<Declared> {
    let mut out = Declared::new();
    let tools = request.get("tools").and_then(Value::as_array);
    let functions = request.get("functions").and_then(Value::as_array);
    let any = tools.is_some() || functions.is_some();
    for t in tools.into_iter().flatten() {
        // OpenAI: {"type": "function", "function": {...}}; Anthropic: {name, input_schema}.
        let (name, schema) = match t.get("function") {
            Some(f) => (text(f, "name"), f.get("parameters")),
            None => (text(t, "name"), t.get("input_schema")),
        };
        if let Some(name) = name {
            out.insert(name, schema.cloned());
        }
    }
    for f in functions.into_iter().flatten() {
        if let Some(name) = text(f, "name") {
            out.insert(name, f.get("parameters").cloned());
        }
    }
    any.then_some(out)
}

/// Removes the calls at `locations` from a completion body. A choice or a
/// message left without calls gets the finish / stop reason of a plain
/// answer (`stop`, `end_turn`). Returns how many were removed.
pub fn strip(doc: &mut Value, locations: &[Location]) -> usize {
    let mut removed = 0;
    if let Some(choices) = doc.get_mut("choices").and_then(Value::as_array_mut) {
        for (c, choice) in choices.iter_mut().enumerate() {
            let drop: Vec<usize> = locations
                .iter()
                .filter_map(|l| match l {
                    Location::OpenAi { choice, call } if *choice == c => Some(*call),
                    _ => None,
                })
                .collect();
            if drop.is_empty() {
                continue;
            }
            let Some(message) = choice.get_mut("message").and_then(Value::as_object_mut) else {
                continue;
            };
            let mut left = 0;
            if let Some(Value::Array(calls)) = message.get_mut("tool_calls") {
                let mut k = 0;
                calls.retain(|_| {
                    let keep = !drop.contains(&k);
                    k += 1;
                    removed += usize::from(!keep);
                    keep
                });
                left = calls.len();
            }
            if left == 0 {
                message.remove("tool_calls");
                if message.get("content").is_none_or(Value::is_null) {
                    message.insert("content".into(), Value::String(String::new()));
                }
                if choice.get("finish_reason").and_then(Value::as_str) == Some("tool_calls") {
                    choice["finish_reason"] = Value::String("stop".into());
                }
            }
        }
    }
    let blocks: Vec<usize> = locations
        .iter()
        .filter_map(|l| match l {
            Location::Anthropic { block } => Some(*block),
            _ => None,
        })
        .collect();
    if !blocks.is_empty() {
        if let Some(Value::Array(content)) = doc.get_mut("content") {
            let mut b = 0;
            content.retain(|_| {
                let keep = !blocks.contains(&b);
                b += 1;
                removed += usize::from(!keep);
                keep
            });
            let any_left = content
                .iter()
                .any(|x| x.get("type").and_then(Value::as_str) == Some("tool_use"));
            if !any_left && doc.get("stop_reason").and_then(Value::as_str) == Some("tool_use") {
                doc["stop_reason"] = Value::String("end_turn".into());
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn openai() -> Value {
        json!({"id": "c1", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"/srv/data/x\"}"}},
            {"id": "b", "type": "function", "function": {"name": "delete_repo", "arguments": "{}"}}
        ]}}]})
    }

    fn anthropic() -> Value {
        json!({"id": "m1", "stop_reason": "tool_use", "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "t1", "name": "search", "input": {"q": "x"}}
        ]})
    }

    #[test]
    fn reads_openai_and_anthropic_calls() {
        let calls = planned_calls(&openai());
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[1].name, "delete_repo");
        assert_eq!(calls[1].id.as_deref(), Some("b"));
        assert_eq!(calls[1].location, Location::OpenAi { choice: 0, call: 1 });
        assert_eq!(
            calls[0].arguments,
            Arguments::Text("{\"path\": \"/srv/data/x\"}".into())
        );
        let calls = planned_calls(&anthropic());
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].location, Location::Anthropic { block: 1 });
        assert_eq!(calls[0].arguments, Arguments::Value(json!({"q": "x"})));
        assert!(planned_calls(&json!({"choices": [{"message": {"content": "hi"}}]})).is_empty());
        assert!(planned_calls(&json!("text")).is_empty());
    }

    #[test]
    fn reads_declared_tools() {
        let req = json!({"tools": [
            {"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}},
            {"name": "b", "input_schema": {"type": "object"}},
            {"name": "c"}
        ]});
        let d = declared_tools(&req).unwrap();
        assert_eq!(d.len(), 3);
        assert!(d["a"].is_some() && d["b"].is_some() && d["c"].is_none());
        assert!(declared_tools(&json!({"messages": []})).is_none());
        assert_eq!(declared_tools(&json!({"tools": []})).unwrap().len(), 0);
    }

    #[test]
    fn strips_calls_and_fixes_the_finish_reason() {
        let mut doc = openai();
        assert_eq!(strip(&mut doc, &[Location::OpenAi { choice: 0, call: 1 }]), 1);
        assert_eq!(doc["choices"][0]["message"]["tool_calls"].as_array().unwrap().len(), 1);
        assert_eq!(doc["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(strip(&mut doc, &[Location::OpenAi { choice: 0, call: 0 }]), 1);
        assert!(doc["choices"][0]["message"].get("tool_calls").is_none());
        assert_eq!(doc["choices"][0]["message"]["content"], "");
        assert_eq!(doc["choices"][0]["finish_reason"], "stop");

        let mut doc = anthropic();
        assert_eq!(strip(&mut doc, &[Location::Anthropic { block: 1 }]), 1);
        assert_eq!(doc["content"].as_array().unwrap().len(), 1);
        assert_eq!(doc["stop_reason"], "end_turn");
    }
}
