//! The ext_proc stream state machine, fed arbitrary Envoy message sequences
//! while the agent answers with arbitrary replies. The kernel runs in
//! process; the agent is an in-process gRPC server on a Unix socket whose
//! next replies come from the fuzz input. Every answer must be of the kind
//! Envoy expects for the message it answers, and carry only mutations Envoy
//! accepts. Route `s` streams its response through the agent's streaming
//! policy, whose replies (events, ends, state) come from the input too.
#![no_main]
use std::sync::{Arc, Mutex, OnceLock};

use envoy_types::pb::envoy::service::ext_proc::v3::processing_request::Request;
use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response;
use envoy_types::pb::envoy::service::ext_proc::v3::ProcessingRequest;
use libfuzzer_sys::fuzz_target;
use policy_kernel::envoy::session::Session;
use policy_kernel::envoy::translate::check_envoy_accepts;
use policy_kernel::kernel::Kernel;
use policy_kernel::proto::{
    self,
    policy_agent_server::{PolicyAgent, PolicyAgentServer},
};
use prost::Message;
use tonic::{Request as Req, Response as Resp, Status};

/// Reply bytes for the agent's next calls, from the current input.
static REPLIES: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

struct FuzzAgent;

fn next_reply() -> (Vec<u8>, bool) {
    let mut q = REPLIES.lock().unwrap_or_else(|e| e.into_inner());
    let bytes = if q.is_empty() { Vec::new() } else { q.remove(0) };
    // One reply in eight keeps whatever request_id the bytes hold.
    let keep_id = bytes.first().is_some_and(|b| b % 8 == 0);
    (bytes, keep_id)
}

#[tonic::async_trait]
impl PolicyAgent for FuzzAgent {
    async fn execute_policy_request(
        &self,
        r: Req<proto::PolicyRequestPhase>,
    ) -> Result<Resp<proto::PolicyRequestResponse>, Status> {
        let (bytes, keep) = next_reply();
        let mut reply = proto::PolicyRequestResponse::decode(bytes.as_slice()).unwrap_or_default();
        if !keep {
            reply.request_id = r.into_inner().request_id;
        }
        Ok(Resp::new(reply))
    }
    async fn execute_policy_response(
        &self,
        r: Req<proto::PolicyResponsePhase>,
    ) -> Result<Resp<proto::PolicyResponseResponse>, Status> {
        let (bytes, keep) = next_reply();
        let mut reply = proto::PolicyResponseResponse::decode(bytes.as_slice()).unwrap_or_default();
        if !keep {
            reply.request_id = r.into_inner().request_id;
        }
        Ok(Resp::new(reply))
    }
    async fn execute_policy_response_chunk(
        &self,
        r: Req<proto::PolicyResponseChunk>,
    ) -> Result<Resp<proto::PolicyResponseChunkReply>, Status> {
        let (bytes, keep) = next_reply();
        let mut reply = proto::PolicyResponseChunkReply::decode(bytes.as_slice()).unwrap_or_default();
        if !keep {
            reply.request_id = r.into_inner().request_id;
        }
        Ok(Resp::new(reply))
    }
    async fn get_agent_config(
        &self,
        _: Req<proto::GetAgentConfigRequest>,
    ) -> Result<Resp<proto::GetAgentConfigResponse>, Status> {
        let policy = |name: &str, body: bool| proto::PolicyInfo {
            name: name.into(),
            version: "1".into(),
            param_schema: vec!["k".into()],
            supported_phases: proto::PolicyPhase::RequestResponse as i32,
            requires_body: body,
            streams_response_body: name == "stream",
        };
        Ok(Resp::new(proto::GetAgentConfigResponse {
            agent_name: "fuzz".into(),
            agent_version: "1".into(),
            supported_policies: vec![policy("headers", false), policy("body", true), policy("stream", true)],
        }))
    }
    async fn health_check(
        &self,
        _: Req<proto::HealthCheckRequest>,
    ) -> Result<Resp<proto::HealthCheckResponse>, Status> {
        Ok(Resp::new(proto::HealthCheckResponse {
            status: proto::health_check_response::Status::Serving as i32,
            message: String::new(),
        }))
    }
}

struct World {
    rt: tokio::runtime::Runtime,
    kernel: Arc<Kernel>,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        let dir = std::env::temp_dir().join(format!("pk-fuzz-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let socket = dir.join("agent.sock");
        let _ = std::fs::remove_file(&socket);
        let kernel = rt.block_on(async {
            let listener = tokio::net::UnixListener::bind(&socket).expect("bind agent");
            tokio::spawn(
                tonic::transport::Server::builder()
                    .add_service(PolicyAgentServer::new(FuzzAgent))
                    .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
            );
            let cfg = policy_kernel::config::parse(&format!(
                "policy_kernel:\n  server:\n    phase_timeout_ms: 200\n  agents:\n    - name: fuzz\n      socket_path: {}\n      timeout_ms: 200\n      circuit_breaker: {{failure_threshold: 0}}\n  route_policies:\n    - route_name: h\n      request_policy_chain: [{{policy: headers}}, {{policy: headers, params: {{k: 1}}}}]\n      response_policy_chain: [{{policy: headers}}]\n    - route_name: b\n      request_policy_chain: [{{policy: body}}, {{policy: headers}}]\n      response_policy_chain: [{{policy: body}}]\n    - route_name: s\n      request_policy_chain: [{{policy: headers}}]\n      response_policy_chain: [{{policy: headers}}, {{policy: stream}}]\n",
                socket.display()
            ))
            .expect("config");
            Kernel::start(cfg).await
        });
        World { rt, kernel }
    })
}

fn expected_kind(req: &Option<Request>, resp: &Option<Response>) -> bool {
    matches!(
        (req, resp),
        (_, Some(Response::ImmediateResponse(_)))
            | (Some(Request::RequestHeaders(_)), Some(Response::RequestHeaders(_)))
            | (Some(Request::RequestBody(_)), Some(Response::RequestBody(_)))
            | (Some(Request::ResponseHeaders(_)), Some(Response::ResponseHeaders(_)))
            | (Some(Request::ResponseBody(_)), Some(Response::ResponseBody(_)))
            | (Some(Request::RequestTrailers(_)), Some(Response::RequestTrailers(_)))
            | (Some(Request::ResponseTrailers(_)), Some(Response::ResponseTrailers(_)))
            | (None, Some(Response::RequestHeaders(_)))
    )
}

fuzz_target!(|data: &[u8]| {
    let w = world();
    // Input: chunks separated by 0xFE; even chunks are Envoy messages, odd
    // chunks agent replies.
    let chunks: Vec<&[u8]> = data.split(|&b| b == 0xFE).take(16).collect();
    let mut messages = Vec::new();
    let mut replies = Vec::new();
    for (i, c) in chunks.iter().enumerate() {
        if i % 2 == 0 {
            if let Ok(m) = ProcessingRequest::decode(*c) {
                messages.push(m);
            }
        } else {
            replies.push(c.to_vec());
        }
    }
    *REPLIES.lock().unwrap_or_else(|e| e.into_inner()) = replies;
    w.rt.block_on(async {
        let mut session = Session::new(Arc::clone(&w.kernel), None, w.kernel.try_stream());
        for m in messages {
            let kind = m.request.clone();
            let resp = session.handle(m).await;
            assert!(expected_kind(&kind, &resp.response), "answered {kind:?} with {:?}", resp.response);
            let common = match &resp.response {
                Some(Response::RequestHeaders(h) | Response::ResponseHeaders(h)) => h.response.clone(),
                Some(Response::RequestBody(b) | Response::ResponseBody(b)) => b.response.clone(),
                _ => None,
            };
            // A piece of a streamed response: a body mutation alone, never
            // with content-length (the kernel removed it at the headers).
            let streamed_piece = matches!(&resp.response, Some(Response::ResponseBody(b)) if b.response.as_ref().is_some_and(|c| c.header_mutation.is_none()));
            if let Some(c) = common.filter(|_| !streamed_piece) {
                let response_phase = matches!(resp.response, Some(Response::ResponseHeaders(_) | Response::ResponseBody(_)));
                if let Err(e) = check_envoy_accepts(&c, response_phase) {
                    panic!("mutation Envoy would refuse: {e}");
                }
            }
        }
    });
});
