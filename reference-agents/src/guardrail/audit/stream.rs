//! `auditLog` on a streamed response: one journal line at the end of the
//! stream, in the same hash chain as every other line.
//!
//! The line holds the request and the response headers and status as a
//! buffered line does, and a `stream` object:
//! `{"framing": "sse"|"raw", "events": N, "bytes": N, "sha256": HEX}`:
//! the number of pieces (complete server-sent events, or raw chunks), their
//! total size, and the SHA-256 of their concatenated bytes, as this policy
//! received them (after the policies before it in the chain; an `auditLog`
//! last in the chain sees what the client gets). With `log_response_body`,
//! the first [`MAX_BODY`] bytes are kept as `response_body` (secrets
//! scrubbed, `response_body_truncated` when cut), as for a buffered body.
//!
//! Between the calls of a stream, the counts and the running SHA-256
//! ([`RunningSha256`]) travel in the kernel-carried call state: one JSON
//! line, then (with `log_response_body`) the body kept so far.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::digest::RunningSha256;
use super::record::{self, MAX_BODY};
use policy_agents::{ChunkContext, Framing, PolicyError};

/// What travels between the calls of one stream.
#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    /// Pieces so far.
    events: u64,
    /// The digest of the pieces so far (its length is their size).
    sha: RunningSha256,
}

/// The call's state after this call's pieces, and the journal record when
/// the stream ends.
pub(super) struct Step {
    /// State for the next call.
    pub state: Vec<u8>,
    /// The line to append (at the end of the stream).
    pub record: Option<Map<String, Value>>,
}

fn decode(state: &[u8]) -> Result<(State, &[u8]), PolicyError> {
    if state.is_empty() {
        return Ok((State::default(), &[]));
    }
    let (head, body) = match state.iter().position(|&b| b == b'\n') {
        Some(i) => (&state[..i], &state[i + 1..]),
        None => (state, &[][..]),
    };
    let st = serde_json::from_slice(head).map_err(|e| PolicyError::new(format!("unreadable stream state: {e}")))?;
    Ok((st, body))
}

/// Takes one call of a streamed response.
pub(super) fn step(ctx: &ChunkContext<'_>, log_body: bool) -> Result<Step, PolicyError> {
    let (mut st, kept) = decode(ctx.state)?;
    let mut body = if log_body { kept.to_vec() } else { Vec::new() };
    for ev in ctx.events {
        st.events += 1;
        st.sha.update(ev);
        if log_body {
            let room = MAX_BODY.saturating_sub(body.len());
            body.extend_from_slice(&ev[..ev.len().min(room)]);
        }
    }
    let mut state = serde_json::to_vec(&st).map_err(|e| PolicyError::new(format!("stream state: {e}")))?;
    if !ctx.end_of_stream {
        if log_body {
            state.push(b'\n');
            state.extend_from_slice(&body);
        }
        return Ok(Step { state, record: None });
    }
    let truncated = st.sha.len() > body.len() as u64;
    let mut line = record::request_record(&ctx.request, ctx.call, ctx.metadata);
    let secrets = record::secret_values(&ctx.request);
    record::add_response(&mut line, &ctx.response, false, &secrets);
    if log_body {
        line.insert(
            "response_body".into(),
            Value::from(record::scrub(&String::from_utf8_lossy(&body), &secrets)),
        );
        if truncated {
            line.insert("response_body_truncated".into(), Value::from(true));
        }
    }
    let framing = match ctx.framing {
        Framing::SseEvent => "sse",
        Framing::Raw => "raw",
    };
    line.insert(
        "stream".into(),
        serde_json::json!({
            "framing": framing,
            "events": st.events,
            "bytes": st.sha.len(),
            "sha256": st.sha.finish_hex(),
        }),
    );
    Ok(Step {
        state: Vec::new(),
        record: Some(line),
    })
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
