//! The tool declarations of a model call, checked for tool poisoning.
//!
//! An agent that lists an MCP server's tools itself (a local server over
//! stdio, one the gateway does not front) hands their definitions to the
//! model in every call, so a poisoned description reaches the model
//! through the model call. The request side reads those declarations as
//! the response side reads a `tools/list` result, tool by tool
//! ([`poisoning::score_tool`]):
//!
//! | API | declarations |
//! |---|---|
//! | OpenAI chat completions | `tools[].function` (`name`, `description`, `parameters`); legacy `functions[]` |
//! | Responses | `tools[]` of type `function` or `custom` (`name`, `description`, `parameters`, `output_schema`, a custom tool's grammar `format.definition`); a `namespace` tool's own `description` and its `tools[]`; the same in `input[]` items that carry tools: `additional_tools` (tools added at that point of the conversation, as Codex declares its own) and `tool_search_output` (tools a tool search loaded) |
//! | Anthropic messages | `tools[]` (`name`, `description`, `input_schema`) |
//! | Gemini | `tools[].functionDeclarations[]` or `function_declarations` (`parameters`, `parametersJsonSchema`, `response`, ...) |
//! | Bedrock Converse | `toolConfig.tools[].toolSpec` (`name`, `description`, `inputSchema.json`) |
//!
//! Built-in tools that carry no description (web search, code execution,
//! a remote MCP server's label) have nothing to read.

use serde_json::Value;

use super::detector::Weights;
use super::poisoning::{self, Scan};
use crate::text;

/// The declarations of a chat document's tools, each as one object whose
/// `name`, `description` and schemas [`poisoning::tool_text`] reads.
pub fn declared(doc: &Value) -> Vec<&Value> {
    let top = [doc.get("tools"), doc.get("functions"), doc.pointer("/toolConfig/tools")];
    // Responses input items that carry tools.
    let items = doc
        .get("input")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|i| text::carries_tools(i))
        .map(|i| i.get("tools"));
    let mut out = Vec::new();
    for item in top
        .into_iter()
        .chain(items)
        .flatten()
        .filter_map(Value::as_array)
        .flatten()
    {
        push_tool(item, &mut out, true);
    }
    out
}

/// Pushes the declarations of one item of a tool list: a Gemini tool's
/// function declarations, a chat `function` or Bedrock `toolSpec`, a
/// Responses `namespace` (its own description, then its tools, once
/// deep), or the item itself.
fn push_tool<'a>(item: &'a Value, out: &mut Vec<&'a Value>, top: bool) {
    let gemini = item
        .get("functionDeclarations")
        .or_else(|| item.get("function_declarations"))
        .and_then(Value::as_array);
    if let Some(declarations) = gemini {
        out.extend(declarations.iter().filter(|d| d.is_object()));
    } else if let Some(inner) = ["function", "toolSpec"]
        .iter()
        .find_map(|k| item.get(*k).filter(|v| v.is_object()))
    {
        out.push(inner);
    } else if item.is_object() {
        out.push(item);
        let namespace = item.get("type").and_then(Value::as_str) == Some("namespace");
        if let Some(tools) = item.get("tools").and_then(Value::as_array).filter(|_| top && namespace) {
            tools.iter().for_each(|t| push_tool(t, out, false));
        }
    }
}

/// `doc`'s declarations scored as a `tools/list` result's tools are
/// ([`poisoning::scan_tools`]).
pub fn scan(doc: &Value, weights: &Weights, threshold: f64) -> Result<Scan, String> {
    poisoning::scan_tools(declared(doc), weights, threshold)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_api_shape_is_read() {
        let names = |doc: Value| -> Vec<String> {
            declared(&doc)
                .iter()
                .map(|t| t["name"].as_str().unwrap_or("").to_string())
                .collect()
        };
        let chat = json!({"tools": [{"type": "function", "function": {"name": "a", "description": "x", "parameters": {}}}],
            "functions": [{"name": "b", "description": "y"}]});
        assert_eq!(names(chat), ["a", "b"]);
        let responses = json!({"tools": [{"type": "function", "name": "c", "parameters": {}}, {"type": "web_search"}]});
        assert_eq!(names(responses), ["c", ""]);
        let anthropic = json!({"tools": [{"name": "d", "description": "z", "input_schema": {"type": "object"}}]});
        assert_eq!(names(anthropic), ["d"]);
        let gemini = json!({"tools": [{"functionDeclarations": [{"name": "e"}, {"name": "f"}]}, {"function_declarations": [{"name": "g"}]}, {"googleSearch": {}}]});
        assert_eq!(names(gemini), ["e", "f", "g", ""]);
        let converse = json!({"toolConfig": {"tools": [{"toolSpec": {"name": "h", "inputSchema": {"json": {}}}}]}});
        assert_eq!(names(converse), ["h"]);
        // Responses namespaces, and tools declared in input items.
        let codex = json!({"tools": [{"type": "namespace", "name": "crm", "description": "CRM tools.",
                "tools": [{"type": "function", "name": "i"}, {"type": "custom", "name": "j"}]}],
            "input": [{"type": "additional_tools", "role": "developer", "tools": [{"type": "namespace", "name": "functions",
                "description": "", "tools": [{"type": "custom", "name": "k"}]}, {"type": "function", "name": "l"}]},
                {"type": "message", "role": "user", "content": "hi", "tools": [{"name": "not_a_declaration"}]},
                {"type": "tool_search_output", "execution": "client", "tools": [{"type": "function", "name": "m"}]}]});
        assert_eq!(names(codex), ["crm", "i", "j", "functions", "k", "l", "m"]);
        assert!(declared(&json!({"messages": []})).is_empty());
    }
}
