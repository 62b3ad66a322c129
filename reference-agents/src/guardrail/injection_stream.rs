//! `promptInjectionGuard` on a streamed event stream (response phase).
//!
//! The policy streams event streams only: a JSON or other reply is buffered
//! by the kernel and read whole, as without streaming. In an SSE reply each
//! event is read as it passes:
//!
//! * a JSON-RPC message (MCP) is scored alone: tool results, errors and the
//!   params of the server's own requests, so the messages of a
//!   `sampling/createMessage` (what the client's model would be asked) are
//!   read before the client sees them. At or above `threshold` with
//!   `action: block`: a response is replaced by the JSON-RPC error for its
//!   id (as for a buffered reply) and the stream goes on; a notification is
//!   dropped; a server request is dropped, the client's pending request
//!   (`mcp.request_id`) is answered with the JSON-RPC error, and the stream
//!   ends (reason `prompt_injection_detected`): the server's request is left
//!   unanswered, as `mcpServerRequestGuard` does; on a session's GET stream
//!   (no pending call) the request is dropped and the stream goes on;
//! * other events (completion chunks, text) are scored over the text of
//!   the stream so far (its last [`WINDOW`] bytes, in the call state), so an
//!   injection split across chunks is still seen; `block` ends the stream
//!   (reason `prompt_injection_in_response`) before the event that crossed
//!   the threshold.
//!
//! * a `tools/list` result is checked tool by tool for poisoning, as in a
//!   buffered reply (see [`response`](super::response)): the event is
//!   rewritten without the poisoned tools, or replaced by the JSON-RPC
//!   error (`poisoned_tools: refuse`).
//!
//! `action: flag` cannot set `x-prompt-risk` once the headers have gone: it
//! sets the `response_risk_*` metadata only.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::detector::{Detector, Verdict};
use super::indirect;
use super::injection::{round, Action, GuardParams};
use super::poisoning;
use crate::tool::events::{self, EventMessage};
use policy_agents::stream::sse;
use policy_agents::{ChunkContext, ChunkOutcome, Framing, PolicyError};

/// The stream text kept for scoring non-JSON-RPC events, in bytes.
pub const WINDOW: usize = 8 * 1024;

#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    window: String,
}

impl State {
    /// Appends a fragment as it came (completion deltas split words).
    fn push(&mut self, text: &str) {
        self.window.push_str(text);
        if self.window.len() > WINDOW {
            let mut cut = self.window.len() - WINDOW;
            while !self.window.is_char_boundary(cut) {
                cut += 1;
            }
            self.window.drain(..cut);
        }
    }
}

fn metadata(out: ChunkOutcome, v: &Verdict) -> ChunkOutcome {
    out.set_metadata("response_risk_score", format!("{:.2}", v.score))
        .set_metadata("response_risk_categories", v.categories().join(","))
        .set_metadata("response_risk_spans", super::injection::spans(v))
}

/// Runs the policy on one call of a streamed response.
pub(super) fn on_chunk(params: &GuardParams, ctx: &ChunkContext<'_>) -> Result<ChunkOutcome, PolicyError> {
    if !params.response {
        return Ok(ChunkOutcome::pass());
    }
    if ctx.framing == Framing::Raw {
        return Err(PolicyError::new(
            "a streamed reply that is not an event stream cannot be scored event by event",
        ));
    }
    if let Some(enc) = ctx
        .response
        .header("content-encoding")
        .filter(|e| !e.eq_ignore_ascii_case("identity"))
    {
        return Err(PolicyError::new(format!(
            "cannot inspect a {enc}-encoded response body"
        )));
    }
    let mut st: State = if ctx.state.is_empty() {
        State::default()
    } else {
        serde_json::from_slice(ctx.state).map_err(|e| PolicyError::new(format!("unreadable stream state: {e}")))?
    };
    let detector = Detector::shared()?;
    let mut out: Vec<Bytes> = Vec::with_capacity(ctx.events.len());
    let mut changed = false;
    let mut worst: Option<Verdict> = None;
    let mut tool_metadata: Vec<(&'static str, String)> = Vec::new();
    let mut changed_lists = false;
    let state = |st: &State| serde_json::to_vec(st).map_err(|e| PolicyError::new(format!("stream state: {e}")));
    for ev in ctx.events {
        let (text, doc) = match events::read(ev) {
            EventMessage::None => {
                out.push(ev.clone());
                continue;
            }
            EventMessage::Message(doc) if poisoning::tools_of(&doc).is_some() => {
                // A tools/list result: its tools are checked one by one.
                let data = sse::data(ev).unwrap_or_default();
                let lists = super::response::tool_lists(params, Some("application/json"), &data)?;
                for (k, v) in lists.metadata() {
                    tool_metadata.push((k, v));
                }
                match &lists.body {
                    Some(new) => {
                        changed_lists = true;
                        out.push(sse::with_data(ev, new));
                    }
                    None => out.push(ev.clone()),
                }
                continue;
            }
            EventMessage::Message(doc) => {
                let (text, jsonrpc) = indirect::event_text(&doc);
                (text, jsonrpc.then_some(doc))
            }
            EventMessage::NotJson(_) => (sse::data(ev).unwrap_or_default().into_owned(), None),
        };
        // Read as tool output, in windows (see super::windows).
        let verdict = match &doc {
            Some(_) => super::windows::assess(detector, &text, &params.weights, params.windowed),
            None => {
                st.push(&text);
                super::windows::assess(detector, &st.window, &params.weights, params.windowed)
            }
        };
        let hit = verdict.score >= params.threshold;
        if verdict.score > 0.0 && worst.as_ref().is_none_or(|w| w.score < verdict.score) {
            worst = Some(verdict.clone());
        }
        if !hit || params.action == Action::Flag {
            out.push(ev.clone());
            continue;
        }
        let categories = verdict.categories();
        let score = round(verdict.score);
        let Some(doc) = doc else {
            tracing::warn!(request_id = %ctx.call.request_id, score, "prompt injection in a streamed response: the stream ends");
            let end = ChunkOutcome::end_stream("prompt_injection_in_response", "prompt injection in the response")
                .replace(out);
            return Ok(metadata(end, &verdict).state(state(&st)?));
        };
        match events::server_request(&doc) {
            Some((method, _)) => {
                tracing::warn!(request_id = %ctx.call.request_id, method, score, "prompt injection in a server request: refused");
                let Some(id) = events::pending_id(ctx.metadata) else {
                    // A GET stream: drop the request, keep the stream.
                    changed = true;
                    continue;
                };
                let err = indirect::jsonrpc_error(&id, params.jsonrpc_error_code, &categories, score);
                out.push(sse::event("message", &err.to_string()));
                let end = ChunkOutcome::end_stream(
                    "prompt_injection_detected",
                    format!("the server's {method} request carried a prompt injection"),
                )
                .replace(out)
                .set_metadata("response_blocked", "prompt_injection_detected")
                .set_metadata("mcp.server_method", crate::tool::metadata_text(method))
                .set_metadata("mcp.server_decision", "deny")
                .set_metadata("mcp.server_rule", "prompt_injection");
                return Ok(metadata(end, &verdict).state(state(&st)?));
            }
            None => {
                changed = true;
                let ids: Vec<Value> = events::messages(&doc)
                    .into_iter()
                    .filter_map(|m| m.get("id").filter(|id| !id.is_null()).cloned())
                    .collect();
                if !ids.is_empty() {
                    // Responses: the JSON-RPC error for each id; a notification is dropped.
                    let body = indirect::jsonrpc_block_body(&ids, true, params.jsonrpc_error_code, &categories, score);
                    out.push(Bytes::from(body));
                }
            }
        }
    }
    let mut outcome = if changed {
        ChunkOutcome::pass()
            .replace(out)
            .set_metadata("response_blocked", "prompt_injection_detected")
    } else if changed_lists {
        ChunkOutcome::pass().replace(out)
    } else {
        ChunkOutcome::pass()
    };
    for (k, v) in tool_metadata {
        outcome = outcome.set_metadata(k, v);
    }
    if let Some(v) = &worst {
        outcome = metadata(outcome, v);
    }
    Ok(outcome.state(state(&st)?))
}

#[cfg(test)]
#[path = "injection_stream_tests.rs"]
mod tests;
