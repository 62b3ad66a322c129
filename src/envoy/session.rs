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
use envoy_types::pb::envoy::service::ext_proc::v3::{
    processing_request::Request, HttpHeaders, ProcessingRequest, ProcessingResponse,
};
use envoy_types::pb::google::protobuf::{value::Kind, Struct};

use super::translate::{self, Answer};
use crate::aggregate::{Metadata, RequestCtx, ResponseCtx};
use crate::chain::{Outcome, Run};
use crate::config::PhaseValidation;
use crate::kernel::Kernel;
use crate::plan::{plan_healthy, plan_route, Plan, PlanError};
use crate::snapshot::{Route, Snapshot};

/// Envoy's attribute namespace for ext_proc.
const ATTRIBUTES: &str = "envoy.filters.http.ext_proc";

/// State of one stream.
pub struct Session {
    kernel: Arc<Kernel>,
    /// Route name from the stream's gRPC metadata (`x-route-name`).
    route_hint: Option<String>,
    state: State,
}

enum State {
    /// Nothing received yet.
    Fresh,
    /// Unknown route, or answered already: every message gets CONTINUE.
    Passthrough,
    /// A route with policies.
    Active(Box<Active>),
}

struct Active {
    snap: Arc<Snapshot>,
    route: Arc<Route>,
    request: RequestCtx,
    meta: Metadata,
    /// The request plan, while waiting for the request body.
    request_plan: Option<Plan>,
    response_plan: Plan,
    response_body: bool,
    /// The response, while waiting for its body.
    response: Option<ResponseCtx>,
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

fn client_ip(addr: &str) -> String {
    addr.parse::<std::net::SocketAddr>()
        .map(|s| s.ip().to_string())
        .unwrap_or_else(|_| addr.to_string())
}

fn request_ctx(h: HttpHeaders, attrs: &HashMap<String, Struct>) -> RequestCtx {
    let mut ctx = RequestCtx {
        client_ip: string_attr(attrs, "source.address").map(client_ip).unwrap_or_default(),
        ..Default::default()
    };
    for v in h.headers.map(|m| m.headers).unwrap_or_default() {
        let value = if v.raw_value.is_empty() {
            Bytes::from(v.value)
        } else {
            Bytes::from(v.raw_value)
        };
        let text = || String::from_utf8_lossy(&value).into_owned();
        match v.key.as_str() {
            ":method" => ctx.method = text(),
            ":path" => ctx.path = text(),
            ":scheme" => ctx.scheme = text(),
            ":authority" => ctx.authority = text(),
            k if k.starts_with(':') => {}
            _ => {
                if v.key == "x-request-id" && ctx.request_id.is_empty() {
                    ctx.request_id = text();
                }
                ctx.headers.push((v.key, value));
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
    for v in h.headers.map(|m| m.headers).unwrap_or_default() {
        let value = if v.raw_value.is_empty() {
            Bytes::from(v.value)
        } else {
            Bytes::from(v.raw_value)
        };
        match v.key.as_str() {
            ":status" => {
                ctx.status = std::str::from_utf8(&value)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0)
            }
            k if k.starts_with(':') => {}
            _ => ctx.headers.push((v.key, value)),
        }
    }
    ctx
}

impl Session {
    /// A new stream; `route_hint` is the `x-route-name` gRPC metadata.
    pub fn new(kernel: Arc<Kernel>, route_hint: Option<String>) -> Self {
        Self {
            kernel,
            route_hint,
            state: State::Fresh,
        }
    }

    /// Answers one message from Envoy.
    pub async fn handle(&mut self, msg: ProcessingRequest) -> ProcessingResponse {
        let attrs = msg.attributes;
        match msg.request {
            Some(Request::RequestHeaders(h)) => self.request_headers(h, &attrs).await,
            Some(Request::RequestBody(b)) => self.request_body(b.body).await,
            Some(Request::ResponseHeaders(h)) => self.response_headers(h).await,
            Some(Request::ResponseBody(b)) => self.response_body(b.body).await,
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
        let snap = self.kernel.snapshot();
        let name = self.route_name(&snap, &h, attrs);
        let Some(route) = name.as_deref().and_then(|n| snap.routes.get(n)).cloned() else {
            tracing::info!(
                route = name.as_deref().unwrap_or(""),
                action = "CONTINUE",
                "Route not found - allowing request through"
            );
            return translate::respond(Answer::RequestHeaders, None);
        };
        let end_of_stream = h.end_of_stream;
        let request = request_ctx(h, attrs);
        let rr = route.rr.fetch_add(1, Ordering::Relaxed);
        let (request_plan, response_plan) = match plan_route(&route, &snap.agents, rr) {
            Ok(plans) => plans,
            Err(e) => return refuse(&snap, &route, &request.request_id, &e),
        };
        let want_request_body = route.request.needs_body && !request_plan.is_empty();
        let response_body = route.response.needs_body && !response_plan.is_empty();
        let buffer_request = want_request_body && !end_of_stream;
        let mode = (buffer_request || response_body).then(|| translate::mode_override(buffer_request, response_body));
        let mut active = Box::new(Active {
            snap,
            route,
            request,
            meta: Metadata::new(),
            request_plan: None,
            response_plan,
            response_body,
            response: None,
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
        resp.mode_override = mode;
        if !translate::is_immediate(&resp) {
            self.state = State::Active(active);
        }
        resp
    }

    async fn request_body(&mut self, body: Vec<u8>) -> ProcessingResponse {
        let State::Active(active) = &mut self.state else {
            return translate::respond(Answer::RequestBody, None);
        };
        let Some(plan) = active.request_plan.take() else {
            return translate::respond(Answer::RequestBody, None);
        };
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
        if active.response_plan.is_empty() {
            return translate::respond(Answer::ResponseHeaders, None);
        }
        if active.snap.phase_validation == PhaseValidation::Strict
            && !plan_healthy(&active.response_plan, &active.snap.agents)
        {
            tracing::warn!(route = %active.route.name, request_id = %active.request.request_id, phase = "response",
                validation_phase = "strict", error_type = "AGENT_UNAVAILABLE", "Planned response agent unhealthy - returning 503 error");
            return translate::immediate(&active.snap.responses.unavailable);
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

    async fn response_body(&mut self, body: Vec<u8>) -> ProcessingResponse {
        let State::Active(active) = &mut self.state else {
            return translate::respond(Answer::ResponseBody, None);
        };
        let Some(mut response) = active.response.take() else {
            return translate::respond(Answer::ResponseBody, None);
        };
        response.body = Some(Bytes::from(body));
        active.run_response(response, Answer::ResponseBody).await
    }
}

impl Active {
    /// A chain run over this stream's snapshot, route and metadata, with the
    /// request id of `request` (held outside `self` while the chain runs).
    fn run_with<'a>(&'a mut self, request: &'a RequestCtx) -> Run<'a> {
        Run {
            snap: &self.snap,
            route: &self.route,
            request_id: &request.request_id,
            meta: &mut self.meta,
            report: Default::default(),
        }
    }

    async fn run_request(&mut self, plan: &Plan, answer: Answer) -> ProcessingResponse {
        let mut request = std::mem::take(&mut self.request);
        let id = request.request_id.clone();
        let outcome = {
            let mut run = Run {
                snap: &self.snap,
                route: &self.route,
                request_id: &id,
                meta: &mut self.meta,
                report: Default::default(),
            };
            run.request(plan, &mut request).await
        };
        self.request = request;
        self.finish(outcome, answer)
    }

    async fn run_response(&mut self, mut response: ResponseCtx, answer: Answer) -> ProcessingResponse {
        let request = std::mem::take(&mut self.request);
        let plan = std::mem::take(&mut self.response_plan);
        let outcome = self.run_with(&request).response(&plan, &request, &mut response).await;
        self.request = request;
        self.response_plan = plan;
        self.finish(outcome, answer)
    }

    fn finish(&self, outcome: Outcome, answer: Answer) -> ProcessingResponse {
        let mut resp = match outcome {
            Outcome::Continue(m) if m.is_empty() => translate::respond(answer, None),
            Outcome::Continue(m) => translate::respond(answer, Some(translate::common(&m, answer))),
            Outcome::Immediate(imm) => translate::immediate(&imm),
        };
        resp.dynamic_metadata = Some(translate::dynamic_metadata(&self.route.name, &self.meta));
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
            translate::immediate(&snap.responses.unavailable)
        }
    }
}
