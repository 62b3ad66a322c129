//! `piiRedaction` on a streamed response.
//!
//! **SSE** (`text/event-stream`): the streamed text of OpenAI-style chat
//! completions (`choices[].delta.content`) and Anthropic-style messages
//! (`content_block_delta` with a `text_delta`) is redacted across event
//! boundaries; A2A events (tasks, messages, status and artifact updates, in
//! either binding) part by part, each part's text whole. Of each
//! completion text, the tail that could still be the start of a
//! value (the trailing run of characters a value can hold, at most
//! [`MAX_HOLD`] characters) is held back and put in front of the next
//! fragment of the same choice or block; so `555-12` + `34-567` is caught as
//! one phone number. The held text goes out with the choice's
//! `finish_reason`, before an Anthropic `content_block_stop`, before
//! `data: [DONE]`, or at the end of the stream, as an event of the same
//! shape. Every event stays valid JSON; events without such text pass
//! unchanged, byte for byte.
//!
//! **Other bodies** (raw chunks): `text/*` bodies other than JSON are
//! redacted as text with the same hold-back; JSON and other bodies cannot be
//! redacted piece by piece without breaking them, so they are held (in the
//! call state, at most [`MAX_WHOLE`]) and redacted whole at the end.
//!
//! The held text, the counts so far and the shape of the last text event
//! travel in the kernel-carried call state, as JSON.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use super::pii::PiiParams;
use super::redactor::{Counts, Redactor};
use policy_agents::stream::sse;
use policy_agents::{ChunkContext, ChunkOutcome, Framing, PolicyError};

/// The longest tail held back, in characters: longer than any value the
/// patterns match but an e-mail address at its RFC limits.
pub const MAX_HOLD: usize = 128;

/// The largest non-text body held whole for redaction at its end.
pub const MAX_WHOLE: usize = 1024 * 1024;

/// What travels between the calls of one stream.
#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    /// Held text by stream position: `o<choice index>` or `a<block index>`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    tails: BTreeMap<String, String>,
    /// Redactions so far, by type name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    counts: BTreeMap<String, usize>,
    /// The last OpenAI-style chunk with text, without its choices and usage
    /// (its `id`, `model`, ...), to shape a flush event. Kept as the JSON
    /// text it travels as: it is parsed only when a flush event is made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    template: Option<Box<RawValue>>,
    /// A raw body held whole (JSON and other non-text bodies), or the bytes
    /// of an unfinished UTF-8 character of a text body.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    raw: Vec<u8>,
}

/// Can `c` be part of a value some pattern matches (a space only after a
/// digit or `)`, as in `+49 (0) 6018` or `4111 1111`)?
fn in_value(c: char, before: Option<char>) -> bool {
    c.is_ascii_alphanumeric()
        || "@._%+-()/".contains(c)
        || (c == ' ' && before.is_some_and(|b| b.is_ascii_digit() || b == ')'))
}

/// Where the held tail of `text` starts (a char boundary).
pub(crate) fn hold_from(text: &str) -> usize {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut start = text.len();
    for (n, &(i, c)) in chars.iter().enumerate().rev() {
        let before = n.checked_sub(1).map(|p| chars[p].1);
        if !in_value(c, before) || chars.len() - n > MAX_HOLD {
            break;
        }
        start = i;
    }
    start
}

impl State {
    fn redact(&mut self, text: &str, p: &PiiParams) -> Result<String, PolicyError> {
        let mut counts = Counts::new();
        let out = Redactor::shared()?.redact_text(text, p.types(), p.regions(), &mut counts);
        for (t, n) in counts {
            *self.counts.entry(t.as_str().to_string()).or_default() += n;
        }
        Ok(out.unwrap_or_else(|| text.to_string()))
    }

    /// `fragment` after the held text of `key`: what goes out now (redacted);
    /// the rest is held, unless `flush`.
    fn step(&mut self, key: &str, fragment: &str, flush: bool, p: &PiiParams) -> Result<String, PolicyError> {
        let mut text = self.tails.remove(key).unwrap_or_default();
        text.push_str(fragment);
        let cut = if flush { text.len() } else { hold_from(&text) };
        let held = text.split_off(cut);
        if !held.is_empty() {
            self.tails.insert(key.to_string(), held);
        }
        self.redact(&text, p)
    }

    fn metadata(&self, mut out: ChunkOutcome) -> ChunkOutcome {
        if self.counts.is_empty() {
            return out;
        }
        for (t, n) in &self.counts {
            out = out.set_metadata(format!("pii_redacted_{t}"), n.to_string());
        }
        out.set_metadata("pii_redacted_total", self.counts.values().sum::<usize>().to_string())
    }
}

/// One event of an SSE stream: the events to send in its place.
fn sse_event(st: &mut State, ev: &Bytes, p: &PiiParams, out: &mut Vec<Bytes>) -> Result<bool, PolicyError> {
    let Some(data) = sse::data(ev) else {
        out.push(ev.clone());
        return Ok(false);
    };
    if data.trim() == "[DONE]" {
        let flushed = flush_all(st, p)?;
        let changed = !flushed.is_empty();
        out.extend(flushed);
        out.push(ev.clone());
        return Ok(changed);
    }
    let Ok(mut doc) = serde_json::from_str::<Value>(&data) else {
        out.push(ev.clone());
        return Ok(false);
    };
    let mut changed = false;
    let mut before = Vec::new();
    if let Some(choices) = doc.get_mut("choices").and_then(Value::as_array_mut) {
        for (pos, choice) in choices.iter_mut().enumerate() {
            let idx = choice.get("index").and_then(Value::as_u64).unwrap_or(pos as u64);
            let key = format!("o{idx}");
            let finished = choice.get("finish_reason").is_some_and(|f| !f.is_null());
            let content = choice
                .get("delta")
                .and_then(|d| d.get("content"))
                .and_then(Value::as_str)
                .map(str::to_string);
            if content.is_none() && !(finished && st.tails.contains_key(&key)) {
                continue;
            }
            let fragment = content.clone().unwrap_or_default();
            let new = st.step(&key, &fragment, finished, p)?;
            if content.as_deref() != Some(new.as_str()) {
                if let Some(delta) = choice.get_mut("delta").and_then(Value::as_object_mut) {
                    delta.insert("content".into(), Value::String(new));
                    changed = true;
                }
            }
        }
        if changed || st.template.is_none() {
            st.template = template(&doc)?;
        }
    } else if doc.get("type").is_none() && !crate::a2a::parts::texts_mut(&mut doc).is_empty() {
        // A2A: each event carries whole parts (a task, a message, a status
        // update, an artifact), redacted part by part.
        for text in crate::a2a::parts::texts_mut(&mut doc) {
            let new = st.redact(text, p)?;
            if new != *text {
                *text = new;
                changed = true;
            }
        }
    } else {
        let kind = doc.get("type").and_then(Value::as_str).unwrap_or_default();
        let idx = doc.get("index").and_then(Value::as_u64).unwrap_or(0);
        let key = format!("a{idx}");
        let delta = doc.get("delta");
        if kind == "content_block_delta"
            && delta.and_then(|d| d.get("type")).and_then(Value::as_str) == Some("text_delta")
        {
            let fragment = delta
                .and_then(|d| d.get("text"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let new = st.step(&key, &fragment, false, p)?;
            if new != fragment {
                if let Some(delta) = doc.get_mut("delta").and_then(Value::as_object_mut) {
                    delta.insert("text".into(), Value::String(new));
                    changed = true;
                }
            }
        } else if kind == "content_block_stop" || kind == "message_stop" {
            let keys: Vec<String> = if kind == "message_stop" {
                st.tails.keys().filter(|k| k.starts_with('a')).cloned().collect()
            } else {
                vec![key]
            };
            for k in keys {
                let rest = st.step(&k, "", true, p)?;
                if !rest.is_empty() {
                    before.push(anthropic_delta(&k, &rest));
                }
            }
        }
    }
    let any = changed || !before.is_empty();
    out.extend(before);
    if changed {
        let json = serde_json::to_string(&doc).map_err(|e| PolicyError::new(format!("re-encoding an event: {e}")))?;
        out.push(sse::with_data(ev, &json));
    } else {
        out.push(ev.clone());
    }
    Ok(any)
}

/// `doc` without its choices and usage, as JSON text.
fn template(doc: &Value) -> Result<Option<Box<RawValue>>, PolicyError> {
    let Some(o) = doc.as_object() else {
        return Ok(None);
    };
    serde_json::value::to_raw_value(&Rest(o))
        .map(Some)
        .map_err(|e| PolicyError::new(format!("stream state: {e}")))
}

/// An event's fields but its choices and usage, written from the parsed
/// event as they are (no copy of the fields).
struct Rest<'a>(&'a serde_json::Map<String, Value>);

impl Serialize for Rest<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().filter(|(k, _)| *k != "choices" && *k != "usage"))
    }
}

/// An Anthropic-style text delta for block `key` (`a<index>`).
fn anthropic_delta(key: &str, text: &str) -> Bytes {
    let index: u64 = key[1..].parse().unwrap_or(0);
    let doc = serde_json::json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}});
    sse::event("content_block_delta", &doc.to_string())
}

/// Events that carry every held text out.
fn flush_all(st: &mut State, p: &PiiParams) -> Result<Vec<Bytes>, PolicyError> {
    let keys: Vec<String> = st.tails.keys().cloned().collect();
    let mut out = Vec::new();
    for key in keys {
        let text = st.step(&key, "", true, p)?;
        if text.is_empty() {
            continue;
        }
        if key.starts_with('a') {
            out.push(anthropic_delta(&key, &text));
            continue;
        }
        let index: u64 = key[1..].parse().unwrap_or(0);
        let mut doc = match &st.template {
            Some(t) => serde_json::from_str(t.get()).map_err(|e| PolicyError::new(format!("stream state: {e}")))?,
            None => serde_json::json!({}),
        };
        if let Some(o) = doc.as_object_mut() {
            o.insert(
                "choices".into(),
                serde_json::json!([{"index": index, "delta": {"content": text}, "finish_reason": null}]),
            );
        }
        out.push(sse::event("", &doc.to_string()));
    }
    Ok(out)
}

/// A raw piece of a text body: what goes out now.
fn raw_text(st: &mut State, chunk: &[u8], eos: bool, p: &PiiParams) -> Result<Bytes, PolicyError> {
    let mut bytes = std::mem::take(&mut st.raw);
    bytes.extend_from_slice(chunk);
    let valid = match std::str::from_utf8(&bytes) {
        Ok(_) => bytes.len(),
        Err(e) if e.error_len().is_none() && !eos => e.valid_up_to(),
        Err(_) => return Err(PolicyError::new("the streamed text body is not valid UTF-8")),
    };
    st.raw = bytes.split_off(valid);
    let text = String::from_utf8(bytes).map_err(|_| PolicyError::new("the streamed text body is not valid UTF-8"))?;
    Ok(Bytes::from(st.step("t", &text, eos, p)?))
}

/// Runs `piiRedaction` on one call of a streamed response.
pub(crate) fn on_chunk(params: &PiiParams, ctx: &ChunkContext<'_>) -> Result<ChunkOutcome, PolicyError> {
    if !params.response_enabled() {
        return Ok(ChunkOutcome::pass());
    }
    if let Some(enc) = ctx
        .response
        .header("content-encoding")
        .filter(|e| !e.eq_ignore_ascii_case("identity"))
    {
        return Err(PolicyError::new(format!("cannot inspect a {enc}-encoded body")));
    }
    let mut st: State = if ctx.state.is_empty() {
        State::default()
    } else {
        serde_json::from_slice(ctx.state).map_err(|e| PolicyError::new(format!("unreadable stream state: {e}")))?
    };
    let mut out = Vec::with_capacity(ctx.events.len());
    let mut changed = false;
    match ctx.framing {
        Framing::SseEvent => {
            for ev in ctx.events {
                changed |= sse_event(&mut st, ev, params, &mut out)?;
            }
            if ctx.end_of_stream {
                let rest = flush_all(&mut st, params)?;
                changed |= !rest.is_empty();
                out.extend(rest);
            }
        }
        Framing::Raw => {
            let content_type = ctx
                .response
                .header("content-type")
                .unwrap_or_default()
                .to_ascii_lowercase();
            let text = content_type.starts_with("text/");
            changed = true;
            if text {
                for (i, ev) in ctx.events.iter().enumerate() {
                    let last = ctx.end_of_stream && i + 1 == ctx.events.len();
                    out.push(raw_text(&mut st, ev, last, params)?);
                }
                if ctx.end_of_stream && ctx.events.is_empty() {
                    out.push(raw_text(&mut st, b"", true, params)?);
                }
            } else {
                for ev in ctx.events {
                    st.raw.extend_from_slice(ev);
                }
                if st.raw.len() > MAX_WHOLE {
                    return Err(PolicyError::new(format!(
                        "a streamed {content_type:?} body is redacted whole, and it is over {MAX_WHOLE} bytes"
                    )));
                }
                if ctx.end_of_stream {
                    let body = std::mem::take(&mut st.raw);
                    let mut counts = Counts::new();
                    let new = Redactor::shared()?.redact_body(&body, params.types(), params.regions(), &mut counts);
                    for (t, n) in counts {
                        *st.counts.entry(t.as_str().to_string()).or_default() += n;
                    }
                    out.push(new.map(Bytes::from).unwrap_or_else(|| Bytes::from(body)));
                }
            }
        }
    }
    let state = serde_json::to_vec(&st).map_err(|e| PolicyError::new(format!("stream state: {e}")))?;
    let outcome = if changed {
        ChunkOutcome::pass().replace(out)
    } else {
        ChunkOutcome::pass()
    };
    Ok(st.metadata(outcome).state(state))
}

#[cfg(test)]
#[path = "pii_stream_tests.rs"]
mod tests;
