//! Streamed response bodies: what a streaming hook
//! ([`Policy::on_response_chunk`](crate::Policy::on_response_chunk)) reads
//! and returns, and how the SDK runs the streaming policies of one call.
//!
//! The kernel sends a streamed body piece by piece: complete server-sent
//! events for `text/event-stream`, chunks as they came for other bodies
//! ([`Framing`]). Each policy of the call sees the pieces as the previous
//! one left them. A policy keeps state between the calls of one stream in
//! [`ChunkContext::state`] / [`ChunkOutcome::state`]: the kernel carries it,
//! so the agent keeps nothing per stream and a client that goes away leaves
//! nothing behind.

use bytes::Bytes;

use crate::context::{CallInfo, Metadata, RequestView, ResponseView};
use crate::policy::PolicyError;
use crate::proto::{self, chunk_instruction::Instruction as ChunkI};
use crate::registry::Registry;
use crate::runner::OnFailure;

pub use policy_net::sse;

/// How the pieces of a streamed body are cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Each piece is one complete server-sent event, blank line included.
    SseEvent,
    /// Each piece is a chunk of another kind of body, as it arrived.
    Raw,
}

/// Everything a streaming hook can read.
#[derive(Debug, Clone, Copy)]
pub struct ChunkContext<'a> {
    /// The request as the upstream received it (no body).
    pub request: RequestView<'a>,
    /// The response headers and status the client received (no body).
    pub response: ResponseView<'a>,
    /// Metadata set so far: both phases, earlier calls of this stream and
    /// earlier policies of this call.
    pub metadata: &'a Metadata,
    /// Facts about the call.
    pub call: &'a CallInfo,
    /// 0 for the stream's first call, then 1, 2, ...
    pub sequence: u64,
    /// How `events` are cut.
    pub framing: Framing,
    /// The pieces of this call, in body order.
    pub events: &'a [Bytes],
    /// True on the stream's last call.
    pub end_of_stream: bool,
    /// What this policy returned with [`ChunkOutcome::state`] on the
    /// previous call of this stream; empty on the first.
    pub state: &'a [u8],
}

/// What a streaming hook returns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChunkOutcome {
    events: Option<Vec<Bytes>>,
    end: Option<(String, String)>,
    metadata: Vec<(String, String)>,
    state: Bytes,
    message: Option<String>,
}

impl ChunkOutcome {
    /// Pass the pieces unchanged.
    pub fn pass() -> Self {
        ChunkOutcome::default()
    }

    /// Replace the pieces with `events` (an empty list drops them). For SSE,
    /// each must be one complete event ending with a blank line
    /// ([`sse::event`], [`sse::with_data`]).
    pub fn replace(mut self, events: Vec<Bytes>) -> Self {
        self.events = Some(events);
        self
    }

    /// End the stream for the client: the pieces given with
    /// [`ChunkOutcome::replace`] (none unless given) go out, then an SSE
    /// `error` event with `reason` and `message`; nothing of the upstream's
    /// body after that reaches the client.
    pub fn end_stream(reason: impl Into<String>, message: impl Into<String>) -> Self {
        ChunkOutcome {
            events: Some(Vec::new()),
            end: Some((reason.into(), message.into())),
            ..ChunkOutcome::default()
        }
    }

    /// Set a metadata key (later policies, Envoy's dynamic metadata).
    pub fn set_metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.push((key.into(), value.into()));
        self
    }

    /// State to receive back as [`ChunkContext::state`] on the next call of
    /// this stream.
    pub fn state(mut self, state: impl Into<Bytes>) -> Self {
        self.state = state.into();
        self
    }

    /// A message for the kernel's logs.
    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }
}

/// What an outcome holds, for tests of streaming policies.
impl ChunkOutcome {
    /// The pieces that replace the call's, if the hook replaced them.
    pub fn replacement(&self) -> Option<&[Bytes]> {
        self.events.as_deref()
    }
    /// The state the hook keeps for the stream's next call.
    pub fn next_state(&self) -> &[u8] {
        &self.state
    }
    /// The metadata the hook set, in order.
    pub fn metadata_set(&self) -> &[(String, String)] {
        &self.metadata
    }
    /// `(reason, message)` if the hook ended the stream.
    pub fn ending(&self) -> Option<&(String, String)> {
        self.end.as_ref()
    }
}

/// Runs the streaming policies of one call, in order.
pub(crate) async fn execute_chunk(
    registry: &Registry,
    call: proto::PolicyResponseChunk,
    info: CallInfo,
) -> Result<proto::PolicyResponseChunkReply, tonic::Status> {
    let policies = registry.resolve(&call.policies)?;
    let request = call.request_data.unwrap_or_default();
    let response = call.response_data.unwrap_or_default();
    let framing = match proto::ChunkFraming::try_from(call.framing) {
        Ok(proto::ChunkFraming::Raw) => Framing::Raw,
        _ => Framing::SseEvent,
    };
    let mut metadata = Metadata::from(call.policy_metadata);
    let mut events = call.events;
    let mut changed = false;
    let mut reply = proto::PolicyResponseChunkReply {
        request_id: call.request_id,
        ..Default::default()
    };
    let mut messages = Vec::new();
    let mut end = None;
    // Once a policy ended the stream, the policies after it get the
    // stream's last call (an audit policy writes its line); only their
    // metadata and state are kept.
    let mut closing = false;
    for (i, policy) in policies.into_iter().enumerate() {
        let params = &policy.params;
        let state = call.policy_state.get(i).cloned().unwrap_or_default();
        let result = match registry.policy(&policy) {
            Some(p) => {
                let ctx = ChunkContext {
                    request: RequestView::new(&request),
                    response: ResponseView::new(&response),
                    metadata: &metadata,
                    call: &info,
                    sequence: call.sequence,
                    framing,
                    events: &events,
                    end_of_stream: call.end_of_stream || closing,
                    state: &state,
                };
                p.run_chunk(params, &ctx).await
            }
            None => Err(PolicyError::new("policy is not supported by this agent")),
        };
        let outcome = match result {
            Ok(o) => o,
            Err(err) => {
                let mode = OnFailure::parse(&policy.on_failure);
                tracing::warn!(policy = %policy.name, request_id = %reply.request_id, error = %err, on_failure = ?mode, "policy failed on a streamed body");
                messages.push(format!("{} failed: {err}", policy.name));
                reply.policy_state.push(state);
                if closing {
                    continue;
                }
                match mode {
                    OnFailure::Continue => continue,
                    OnFailure::SkipRemaining => break,
                    OnFailure::Deny => {
                        events.clear();
                        changed = true;
                        end = Some(("policy_failed".to_string(), format!("{} failed", policy.name)));
                        closing = true;
                        continue;
                    }
                }
            }
        };
        reply.policy_state.push(outcome.state);
        messages.extend(outcome.message);
        for (k, v) in outcome.metadata {
            metadata.insert(k.clone(), v.clone());
            reply.policy_metadata.insert(k.clone(), v.clone());
            let i = ChunkI::SetMetadata(proto::SetMetadata { key: k, value: v });
            reply
                .instructions
                .push(proto::ChunkInstruction { instruction: Some(i) });
        }
        if closing {
            continue;
        }
        if let Some(new) = outcome.events {
            events = new;
            changed = true;
        }
        if outcome.end.is_some() {
            end = outcome.end;
            closing = true;
        }
    }
    if changed {
        let i = ChunkI::ReplaceEvents(proto::ReplaceEvents { events });
        reply
            .instructions
            .push(proto::ChunkInstruction { instruction: Some(i) });
    }
    if let Some((reason, message)) = end {
        let i = ChunkI::EndStream(proto::EndStream { reason, message });
        reply
            .instructions
            .push(proto::ChunkInstruction { instruction: Some(i) });
    }
    reply.message = messages.join("; ");
    Ok(reply)
}
