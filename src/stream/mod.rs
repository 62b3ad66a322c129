//! Streamed response bodies: policies on SSE and chunked responses without
//! buffering them.
//!
//! When every body policy of a stream's response plan runs on an agent that
//! declares `streams_response_body` for it, the kernel asks Envoy to stream
//! the response (`STREAMED` body mode, through `mode_override`) instead of
//! buffering it ([`split_plan`]); `STREAMED` rather than
//! `FULL_DUPLEX_STREAMED`, which would make the kernel send every byte back
//! for about 0.1 ms less to the first byte (docs/streaming.md;
//! `benches/RESULTS.md`, 2026-11-24). The header-only policies of the response
//! chain run at the response headers as usual; the streaming ones
//! ([`Streamer`]) then see the body piece by piece:
//!
//! - a `text/event-stream` body is cut into complete server-sent events
//!   ([`policy_net::sse::Framer`]): an event split across Envoy's chunks is
//!   held until it is complete; any other body goes as the chunks it came in;
//! - the groups are called in chain order on each piece, one call at a time
//!   per stream, with a sequence number, `end_of_stream` and the state each
//!   policy returned last time (the kernel carries it: agents keep nothing
//!   per stream);
//! - replies can pass, replace or drop events, set metadata or end the
//!   stream. Headers are gone by then, so an SSE stream ends with a final
//!   `event: error` and everything after it is dropped; a raw body is cut
//!   with an immediate response, which makes Envoy reset the stream. The
//!   groups after the one that ended it get one last call with
//!   `end_of_stream` (an `auditLog` there still writes its line);
//! - a policy may stream event streams only (`streams_event_streams_only`):
//!   a response of another content type is then buffered for the whole
//!   chain at its headers ([`Streamer::fallback_for`], a `mode_override`);
//! - each piece has its own deadline (`server.phase_timeout_ms`); a failed
//!   call follows `on_failure` / `fail_open`: `deny` ends the stream as
//!   above, `continue` passes the piece unchanged, `skip_remaining` passes
//!   the rest of the stream unchanged;
//! - chunks, events, bytes and terminations are counted ([`metrics`]) and
//!   set on the request's span.
//!
//! A client that goes away resets Envoy's ext_proc stream; the session, and
//! with it any agent call in flight, is dropped, which cancels the call.

pub mod metrics;
mod reply;

use bytes::{Bytes, BytesMut};
use envoy_types::pb::envoy::service::ext_proc::v3::{
    body_mutation, processing_response::Response, BodyMutation, BodyResponse, CommonResponse, ProcessingResponse,
};
use opentelemetry::KeyValue;
use policy_net::sse::{self, Framer};
use tokio::time::Instant;

use crate::aggregate::{Immediate, Metadata, RequestCtx, ResponseCtx};
use crate::config::OnFailure;
use crate::envoy::translate::{self, Answer};
use crate::plan::{Group, Plan};
use crate::proto::ChunkFraming;
use crate::registry::{AgentCall, CallError};
use crate::snapshot::{Chain, Route, Snapshot};
use crate::telemetry::tracing::RequestTrace;
use crate::wire;
use reply::{check, Checked};

/// Splits a planned response chain for streaming: the groups of the policies
/// that run at the response headers (those that need no body on their
/// agent), and the groups of the streaming ones. `None` when the response
/// must be buffered: some body policy's planned agent cannot stream it.
pub fn split_plan(chain: &Chain, plan: &Plan) -> Option<(Plan, Plan)> {
    if !chain.may_stream {
        return None;
    }
    let mut head = Plan::new();
    let mut body = Plan::new();
    let push = |plan: &mut Plan, agent: usize, i: usize| match plan.last_mut() {
        Some(g) if g.agent == agent && g.policies.end == i => g.policies.end = i + 1,
        _ => plan.push(Group {
            agent,
            policies: i..i + 1,
        }),
    };
    for g in plan {
        for i in g.policies.clone() {
            let p = chain.policies.get(i)?;
            if !p.body_agents.contains(&g.agent) {
                push(&mut head, g.agent, i);
            } else if p.stream_agents.contains(&g.agent) {
                push(&mut body, g.agent, i);
            } else {
                return None;
            }
        }
    }
    (!body.is_empty()).then_some((head, body))
}

/// True when a policy of the streaming groups `body` streams only event
/// streams on its planned agent (`streams_event_streams_only`): a response
/// of another content type is then buffered for the whole chain.
pub fn events_only(chain: &Chain, body: &Plan) -> bool {
    body.iter().any(|g| {
        g.policies
            .clone()
            .filter_map(|i| chain.policies.get(i))
            .any(|p| p.event_stream_agents.contains(&g.agent))
    })
}

/// True when `response` is an event stream (`text/event-stream`).
pub fn is_event_stream(response: &ResponseCtx) -> bool {
    response
        .headers
        .iter()
        .find(|(k, _)| k == "content-type")
        .is_some_and(|(_, v)| sse::is_event_stream(v))
}

/// The answer to `response_headers` of a streamed response: `resp` without
/// the upstream's `content-length`, which pieces the policies change would
/// contradict (Envoy then frames the body itself).
pub fn strip_length(mut resp: ProcessingResponse, response: &ResponseCtx) -> ProcessingResponse {
    if !response.headers.iter().any(|(k, _)| k == "content-length") {
        return resp;
    }
    if let Some(Response::ResponseHeaders(h)) = &mut resp.response {
        let common = h.response.get_or_insert_with(CommonResponse::default);
        common
            .header_mutation
            .get_or_insert_with(Default::default)
            .remove_headers
            .push("content-length".to_string());
    }
    resp
}

/// What a piece's run needs from its stream.
pub struct StreamCtx<'a> {
    /// The stream's snapshot.
    pub snap: &'a Snapshot,
    /// The matched route.
    pub route: &'a Route,
    /// The request id sent to agents.
    pub request_id: &'a str,
    /// Metadata, accumulated over both phases.
    pub meta: &'a mut Metadata,
    /// The request's trace, when sampled.
    pub trace: Option<&'a RequestTrace>,
}

/// The streaming policies of one response.
pub struct Streamer {
    plan: Plan,
    /// `Some` for `text/event-stream`.
    framer: Option<Framer>,
    seq: u64,
    /// Per group: the policies' state from their last reply.
    states: Vec<Vec<Bytes>>,
    /// Why the stream was ended for the client, once it was.
    ended: Option<String>,
    /// After `skip_remaining`: the rest passes unchanged.
    passthrough: bool,
    /// The request and response headers, encoded once for every call.
    context: Bytes,
    counts: metrics::Counts,
    /// The whole response plan, when a response that is not an event
    /// stream must be buffered instead ([`events_only`]).
    fallback: Option<Plan>,
}

impl Streamer {
    /// The streaming groups of a response, not started yet.
    pub fn new(plan: Plan) -> Self {
        let states = vec![Vec::new(); plan.len()];
        Streamer {
            plan,
            framer: None,
            seq: 0,
            states,
            ended: None,
            passthrough: false,
            context: Bytes::new(),
            counts: metrics::Counts::default(),
            fallback: None,
        }
    }

    /// A response that is not an event stream runs `full` (the whole
    /// response plan) on its buffered body instead of streaming.
    pub fn buffer_others(mut self, full: Plan) -> Self {
        self.fallback = Some(full);
        self
    }

    /// The whole plan to buffer `response` with, when it is not an event
    /// stream and a policy streams only event streams.
    pub fn fallback_for(&mut self, response: &ResponseCtx) -> Option<Plan> {
        if is_event_stream(response) {
            return None;
        }
        self.fallback.take()
    }

    /// The plan of the streaming groups.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Starts the body: the request as sent upstream and the response headers
    /// as the client gets them; the framing follows the content type.
    pub fn start(&mut self, route: &str, request: &RequestCtx, response: &ResponseCtx) {
        let sse = is_event_stream(response);
        self.framer = sse.then(Framer::default);
        self.context = wire::chunk_context(request, response);
        self.counts = metrics::Counts::new(route);
    }

    fn framing(&self) -> ChunkFraming {
        if self.framer.is_some() {
            ChunkFraming::SseEvent
        } else {
            ChunkFraming::Raw
        }
    }

    /// Answers one `response_body` message.
    pub async fn chunk(&mut self, cx: StreamCtx<'_>, body: Vec<u8>, end_of_stream: bool) -> ProcessingResponse {
        self.counts.chunk(body.len());
        if self.ended.is_some() {
            return replaced(Bytes::new(), body.is_empty());
        }
        let held_before = self.framer.as_ref().map_or(0, Framer::held);
        if self.passthrough {
            let rest = self.framer.as_mut().and_then(Framer::finish);
            return match rest {
                Some(r) => replaced([&r[..], &body[..]].concat().into(), false),
                None => self.pass(body.len()),
            };
        }
        let events = match self.frame(&body, end_of_stream) {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(route = %cx.route.name, request_id = cx.request_id, error = %e, "streamed response cannot be framed: ending it");
                return self.end(&cx, Vec::new(), "sse_event_too_large", &e.to_string());
            }
        };
        if events.is_empty() && !end_of_stream {
            // Part of an event: held until it is complete.
            return replaced(Bytes::new(), body.is_empty());
        }
        let mut cx = cx;
        let outcome = self.run(&mut cx, events, end_of_stream).await;
        self.seq += 1;
        let mut resp = match outcome.end {
            Some((reason, message)) => return self.end(&cx, outcome.events, &reason, &message),
            None if !outcome.replaced && held_before == 0 && self.framer.as_ref().is_none_or(|f| f.held() == 0) => {
                self.counts.events(outcome.events.len());
                self.pass(body.len())
            }
            None => {
                self.counts.events(outcome.events.len());
                let out = concat(&outcome.events);
                self.counts.bytes_out(out.len());
                replaced(out, false)
            }
        };
        if outcome.metadata_set {
            resp.dynamic_metadata = Some(translate::dynamic_metadata(&cx.route.name, cx.meta));
        }
        if end_of_stream {
            self.finish(cx.trace);
        }
        resp
    }

    /// Cuts `body` into the pieces of one call.
    fn frame(&mut self, body: &[u8], end_of_stream: bool) -> Result<Vec<Bytes>, sse::FrameError> {
        let Some(framer) = self.framer.as_mut() else {
            return Ok(if body.is_empty() {
                Vec::new()
            } else {
                vec![Bytes::copy_from_slice(body)]
            });
        };
        let mut events = framer.push(body)?;
        if end_of_stream {
            events.extend(framer.finish());
        }
        Ok(events)
    }

    fn pass(&mut self, len: usize) -> ProcessingResponse {
        self.counts.bytes_out(len);
        translate::respond(Answer::ResponseBody, None)
    }

    /// Ends the stream for the client after `events`.
    fn end(&mut self, cx: &StreamCtx<'_>, events: Vec<Bytes>, reason: &str, message: &str) -> ProcessingResponse {
        let reason = crate::telemetry::metrics::reason_label(reason);
        tracing::warn!(route = %cx.route.name, request_id = cx.request_id, reason = %reason, message, sequence = self.seq,
            "streamed response ended by its policies");
        self.counts.terminated(&reason);
        self.ended = Some(reason.clone());
        self.finish(cx.trace);
        if self.framer.is_none() {
            // A raw body has no way to say it was cut: Envoy resets the
            // stream on an immediate response after the headers.
            let f = &cx.snap.responses.failure;
            let imm = Immediate { reason, ..f.clone() };
            return translate::immediate(&imm);
        }
        let data = serde_json::json!({"error": reason, "message": message}).to_string();
        let mut out = BytesMut::from(&concat(&events)[..]);
        out.extend_from_slice(&sse::event("error", &data));
        self.counts.events(events.len() + 1);
        self.counts.bytes_out(out.len());
        let mut resp = replaced(out.freeze(), false);
        resp.dynamic_metadata = Some(translate::dynamic_metadata(&cx.route.name, cx.meta));
        resp
    }

    /// Metrics and span attributes of the whole stream.
    fn finish(&mut self, trace: Option<&RequestTrace>) {
        if let Some(t) = trace {
            let c = &self.counts;
            let mut attrs = vec![
                KeyValue::new("stream.chunks", c.chunks as i64),
                KeyValue::new("stream.events", c.events as i64),
                KeyValue::new("stream.bytes_in", c.bytes_in as i64),
                KeyValue::new("stream.bytes_out", c.bytes_out as i64),
                KeyValue::new("stream.agent_calls", self.seq as i64),
            ];
            if let Some(r) = &self.ended {
                attrs.push(KeyValue::new("stream.terminated", r.clone()));
            }
            t.set(attrs);
        }
    }

    /// Calls the streaming groups in order on `events`. When a group ends
    /// the stream, the groups after it get one last call (`end_of_stream`,
    /// with the events the client gets), so that an audit policy still
    /// writes its line; what they return beyond metadata and state is not
    /// used.
    async fn run(&mut self, cx: &mut StreamCtx<'_>, mut events: Vec<Bytes>, end_of_stream: bool) -> RunOutcome {
        let mut out = RunOutcome::default();
        let mut closing = false;
        let deadline = Instant::now() + cx.snap.phase_timeout;
        let chain = &cx.route.response;
        let framing = self.framing();
        for (n, group) in self.plan.iter().enumerate() {
            let (Some(agent), Some(entries)) = (
                cx.snap.agents.get(group.agent),
                chain.policies.get(group.policies.clone()),
            ) else {
                continue;
            };
            let call = wire::chunk_call(
                entries.iter().map(|p| &p.wire),
                &wire::Chunk {
                    request_id: cx.request_id,
                    context: &self.context,
                    sequence: self.seq,
                    framing: framing as i32,
                    events: &events,
                    end_of_stream: end_of_stream || closing,
                    states: self.states.get(n).map_or(&[], Vec::as_slice),
                    meta: cx.meta,
                },
            );
            let started = Instant::now();
            let result = Box::pin(agent.execute(AgentCall::Chunk(call), deadline.min(started + agent.timeout()), None))
                .await
                .and_then(|r| check(cx.request_id, framing, entries.len(), r));
            let status = result.as_ref().map_or_else(CallError::status_index, |_| 0);
            if let Some(m) = cx.route.metrics.agents.get(group.agent) {
                m.calls[status].inc();
                m.duration.observe(started.elapsed().as_secs_f64());
            }
            let reply = match result {
                Ok(r) => r,
                Err(_) if closing => continue,
                Err(error) => {
                    let action = match entries.first().and_then(|p| p.on_failure) {
                        Some(f) => f,
                        None if agent.config.fail_open => OnFailure::Continue,
                        None => OnFailure::Deny,
                    };
                    tracing::warn!(route = %cx.route.name, request_id = cx.request_id, agent = agent.name(),
                        sequence = self.seq, error = %error, on_failure_action = action.as_str(),
                        "agent failed on a streamed response");
                    cx.route.metrics.partial_failure(agent.name(), error.kind());
                    match action {
                        OnFailure::Continue => continue,
                        OnFailure::SkipRemaining => {
                            self.passthrough = true;
                            break;
                        }
                        OnFailure::Deny => {
                            out.end = Some((
                                cx.snap.responses.failure.reason.clone(),
                                format!("agent {} failed", agent.name()),
                            ));
                            out.replaced = true;
                            events = Vec::new();
                            closing = true;
                            continue;
                        }
                    }
                }
            };
            let Checked {
                metadata,
                states,
                replace,
                end,
            } = reply;
            out.metadata_set |= !metadata.is_empty();
            cx.meta.extend(metadata);
            if let Some(s) = self.states.get_mut(n) {
                *s = states;
            }
            if closing {
                continue;
            }
            if let Some(new) = replace {
                events = new;
                out.replaced = true;
            }
            if end.is_some() {
                out.end = end;
                closing = true;
            }
        }
        out.events = events;
        out
    }
}

/// How the groups' run on one piece ended.
#[derive(Default)]
struct RunOutcome {
    events: Vec<Bytes>,
    replaced: bool,
    metadata_set: bool,
    end: Option<(String, String)>,
}

fn concat(events: &[Bytes]) -> Bytes {
    match events {
        [] => Bytes::new(),
        [one] => one.clone(),
        many => {
            let mut out = BytesMut::with_capacity(many.iter().map(Bytes::len).sum());
            for e in many {
                out.extend_from_slice(e);
            }
            out.freeze()
        }
    }
}

/// A body answer sending `body` in place of the chunk (a plain CONTINUE when
/// the chunk was empty and nothing replaces it).
fn replaced(body: Bytes, chunk_was_empty: bool) -> ProcessingResponse {
    if chunk_was_empty && body.is_empty() {
        return translate::respond(Answer::ResponseBody, None);
    }
    ProcessingResponse {
        response: Some(Response::ResponseBody(BodyResponse {
            response: Some(CommonResponse {
                body_mutation: Some(BodyMutation {
                    mutation: Some(body_mutation::Mutation::Body(body.to_vec())),
                }),
                ..Default::default()
            }),
        })),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
