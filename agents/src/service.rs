//! The gRPC service: answers `GetAgentConfig` and `HealthCheck` and hands
//! execution calls, unary or on the call stream ([`crate::call_stream`]),
//! to the runner, counting them so that a drain can wait for them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use crate::context::{CallInfo, Phase};
use crate::proto::{self, health_check_response::Status as Health};
use crate::registry::Registry;
use crate::runner;

/// Serving state shared by the service and the server loop.
pub(crate) struct DrainState {
    draining: AtomicBool,
    inflight: watch::Sender<usize>,
}

impl DrainState {
    pub(crate) fn new() -> Self {
        DrainState {
            draining: AtomicBool::new(false),
            inflight: watch::Sender::new(0),
        }
    }

    /// From now on, health checks answer NOT_SERVING.
    pub(crate) fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    pub(crate) fn enter(&self) -> InflightGuard<'_> {
        self.inflight.send_modify(|n| *n += 1);
        InflightGuard(self)
    }

    /// Resolves when no execution call is in flight.
    pub(crate) async fn wait_idle(&self) {
        let mut rx = self.inflight.subscribe();
        // The sender lives in `self`, so `wait_for` cannot fail while we borrow it.
        let _ = rx.wait_for(|n| *n == 0).await;
    }
}

/// Counts one in-flight call; dropped when the call ends or is cancelled.
pub(crate) struct InflightGuard<'a>(&'a DrainState);

impl Drop for InflightGuard<'_> {
    fn drop(&mut self) {
        self.0.inflight.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// What the service needs: identity, policies, drain state.
pub(crate) struct Shared {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) registry: Registry,
    pub(crate) drain: DrainState,
}

/// The `PolicyAgent` gRPC service of an [`Agent`](crate::Agent).
///
/// Most agents use [`Agent::serve_unix`](crate::Agent::serve_unix); this is
/// for mounting the service in a server of your own
/// ([`Agent::into_service`](crate::Agent::into_service)).
#[derive(Clone)]
pub struct AgentService {
    pub(crate) shared: Arc<Shared>,
}

fn metadata_str(meta: &tonic::metadata::MetadataMap, key: &str) -> Option<String> {
    meta.get(key).and_then(|v| v.to_str().ok()).map(str::to_string)
}

/// When a call of `deadline_ms` (0 or less: none said) must be over.
pub(crate) fn deadline_of(deadline_ms: i64) -> Option<Instant> {
    u64::try_from(deadline_ms)
        .ok()
        .filter(|ms| *ms > 0)
        .map(|ms| Instant::now() + Duration::from_millis(ms))
}

fn call_info(meta: &tonic::metadata::MetadataMap, request_id: &str, deadline_ms: i64, phase: Phase) -> CallInfo {
    let deadline = deadline_of(deadline_ms);
    CallInfo {
        request_id: request_id.to_string(),
        phase,
        traceparent: metadata_str(meta, "traceparent"),
        tracestate: metadata_str(meta, "tracestate"),
        deadline,
    }
}

#[tonic::async_trait]
impl proto::policy_agent_server::PolicyAgent for AgentService {
    async fn execute_policy_request(
        &self,
        request: Request<proto::PolicyRequestPhase>,
    ) -> Result<Response<proto::PolicyRequestResponse>, Status> {
        let _guard = self.shared.drain.enter();
        let (meta, _, call) = request.into_parts();
        let info = call_info(&meta, &call.request_id, call.deadline_ms, Phase::Request);
        let span = tracing::debug_span!("execute", phase = "request", request_id = %call.request_id, traceparent = info.traceparent.as_deref().unwrap_or(""));
        let reply = runner::execute_request(&self.shared.registry, call, info)
            .instrument(span)
            .await;
        Ok(Response::new(reply))
    }

    async fn execute_policy_response(
        &self,
        request: Request<proto::PolicyResponsePhase>,
    ) -> Result<Response<proto::PolicyResponseResponse>, Status> {
        let _guard = self.shared.drain.enter();
        let (meta, _, call) = request.into_parts();
        let info = call_info(&meta, &call.request_id, call.deadline_ms, Phase::Response);
        let span = tracing::debug_span!("execute", phase = "response", request_id = %call.request_id, traceparent = info.traceparent.as_deref().unwrap_or(""));
        let reply = runner::execute_response(&self.shared.registry, call, info)
            .instrument(span)
            .await;
        Ok(Response::new(reply))
    }

    async fn execute_policy_response_chunk(
        &self,
        request: Request<proto::PolicyResponseChunk>,
    ) -> Result<Response<proto::PolicyResponseChunkReply>, Status> {
        let _guard = self.shared.drain.enter();
        let (meta, _, call) = request.into_parts();
        let info = call_info(&meta, &call.request_id, call.deadline_ms, Phase::Response);
        let span = tracing::debug_span!("execute", phase = "response_chunk", request_id = %call.request_id, sequence = call.sequence);
        let reply = crate::stream::execute_chunk(&self.shared.registry, call, info)
            .instrument(span)
            .await;
        Ok(Response::new(reply))
    }

    type CallsStream = crate::call_stream::ReplyStream;

    async fn calls(
        &self,
        request: Request<tonic::Streaming<proto::CallFrame>>,
    ) -> Result<Response<Self::CallsStream>, Status> {
        Ok(Response::new(crate::call_stream::serve(
            Arc::clone(&self.shared),
            request.into_inner(),
        )))
    }

    async fn get_agent_config(
        &self,
        _request: Request<proto::GetAgentConfigRequest>,
    ) -> Result<Response<proto::GetAgentConfigResponse>, Status> {
        Ok(Response::new(proto::GetAgentConfigResponse {
            agent_name: self.shared.name.clone(),
            agent_version: self.shared.version.clone(),
            supported_policies: self.shared.registry.infos(),
            serves_call_stream: true,
        }))
    }

    async fn health_check(
        &self,
        _request: Request<proto::HealthCheckRequest>,
    ) -> Result<Response<proto::HealthCheckResponse>, Status> {
        let (status, message) = if self.shared.drain.is_draining() {
            (Health::NotServing, "draining")
        } else {
            (Health::Serving, "")
        };
        Ok(Response::new(proto::HealthCheckResponse {
            status: status as i32,
            message: message.to_string(),
        }))
    }
}
