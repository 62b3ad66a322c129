//! `policy-test-agent`: a programmable policy agent for testing kernels and
//! Envoy set-ups. It declares the policies of a YAML script and answers each
//! call with the script's instructions, after an optional delay.
//!
//! ```yaml
//! name: agent1
//! events_file: /tmp/agent1.events   # optional: "start|end|cancel <policies> <request_id>" lines
//! not_serving: false                 # health checks answer NOT_SERVING
//! not_serving_file: /tmp/agent1.down # ... while this file exists (optional)
//! policies:
//!   - name: tag
//!     phases: request_response        # request | response | request_response
//!     params: [k]                     # param_schema
//!     required: [k]                   # required_params (subset of params)
//!     requires_body: false
//!     delay_ms: 0
//!     request_id: echo                # or "wrong": reply with another id
//!     rules:                          # first matching rule replaces `request`
//!       - when: {header_absent: x-token}
//!         request: [{immediate: {status: 401, body: "no token", reason: auth}}]
//!     request:
//!       - set_header: {name: x-seen, value: "${header:x-a1}|${meta:user}|${param:k}"}
//!     response:
//!       - set_status: 418
//!     streams: false                  # streams_response_body (with requires_body)
//!     events_only: false              # streams_event_streams_only (with streams)
//!     chunk:                          # streamed pieces (ExecutePolicyResponseChunk)
//!       delay_ms: 0
//!       upper: false                  # SSE: upper-case each event's data
//!       end_at: 3                     # end the stream at this sequence
//!       count: true                   # metadata chunks_seen = sequence + 1
//!     cache:                          # PolicyInfo.cache (request phase)
//!       max_age_ms: 60000
//!       headers: [x-user]
//!       metadata: [user]
//!       body: false
//!       reply_max_age_ms: 1000        # cache_max_age_ms of each reply
//! ```
//!
//! Templates: `${header:NAME}`, `${meta:KEY}`, `${param:NAME}`, `${path}`,
//! `${method}`, `${body}`, `${body_len}`, `${agent}`, `${status}` (response phase),
//! `${traceparent}` (the call's gRPC metadata).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use clap::Parser;
use policy_kernel::proto::{
    self,
    policy_agent_server::{PolicyAgent, PolicyAgentServer},
    request_instruction::Instruction as Rq,
    response_instruction::Instruction as Rs,
};
use serde::Deserialize;
use tonic::{Request, Response, Status};

// mimalloc: cheaper than glibc malloc for many small, short-lived gRPC buffers.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(about = "Programmable policy agent for tests")]
struct Cli {
    /// Unix socket to serve on.
    #[arg(long)]
    socket: PathBuf,
    /// YAML script.
    #[arg(long)]
    script: PathBuf,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct Script {
    name: String,
    #[serde(default)]
    events_file: Option<PathBuf>,
    #[serde(default)]
    not_serving: bool,
    /// Health checks answer NOT_SERVING while this file exists.
    #[serde(default)]
    not_serving_file: Option<PathBuf>,
    policies: Vec<ScriptPolicy>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct ScriptPolicy {
    name: String,
    #[serde(default = "both")]
    phases: String,
    #[serde(default)]
    params: Vec<String>,
    #[serde(default)]
    required: Vec<String>,
    #[serde(default)]
    requires_body: bool,
    #[serde(default)]
    delay_ms: u64,
    #[serde(default)]
    request_id: Option<String>,
    #[serde(default)]
    rules: Vec<Rule>,
    #[serde(default)]
    request: Vec<Step>,
    #[serde(default)]
    response: Vec<Step>,
    #[serde(default)]
    streams: bool,
    #[serde(default)]
    events_only: bool,
    #[serde(default)]
    chunk: ChunkScript,
    /// Declares the request-phase outcome cacheable (`PolicyInfo.cache`).
    #[serde(default)]
    cache: Option<CacheScript>,
}

/// `cache:` of a policy: `PolicyInfo.cache`, and the lifetime each reply
/// asks for.
#[derive(Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
struct CacheScript {
    max_age_ms: u32,
    #[serde(default)]
    headers: Vec<String>,
    #[serde(default)]
    metadata: Vec<String>,
    #[serde(default)]
    body: bool,
    /// `cache_max_age_ms` of every request-phase reply.
    #[serde(default)]
    reply_max_age_ms: Option<u32>,
}

/// What a streaming policy does with each piece.
#[derive(Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
struct ChunkScript {
    #[serde(default)]
    delay_ms: u64,
    #[serde(default)]
    upper: bool,
    #[serde(default)]
    end_at: Option<u64>,
    #[serde(default)]
    count: bool,
}

fn both() -> String {
    "request_response".into()
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct Rule {
    when: When,
    #[serde(default)]
    request: Vec<Step>,
    #[serde(default)]
    response: Vec<Step>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct When {
    #[serde(default)]
    header_absent: Option<String>,
    #[serde(default)]
    header_present: Option<String>,
}

#[derive(Deserialize, Clone)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum Step {
    SetHeader {
        name: String,
        value: String,
    },
    AppendHeader {
        name: String,
        value: String,
    },
    RemoveHeader(String),
    SetBody {
        body: String,
        #[serde(default)]
        content_type: String,
    },
    SetPath(String),
    SetQueryParam {
        name: String,
        value: String,
    },
    RemoveQueryParam(String),
    SetMethod(String),
    Immediate {
        status: i32,
        #[serde(default)]
        body: String,
        #[serde(default)]
        headers: BTreeMap<String, String>,
        #[serde(default)]
        reason: String,
    },
    SetMetadata {
        key: String,
        value: String,
    },
    SetStatus(i32),
    Continue,
    Skip,
}

struct Agent {
    script: Script,
}

/// One call's inputs.
struct Call<'a> {
    id: &'a str,
    policies: &'a [proto::Policy],
    req: &'a proto::RequestData,
    resp: Option<&'a proto::ResponseData>,
    meta: &'a std::collections::HashMap<String, String>,
    traceparent: &'a str,
}

fn traceparent<T>(r: &Request<T>) -> String {
    r.metadata()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

/// Values templates read.
struct View<'a> {
    agent: &'a str,
    req: &'a proto::RequestData,
    resp: Option<&'a proto::ResponseData>,
    meta: &'a BTreeMap<String, String>,
    params: &'a std::collections::HashMap<String, String>,
    traceparent: &'a str,
}

impl View<'_> {
    fn render(&self, s: &str) -> String {
        let mut out = String::new();
        let mut rest = s;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let Some(end) = rest[start..].find('}') else { break };
            let key = &rest[start + 2..start + end];
            out.push_str(&self.lookup(key));
            rest = &rest[start + end + 1..];
        }
        out.push_str(rest);
        out
    }

    fn lookup(&self, key: &str) -> String {
        let headers = |h: Option<&proto::HttpHeaders>, n: &str| {
            h.and_then(|h| h.headers.iter().find(|v| v.key == n))
                .map(|v| v.value.clone())
                .unwrap_or_default()
        };
        match key.split_once(':') {
            Some(("header", n)) => headers(self.req.headers.as_ref(), n),
            Some(("resp_header", n)) => headers(self.resp.and_then(|r| r.headers.as_ref()), n),
            Some(("meta", k)) => self.meta.get(k).cloned().unwrap_or_default(),
            Some(("param", k)) => self.params.get(k).cloned().unwrap_or_default(),
            _ => match key {
                "path" => self.req.path.clone(),
                "method" => self.req.method.clone(),
                "agent" => self.agent.to_string(),
                "traceparent" => self.traceparent.to_string(),
                "status" => self.resp.map(|r| r.status_code.to_string()).unwrap_or_default(),
                "body" => String::from_utf8_lossy(match self.resp {
                    Some(r) => &r.body,
                    None => &self.req.body,
                })
                .into_owned(),
                "body_len" => match self.resp {
                    Some(r) => r.body.len(),
                    None => self.req.body.len(),
                }
                .to_string(),
                "body_included" => match self.resp {
                    Some(r) => r.body_included,
                    None => self.req.body_included,
                }
                .to_string(),
                _ => String::new(),
            },
        }
    }
}

fn matches(when: &When, req: &proto::RequestData) -> bool {
    let has = |n: &str| {
        req.headers
            .as_ref()
            .is_some_and(|h| h.headers.iter().any(|v| v.key == n))
    };
    when.header_absent.as_deref().is_none_or(|n| !has(n)) && when.header_present.as_deref().is_none_or(has)
}

/// Logs call start; logs cancel if dropped before `done`.
struct CallLog {
    file: Option<PathBuf>,
    what: String,
    done: bool,
}

impl CallLog {
    fn new(file: &Option<PathBuf>, what: String) -> Self {
        let log = Self {
            file: file.clone(),
            what,
            done: false,
        };
        log.write("start");
        log
    }
    fn write(&self, event: &str) {
        if let Some(path) = &self.file {
            if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
                // One write per line: O_APPEND keeps concurrent lines whole.
                let _ = f.write_all(format!("{event} {}\n", self.what).as_bytes());
            }
        }
    }

    fn finish(mut self) {
        self.done = true;
        self.write("end");
    }
}

impl Drop for CallLog {
    fn drop(&mut self) {
        if !self.done {
            self.write("cancel");
        }
    }
}

impl Agent {
    /// Runs the call's policies; returns (steps per policy, reply id, metadata).
    async fn run(&self, call: Call<'_>) -> (Vec<(Step, String)>, String, BTreeMap<String, String>) {
        let Call {
            id,
            policies,
            req,
            resp,
            meta: meta_in,
            traceparent,
        } = call;
        let names: Vec<&str> = policies.iter().map(|p| p.name.as_str()).collect();
        let log = CallLog::new(&self.script.events_file, format!("{} {id}", names.join(",")));
        let mut meta: BTreeMap<String, String> = meta_in.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let mut out = Vec::new();
        let mut reply_id = id.to_string();
        'policies: for p in policies {
            let Some(sp) = self.script.policies.iter().find(|s| s.name == p.name) else {
                continue;
            };
            if sp.delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(sp.delay_ms)).await;
            }
            if sp.request_id.as_deref() == Some("wrong") {
                reply_id = format!("not-{id}");
            }
            let rule = sp.rules.iter().find(|r| matches(&r.when, req));
            let steps = match (rule, resp.is_some()) {
                (Some(r), false) => &r.request,
                (Some(r), true) => &r.response,
                (None, false) => &sp.request,
                (None, true) => &sp.response,
            };
            for step in steps {
                let view = View {
                    agent: &self.script.name,
                    req,
                    resp,
                    meta: &meta,
                    params: &p.params,
                    traceparent,
                };
                let rendered = match step {
                    Step::SetMetadata { value, .. } => view.render(value),
                    _ => String::new(),
                };
                let step_out = render_step(step, &view);
                if let Step::SetMetadata { key, .. } = step {
                    meta.insert(key.clone(), rendered.clone());
                }
                out.push((step_out, rendered));
                if matches!(step, Step::Immediate { .. } | Step::Skip) {
                    break 'policies;
                }
            }
        }
        log.finish();
        (out, reply_id, meta)
    }
}

fn render_step(step: &Step, v: &View) -> Step {
    let r = |s: &String| v.render(s);
    match step {
        Step::SetHeader { name, value } => Step::SetHeader {
            name: r(name),
            value: r(value),
        },
        Step::AppendHeader { name, value } => Step::AppendHeader {
            name: r(name),
            value: r(value),
        },
        Step::SetBody { body, content_type } => Step::SetBody {
            body: r(body),
            content_type: content_type.clone(),
        },
        Step::SetPath(p) => Step::SetPath(r(p)),
        Step::SetQueryParam { name, value } => Step::SetQueryParam {
            name: r(name),
            value: r(value),
        },
        Step::Immediate {
            status,
            body,
            headers,
            reason,
        } => Step::Immediate {
            status: *status,
            body: r(body),
            headers: headers.clone(),
            reason: reason.clone(),
        },
        other => other.clone(),
    }
}

fn request_instr(step: Step, meta_value: String) -> Option<Rq> {
    Some(match step {
        Step::SetHeader { name, value } => Rq::SetHeader(proto::SetHeader { name, value }),
        Step::AppendHeader { name, value } => Rq::AppendHeader(proto::AppendHeader { name, value }),
        Step::RemoveHeader(name) => Rq::RemoveHeader(proto::RemoveHeader { name }),
        Step::SetBody { body, content_type } => Rq::SetBody(proto::SetBody {
            body: Bytes::from(body),
            content_type,
        }),
        Step::SetPath(path) => Rq::SetPath(proto::SetPath { path }),
        Step::SetQueryParam { name, value } => Rq::SetQueryParam(proto::SetQueryParam { name, value }),
        Step::RemoveQueryParam(name) => Rq::RemoveQueryParam(proto::RemoveQueryParam { name }),
        Step::SetMethod(method) => Rq::SetMethod(proto::SetMethod { method }),
        Step::Immediate {
            status,
            body,
            headers,
            reason,
        } => Rq::ImmediateResponse(proto::ImmediateResponse {
            status_code: status,
            body: Bytes::from(body),
            headers: headers
                .into_iter()
                .map(|(key, value)| proto::HeaderValue {
                    key,
                    value,
                    raw_value: Bytes::new(),
                })
                .collect(),
            reason,
        }),
        Step::SetMetadata { key, .. } => Rq::SetMetadata(proto::SetMetadata { key, value: meta_value }),
        Step::Continue => Rq::Continue(proto::Continue::default()),
        Step::Skip => Rq::SkipRemainingPolicies(proto::SkipRemainingPolicies::default()),
        Step::SetStatus(_) => return None,
    })
}

fn response_instr(step: Step, meta_value: String) -> Option<Rs> {
    Some(match step {
        Step::SetHeader { name, value } => Rs::SetHeader(proto::SetHeader { name, value }),
        Step::AppendHeader { name, value } => Rs::AppendHeader(proto::AppendHeader { name, value }),
        Step::RemoveHeader(name) => Rs::RemoveHeader(proto::RemoveHeader { name }),
        Step::SetBody { body, content_type } => Rs::SetBody(proto::SetBody {
            body: Bytes::from(body),
            content_type,
        }),
        Step::SetStatus(status_code) => Rs::SetStatusCode(proto::SetStatusCode { status_code }),
        Step::SetMetadata { key, .. } => Rs::SetMetadata(proto::SetMetadata { key, value: meta_value }),
        Step::Continue => Rs::Continue(proto::Continue::default()),
        Step::Skip => Rs::SkipRemainingPolicies(proto::SkipRemainingPolicies::default()),
        _ => return None,
    })
}

#[tonic::async_trait]
impl PolicyAgent for Agent {
    // A spec-only agent: unary calls only (serves_call_stream is false).
    type CallsStream = futures::stream::Empty<Result<proto::ReplyFrame, Status>>;

    async fn calls(
        &self,
        _request: Request<tonic::Streaming<proto::CallFrame>>,
    ) -> Result<Response<Self::CallsStream>, Status> {
        Err(Status::unimplemented("this agent serves unary calls only"))
    }

    async fn execute_policy_request(
        &self,
        request: Request<proto::PolicyRequestPhase>,
    ) -> Result<Response<proto::PolicyRequestResponse>, Status> {
        let tp = traceparent(&request);
        let r = request.into_inner();
        let data = r.request_data.unwrap_or_default();
        let (steps, request_id, _) = self
            .run(Call {
                id: &r.request_id,
                policies: &r.policies,
                req: &data,
                resp: None,
                meta: &r.policy_metadata,
                traceparent: &tp,
            })
            .await;
        Ok(Response::new(proto::PolicyRequestResponse {
            request_id,
            instructions: steps
                .into_iter()
                .filter_map(|(s, m)| request_instr(s, m))
                .map(|i| proto::RequestInstruction { instruction: Some(i) })
                .collect(),
            message: String::new(),
            policy_metadata: Default::default(),
            cache_max_age_ms: r
                .policies
                .iter()
                .filter_map(|p| self.script.policies.iter().find(|s| s.name == p.name))
                .filter_map(|s| s.cache.as_ref()?.reply_max_age_ms)
                .min(),
        }))
    }

    async fn execute_policy_response(
        &self,
        request: Request<proto::PolicyResponsePhase>,
    ) -> Result<Response<proto::PolicyResponseResponse>, Status> {
        let tp = traceparent(&request);
        let r = request.into_inner();
        let data = r.request_data.unwrap_or_default();
        let resp = r.response_data.unwrap_or_default();
        let (steps, request_id, _) = self
            .run(Call {
                id: &r.request_id,
                policies: &r.policies,
                req: &data,
                resp: Some(&resp),
                meta: &r.policy_metadata,
                traceparent: &tp,
            })
            .await;
        Ok(Response::new(proto::PolicyResponseResponse {
            request_id,
            instructions: steps
                .into_iter()
                .filter_map(|(s, m)| response_instr(s, m))
                .map(|i| proto::ResponseInstruction { instruction: Some(i) })
                .collect(),
            message: String::new(),
            policy_metadata: Default::default(),
        }))
    }

    async fn execute_policy_response_chunk(
        &self,
        request: Request<proto::PolicyResponseChunk>,
    ) -> Result<Response<proto::PolicyResponseChunkReply>, Status> {
        use proto::chunk_instruction::Instruction as Ch;
        let r = request.into_inner();
        let names: Vec<&str> = r.policies.iter().map(|p| p.name.as_str()).collect();
        let log = CallLog::new(
            &self.script.events_file,
            format!("{} {}#{}", names.join(","), r.request_id, r.sequence),
        );
        let mut events = r.events;
        let mut instructions = Vec::new();
        let mut states = Vec::new();
        for p in &r.policies {
            let Some(sp) = self.script.policies.iter().find(|s| s.name == p.name) else {
                continue;
            };
            let c = &sp.chunk;
            if c.delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(c.delay_ms)).await;
            }
            if c.upper {
                events = events
                    .iter()
                    .map(|e| match policy_net::sse::data(e) {
                        Some(d) => policy_net::sse::with_data(e, &d.to_uppercase()),
                        None => e.clone(),
                    })
                    .collect();
                instructions.push(Ch::ReplaceEvents(proto::ReplaceEvents { events: events.clone() }));
            }
            if c.count {
                // The state carries the count of pieces seen, to prove the
                // kernel sends it back.
                let seen: u64 = std::str::from_utf8(r.policy_state.get(states.len()).map(|b| &b[..]).unwrap_or(b"0"))
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0)
                    + events.len() as u64;
                instructions.push(Ch::SetMetadata(proto::SetMetadata {
                    key: "chunks_seen".into(),
                    value: format!("{}:{seen}", r.sequence + 1),
                }));
                states.push(Bytes::from(seen.to_string()));
            } else {
                states.push(Bytes::new());
            }
            if c.end_at == Some(r.sequence) {
                instructions.push(Ch::EndStream(proto::EndStream {
                    reason: "test_end".into(),
                    message: format!("ended by {}", p.name),
                }));
                break;
            }
        }
        log.finish();
        Ok(Response::new(proto::PolicyResponseChunkReply {
            request_id: r.request_id,
            instructions: instructions
                .into_iter()
                .map(|i| proto::ChunkInstruction { instruction: Some(i) })
                .collect(),
            message: String::new(),
            policy_metadata: Default::default(),
            policy_state: states,
        }))
    }

    async fn get_agent_config(
        &self,
        _: Request<proto::GetAgentConfigRequest>,
    ) -> Result<Response<proto::GetAgentConfigResponse>, Status> {
        let phase = |p: &str| match p {
            "request" => proto::PolicyPhase::Request,
            "response" => proto::PolicyPhase::Response,
            _ => proto::PolicyPhase::RequestResponse,
        };
        Ok(Response::new(proto::GetAgentConfigResponse {
            serves_call_stream: false,
            agent_name: self.script.name.clone(),
            agent_version: "test".into(),
            supported_policies: self
                .script
                .policies
                .iter()
                .map(|p| proto::PolicyInfo {
                    name: p.name.clone(),
                    version: "1".into(),
                    param_schema: p.params.clone(),
                    supported_phases: phase(&p.phases) as i32,
                    requires_body: p.requires_body,
                    streams_response_body: p.streams,
                    streams_event_streams_only: p.events_only,
                    required_params: p.required.clone(),
                    cache: p.cache.as_ref().map(|c| proto::DecisionCache {
                        max_age_ms: c.max_age_ms,
                        headers: c.headers.clone(),
                        metadata: c.metadata.clone(),
                        body: c.body,
                        ..Default::default()
                    }),
                })
                .collect(),
        }))
    }

    async fn health_check(
        &self,
        _: Request<proto::HealthCheckRequest>,
    ) -> Result<Response<proto::HealthCheckResponse>, Status> {
        let down = self.script.not_serving || self.script.not_serving_file.as_ref().is_some_and(|f| f.exists());
        let status = if down {
            proto::health_check_response::Status::NotServing
        } else {
            proto::health_check_response::Status::Serving
        };
        Ok(Response::new(proto::HealthCheckResponse {
            status: status as i32,
            message: String::new(),
        }))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let text = std::fs::read_to_string(&cli.script).with_context(|| format!("reading {}", cli.script.display()))?;
    let script: Script =
        serde_yaml::with::singleton_map_recursive::deserialize(serde_yaml::Deserializer::from_str(&text))
            .with_context(|| format!("parsing {}", cli.script.display()))?;
    let _ = std::fs::remove_file(&cli.socket);
    if let Some(dir) = cli.socket.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let listener =
        tokio::net::UnixListener::bind(&cli.socket).with_context(|| format!("binding {}", cli.socket.display()))?;
    let agent = Agent { script };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tonic::transport::Server::builder()
        // As the SDK's agents: the kernel's cancelled calls are no attack.
        .http2_max_pending_accept_reset_streams(Some(policy_net::AGENT_MAX_CANCELLED_BEFORE_ACCEPT))
        .add_service(PolicyAgentServer::new(agent))
        .serve_with_incoming_shutdown(policy_net::incoming(listener), async move {
            term.recv().await;
        })
        .await?;
    let _ = std::fs::remove_file(&cli.socket);
    Ok(())
}
