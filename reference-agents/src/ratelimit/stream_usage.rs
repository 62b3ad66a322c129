//! `tokenBasedRateLimit` on streamed chat completions.
//!
//! **Request side.** An OpenAI-style request with `"stream": true` gets
//! `stream_options.include_usage: true`, so that the upstream reports the
//! usage in a final chunk; every other member of the body is kept, in order,
//! byte for byte (members are written back without the whitespace between
//! them). When the client had not asked for it, metadata
//! [`USAGE_ADDED_KEY`] = `true` says so. Anthropic-style requests (an
//! `anthropic-version` header, or a path ending in `/messages`) are left
//! alone: their API rejects unknown members, and reports usage unasked.
//!
//! **Response side.** The usage of a streamed response is read from its
//! events: the OpenAI final chunk's `usage` (`total_tokens`, else
//! `prompt_tokens + completion_tokens`), or the Anthropic
//! `message_start.message.usage` and `message_delta.usage` (input + output
//! tokens; `message_delta`'s `output_tokens` is the running total). The
//! charge is made once: at the OpenAI usage event, or at the Anthropic
//! `message_stop` (else at the end of the stream). When [`USAGE_ADDED_KEY`]
//! is set, the usage-only chunk (`choices: []` with `usage`) is removed so
//! that the client gets the stream it asked for. A non-SSE body streamed in
//! chunks is kept (at most [`MAX_RAW`] bytes, in the call state) and its
//! `usage` read at the end, as the buffered path reads it.

use bytes::Bytes;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use policy_agents::stream::sse;
use policy_agents::{ChunkContext, ChunkOutcome, Framing, PolicyError, RequestView};

/// Metadata key set (to `true`) when the kernel-side policy added
/// `stream_options.include_usage` to a request that did not ask for it.
pub const USAGE_ADDED_KEY: &str = "tokens_usage_added";

/// The largest non-SSE streamed body kept to read its `usage` at the end.
pub const MAX_RAW: usize = 256 * 1024;

/// The members of a JSON object, in order, with their values as written.
struct Members(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry::<String, Box<RawValue>>()? {
                    out.push(entry);
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(V)
    }
}

impl Members {
    fn get(&self, key: &str) -> Option<&RawValue> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| &**v)
    }

    /// Sets `key` (its last occurrence) to `value`, or appends it.
    fn set(&mut self, key: &str, value: Box<RawValue>) {
        match self.0.iter_mut().rev().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key.to_string(), value)),
        }
    }

    fn write(&self) -> String {
        let mut out = String::from("{");
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&Value::String(k.clone()).to_string());
            out.push(':');
            out.push_str(v.get());
        }
        out.push('}');
        out
    }
}

/// False for an Anthropic-style request (`anthropic-version` header, or a
/// path ending in `/messages`), whose body must not get `stream_options`.
pub fn openai_style(request: &RequestView<'_>) -> bool {
    let path = request.path().split('?').next().unwrap_or_default();
    request.header("anthropic-version").is_none() && !path.trim_end_matches('/').ends_with("/messages")
}

fn raw(json: &str) -> Option<Box<RawValue>> {
    RawValue::from_string(json.to_string()).ok()
}

/// The request body with `stream_options.include_usage: true`, when it is an
/// OpenAI-style streaming request that does not ask for usage; `None` when
/// it needs no change (not JSON, not streaming, usage already asked for).
pub fn ask_for_usage(body: &[u8]) -> Option<Bytes> {
    let mut top: Members = serde_json::from_slice(body).ok()?;
    if top.get("stream").map(RawValue::get) != Some("true") {
        return None;
    }
    let options = match top.get("stream_options") {
        None => Members(Vec::new()),
        Some(v) if v.get() == "null" => Members(Vec::new()),
        Some(v) => serde_json::from_str::<Members>(v.get()).ok()?,
    };
    if options.get("include_usage").map(RawValue::get) == Some("true") {
        return None;
    }
    let mut options = options;
    options.set("include_usage", raw("true")?);
    top.set("stream_options", raw(&options.write())?);
    Some(Bytes::from(top.write()))
}

/// The tokens of a `usage` object: `total_tokens`, else the sum of the
/// input and output counts it has (OpenAI and Anthropic names).
pub(crate) fn usage_tokens(usage: &Value) -> Option<u64> {
    if let Some(t) = usage.get("total_tokens").and_then(Value::as_u64) {
        return Some(t);
    }
    let n = |k: &str| usage.get(k).and_then(Value::as_u64);
    match (n("prompt_tokens"), n("completion_tokens")) {
        (None, None) => None,
        (p, c) => Some(p.unwrap_or(0) + c.unwrap_or(0)),
    }
}

/// True for the OpenAI usage-only chunk: `usage` and an empty `choices`.
fn usage_only(doc: &Value) -> bool {
    doc.get("usage").is_some_and(Value::is_object)
        && doc.get("choices").and_then(Value::as_array).is_some_and(Vec::is_empty)
}

/// The SSE body `body` without its usage-only chunks; `None` when it has none.
pub fn strip_usage_events(body: &[u8]) -> Option<Bytes> {
    let mut framer = sse::Framer::new(body.len().max(1));
    let mut events = framer.push(body).ok()?;
    events.extend(framer.finish());
    let before = events.len();
    events.retain(|ev| {
        !sse::data(ev)
            .and_then(|d| serde_json::from_str::<Value>(&d).ok())
            .is_some_and(|doc| usage_only(&doc))
    });
    (events.len() != before).then(|| Bytes::from(events.concat()))
}

/// What travels between the calls of one SSE stream.
#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    /// The usage has been charged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    charged: bool,
    /// Anthropic input tokens seen so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    input: Option<u64>,
    /// Anthropic output tokens seen so far (a running total).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    output: Option<u64>,
}

impl State {
    /// The Anthropic usage gathered, if any, to be charged once.
    fn anthropic_total(&self) -> Option<u64> {
        if self.charged || (self.input.is_none() && self.output.is_none()) {
            return None;
        }
        Some(self.input.unwrap_or(0) + self.output.unwrap_or(0))
    }
}

/// What a call of the streaming hook found.
pub struct ChunkUsage {
    /// The tokens to charge now, once per stream.
    pub charge: Option<u64>,
    /// The outcome, without the charge's metadata.
    pub outcome: ChunkOutcome,
}

/// Reads one call of a streamed response: the usage to charge, the events
/// to send and the state for the next call.
pub fn read_chunk(ctx: &ChunkContext<'_>) -> Result<ChunkUsage, PolicyError> {
    match ctx.framing {
        Framing::SseEvent => read_events(ctx),
        Framing::Raw => read_raw(ctx),
    }
}

fn read_events(ctx: &ChunkContext<'_>) -> Result<ChunkUsage, PolicyError> {
    let mut st: State = if ctx.state.is_empty() {
        State::default()
    } else {
        serde_json::from_slice(ctx.state).map_err(|e| PolicyError::new(format!("unreadable stream state: {e}")))?
    };
    let hide = ctx.metadata.get(USAGE_ADDED_KEY) == Some("true");
    let mut charge = None;
    let mut kept = Vec::with_capacity(ctx.events.len());
    let mut dropped = false;
    for ev in ctx.events {
        let doc = sse::data(ev).and_then(|d| serde_json::from_str::<Value>(&d).ok());
        let Some(doc) = doc else {
            kept.push(ev.clone());
            continue;
        };
        match doc.get("type").and_then(Value::as_str) {
            Some("message_start") => {
                if let Some(u) = doc.pointer("/message/usage") {
                    let n = |k: &str| u.get(k).and_then(Value::as_u64);
                    st.input = n("input_tokens").or(st.input);
                    st.output = n("output_tokens").or(st.output);
                }
            }
            Some("message_delta") => {
                if let Some(u) = doc.get("usage") {
                    let n = |k: &str| u.get(k).and_then(Value::as_u64);
                    st.input = n("input_tokens").or(st.input);
                    st.output = n("output_tokens").or(st.output);
                }
            }
            Some("message_stop") => {
                if let Some(total) = st.anthropic_total() {
                    charge = Some(total);
                    st.charged = true;
                }
            }
            _ => {
                if let Some(total) = doc.get("usage").and_then(usage_tokens) {
                    if !st.charged {
                        charge = Some(total);
                        st.charged = true;
                    }
                }
            }
        }
        if hide && usage_only(&doc) {
            dropped = true;
            continue;
        }
        kept.push(ev.clone());
    }
    if ctx.end_of_stream {
        if let Some(total) = st.anthropic_total() {
            charge = Some(total);
            st.charged = true;
        }
    }
    let state = serde_json::to_vec(&st).map_err(|e| PolicyError::new(format!("stream state: {e}")))?;
    let outcome = if dropped {
        ChunkOutcome::pass().replace(kept)
    } else {
        ChunkOutcome::pass()
    };
    Ok(ChunkUsage {
        charge,
        outcome: outcome.state(state),
    })
}

/// Raw state: a tag byte (`0` keeping the body, `1` gave up: too large),
/// then the body so far.
fn read_raw(ctx: &ChunkContext<'_>) -> Result<ChunkUsage, PolicyError> {
    let (tag, kept) = ctx.state.split_first().map_or((0, &[][..]), |(t, rest)| (*t, rest));
    let size = kept.len() + ctx.events.iter().map(Bytes::len).sum::<usize>();
    if tag == 1 || size > MAX_RAW {
        let outcome = ChunkOutcome::pass().state(Bytes::from_static(&[1]));
        let outcome = if tag == 0 {
            outcome.message(format!(
                "the streamed body is over {MAX_RAW} bytes: its usage is not read"
            ))
        } else {
            outcome
        };
        return Ok(ChunkUsage { charge: None, outcome });
    }
    let mut body = Vec::with_capacity(size + 1);
    body.push(0);
    body.extend_from_slice(kept);
    for ev in ctx.events {
        body.extend_from_slice(ev);
    }
    if ctx.end_of_stream {
        let charge = super::tokens::usage_total(&body[1..]);
        return Ok(ChunkUsage {
            charge,
            outcome: ChunkOutcome::pass(),
        });
    }
    Ok(ChunkUsage {
        charge: None,
        outcome: ChunkOutcome::pass().state(body),
    })
}

#[cfg(test)]
#[path = "stream_usage_tests.rs"]
mod tests;
