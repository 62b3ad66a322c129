//! `untrustedInput`: fences off untrusted text in the prompt (request phase).
//!
//! The content of tool results (OpenAI-style `messages[]` of `role: tool`
//! or `function`, Anthropic-style `tool_result` blocks) and of configured
//! fields is wrapped as the agent runtimes' `wrapUntrusted` does:
//!
//! ```text
//! <<<UNTRUSTED_INPUT>>>
//! {content}
//! <<<END_UNTRUSTED_INPUT>>>
//! ```
//!
//! after removing any delimiter string embedded in the content (repeatedly,
//! so removal cannot assemble a new one) and cutting it to `max_bytes`.
//! Text already wrapped exactly so is left alone (two policies in a chain do
//! not wrap twice). Only the wrapped strings change: the rest of the body
//! (member order, whitespace, numbers as written) is kept byte for byte
//! ([`super::splice`]).

use serde_json::Value;

use super::plan_critic::config_error_named;
use super::splice::{changed_strings, replace_strings};
use crate::param_cache::ParamCache;
use policy_agents::{describe, ParamError, Params, Policy, PolicyError, RequestContext, RequestOutcome};

const NAME: &str = "untrustedInput";
const KEYS: &[&str] = &["max_bytes", "roles", "tool_results", "fields"];

/// The opening delimiter.
pub const OPEN: &str = "<<<UNTRUSTED_INPUT>>>";
/// The closing delimiter.
pub const CLOSE: &str = "<<<END_UNTRUSTED_INPUT>>>";
/// The default cut of wrapped content, as the runtimes' `wrapUntrusted`: 10 KB.
pub const DEFAULT_MAX_BYTES: usize = 10 * 1024;

/// `text` without delimiter strings; the number removed.
pub fn strip_delimiters(text: &str) -> (String, usize) {
    let mut out = text.to_string();
    let mut removed = 0;
    loop {
        let n = out.matches(OPEN).count() + out.matches(CLOSE).count();
        if n == 0 {
            return (out, removed);
        }
        removed += n;
        out = out.replace(OPEN, "").replace(CLOSE, "");
    }
}

/// What wrapping one text did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Wrapped {
    /// Texts wrapped.
    pub wrapped: usize,
    /// Delimiter strings removed.
    pub stripped: usize,
    /// Texts cut to `max_bytes`.
    pub truncated: usize,
}

fn already_wrapped(text: &str) -> bool {
    text.strip_prefix(OPEN)
        .and_then(|t| t.strip_prefix('\n'))
        .and_then(|t| t.strip_suffix(CLOSE))
        .and_then(|t| t.strip_suffix('\n'))
        .is_some_and(|inner| !inner.contains(OPEN) && !inner.contains(CLOSE))
}

/// Wraps `text` (see the module doc); `None` when it is already wrapped.
pub fn wrap_untrusted(text: &str, max_bytes: usize, stats: &mut Wrapped) -> Option<String> {
    if already_wrapped(text) {
        return None;
    }
    let (mut clean, removed) = strip_delimiters(text);
    if clean.len() > max_bytes {
        let mut cut = max_bytes;
        while !clean.is_char_boundary(cut) {
            cut -= 1;
        }
        clean.truncate(cut);
        stats.truncated += 1;
    }
    stats.stripped += removed;
    stats.wrapped += 1;
    Some(format!("{OPEN}\n{clean}\n{CLOSE}"))
}

/// Parsed params of `untrustedInput`.
#[derive(Debug)]
pub struct UntrustedConfig {
    max_bytes: usize,
    roles: Vec<String>,
    tool_results: bool,
    fields: Vec<Vec<String>>,
}

impl UntrustedConfig {
    fn parse(p: &Params) -> Result<Self, ParamError> {
        let max_bytes = p.parse_or("max_bytes", DEFAULT_MAX_BYTES)?;
        if max_bytes == 0 {
            return Err(ParamError::invalid("max_bytes", "0", "must be at least 1"));
        }
        let roles = match p.get("roles") {
            None => vec!["tool".to_string(), "function".to_string()],
            Some(_) => p.list("roles")?,
        };
        let mut fields = Vec::new();
        for f in p.list("fields")? {
            let Some(rest) = f.strip_prefix('/') else {
                return Err(ParamError::invalid("fields", &f, "a JSON pointer starts with /"));
            };
            fields.push(
                rest.split('/')
                    .map(|s| s.replace("~1", "/").replace("~0", "~"))
                    .collect(),
            );
        }
        Ok(UntrustedConfig {
            max_bytes,
            roles,
            tool_results: p.bool_or("tool_results", true)?,
            fields,
        })
    }
}

/// Wraps a message or block `content`: a string, or the `text` of text parts.
fn wrap_content(content: &mut Value, max: usize, stats: &mut Wrapped) {
    match content {
        Value::String(s) => {
            if let Some(w) = wrap_untrusted(s, max, stats) {
                *s = w;
            }
        }
        Value::Array(parts) => {
            for part in parts {
                if part.get("type").and_then(Value::as_str) == Some("text") {
                    if let Some(Value::String(s)) = part.get_mut("text") {
                        if let Some(w) = wrap_untrusted(s, max, stats) {
                            *s = w;
                        }
                    }
                }
            }
        }
        _ => {}
    }
}

/// Wraps the string(s) at `path`; `*` matches every item or member.
fn wrap_path(v: &mut Value, path: &[String], max: usize, stats: &mut Wrapped) {
    let Some((head, rest)) = path.split_first() else {
        if let Value::String(s) = v {
            if let Some(w) = wrap_untrusted(s, max, stats) {
                *s = w;
            }
        }
        return;
    };
    match v {
        Value::Object(map) if head == "*" => map.values_mut().for_each(|x| wrap_path(x, rest, max, stats)),
        Value::Object(map) => {
            if let Some(x) = map.get_mut(head) {
                wrap_path(x, rest, max, stats);
            }
        }
        Value::Array(items) if head == "*" => items.iter_mut().for_each(|x| wrap_path(x, rest, max, stats)),
        Value::Array(items) => {
            if let Some(x) = head.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                wrap_path(x, rest, max, stats);
            }
        }
        _ => {}
    }
}

/// Wraps the untrusted text of a request document.
pub fn wrap_request(cfg: &UntrustedConfig, doc: &mut Value) -> Wrapped {
    let mut stats = Wrapped::default();
    let max = cfg.max_bytes;
    for m in doc
        .get_mut("messages")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        if cfg.roles.iter().any(|r| r == role) {
            if let Some(c) = m.get_mut("content") {
                wrap_content(c, max, &mut stats);
            }
            continue;
        }
        if !cfg.tool_results {
            continue;
        }
        for block in m.get_mut("content").and_then(Value::as_array_mut).into_iter().flatten() {
            if block.get("type").and_then(Value::as_str) == Some("tool_result") {
                if let Some(c) = block.get_mut("content") {
                    wrap_content(c, max, &mut stats);
                }
            }
        }
    }
    for path in &cfg.fields {
        wrap_path(doc, path, max, &mut stats);
    }
    stats
}

/// The `untrustedInput` policy.
#[derive(Debug)]
pub struct UntrustedInput {
    cache: ParamCache<UntrustedConfig>,
}

impl Default for UntrustedInput {
    fn default() -> Self {
        UntrustedInput::new()
    }
}

impl UntrustedInput {
    /// A policy with an empty params cache.
    pub fn new() -> Self {
        UntrustedInput {
            cache: ParamCache::new(KEYS),
        }
    }
}

impl Policy for UntrustedInput {
    type Params = Params;
    describe! { name: NAME, params: KEYS, body: true }

    async fn on_request(&self, params: &Params, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let cfg = self
            .cache
            .get(params, UntrustedConfig::parse)
            .map_err(|e| config_error_named(NAME, &e))?;
        let Some(body) = ctx.request.body() else {
            return Err(PolicyError::new(format!(
                "{NAME}: the request body was not included (the policy requires it)"
            )));
        };
        if body.is_empty() {
            return Ok(RequestOutcome::proceed());
        }
        if ctx
            .request
            .header("content-encoding")
            .is_some_and(|e| !e.eq_ignore_ascii_case("identity"))
        {
            return Ok(RequestOutcome::proceed().set_metadata("untrusted.error", "content-encoding"));
        }
        let mut doc: Value = match serde_json::from_slice(body) {
            Ok(d) => d,
            Err(e) => {
                return Ok(RequestOutcome::proceed().set_metadata(
                    "untrusted.error",
                    crate::tool::metadata_text(&format!("request is not JSON: {e}")),
                ))
            }
        };
        let before = doc.clone();
        let stats = wrap_request(&cfg, &mut doc);
        let out = RequestOutcome::proceed().set_metadata("untrusted.wrapped", stats.wrapped.to_string());
        if stats.wrapped == 0 {
            return Ok(out);
        }
        // Only the wrapped strings change: the rest of the body byte for byte.
        let body = match replace_strings(body, &changed_strings(&before, &doc)) {
            Some(b) => b,
            None => {
                serde_json::to_vec(&doc).map_err(|e| PolicyError::new(format!("{NAME}: cannot write the body: {e}")))?
            }
        };
        Ok(out
            .set_body(body)
            .set_metadata("untrusted.stripped", stats.stripped.to_string())
            .set_metadata("untrusted.truncated", stats.truncated.to_string()))
    }
}

#[cfg(test)]
#[path = "untrusted_tests.rs"]
mod tests;
