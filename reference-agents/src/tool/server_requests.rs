//! `mcpServerRequestGuard`: the requests an MCP server sends the client
//! (`sampling/createMessage`, `elicitation/create`, `roots/list`), and the
//! client's answers to them.
//!
//! **Response phase, streamed** (event streams only): each event of a POST's
//! SSE reply, or of a session's GET stream, is read as it passes. A server
//! request is decided by [`server_checks`](super::server_checks) (the
//! route's `rules` per caller, then secret fields of forms and the URL of
//! URL elicitations); notifications and results pass at once, unchanged.
//!
//! A **refused** server request cannot be answered on the client's behalf:
//! ext_proc cannot make a new request to the server. So the policy keeps
//! the client from waiting for nothing. The request's event is dropped;
//! then:
//! * on a POST's stream (the request belongs to a call), the client's own
//!   pending request (its id recorded by the request phase in
//!   `mcp.request_id`) is answered with a JSON-RPC error
//!   (`jsonrpc_error_code`, default -32001, `data`: `method`, `rule`,
//!   `field`), and the stream ends (the kernel's SSE `error` event, reason
//!   `mcp_server_request_refused`, counted in
//!   `policy_kernel_stream_terminations_total` and logged). Nothing after it
//!   reaches the client; the server's request is left unanswered and times
//!   out on the server, whose reply to the call no one reads any more;
//! * on a session's GET stream (no call to answer), only the event is
//!   dropped and the stream goes on, so that the session's later
//!   notifications (`tools/list_changed`) still arrive; the refusal is in
//!   the metadata, the journal and the agent's log (a warning per refusal).
//!   Ending that stream would leave the client with a silent, open stream.
//!
//! **MCP 2026-07-28**: the questions inside results (`inputRequests`), in
//! JSON replies ([`Policy::on_response`]) and SSE replies alike, and the
//! retry's `inputResponses` (param `check_input_responses`, default on):
//! see [`input_requests`](super::input_requests).
//!
//! **Request phase**: records `mcp.request_id` for a single request, and,
//! with `check_client_responses: true`, refuses (403, reason
//! `unsolicited_response`) a POSTed JSON-RPC response whose id the server
//! never asked in that session (`Mcp-Session-Id`; the ids asked are kept in
//! the agent's session store, in memory or in Redis with `tool-agent
//! --redis-url`, for `pending_ttl_s`). Without a session id (protocol
//! 2026-07-28) responses pass.
//!
//! Metadata: `mcp.server_method`, `mcp.server_decision` (`allow`/`deny`),
//! `mcp.server_rule` (the last request), `mcp.server_requests`
//! (`method:decision:rule,...` over the stream, at most 512 bytes),
//! `mcp.server_requests_allowed` / `mcp.server_requests_refused` (counts);
//! on a POSTed response `mcp.method` = `response`, `mcp.decision`,
//! `mcp.rule` (`answers_server_request`, `unsolicited_response`,
//! `no_session`). `auditLog` after it in the chain writes them in the
//! journal line of the stream.

use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::deny::{self, config_error, Incoming};
use super::events::{self, EventMessage, PENDING_ID};
use super::input_requests;
use super::reply::{self, Format};
use super::server_checks::{normalise, Checks, Verdict};
use super::urls::HostPattern;
use crate::jsonrpc::{Kind, DENIED};
use crate::mcp::shapes::Capabilities;
use crate::param_cache::ParamCache;
use crate::planner::SessionStore;
use crate::rules::{Caller, Rules};
use policy_agents::stream::sse;
use policy_agents::{
    describe, ChunkContext, ChunkOutcome, Deny, Framing, ParamError, Params, Policy, PolicyError, RequestContext,
    RequestOutcome, ResponseContext, ResponseOutcome,
};

pub(super) const NAME: &str = "mcpServerRequestGuard";
const KEYS: &[&str] = &[
    "rules",
    "allowed_hosts",
    "allowed_ports",
    "secret_fields_allowed",
    "check_client_responses",
    "check_input_responses",
    "pending_ttl_s",
    "jsonrpc_error_code",
];

/// The stream-end reason of a refused server request.
pub const REFUSED: &str = "mcp_server_request_refused";

/// Parsed params.
#[derive(Debug)]
pub struct GuardParams {
    checks: Checks,
    check_responses: bool,
    check_inputs: bool,
    ttl: Duration,
    code: i64,
}

impl GuardParams {
    fn parse(p: &Params) -> Result<Self, ParamError> {
        let mut allowed_hosts = Vec::new();
        for h in p.list("allowed_hosts")? {
            allowed_hosts.push(
                HostPattern::parse(&h).ok_or_else(|| ParamError::invalid("allowed_hosts", &h, "bad host pattern"))?,
            );
        }
        let mut allowed_ports = Vec::new();
        for port in p.list("allowed_ports")? {
            allowed_ports.push(
                port.parse()
                    .map_err(|_| ParamError::invalid("allowed_ports", &port, "expected a port number"))?,
            );
        }
        let ttl_s: u64 = p.parse_or("pending_ttl_s", 600)?;
        if ttl_s == 0 {
            return Err(ParamError::invalid("pending_ttl_s", "0", "must be at least 1"));
        }
        Ok(GuardParams {
            checks: Checks {
                rules: Rules::parse("rules", p.required("rules")?)?,
                allowed_hosts,
                allowed_ports,
                secret_fields_allowed: p.list("secret_fields_allowed")?.iter().map(|s| normalise(s)).collect(),
            },
            check_responses: p.bool_or("check_client_responses", false)?,
            check_inputs: p.bool_or("check_input_responses", true)?,
            ttl: Duration::from_secs(ttl_s),
            code: p.parse_or("jsonrpc_error_code", DENIED)?,
        })
    }
}

/// What travels between the calls of one stream.
#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    allowed: u64,
    refused: u64,
    log: String,
}

impl State {
    fn record_all(&mut self, decided: &[(String, Verdict)]) {
        for (m, v) in decided {
            self.record(m, v);
        }
    }

    fn record(&mut self, method: &str, v: &Verdict) {
        if v.allowed {
            self.allowed += 1;
        } else {
            self.refused += 1;
        }
        let entry = format!(
            "{}:{}:{}",
            super::metadata_text(method),
            if v.allowed { "allow" } else { "deny" },
            v.rule
        );
        if self.log.len() + entry.len() < 512 {
            if !self.log.is_empty() {
                self.log.push(',');
            }
            self.log.push_str(&entry);
        }
    }

    /// The metadata of the decisions so far, `last` the newest.
    fn metadata(&self, last: Option<(&str, &Verdict)>) -> Vec<(&'static str, String)> {
        let Some((method, v)) = last else { return Vec::new() };
        vec![
            ("mcp.server_method", super::metadata_text(method)),
            (
                "mcp.server_decision",
                if v.allowed { "allow" } else { "deny" }.to_string(),
            ),
            ("mcp.server_rule", v.rule.clone()),
            ("mcp.server_requests", self.log.clone()),
            ("mcp.server_requests_allowed", self.allowed.to_string()),
            ("mcp.server_requests_refused", self.refused.to_string()),
        ]
    }

    fn outcome(&self, out: ChunkOutcome, last: Option<(&str, &Verdict)>) -> ChunkOutcome {
        self.metadata(last)
            .into_iter()
            .fold(out, |o, (k, v)| o.set_metadata(k, v))
    }

    fn response_outcome(&self, out: ResponseOutcome, last: Option<(&str, &Verdict)>) -> ResponseOutcome {
        self.metadata(last)
            .into_iter()
            .fold(out, |o, (k, v)| o.set_metadata(k, v))
    }
}

/// The `mcpServerRequestGuard` policy.
#[derive(Debug)]
pub struct McpServerRequestGuard {
    cache: ParamCache<GuardParams>,
    store: SessionStore,
}

impl Default for McpServerRequestGuard {
    fn default() -> Self {
        McpServerRequestGuard::new(SessionStore::memory())
    }
}

/// The store key of an MCP session: its endpoint and its id.
fn session_key(path: &str, session: &str) -> String {
    let path = path.split(['?', '#']).next().unwrap_or(path);
    format!("mcp-asked {path} {session}")
}

impl McpServerRequestGuard {
    /// A policy keeping the ids the servers asked in `store`.
    pub fn new(store: SessionStore) -> Self {
        McpServerRequestGuard {
            cache: ParamCache::new(KEYS),
            store,
        }
    }

    /// Checks the responses of a POSTed body against what the server asked.
    async fn check_responses(
        &self,
        cfg: &GuardParams,
        ctx: &RequestContext<'_>,
        env: &crate::jsonrpc::Envelope,
    ) -> Result<Option<RequestOutcome>, PolicyError> {
        let responses: Vec<&Value> = env
            .messages
            .iter()
            .filter(|m| m.kind == Kind::Response)
            .filter_map(|m| m.id.as_ref())
            .collect();
        if responses.is_empty() {
            return Ok(None);
        }
        let meta = |o: RequestOutcome, decision: &str, rule: &str| {
            o.set_metadata("mcp.method", "response")
                .set_metadata("mcp.decision", decision.to_string())
                .set_metadata("mcp.rule", rule.to_string())
        };
        let session = ctx.request.header("mcp-session-id").filter(|s| !s.is_empty());
        let (true, Some(session)) = (cfg.check_responses, session) else {
            let rule = if cfg.check_responses {
                "no_session"
            } else {
                "not_checked"
            };
            return Ok(Some(meta(RequestOutcome::proceed(), "allow", rule)));
        };
        let key = session_key(ctx.request.path(), session);
        for id in responses {
            let asked = match events::id_text(id) {
                Some(text) => self
                    .store
                    .take_request(&key, &text, cfg.ttl)
                    .await
                    .map_err(|e| e.policy_error(NAME))?,
                None => false,
            };
            if !asked {
                tracing::warn!(policy = NAME, request_id = %ctx.call.request_id, "client response to a request the server did not send: refused");
                let body = deny::error_object(
                    id.clone(),
                    crate::jsonrpc::INVALID_REQUEST,
                    "response to a request the server did not send in this session",
                    None,
                );
                let out = RequestOutcome::denied_with(Deny::json(403, &body).reason("unsolicited_response"));
                return Ok(Some(meta(out, "deny", "unsolicited_response")));
            }
        }
        Ok(Some(meta(RequestOutcome::proceed(), "allow", "answers_server_request")))
    }
}

impl Policy for McpServerRequestGuard {
    type Params = Params;
    describe! { name: NAME, params: KEYS, required: &["rules"], phases: Both, body: true, streams: true, events_only: true }

    async fn on_request(&self, params: &Params, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let cfg = self
            .cache
            .get(params, GuardParams::parse)
            .map_err(|e| config_error(NAME, &e))?;
        let env = match deny::incoming(NAME, ctx)? {
            Incoming::NotPost => return Ok(RequestOutcome::proceed()),
            Incoming::Bad(d) => {
                let rule = d.reason.clone();
                return Ok(RequestOutcome::denied_with(d)
                    .set_metadata("mcp.decision", "deny")
                    .set_metadata("mcp.rule", rule));
            }
            Incoming::Messages(env) => env,
        };
        if let Some(out) = self.check_responses(&cfg, ctx, &env).await? {
            return Ok(out);
        }
        let [m] = env.messages.as_slice() else {
            return Ok(RequestOutcome::proceed());
        };
        let (false, Kind::Request, Some(id)) = (env.batch, m.kind, m.id.as_ref()) else {
            return Ok(RequestOutcome::proceed());
        };
        let mut out = RequestOutcome::proceed();
        if let Some(text) = events::id_text(id) {
            out = out.set_metadata(PENDING_ID, text);
        }
        // `incoming` read every message through the reader already.
        if let Ok(Some(call)) = crate::mcp::shapes::read_call(m) {
            match input_requests::check_retry(&self.store, cfg.ttl, ctx, &call, id, cfg.check_inputs).await? {
                Ok(metadata) => {
                    for (k, v) in metadata {
                        out = out.set_metadata(k, v);
                    }
                }
                Err(refused) => return Ok(refused),
            }
        }
        Ok(out)
    }

    async fn on_response(&self, params: &Params, ctx: &ResponseContext<'_>) -> Result<ResponseOutcome, PolicyError> {
        let cfg = self
            .cache
            .get(params, GuardParams::parse)
            .map_err(|e| config_error(NAME, &e))?;
        let Some(format) = Format::of(ctx.response.header("content-type")) else {
            return Ok(ResponseOutcome::proceed());
        };
        let body = match ctx.response.body() {
            Some(b) if !b.is_empty() => b,
            _ => return Ok(ResponseOutcome::proceed()),
        };
        reply::refuse_encoded(NAME, &ctx.response)?;
        // A tool's answer, which asks nothing: no parse.
        if format == Format::Json && crate::mcp::shapes::surely_plain(body) {
            return Ok(ResponseOutcome::proceed());
        }
        let caller = Caller::from_metadata(ctx.metadata);
        let caps = ctx
            .metadata
            .get(input_requests::CAPABILITIES)
            .map(Capabilities::from_metadata);
        let mut st = State::default();
        let mut keys = Vec::new();
        let mut refused = None;
        let mut unreadable = None;
        let mut last: Option<(String, Verdict)> = None;
        let read = reply::each(body, format, &mut |doc| {
            if refused.is_some() {
                return;
            }
            let j = input_requests::judge(&cfg.checks, &caller, caps, doc);
            st.record_all(&j.decided);
            if let Some(d) = j.decided.iter().rev().find(|(_, v)| v.allowed) {
                last = Some(d.clone());
            }
            keys.extend(j.keys);
            if let Some(r) = j.refused {
                let id = doc.get("id").cloned().or_else(|| events::pending_id(ctx.metadata));
                refused = Some((r, id));
            }
        });
        if let Err(e) = read {
            unreadable = Some(e);
        }
        if let Some(e) = unreadable.filter(|_| format == Format::Json) {
            let v = Verdict {
                allowed: false,
                rule: input_requests::UNREADABLE.into(),
                detail: Some(e),
            };
            refused = Some((("reply".to_string(), v, None), events::pending_id(ctx.metadata)));
        }
        let Some(((method, verdict, key), id)) = refused else {
            input_requests::remember(&self.store, ctx.metadata, &keys, cfg.ttl).await?;
            let last = last.as_ref().map(|(m, v)| (m.as_str(), v));
            return Ok(st.response_outcome(ResponseOutcome::proceed(), last));
        };
        tracing::warn!(policy = NAME, request_id = %ctx.call.request_id, method = %method, rule = %verdict.rule,
            "server request refused");
        let doc = input_requests::refusal(id.unwrap_or(Value::Null), cfg.code, &method, &verdict, key.as_deref());
        let body = match format {
            Format::Json => doc.to_string().into_bytes(),
            Format::Sse => sse::event("message", &doc.to_string()).to_vec(),
        };
        Ok(st.response_outcome(ResponseOutcome::proceed().set_body(body), Some((&method, &verdict))))
    }

    async fn on_response_chunk(&self, params: &Params, ctx: &ChunkContext<'_>) -> Result<ChunkOutcome, PolicyError> {
        let cfg = self
            .cache
            .get(params, GuardParams::parse)
            .map_err(|e| config_error(NAME, &e))?;
        if ctx.framing == Framing::Raw {
            return Err(PolicyError::new(format!(
                "{NAME}: a streamed reply that is not an event stream cannot be read event by event"
            )));
        }
        let mut st: State = if ctx.state.is_empty() {
            State::default()
        } else {
            serde_json::from_slice(ctx.state)
                .map_err(|e| PolicyError::new(format!("{NAME}: unreadable stream state: {e}")))?
        };
        let caller = Caller::from_metadata(ctx.metadata);
        let session = ctx
            .request
            .header("mcp-session-id")
            .filter(|s| cfg.check_responses && !s.is_empty())
            .map(|s| session_key(ctx.request.path(), s));
        let caps = ctx
            .metadata
            .get(input_requests::CAPABILITIES)
            .map(Capabilities::from_metadata);
        let mut last: Option<(String, Verdict)> = None;
        let mut out: Vec<Bytes> = Vec::with_capacity(ctx.events.len());
        let mut dropped = false;
        for ev in ctx.events {
            let EventMessage::Message(v) = events::read(ev) else {
                out.push(ev.clone());
                continue;
            };
            let j = input_requests::judge(&cfg.checks, &caller, caps, &v);
            st.record_all(&j.decided);
            if let Some(d) = j.decided.iter().rev().find(|(_, v)| v.allowed) {
                last = Some(d.clone());
            }
            if let Some(key) = &session {
                for id in &j.ids {
                    self.store
                        .remember_request(key, id, cfg.ttl)
                        .await
                        .map_err(|e| e.policy_error(NAME))?;
                }
            }
            input_requests::remember(&self.store, ctx.metadata, &j.keys, cfg.ttl).await?;
            if let Some((method, verdict, key)) = j.refused {
                tracing::warn!(policy = NAME, request_id = %ctx.call.request_id, method = %method, rule = %verdict.rule,
                    "server request refused");
                let Some(id) = events::pending_id(ctx.metadata) else {
                    // A GET stream: drop the event, keep the stream.
                    dropped = true;
                    last = Some((method, verdict));
                    continue;
                };
                let doc = input_requests::refusal(id, cfg.code, &method, &verdict, key.as_deref());
                out.push(sse::event("message", &doc.to_string()));
                let message = format!("the server's {method} request was refused by policy");
                let end = ChunkOutcome::end_stream(REFUSED, message).replace(out);
                let state = serde_json::to_vec(&st).map_err(|e| PolicyError::new(format!("{NAME}: {e}")))?;
                return Ok(st.outcome(end, Some((&method, &verdict))).state(state));
            }
            out.push(ev.clone());
        }
        let state = serde_json::to_vec(&st).map_err(|e| PolicyError::new(format!("{NAME}: {e}")))?;
        let pass = if dropped {
            ChunkOutcome::pass().replace(out)
        } else {
            ChunkOutcome::pass()
        };
        Ok(st
            .outcome(pass, last.as_ref().map(|(m, v)| (m.as_str(), v)))
            .state(state))
    }
}

#[cfg(test)]
#[path = "server_requests_tests.rs"]
mod tests;
