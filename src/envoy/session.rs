//! One ext_proc stream, i.e. one HTTP request: the state machine that answers
//! each Envoy message, in order.
//!
//! At `request_headers` the snapshot is loaded (once), the route is found,
//! both chains are validated and planned. The request chain runs at once, or
//! at `request_body` when a policy needs the body (the headers answer then
//! switches on BUFFERED mode for exactly the phases that need it). The
//! response chain runs at `response_headers`, or at `response_body` likewise.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    processing_request::Request, HttpHeaders, ProcessingRequest, ProcessingResponse,
};
use envoy_types::pb::google::protobuf::{value::Kind, Struct};

use super::body_limit;
use super::translate::{self, Answer};
use crate::aggregate::{Metadata, RequestCtx, ResponseCtx};
use crate::chain::{Outcome, Report, Run};
use crate::config::PhaseValidation;
use crate::kernel::Kernel;
use crate::plan::{plan_healthy, plan_route, Plan, PlanError};
use crate::snapshot::{Route, Snapshot};
use crate::stream::{self, StreamCtx, Streamer};
use crate::telemetry::metrics::{metrics, NoCall};
use crate::telemetry::request_log::{self, RequestLine};
use crate::telemetry::tracing::{end, RequestTrace, TraceHeaders};
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::processing_mode::BodySendMode;
use opentelemetry::KeyValue;

/// Envoy's attribute namespace for ext_proc.
const ATTRIBUTES: &str = "envoy.filters.http.ext_proc";

/// State of one stream.
pub struct Session {
    _active: ActiveStream,
    /// This stream's share of `server.max_concurrent_streams`; `None` when
    /// the kernel is full and the request gets `overload_response`.
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    kernel: Arc<Kernel>,
    /// Route name from the stream's gRPC metadata (`x-route-name`).
    route_hint: Option<String>,
    state: State,
    /// Set on a shadow route: every answer goes through it (see [`crate::shadow`]).
    shadow: Option<crate::shadow::Shadow>,
}

enum State {
    /// Nothing received yet.
    Fresh,
    /// Unknown route, or answered already: every message gets CONTINUE.
    Passthrough,
    /// A route with policies.
    Active(Box<Active>),
}

/// Counts the stream in `policy_kernel_active_streams` while it lives.
struct ActiveStream;

impl ActiveStream {
    fn new() -> Self {
        metrics().active_streams.inc();
        Self
    }
}

impl Drop for ActiveStream {
    fn drop(&mut self) {
        metrics().active_streams.dec();
    }
}

struct Active {
    started: std::time::Instant,
    report: Report,
    /// The request's trace, when sampled.
    trace: Option<RequestTrace>,
    snap: Arc<Snapshot>,
    route: Arc<Route>,
    request: RequestCtx,
    meta: Metadata,
    /// The request plan, while waiting for the request body.
    request_plan: Option<Plan>,
    /// The request body was asked for in BUFFERED_PARTIAL mode (no declared
    /// length): a piece that is not the last one means it was cut.
    body_partial: bool,
    response_plan: Plan,
    response_body: bool,
    /// The response, while waiting for its body.
    response: Option<ResponseCtx>,
    /// The streaming policies, when the response is streamed through them
    /// (`response_plan` then holds only the header-only ones).
    stream: Option<Box<Streamer>>,
}

fn string_attr<'a>(attrs: &'a HashMap<String, Struct>, key: &str) -> Option<&'a str> {
    match attrs.get(ATTRIBUTES)?.fields.get(key)?.kind.as_ref()? {
        Kind::StringValue(s) if !s.is_empty() => Some(s),
        _ => None,
    }
}

fn header<'a>(h: &'a HttpHeaders, name: &str) -> Option<&'a [u8]> {
    h.headers.as_ref()?.headers.iter().find(|v| v.key == name).map(|v| {
        if v.raw_value.is_empty() {
            v.value.as_bytes()
        } else {
            v.raw_value.as_slice()
        }
    })
}

/// CONTINUE for a stream the kernel has nothing more to do with: no bodies,
/// and no response headers message.
fn no_response_phase() -> ProcessingResponse {
    let mut resp = translate::respond(Answer::RequestHeaders, None);
    resp.mode_override = Some(translate::mode_override(false, false, false));
    resp
}

fn client_ip(addr: &str) -> String {
    addr.parse::<std::net::SocketAddr>()
        .map(|s| s.ip().to_string())
        .unwrap_or_else(|_| addr.to_string())
}

/// A header's bytes as text, without a copy when they are UTF-8 (they
/// always are from Envoy, which sends `raw_value`); other bytes become
/// U+FFFD.
fn text(raw: Vec<u8>) -> String {
    String::from_utf8(raw).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// A header's name and bytes: Envoy sends them in `raw_value`, `value` is
/// the fallback of older senders.
fn header_bytes(v: HeaderValue) -> (String, Vec<u8>) {
    let raw = if v.raw_value.is_empty() {
        v.value.into_bytes()
    } else {
        v.raw_value
    };
    (v.key, raw)
}

/// The request as agents see it, from Envoy's request headers `h` and the
/// client's address in `attrs` (`source.address`).
pub fn request_ctx(h: HttpHeaders, attrs: &HashMap<String, Struct>) -> RequestCtx {
    let mut ctx = RequestCtx {
        client_ip: string_attr(attrs, "source.address").map(client_ip).unwrap_or_default(),
        ..Default::default()
    };
    for (key, raw) in h
        .headers
        .map(|m| m.headers)
        .unwrap_or_default()
        .into_iter()
        .map(header_bytes)
    {
        match key.as_str() {
            ":method" => ctx.method = text(raw),
            ":path" => ctx.path = text(raw),
            ":scheme" => ctx.scheme = text(raw),
            ":authority" => ctx.authority = text(raw),
            k if k.starts_with(':') => {}
            _ => {
                if key == "x-request-id" && ctx.request_id.is_empty() {
                    ctx.request_id = String::from_utf8_lossy(&raw).into_owned();
                }
                ctx.headers.push((key, Bytes::from(raw)));
            }
        }
    }
    if ctx.request_id.is_empty() {
        ctx.request_id = uuid::Uuid::new_v4().to_string();
    }
    ctx
}

fn response_ctx(h: HttpHeaders) -> ResponseCtx {
    let mut ctx = ResponseCtx::default();
    for (key, raw) in h
        .headers
        .map(|m| m.headers)
        .unwrap_or_default()
        .into_iter()
        .map(header_bytes)
    {
        match key.as_str() {
            ":status" => ctx.status = std::str::from_utf8(&raw).ok().and_then(|s| s.parse().ok()).unwrap_or(0),
            k if k.starts_with(':') => {}
            _ => ctx.headers.push((key, Bytes::from(raw))),
        }
    }
    ctx
}

impl Session {
    /// A new stream; `route_hint` is the `x-route-name` gRPC metadata.
    pub fn new(
        kernel: Arc<Kernel>,
        route_hint: Option<String>,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Self {
        Self {
            _active: ActiveStream::new(),
            permit,
            kernel,
            route_hint,
            state: State::Fresh,
            shadow: None,
        }
    }

    /// Answers one message from Envoy.
    pub async fn handle(&mut self, msg: ProcessingRequest) -> ProcessingResponse {
        let answer = match &msg.request {
            Some(Request::RequestBody(_)) => Answer::RequestBody,
            Some(Request::ResponseHeaders(_)) => Answer::ResponseHeaders,
            Some(Request::ResponseBody(_)) => Answer::ResponseBody,
            Some(Request::RequestTrailers(_)) => Answer::RequestTrailers,
            Some(Request::ResponseTrailers(_)) => Answer::ResponseTrailers,
            _ => Answer::RequestHeaders,
        };
        let resp = self.answer(msg).await;
        match &mut self.shadow {
            Some(shadow) => shadow.neutralize(answer, resp),
            None => resp,
        }
    }

    async fn answer(&mut self, msg: ProcessingRequest) -> ProcessingResponse {
        let attrs = msg.attributes;
        match msg.request {
            Some(Request::RequestHeaders(h)) => self.request_headers(h, &attrs).await,
            Some(Request::RequestBody(b)) => self.request_body(b.body, b.end_of_stream).await,
            Some(Request::ResponseHeaders(h)) => self.response_headers(h).await,
            Some(Request::ResponseBody(b)) => self.response_body(b.body, b.end_of_stream).await,
            Some(Request::RequestTrailers(_)) => translate::respond(Answer::RequestTrailers, None),
            Some(Request::ResponseTrailers(_)) => translate::respond(Answer::ResponseTrailers, None),
            None => translate::respond(Answer::RequestHeaders, None),
        }
    }

    fn route_name(&self, snap: &Snapshot, h: &HttpHeaders, attrs: &HashMap<String, Struct>) -> Option<String> {
        if let Some(name) = string_attr(attrs, "xds.route_name") {
            return Some(name.to_string());
        }
        if let Some(name) = &self.route_hint {
            return Some(name.clone());
        }
        let name = snap.route_name_header.as_deref()?;
        header(h, name).map(|v| String::from_utf8_lossy(v).into_owned())
    }

    async fn request_headers(&mut self, h: HttpHeaders, attrs: &HashMap<String, Struct>) -> ProcessingResponse {
        if !matches!(self.state, State::Fresh) {
            return translate::respond(Answer::RequestHeaders, None);
        }
        self.state = State::Passthrough;
        if self.permit.is_none() {
            let snap = self.kernel.snapshot();
            let imm = &snap.responses.overload;
            snap.unknown.immediate(imm.status, &imm.reason);
            tracing::warn!(
                limit = snap.config.server.max_concurrent_streams,
                "overloaded: request answered with overload_response"
            );
            return translate::immediate(imm);
        }
        let trace = RequestTrace::start(TraceHeaders {
            traceparent: header(&h, "traceparent"),
            tracestate: header(&h, "tracestate"),
        });
        let lookup = trace
            .as_ref()
            .map(|t| RequestTrace::child(t.context(), "kernel.route_lookup", vec![]));
        let snap = self.kernel.snapshot();
        let name = self.route_name(&snap, &h, attrs);
        let route = name.as_deref().and_then(|n| snap.routes.get(n)).cloned();
        if let (Some(cx), Some(t)) = (lookup, &trace) {
            t.set(vec![KeyValue::new("route.name", name.clone().unwrap_or_default())]);
            end(cx);
        }
        let Some(route) = route else {
            snap.unknown.no_call[NoCall::Passthrough as usize].inc();
            tracing::info!(
                route = name.as_deref().unwrap_or(""),
                action = "CONTINUE",
                "Route not found - allowing request through"
            );
            return no_response_phase();
        };
        if route.mode == crate::config::RouteMode::Shadow {
            self.shadow = Some(crate::shadow::Shadow::new(route.clone()));
        }
        let end_of_stream = h.end_of_stream;
        let request = request_ctx(h, attrs);
        let rr = route.rr.fetch_add(1, Ordering::Relaxed);
        let planning = trace
            .as_ref()
            .map(|t| RequestTrace::child(t.context(), "kernel.create_execution_plan", vec![]));
        let planned = plan_route(&route, &snap.agents, rr);
        if let Some(cx) = planning {
            if let Ok((req, resp)) = &planned {
                let mut agents: Vec<usize> = req.iter().chain(resp).map(|g| g.agent).collect();
                agents.sort_unstable();
                agents.dedup();
                let span = opentelemetry::trace::TraceContextExt::span(&cx);
                span.set_attribute(KeyValue::new(
                    "total.policies",
                    (route.request.policies.len() + route.response.policies.len()) as i64,
                ));
                span.set_attribute(KeyValue::new("total.agents", agents.len() as i64));
                span.set_attribute(KeyValue::new("execution.groups", (req.len() + resp.len()) as i64));
            }
            end(cx);
        }
        let (request_plan, response_plan) = match planned {
            Ok(plans) => plans,
            Err(e) => return refuse(&snap, &route, &request.request_id, &e),
        };
        if request_plan.is_empty() && response_plan.is_empty() {
            route.metrics.no_call[NoCall::Passthrough as usize].inc();
            return no_response_phase();
        }
        let want_request_body = route.request.needs_body && !request_plan.is_empty();
        let mut response_body = route.response.needs_body && !response_plan.is_empty();
        let mut response_plan = response_plan;
        let streamed = response_body
            .then(|| stream::split_plan(&route.response, &response_plan))
            .flatten()
            .map(|(head, body)| {
                let full = std::mem::replace(&mut response_plan, head);
                response_body = false;
                let streamer = Streamer::new(body);
                Box::new(if stream::events_only(&route.response, streamer.plan()) {
                    streamer.buffer_others(full)
                } else {
                    streamer
                })
            });
        let buffer_request = want_request_body && !end_of_stream;
        let mut body_mode = body_limit::request_body_mode(None);
        if buffer_request {
            let limit = snap.config.server.max_request_body_bytes;
            let declared_len = body_limit::declared_length(request.headers.iter().map(|(k, v)| (k.as_str(), &v[..])));
            body_mode = body_limit::request_body_mode(declared_len);
            if let Some(len) = declared_len.filter(|&len| len > limit) {
                let imm = &snap.responses.too_large;
                route.metrics.immediate(imm.status, &imm.reason);
                tracing::warn!(route = %route.name, request_id = %request.request_id, content_length = len,
                    max_request_body_bytes = limit, response_status = imm.status, action = "IMMEDIATE_RESPONSE",
                    "request body larger than server.max_request_body_bytes: not buffered for the body policies");
                return translate::immediate(imm);
            }
        }
        let mut mode = translate::mode_override(
            buffer_request,
            response_body,
            !response_plan.is_empty() || streamed.is_some(),
        );
        if streamed.is_some() {
            mode = translate::streamed_response(mode);
        }
        if buffer_request {
            mode.request_body_mode = body_mode as i32;
        }
        let mut active = Box::new(Active {
            started: std::time::Instant::now(),
            report: Report::default(),
            trace,
            snap,
            route,
            request,
            meta: Metadata::new(),
            request_plan: None,
            body_partial: buffer_request && body_mode == BodySendMode::BufferedPartial,
            response_plan,
            response_body,
            response: None,
            stream: streamed,
        });
        let mut resp = if buffer_request {
            active.request_plan = Some(request_plan);
            translate::respond(Answer::RequestHeaders, None)
        } else {
            if want_request_body {
                active.request.body = Some(Bytes::new());
            }
            active.run_request(&request_plan, Answer::RequestHeaders).await
        };
        if !translate::is_immediate(&resp) {
            resp.mode_override = Some(mode);
            self.state = State::Active(active);
        }
        resp
    }

    async fn request_body(&mut self, body: Vec<u8>, end_of_stream: bool) -> ProcessingResponse {
        let State::Active(active) = &mut self.state else {
            return translate::respond(Answer::RequestBody, None);
        };
        let Some(plan) = active.request_plan.take() else {
            return translate::respond(Answer::RequestBody, None);
        };
        let limit = active.snap.config.server.max_request_body_bytes;
        if let body_limit::Verdict::TooLarge { received } =
            body_limit::BodyCounter::new(limit).piece(body.len(), end_of_stream || !active.body_partial)
        {
            let imm = &active.snap.responses.too_large;
            active.route.metrics.immediate(imm.status, &imm.reason);
            tracing::warn!(route = %active.route.name, request_id = %active.request.request_id, received_bytes = received,
                complete = end_of_stream, max_request_body_bytes = limit, response_status = imm.status,
                action = "IMMEDIATE_RESPONSE",
                "request body without content-length larger than server.max_request_body_bytes or Envoy's buffer limit: refused");
            let resp = translate::immediate(imm);
            self.state = State::Passthrough;
            return resp;
        }
        active.request.body = Some(Bytes::from(body));
        let resp = active.run_request(&plan, Answer::RequestBody).await;
        if translate::is_immediate(&resp) {
            self.state = State::Passthrough;
        }
        resp
    }

    async fn response_headers(&mut self, h: HttpHeaders) -> ProcessingResponse {
        let State::Active(active) = &mut self.state else {
            return translate::respond(Answer::ResponseHeaders, None);
        };
        if active.stream.is_some() {
            return active.start_stream(h).await;
        }
        if active.response_plan.is_empty() {
            return translate::respond(Answer::ResponseHeaders, None);
        }
        if let Some(refused) = active.strict_refusal(&[&active.response_plan]) {
            return refused;
        }
        let end_of_stream = h.end_of_stream;
        let mut response = response_ctx(h);
        if active.response_body && !end_of_stream {
            active.response = Some(response);
            return translate::respond(Answer::ResponseHeaders, None);
        }
        if active.response_body {
            response.body = Some(Bytes::new());
        }
        active.run_response(response, Answer::ResponseHeaders).await
    }

    async fn response_body(&mut self, body: Vec<u8>, end_of_stream: bool) -> ProcessingResponse {
        let State::Active(active) = &mut self.state else {
            return translate::respond(Answer::ResponseBody, None);
        };
        if let Some(mut streamer) = active.stream.take() {
            let resp = active.stream_piece(&mut streamer, body, end_of_stream).await;
            active.stream = Some(streamer);
            return resp;
        }
        let Some(mut response) = active.response.take() else {
            return translate::respond(Answer::ResponseBody, None);
        };
        response.body = Some(Bytes::from(body));
        active.run_response(response, Answer::ResponseBody).await
    }
}

impl Active {
    /// Strict mode (§6.5): 503 when an agent of `plans` went unhealthy
    /// since the request phase.
    fn strict_refusal(&self, plans: &[&Plan]) -> Option<ProcessingResponse> {
        if self.snap.phase_validation != PhaseValidation::Strict
            || plans.iter().all(|p| plan_healthy(p, &self.snap.agents))
        {
            return None;
        }
        tracing::warn!(route = %self.route.name, request_id = %self.request.request_id, phase = "response",
            validation_phase = "strict", error_type = "AGENT_UNAVAILABLE", "Planned response agent unhealthy - returning 503 error");
        let imm = &self.snap.responses.unavailable;
        self.route.metrics.immediate(imm.status, &imm.reason);
        Some(translate::immediate(imm))
    }

    /// One piece of a streamed response body through `streamer`.
    async fn stream_piece(
        &mut self,
        streamer: &mut Streamer,
        body: Vec<u8>,
        end_of_stream: bool,
    ) -> ProcessingResponse {
        let cx = StreamCtx {
            snap: &self.snap,
            route: &self.route,
            request_id: &self.request.request_id,
            meta: &mut self.meta,
            trace: self.trace.as_ref(),
        };
        streamer.chunk(cx, body, end_of_stream).await
    }

    /// The response headers of a streamed response: the header-only
    /// policies run now; the streaming ones get the body piece by piece.
    async fn start_stream(&mut self, h: HttpHeaders) -> ProcessingResponse {
        let Some(streamer) = self.stream.take() else {
            return translate::respond(Answer::ResponseHeaders, None);
        };
        if let Some(refused) = self.strict_refusal(&[&self.response_plan, streamer.plan()]) {
            return refused;
        }
        let end_of_stream = h.end_of_stream;
        let mut response = response_ctx(h);
        let mut streamer = streamer;
        if let Some(full) = streamer.fallback_for(&response) {
            // Not an event stream, and a policy streams only those: the
            // whole chain runs on the buffered body, as without streaming.
            self.response_plan = full;
            self.response_body = true;
            if end_of_stream {
                response.body = Some(Bytes::new());
                return self.run_response(response, Answer::ResponseHeaders).await;
            }
            self.response = Some(response);
            let mut resp = translate::respond(Answer::ResponseHeaders, None);
            resp.mode_override = Some(translate::mode_override(false, true, true));
            return resp;
        }
        let resp = if self.response_plan.is_empty() {
            translate::respond(Answer::ResponseHeaders, None)
        } else {
            self.run_response_on(&mut response, Answer::ResponseHeaders).await
        };
        if translate::is_immediate(&resp) {
            return resp;
        }
        streamer.start(&self.route.name, &self.request, &response);
        if end_of_stream {
            // No body will come: the streaming policies still get their
            // end of stream (an audit entry, say); there is nothing to send.
            let _ = self.stream_piece(&mut streamer, Vec::new(), true).await;
        }
        self.stream = Some(streamer);
        stream::strip_length(resp, &response)
    }
}

impl Active {
    async fn run_request(&mut self, plan: &Plan, answer: Answer) -> ProcessingResponse {
        let mut request = std::mem::take(&mut self.request);
        let id = request.request_id.clone();
        let outcome = {
            let mut run = Run {
                snap: &self.snap,
                route: &self.route,
                request_id: &id,
                meta: &mut self.meta,
                report: &mut self.report,
                trace: self.trace.as_ref(),
            };
            run.request(plan, &mut request).await
        };
        self.request = request;
        self.finish(outcome, answer, true)
    }

    async fn run_response(&mut self, mut response: ResponseCtx, answer: Answer) -> ProcessingResponse {
        self.run_response_on(&mut response, answer).await
    }

    /// Runs the response plan on `response`, which it leaves as the last
    /// policy left it.
    async fn run_response_on(&mut self, response: &mut ResponseCtx, answer: Answer) -> ProcessingResponse {
        // The request phase's answer carried the metadata, and Envoy merges
        // each answer's into the stream's: this answer carries it only when
        // the response chain changed it, or when the request chain never ran
        // (its plan still waits for a request body that did not come).
        // Cloning an empty map allocates nothing.
        let before = self.meta.clone();
        let outcome = {
            let mut run = Run {
                snap: &self.snap,
                route: &self.route,
                request_id: &self.request.request_id,
                meta: &mut self.meta,
                report: &mut self.report,
                trace: self.trace.as_ref(),
            };
            run.response(&self.response_plan, &self.request, response).await
        };
        let metadata = self.meta != before || self.request_plan.is_some();
        self.finish(outcome, answer, metadata)
    }

    /// The answer to Envoy; with the stream's dynamic metadata when
    /// `metadata` (always in the request phase).
    fn finish(&self, outcome: Outcome, answer: Answer, metadata: bool) -> ProcessingResponse {
        let conversion = self
            .trace
            .as_ref()
            .map(|t| RequestTrace::child(t.context(), "kernel.response_conversion", vec![]));
        let mut resp = match outcome {
            Outcome::Continue(m) if m.is_empty() => translate::respond(answer, None),
            Outcome::Continue(m) => translate::respond(answer, Some(translate::common(&m, answer))),
            Outcome::Immediate(imm) => {
                self.route.metrics.immediate(imm.status, &imm.reason);
                translate::immediate(&imm)
            }
        };
        if metadata {
            resp.dynamic_metadata = Some(translate::dynamic_metadata(&self.route.name, &self.meta));
        }
        if let Some(cx) = conversion {
            end(cx);
        }
        resp
    }
}

fn refuse(snap: &Snapshot, route: &Route, request_id: &str, e: &PlanError) -> ProcessingResponse {
    let available: Vec<&str> = snap
        .agents
        .iter()
        .filter(|a| a.is_healthy())
        .map(|a| a.name())
        .collect();
    match e {
        PlanError::NotSupported { phase, policies } => {
            tracing::error!(route = %route.name, request_id, phase = phase.as_str(), validation_phase = "upfront",
                unsupported_policies = ?policies, available_agents = ?available, error_type = "POLICY_NOT_SUPPORTED",
                response_status = snap.responses.not_supported.status, action = "IMMEDIATE_RESPONSE",
                "Policy not supported by any agent - returning 500 error");
            route.metrics.no_call[NoCall::NotSupported as usize].inc();
            route.metrics.immediate(
                snap.responses.not_supported.status,
                &snap.responses.not_supported.reason,
            );
            translate::immediate(&snap.responses.not_supported)
        }
        PlanError::Unavailable {
            phase,
            policies,
            agents,
        } => {
            tracing::warn!(route = %route.name, request_id, phase = phase.as_str(), validation_phase = "upfront",
                affected_policies = ?policies, unhealthy_agents = ?agents, error_type = "AGENT_UNAVAILABLE",
                response_status = snap.responses.unavailable.status, action = "IMMEDIATE_RESPONSE",
                "All supporting agents unhealthy - returning 503 error");
            route.metrics.no_call[NoCall::Unavailable as usize].inc();
            route
                .metrics
                .immediate(snap.responses.unavailable.status, &snap.responses.unavailable.reason);
            translate::immediate(&snap.responses.unavailable)
        }
    }
}

impl Drop for Active {
    /// The end of the request: metrics and the summary log of spec §10.2.
    fn drop(&mut self) {
        let calls = &self.report.calls;
        self.route.metrics.calls_per_request.observe(calls.len() as f64);
        if let Some(t) = &self.trace {
            let mut agents: Vec<usize> = calls.iter().map(|c| c.agent).collect();
            agents.sort_unstable();
            agents.dedup();
            let policies = self.route.request.policies.len() + self.route.response.policies.len();
            let mut attrs = vec![
                KeyValue::new(
                    "execution.mode",
                    if calls.len() > 1 { "multi-agent" } else { "single-agent" },
                ),
                KeyValue::new("agent.count", agents.len() as i64),
                KeyValue::new("policy.count", policies as i64),
                KeyValue::new("execution.groups", calls.len() as i64),
                KeyValue::new("partial.failure", !self.report.failures.is_empty()),
                KeyValue::new("aggregation.conflicts", i64::from(self.report.conflicts)),
            ];
            if let Some(f) = self.report.failures.first() {
                attrs.push(KeyValue::new("failed.agent", f.agent.clone()));
            }
            t.set(attrs);
        }
        if calls.is_empty() || !tracing::enabled!(tracing::Level::INFO) {
            return;
        }
        let name = |i: usize| self.snap.agents.get(i).map(|a| a.name()).unwrap_or("");
        let duration_ms = self.started.elapsed().as_millis() as u64;
        let policies = |c: &crate::chain::CallRecord| -> Vec<&str> {
            let chain = self.route.chain(c.phase);
            chain
                .policies
                .get(c.policies.clone())
                .unwrap_or_default()
                .iter()
                .map(|p| p.proto.name.as_str())
                .collect()
        };
        let total_policies: usize = calls.iter().map(|c| c.policies.len()).sum();
        let instructions: usize = calls.iter().map(|c| c.instructions).sum();
        let Some(first) = calls.first().map(|c| c.agent) else {
            return;
        };
        let mut line = RequestLine {
            message: "Request processed successfully",
            request_id: &self.request.request_id,
            route_name: &self.route.name,
            agent_name: None,
            duration_ms,
        };
        if calls.iter().all(|c| c.agent == first) {
            line.agent_name = Some(name(first));
            line.write(request_log::Metadata::Counts {
                policies_executed: total_policies,
                instructions_count: instructions,
            });
            return;
        }
        let mut per_agent = serde_json::Map::new();
        let mut durations = serde_json::Map::new();
        for c in calls {
            let entry = per_agent.entry(name(c.agent)).or_insert_with(|| serde_json::json!([]));
            if let Some(list) = entry.as_array_mut() {
                list.extend(policies(c).into_iter().map(serde_json::Value::from));
            }
            let d = durations.entry(name(c.agent)).or_insert_with(|| serde_json::json!([]));
            if let Some(list) = d.as_array_mut() {
                list.push((c.duration.as_millis() as u64).into());
            }
        }
        let metadata = serde_json::json!({
            "total_policies": total_policies,
            "agents_called": calls.len(),
            "agent_sequence": calls.iter().map(|c| name(c.agent)).collect::<Vec<_>>(),
            "phases": calls.iter().map(|c| c.phase.as_str()).collect::<Vec<_>>(),
            "policies_per_agent": per_agent,
            "total_instructions": instructions,
            "agent_durations_ms": durations,
        });
        line.message = "Policy chain executed across multiple agents";
        line.write(request_log::Metadata::Json(&metadata));
    }
}

#[cfg(test)]
mod tests;
