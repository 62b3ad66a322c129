//! The gRPC service: answers `GetAgentConfig` and `HealthCheck` and hands
//! execution calls, unary or on the call stream ([`crate::call_stream`]),
//! to the runner, counting them so that a drain can wait for them.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use crate::context::{CallInfo, Phase};
use crate::proto::{self, health_check_response::Status as Health};
use crate::registry::Registry;
use crate::runner;

/// Serving state shared by the service and the server loop.
///
/// Calls are counted with an atomic: entering and leaving a call is on every
/// call's path, and costs two atomic operations (a `watch` channel cost two
/// locks and a wake-up of its waiters per call). Leaving wakes the drain
/// only when it is the last call and the agent is draining.
pub(crate) struct DrainState {
    draining: AtomicBool,
    inflight: AtomicUsize,
    idle: Notify,
}

impl DrainState {
    pub(crate) fn new() -> Self {
        DrainState {
            draining: AtomicBool::new(false),
            inflight: AtomicUsize::new(0),
            idle: Notify::new(),
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
        self.inflight.fetch_add(1, Ordering::SeqCst);
        InflightGuard(self)
    }

    /// Resolves when no execution call is in flight. Called after
    /// [`start_draining`](Self::start_draining): a call that ends before
    /// that is seen by the count, one that ends after it wakes this.
    pub(crate) async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.inflight.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// Counts one in-flight call; dropped when the call ends or is cancelled.
pub(crate) struct InflightGuard<'a>(&'a DrainState);

impl Drop for InflightGuard<'_> {
    fn drop(&mut self) {
        let left = self.0.inflight.fetch_sub(1, Ordering::SeqCst) - 1;
        if left == 0 && self.0.is_draining() {
            self.0.idle.notify_waiters();
        }
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
            .await?;
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
            .await?;
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
            .await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_idle_agent_drains_at_once() {
        let drain = DrainState::new();
        drop(drain.enter());
        drain.start_draining();
        tokio::time::timeout(Duration::from_secs(1), drain.wait_idle())
            .await
            .expect("no call in flight");
    }

    #[tokio::test]
    async fn a_drain_waits_for_every_call_in_flight() {
        let drain = Arc::new(DrainState::new());
        let first = drain.enter();
        let second = drain.enter();
        drain.start_draining();
        let waiting = {
            let drain = Arc::clone(&drain);
            tokio::spawn(async move { drain.wait_idle().await })
        };
        tokio::task::yield_now().await;
        drop(first);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "the drain ended with a call in flight");
        drop(second);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("the last call's end wakes the drain")
            .expect("drain task");
    }
}
