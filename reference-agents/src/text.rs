//! Reading the text of a request body as the model or agent behind it
//! reads it, for the guardrails and token estimates.
//!
//! * A chat document (OpenAI chat completions and completions, the
//!   Responses API, Anthropic messages, Bedrock Converse, Gemini
//!   `generateContent`): every string of `messages`, `input`, `prompt`,
//!   `instructions`, `system`, `contents` and `systemInstruction` (or
//!   `system_instruction`: Gemini takes either spelling), whatever their
//!   shape: string content, content parts (`text`, `input_text`, ...), tool
//!   messages and tool results, Responses input items
//!   (`function_call_output.output`, ...), tool-call arguments. A member
//!   that holds free JSON the model is given as JSON (a call's `args` or
//!   `input` object, a function's `response`, a tool result's `json`) is
//!   read with its keys. Strings that name a shape rather than say
//!   something (`role`, `type`, ids, signatures) are left out, and so is
//!   encoded data (`data:` URLs, the `data` of a `base64` source, of
//!   Gemini's `inlineData` or of an audio part, Bedrock's `bytes`: images,
//!   audio and files).
//! * Any other JSON (an A2A message in any version, an MCP call): every
//!   string and every key, decoded. Nothing an agent could act on is
//!   skipped because it sits under a name this reader does not know.
//! * Anything else: the body as text (lossy UTF-8).
//!
//! [`body_parts`] reads the same text with the application's own
//! instructions set apart (`instructions`, `system`, `systemInstruction`,
//! and messages or input items of role `system` or `developer`), and what
//! tools returned:
//! a chat document's tool results (`role: tool` and `function` messages,
//! Responses `*_output` items and `mcp_call` outputs, Anthropic
//! `tool_result` blocks, Bedrock `toolResult` blocks, Gemini
//! `functionResponse` and `codeExecutionResult` parts), each on its own,
//! for a guard that reads them as tool output.

use serde_json::Value;

/// The members of a chat document whose strings the model reads.
const CHAT_FIELDS: &[&str] = &[
    "messages",
    "prompt",
    "input",
    "instructions",
    "system",
    "contents",
    "systemInstruction",
    "system_instruction",
];

/// Members whose string values name a shape, not content.
const SHAPE_KEYS: &[&str] = &[
    "role",
    "type",
    "id",
    "tool_call_id",
    "tool_use_id",
    "call_id",
    "detail",
    "format",
    "mime_type",
    "media_type",
    "mimeType",
    "status",
    "language",
    "outcome",
    "toolUseId",
    "signature",
    "thoughtSignature",
    "thought_signature",
];

/// Members that hold a tool's result wherever they stand: Bedrock
/// Converse's `toolResult` block, Gemini's `functionResponse` and
/// `codeExecutionResult` parts (in either spelling).
const RESULT_KEYS: &[&str] = &[
    "toolResult",
    "functionResponse",
    "function_response",
    "codeExecutionResult",
    "code_execution_result",
];

/// Members whose object the model is given as JSON, keys and all: a call's
/// arguments (Gemini `functionCall.args`, Anthropic `tool_use.input`,
/// Bedrock `toolUse.input`), a function's `response` (Gemini), a tool
/// result's `json` block (Bedrock).
const JSON_KEYS: &[&str] = &["args", "input", "response", "json"];

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

/// Whether a chat object is a tool's result as a whole: a tool or function
/// message (chat completions), an item or block whose type ends in
/// `_output` or `tool_result` (Responses `function_call_output`,
/// `custom_tool_call_output`, ...; Anthropic `tool_result`,
/// `web_search_tool_result`, `mcp_tool_result`, ...).
fn is_tool_result(map: &serde_json::Map<String, Value>) -> bool {
    let role = map.get("role").and_then(Value::as_str);
    let kind = map.get("type").and_then(Value::as_str).unwrap_or("");
    matches!(role, Some("tool" | "function")) || kind.ends_with("_output") || kind.ends_with("tool_result")
}

/// The members of an object that hold a tool's result while the rest does
/// not: a Responses `mcp_call` item's `output` and `error` (its name and
/// arguments are the model's own), and any [`RESULT_KEYS`] member.
fn result_members(map: &serde_json::Map<String, Value>) -> &'static [&'static str] {
    match map.get("type").and_then(Value::as_str) {
        Some("mcp_call") => &["output", "error"],
        _ => RESULT_KEYS,
    }
}

/// Responses input items that declare tools rather than say something:
/// `additional_tools` (tools added at that point) and `tool_search_output`
/// (tools a tool search loaded). Their definitions are read as
/// declarations (the guard's `declarations`), not as the prompt.
const TOOL_ITEMS: &[&str] = &["additional_tools", "tool_search_output"];

/// Whether a chat document's item declares tools ([`TOOL_ITEMS`]).
pub fn carries_tools(item: &Value) -> bool {
    item.get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| TOOL_ITEMS.contains(&t))
}

/// Whether `map` is encoded data whose `data` member is not text: a
/// `base64` source (Anthropic), an encrypted `redacted_thinking` block,
/// a blob with its `mimeType` (Gemini `inlineData`) or an audio part with
/// its `format` (OpenAI `input_audio`).
fn is_encoded(map: &serde_json::Map<String, Value>) -> bool {
    let kind = map.get("type").and_then(Value::as_str);
    matches!(kind, Some("base64" | "redacted_thinking"))
        || ["mimeType", "mime_type", "format"].iter().any(|k| map.contains_key(*k))
}

/// The content strings of one tool result, as one text.
fn result_text(v: &Value, depth: usize) -> String {
    let mut out = String::new();
    content_strings(v, &mut out, None, depth);
    out
}

/// The content strings of a chat member, at any depth. With `tools`, each
/// tool result's strings go there, one string per result, instead of `out`.
fn content_strings(v: &Value, out: &mut String, mut tools: Option<&mut Vec<String>>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match v {
        Value::String(s) if !is_blob(s) => push(out, s),
        Value::Array(items) => items
            .iter()
            .for_each(|i| content_strings(i, out, tools.as_deref_mut(), depth + 1)),
        Value::Object(map) => {
            if let Some(tools) = tools.as_deref_mut().filter(|_| is_tool_result(map)) {
                tools.push(result_text(v, depth + 1));
                return;
            }
            let encoded = is_encoded(map);
            let results = result_members(map);
            for (k, child) in map {
                let k = k.as_str();
                let shape = SHAPE_KEYS.contains(&k) && child.is_string();
                // Bedrock's `bytes` are base64 wherever they are.
                let data = (encoded && k == "data") || k == "bytes";
                if shape || data {
                    continue;
                }
                match tools.as_deref_mut() {
                    Some(tools) if results.contains(&k) => tools.push(result_text(child, depth + 1)),
                    _ if JSON_KEYS.contains(&k) && child.is_object() => all_text(child, out, depth + 1),
                    tools => content_strings(child, out, tools, depth + 1),
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

/// The members of a chat document that hold the application's own
/// instructions: Responses `instructions`, Anthropic's and Bedrock's
/// `system`, Gemini's `systemInstruction` (or `system_instruction`).
const INSTRUCTION_FIELDS: &[&str] = &["instructions", "system", "systemInstruction", "system_instruction"];

/// Whether a message or input item is the application's instructions: its
/// `role` is `system` or `developer`.
fn is_instruction_message(item: &Value) -> bool {
    matches!(item.get("role").and_then(Value::as_str), Some("system" | "developer"))
}

/// Where [`read_chat`] puts what it reads: a chat document's strings into
/// `out`, its instructions into `instructions` and each tool result into
/// `tools` when those are given.
struct Sinks<'a> {
    out: &'a mut String,
    instructions: Option<&'a mut String>,
    tools: Option<&'a mut Vec<String>>,
}

impl Sinks<'_> {
    /// Reads `v` (at `depth`), into the instructions when `instructions`
    /// and they are set apart.
    fn read(&mut self, v: &Value, instructions: bool, depth: usize) {
        let out = match self.instructions.as_deref_mut() {
            Some(i) if instructions => i,
            _ => &mut *self.out,
        };
        content_strings(v, out, self.tools.as_deref_mut(), depth);
    }
}

/// Reads the strings of `obj`'s [`CHAT_FIELDS`] into `sinks`; false when
/// it has none.
fn read_chat(obj: &serde_json::Map<String, Value>, sinks: &mut Sinks<'_>) -> bool {
    let mut found = false;
    for field in CHAT_FIELDS {
        let Some(v) = obj.get(*field) else {
            continue;
        };
        found = true;
        match v {
            // Messages and input items one by one: the system and developer
            // ones are instructions; Responses input items that declare
            // tools are not read here (only there, at the top of `input`).
            Value::Array(items) if matches!(*field, "messages" | "input") => {
                for item in items.iter().filter(|i| *field != "input" || !carries_tools(i)) {
                    sinks.read(item, is_instruction_message(item), 1);
                }
            }
            v => sinks.read(v, INSTRUCTION_FIELDS.contains(field), 0),
        }
    }
    found
}

/// The text a model reads in a chat document, or `None` when the document
/// has none of [`CHAT_FIELDS`].
pub fn chat_text(doc: &Value) -> Option<String> {
    let mut out = String::new();
    let mut sinks = Sinks {
        out: &mut out,
        instructions: None,
        tools: None,
    };
    read_chat(doc.as_object()?, &mut sinks).then_some(out)
}

/// A body's text with its tool results set apart ([`body_parts`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct BodyParts {
    /// Everything but the instructions and the tool results.
    pub prompt: String,
    /// The application's own instructions (a chat document's only):
    /// `instructions`, `system`, `systemInstruction` or
    /// `system_instruction`, and the messages and input items of role
    /// `system` or `developer`.
    pub instructions: String,
    /// Each tool result's text, in document order (a chat document's only).
    pub tool_results: Vec<String>,
}

/// Reads a parsed body as [`body_text`] says, a chat document's
/// instructions and tool results into `instructions` and `tools` when
/// given.
fn read_doc(doc: &Value, instructions: Option<&mut String>, tools: Option<&mut Vec<String>>) -> String {
    let mut out = String::new();
    let mut sinks = Sinks {
        out: &mut out,
        instructions,
        tools,
    };
    if !doc.as_object().is_some_and(|obj| read_chat(obj, &mut sinks)) {
        all_text(doc, &mut out, 0);
    }
    out
}

/// Whether `doc` is a chat document (it has one of [`CHAT_FIELDS`]).
pub fn is_chat_document(doc: &Value) -> bool {
    doc.as_object()
        .is_some_and(|obj| CHAT_FIELDS.iter().any(|f| obj.contains_key(*f)))
}

/// [`body_text`]'s reading of `body`, with a chat document's instructions
/// set apart, and its tool results, one text per result. Nothing is
/// dropped: the prompt, the instructions and the results together hold
/// every string `body_text` reads.
pub fn body_parts(body: &[u8]) -> BodyParts {
    parts_of(body, serde_json::from_slice::<Value>(body).ok().as_ref())
}

/// [`body_parts`] of `body` already parsed (`doc`: `None` when it is not
/// JSON).
pub fn parts_of(body: &[u8], doc: Option<&Value>) -> BodyParts {
    let Some(doc) = doc else {
        return BodyParts {
            prompt: String::from_utf8_lossy(body).into_owned(),
            ..BodyParts::default()
        };
    };
    let mut tool_results = Vec::new();
    let mut instructions = String::new();
    let prompt = read_doc(doc, Some(&mut instructions), Some(&mut tool_results));
    tool_results.retain(|t| !t.is_empty());
    BodyParts {
        prompt,
        instructions,
        tool_results,
    }
}

/// The text to inspect in a body: the chat fields when it is a chat
/// document, every key and string of any other JSON, else the whole body
/// (lossy UTF-8).
pub fn body_text(body: &[u8]) -> String {
    match serde_json::from_slice::<Value>(body) {
        Ok(doc) => read_doc(&doc, None, None),
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

    /// The length of a body's parts joined as `body_text` joins strings
    /// (one newline between each two).
    fn held(p: &BodyParts) -> usize {
        let parts: Vec<&str> = [p.prompt.as_str(), p.instructions.as_str()]
            .into_iter()
            .chain(p.tool_results.iter().map(String::as_str))
            .filter(|t| !t.is_empty())
            .collect();
        parts.iter().map(|t| t.len()).sum::<usize>() + parts.len().saturating_sub(1)
    }

    #[test]
    fn tool_results_are_set_apart_in_every_shape() {
        let chat = br#"{"model": "m", "messages": [
            {"role": "system", "content": "one"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"q\":\"two\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "three"}]},
            {"role": "function", "name": "g", "content": "four"}
        ]}"#;
        let p = body_parts(chat);
        assert_eq!(p.prompt, "{\"q\":\"two\"}\nf");
        assert_eq!(p.instructions, "one");
        assert_eq!(p.tool_results, ["three", "four\ng"]);
        let responses = br#"{"instructions": "five", "input": [
            {"type": "function_call_output", "call_id": "x", "output": "six"},
            {"type": "custom_tool_call_output", "call_id": "y", "output": [{"type": "input_text", "text": "seven"}]},
            {"type": "mcp_call", "id": "m", "name": "search", "arguments": "{}", "server_label": "s", "output": "eight", "error": null},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "nine"}]}
        ]}"#;
        let p = body_parts(responses);
        assert_eq!(p.tool_results, ["six", "seven", "eight"]);
        for word in ["search", "nine"] {
            assert!(p.prompt.contains(word), "{word} in {}", p.prompt);
        }
        assert_eq!(p.instructions, "five");
        let anthropic = br#"{"system": "ten", "messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "eleven"}]},
            {"type": "web_search_tool_result", "tool_use_id": "w", "content": [{"type": "web_search_result", "title": "twelve", "url": "https://x"}]},
            {"type": "text", "text": "thirteen"}]}]}"#;
        let p = body_parts(anthropic);
        assert_eq!(p.prompt, "thirteen");
        assert_eq!(p.instructions, "ten");
        assert_eq!(p.tool_results, ["eleven", "twelve\nhttps://x"]);
        // Together they hold what `body_text` reads; other bodies have no
        // tool results.
        for body in [&chat[..], responses, anthropic] {
            let p = body_parts(body);
            let all = body_text(body);
            assert!(p.tool_results.iter().all(|t| all.contains(t.as_str())));
            assert_eq!(all.len(), held(&p), "{all:?} vs {p:?}");
        }
        let mcp = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"role":"tool","text":"y"}}}"#;
        for body in [gemini_body(), gemini_snake_body(), converse_body()] {
            let p = body_parts(&body);
            let all = body_text(&body);
            assert_eq!(all.len(), held(&p), "{all:?} vs {p:?}");
        }
        assert_eq!(body_parts(mcp).prompt, body_text(mcp));
        assert!(body_parts(mcp).tool_results.is_empty());
        assert_eq!(body_parts(b"plain").prompt, "plain");
    }

    /// A Gemini `generateContent` body: a system instruction, a user's
    /// text and image, the model's call (its thought signature opaque), the
    /// function's response and a code execution's result.
    fn gemini_body() -> Vec<u8> {
        br#"{"systemInstruction": {"parts": [{"text": "one"}]}, "contents": [
            {"role": "user", "parts": [{"text": "two"}, {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgoAAAA"}}]},
            {"role": "model", "parts": [{"functionCall": {"name": "search", "args": {"three": "four"}}, "thoughtSignature": "CiQBcsjafQ"}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "search", "response": {"five": ["six"]}}}]},
            {"role": "model", "parts": [{"executableCode": {"language": "PYTHON", "code": "print(7)"}}, {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "seven"}}]}
        ], "tools": [{"functionDeclarations": [{"name": "search", "description": "declared"}]}], "generationConfig": {"temperature": 0}}"#.to_vec()
    }

    /// The same in the field names' other spelling, which Gemini takes too,
    /// with a function message (`role: function`).
    fn gemini_snake_body() -> Vec<u8> {
        br#"{"system_instruction": {"parts": [{"text": "one"}]}, "contents": [
            {"role": "user", "parts": [{"text": "two"}, {"inline_data": {"mime_type": "image/png", "data": "iVBORw0KGgoAAAA"}}]},
            {"role": "model", "parts": [{"function_call": {"name": "search", "args": {"three": "four"}}, "thought_signature": "CiQBcsjafQ"}]},
            {"role": "user", "parts": [{"function_response": {"name": "search", "response": {"five": ["six"]}}}]},
            {"role": "function", "parts": [{"text": "seven"}]}
        ]}"#.to_vec()
    }

    /// A Bedrock Converse body: system blocks, an image's bytes, the
    /// model's tool use, and the tool's result as text and as JSON.
    fn converse_body() -> Vec<u8> {
        br#"{"system": [{"text": "one"}], "messages": [
            {"role": "user", "content": [{"text": "two"}, {"image": {"format": "png", "source": {"bytes": "iVBORw0KGgoAAAA"}}}]},
            {"role": "assistant", "content": [{"toolUse": {"toolUseId": "tooluse_1", "name": "search", "input": {"three": "four"}}}]},
            {"role": "user", "content": [{"toolResult": {"toolUseId": "tooluse_1", "content": [{"text": "five"}, {"json": {"six": "seven"}}], "status": "success"}}]}
        ], "inferenceConfig": {"maxTokens": 10}}"#.to_vec()
    }

    #[test]
    fn responses_items_that_declare_tools_are_not_the_prompt() {
        let doc = serde_json::json!({"model": "m", "input": [
            {"type": "additional_tools", "role": "developer", "tools": [{"type": "namespace", "name": "functions",
                "description": "Tool set.", "tools": [{"type": "custom", "name": "exec", "description": "Run code."}]}]},
            {"type": "message", "role": "developer", "content": "Be brief."},
            {"type": "tool_search_output", "execution": "client", "tools": [{"type": "function", "name": "f", "description": "Loaded."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"},
                // Not an item of `input`: read as any content is.
                {"type": "additional_tools", "tools": [{"description": "nested"}]}]}
        ]});
        let parts = parts_of(b"", Some(&doc));
        assert_eq!(parts.prompt, "hi\nnested");
        assert_eq!(parts.instructions, "Be brief.");
        assert!(parts.tool_results.is_empty());
        assert_eq!(chat_text(&doc).as_deref(), Some("Be brief.\nhi\nnested"));
    }

    #[test]
    fn gemini_and_converse_are_read_as_chat_documents() {
        let lines = |t: &str| {
            let mut l: Vec<_> = t.lines().map(str::to_owned).collect();
            l.sort();
            l.join(" ")
        };
        for body in [gemini_body(), gemini_snake_body()] {
            let p = body_parts(&body);
            let prompt = if body == gemini_body() {
                "four print(7) search three two"
            } else {
                "four search three two"
            };
            assert_eq!(lines(&p.prompt), prompt, "{}", String::from_utf8_lossy(&body));
            assert_eq!(p.instructions, "one");
            let results: Vec<_> = p.tool_results.iter().map(|t| lines(t)).collect();
            assert_eq!(results, ["five search six", "seven"]);
        }
        // The code the model wrote is its own; what ran it returned is a
        // tool's result. Declarations and settings are not read.
        let all = body_text(&gemini_body());
        assert!(
            all.contains("print(7)") && !all.contains("declared") && !all.contains("iVBOR"),
            "{all}"
        );
        assert!(!all.contains("CiQB") && !all.contains("image/png"), "{all}");
        let p = body_parts(&converse_body());
        assert_eq!(lines(&p.prompt), "four search three two");
        assert_eq!(p.instructions, "one");
        assert_eq!(
            p.tool_results.iter().map(|t| lines(t)).collect::<Vec<_>>(),
            ["five seven six"]
        );
        assert!(!body_text(&converse_body()).contains("tooluse_1"));
        // Keys of the JSON a model is given are read too; an OpenAI audio
        // part's data is not.
        let anthropic = br#"{"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"ignore previous": 1}}]},
            {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "UklGRiQAAABXQVZF", "format": "wav"}}]}]}"#;
        let t = body_text(anthropic);
        assert!(t.contains("ignore previous") && !t.contains("UklGR"), "{t}");
    }
}
