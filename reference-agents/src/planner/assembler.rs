//! Assembles the tool calls of a streamed completion from its events.
//!
//! * OpenAI-style chunks: `choices[c].delta.tool_calls[]` items
//!   `{index, id?, function: {name?, arguments?}}`; `arguments` arrive as
//!   fragments of JSON text. A call is complete when its choice gets a
//!   `finish_reason`, when a call with another `index` starts in the same
//!   choice, or at the end of the stream (`[DONE]`).
//! * Anthropic-style events: `content_block_start` with a `tool_use` block
//!   (`id`, `name`), `content_block_delta` with `input_json_delta`
//!   (`partial_json` fragments), complete at `content_block_stop`.
//!
//! Every call gets a key (`o<choice>.<index>` or `a<block>`) and a position
//! in the plan (0, 1, ... in the order calls start). The assembler keeps
//! only what it needs (the name, id and argument text of open calls) and is
//! serializable, so the kernel-carried stream state can hold it.
//!
//! Limits: an argument text over [`MAX_ARGUMENTS_BYTES`] is dropped and the
//! call marked oversize; more than [`MAX_CALLS`] calls in one stream is an
//! error ([`AssembleError`]); input is never trusted to be well formed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::calls::{Arguments, Location, PlannedCall};

/// The most calls one stream may plan.
pub const MAX_CALLS: usize = 256;

/// The largest argument text of one streamed call: the stream state the
/// kernel carries is at most 1 MiB.
pub const MAX_ARGUMENTS_BYTES: usize = 128 * 1024;

/// A call being assembled.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partial {
    /// Position in the plan.
    pub index: usize,
    /// Call id, once seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Tool name (OpenAI may send it in pieces).
    #[serde(default)]
    pub name: String,
    /// Argument text so far.
    #[serde(default)]
    pub args: String,
    /// The argument text passed [`MAX_ARGUMENTS_BYTES`].
    #[serde(default)]
    pub oversize: bool,
    /// Some fragment was not valid UTF-8.
    #[serde(default)]
    pub bad_utf8: bool,
    /// Complete.
    #[serde(default)]
    pub done: bool,
}

/// Why assembly stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AssembleError {
    /// More than [`MAX_CALLS`] calls.
    TooManyCalls,
}

impl std::fmt::Display for AssembleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AssembleError::TooManyCalls => write!(f, "the stream plans more than {MAX_CALLS} tool calls"),
        }
    }
}

impl std::error::Error for AssembleError {}

/// What one event did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fed {
    /// Keys of the calls this event carries a part of.
    pub touched: Vec<String>,
    /// Keys of the calls this event completed (including earlier calls it closed).
    pub completed: Vec<String>,
}

/// The assembler: the calls of one stream, by key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assembler {
    /// Calls by key.
    #[serde(default)]
    pub calls: BTreeMap<String, Partial>,
    /// For OpenAI choices: the key of the call last opened in each choice.
    #[serde(default)]
    last: BTreeMap<u64, String>,
}

fn as_index(v: Option<&Value>, fallback: usize) -> u64 {
    v.and_then(Value::as_u64).unwrap_or(fallback as u64)
}

impl Assembler {
    /// An empty assembler.
    pub fn new() -> Self {
        Assembler::default()
    }

    fn open(&mut self, key: &str, fed: &mut Fed) -> Result<&mut Partial, AssembleError> {
        if !self.calls.contains_key(key) {
            if self.calls.len() >= MAX_CALLS {
                return Err(AssembleError::TooManyCalls);
            }
            let index = self.calls.len();
            self.calls.insert(
                key.to_string(),
                Partial {
                    index,
                    ..Partial::default()
                },
            );
        }
        if !fed.touched.iter().any(|k| k == key) {
            fed.touched.push(key.to_string());
        }
        // Present: inserted above when missing.
        Ok(self.calls.entry(key.to_string()).or_default())
    }

    fn complete(&mut self, key: &str, fed: &mut Fed) {
        if let Some(p) = self.calls.get_mut(key).filter(|p| !p.done) {
            p.done = true;
            fed.completed.push(key.to_string());
        }
    }

    /// Feeds one event's data, parsed as JSON; `utf8` says whether the
    /// event's bytes were valid UTF-8 (invalid bytes taint the calls it touches).
    pub fn feed(&mut self, doc: &Value, utf8: bool) -> Result<Fed, AssembleError> {
        let mut fed = Fed::default();
        if let Some(choices) = doc.get("choices").and_then(Value::as_array) {
            for (pos, choice) in choices.iter().enumerate() {
                let c = as_index(choice.get("index"), pos);
                let deltas = choice.pointer("/delta/tool_calls").and_then(Value::as_array);
                for (k, d) in deltas.into_iter().flatten().enumerate() {
                    let key = format!("o{c}.{}", as_index(d.get("index"), k));
                    if let Some(prev) = self.last.get(&c).filter(|p| **p != key).cloned() {
                        self.complete(&prev, &mut fed);
                    }
                    self.last.insert(c, key.clone());
                    let f = d.get("function").unwrap_or(&Value::Null);
                    let p = self.open(&key, &mut fed)?;
                    if let Some(id) = d.get("id").and_then(Value::as_str) {
                        p.id = Some(id.chars().take(256).collect());
                    }
                    if let Some(n) = f.get("name").and_then(Value::as_str) {
                        if p.name.len() + n.len() <= 1024 {
                            p.name.push_str(n);
                        }
                    }
                    match f.get("arguments") {
                        Some(Value::String(a)) => push_args(p, a),
                        Some(v) if !v.is_null() => push_args(p, &v.to_string()),
                        _ => {}
                    }
                    p.bad_utf8 |= !utf8;
                }
                if choice.get("finish_reason").is_some_and(|f| !f.is_null()) {
                    let prefix = format!("o{c}.");
                    let keys: Vec<String> = self.calls.keys().filter(|k| k.starts_with(&prefix)).cloned().collect();
                    for k in keys {
                        self.complete(&k, &mut fed);
                    }
                }
            }
        }
        match doc.get("type").and_then(Value::as_str) {
            Some("content_block_start") => {
                let block = doc.get("content_block").unwrap_or(&Value::Null);
                if block.get("type").and_then(Value::as_str) == Some("tool_use") {
                    let key = format!("a{}", as_index(doc.get("index"), 0));
                    let p = self.open(&key, &mut fed)?;
                    p.id = block
                        .get("id")
                        .and_then(Value::as_str)
                        .map(|s| s.chars().take(256).collect());
                    p.name = block
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .chars()
                        .take(1024)
                        .collect();
                    // A complete input given at the start (not `{}`) counts.
                    if let Some(input) = block
                        .get("input")
                        .filter(|i| i.as_object().is_some_and(|o| !o.is_empty()))
                    {
                        push_args(p, &input.to_string());
                    }
                    p.bad_utf8 |= !utf8;
                }
            }
            Some("content_block_delta") => {
                let key = format!("a{}", as_index(doc.get("index"), 0));
                let delta = doc.get("delta").unwrap_or(&Value::Null);
                if self.calls.contains_key(&key) {
                    let p = self.open(&key, &mut fed)?;
                    if delta.get("type").and_then(Value::as_str) == Some("input_json_delta") {
                        if let Some(j) = delta.get("partial_json").and_then(Value::as_str) {
                            push_args(p, j);
                        }
                    }
                    p.bad_utf8 |= !utf8;
                }
            }
            Some("content_block_stop") => {
                let key = format!("a{}", as_index(doc.get("index"), 0));
                if self.calls.contains_key(&key) {
                    self.open(&key, &mut fed)?;
                    self.complete(&key, &mut fed);
                }
            }
            _ => {}
        }
        Ok(fed)
    }

    /// Completes every open call (end of stream, `[DONE]`); their keys.
    pub fn finish(&mut self) -> Vec<String> {
        let mut fed = Fed::default();
        let keys: Vec<String> = self.calls.keys().cloned().collect();
        for k in keys {
            self.complete(&k, &mut fed);
        }
        fed.completed
    }

    /// Drops the argument text of a decided call (the state stays small).
    pub fn forget_args(&mut self, key: &str) {
        if let Some(p) = self.calls.get_mut(key) {
            p.args = String::new();
        }
    }

    /// Marks the open calls of `keys` too large and completes them; their keys.
    pub fn overflow(&mut self, keys: &[String]) -> Vec<String> {
        let mut fed = Fed::default();
        for k in keys {
            if let Some(p) = self.calls.get_mut(k).filter(|p| !p.done) {
                p.oversize = true;
                p.args = String::new();
            }
            self.complete(k, &mut fed);
        }
        fed.completed
    }

    /// The call of `key` as the critic checks it.
    pub fn call(&self, key: &str) -> Option<PlannedCall> {
        let p = self.calls.get(key)?;
        let location = match key.strip_prefix('a') {
            Some(b) => Location::Anthropic {
                block: b.parse().unwrap_or(0),
            },
            None => {
                let (c, k) = key.trim_start_matches('o').split_once('.').unwrap_or(("0", "0"));
                Location::OpenAi {
                    choice: c.parse().unwrap_or(0),
                    call: k.parse().unwrap_or(0),
                }
            }
        };
        let arguments = if p.oversize {
            Arguments::TooLarge
        } else if p.bad_utf8 {
            Arguments::NotUtf8
        } else if p.args.trim().is_empty() {
            Arguments::Missing
        } else {
            Arguments::Text(p.args.clone())
        };
        Some(PlannedCall {
            index: p.index,
            id: p.id.clone(),
            name: p.name.clone(),
            arguments,
            location,
        })
    }
}

fn push_args(p: &mut Partial, fragment: &str) {
    if p.oversize {
        return;
    }
    if p.args.len() + fragment.len() > MAX_ARGUMENTS_BYTES {
        p.oversize = true;
        p.args = String::new();
        return;
    }
    p.args.push_str(fragment);
}

#[cfg(test)]
#[path = "assembler_tests.rs"]
mod tests;
