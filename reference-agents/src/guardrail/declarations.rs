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
//! | Responses | `tools[]` of type `function` or `custom` (`name`, `description`, `parameters`) |
//! | Anthropic messages | `tools[]` (`name`, `description`, `input_schema`) |
//! | Gemini | `tools[].functionDeclarations[]` or `function_declarations` (`parameters`, `parametersJsonSchema`, `response`, ...) |
//! | Bedrock Converse | `toolConfig.tools[].toolSpec` (`name`, `description`, `inputSchema.json`) |
//!
//! Built-in tools that carry no description (web search, code execution,
//! a remote MCP server's label) have nothing to read.

use serde_json::Value;

use super::detector::Weights;
use super::poisoning::{self, Scan};

/// The declarations of a chat document's tools, each as one object whose
/// `name`, `description` and schemas [`poisoning::tool_text`] reads.
pub fn declared(doc: &Value) -> Vec<&Value> {
    let lists = [doc.get("tools"), doc.get("functions"), doc.pointer("/toolConfig/tools")];
    let mut out = Vec::new();
    for item in lists.into_iter().flatten().filter_map(Value::as_array).flatten() {
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
        }
    }
    out
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
        assert!(declared(&json!({"messages": []})).is_empty());
    }
}
