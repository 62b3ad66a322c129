//! One policy call to an agent: deadline, gRPC deadline, and retries of
//! attempts that provably never reached the agent.

use std::time::Duration;

use tokio::time::Instant;

use super::{AgentHandle, TransportError};
use crate::proto::{PolicyRequestPhase, PolicyRequestResponse, PolicyResponsePhase, PolicyResponseResponse};

/// A call of either phase.
#[derive(Debug, Clone)]
pub enum AgentCall {
    /// `ExecutePolicyRequest`.
    Request(PolicyRequestPhase),
    /// `ExecutePolicyResponse`.
    Response(PolicyResponsePhase),
}

/// The reply of either phase.
#[derive(Debug, Clone)]
pub enum AgentReply {
    /// Reply to `ExecutePolicyRequest`.
    Request(PolicyRequestResponse),
    /// Reply to `ExecutePolicyResponse`.
    Response(PolicyResponseResponse),
}

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The deadline passed.
    #[error("agent timeout")]
    Timeout,
    /// The agent could not be reached (nothing was sent).
    #[error("agent unavailable: {0}")]
    Unavailable(String),
    /// The agent answered with a gRPC error, or the transport broke mid-call.
    #[error("agent error: {0}")]
    Failed(String),
    /// The reply broke the contract.
    #[error("invalid agent reply: {0}")]
    Invalid(String),
    /// Not sent: the agent's circuit is open, or `max_concurrent_calls` are
    /// in flight.
    #[error("agent refused locally: {0}")]
    Shed(&'static str),
}

impl CallError {
    /// Index of this outcome in `telemetry::metrics::CALL_STATUSES`.
    pub fn status_index(&self) -> usize {
        match self {
            CallError::Timeout => 1,
            CallError::Unavailable(_) | CallError::Shed(_) => 2,
            CallError::Failed(_) => 3,
            CallError::Invalid(_) => 4,
        }
    }

    /// Short label for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            CallError::Timeout => "timeout",
            CallError::Unavailable(_) => "unavailable",
            CallError::Failed(_) => "error",
            CallError::Invalid(_) => "invalid_reply",
            CallError::Shed(why) => why,
        }
    }
}

impl AgentCall {
    fn set_deadline(&mut self, ms: i64) {
        match self {
            AgentCall::Request(r) => r.deadline_ms = ms,
            AgentCall::Response(r) => r.deadline_ms = ms,
        }
    }
}

impl AgentHandle {
    /// Sends `call`, giving up at `deadline`. A failed attempt is retried
    /// (up to `retry.max_attempts`, `retry.backoff_ms` apart, within the
    /// deadline) only when the connection could not be made, so a policy never
    /// sees the same request twice.
    pub async fn execute(
        &self,
        call: AgentCall,
        deadline: Instant,
        trace: Option<&opentelemetry::Context>,
    ) -> Result<AgentReply, CallError> {
        let Ok(_permit) = self.calls.try_acquire() else {
            return Err(CallError::Shed("max_concurrent_calls"));
        };
        if !self.circuit.try_call() {
            return Err(CallError::Shed("circuit_open"));
        }
        let result = self.attempts(call, deadline, trace).await;
        match &result {
            Ok(_) => self.circuit.success(),
            Err(e) => {
                if self.circuit.failure() {
                    tracing::warn!(agent = self.name(), error = %e, "circuit opened: the agent counts as unavailable until a probe succeeds");
                }
            }
        }
        self.metrics.circuit.set(self.circuit.state() as i64);
        result
    }

    async fn attempts(
        &self,
        call: AgentCall,
        deadline: Instant,
        trace: Option<&opentelemetry::Context>,
    ) -> Result<AgentReply, CallError> {
        let attempts = self.config.retry.max_attempts.max(1);
        let backoff = Duration::from_millis(self.config.retry.backoff_ms);
        let mut call = Some(call);
        for attempt in 1..=attempts {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(CallError::Timeout);
            }
            let ms = i64::try_from(remaining.as_millis()).unwrap_or(i64::MAX).max(1);
            let mut this = if attempt == attempts { call.take() } else { call.clone() }.ok_or(CallError::Timeout)?;
            this.set_deadline(ms);
            match tokio::time::timeout(remaining, self.send(this, remaining, trace)).await {
                Err(_) => {
                    self.metrics.timeouts.inc();
                    return Err(CallError::Timeout);
                }
                Ok(Ok(reply)) => return Ok(reply),
                Ok(Err(status)) => {
                    let not_sent = TransportError::is_not_sent(&status);
                    // The agent's own gRPC server enforces the deadline we
                    // sent and answers DEADLINE_EXCEEDED or, for tonic,
                    // CANCELLED ("Timeout expired"), sometimes before our
                    // timer fires: both are timeouts.
                    if matches!(status.code(), tonic::Code::DeadlineExceeded | tonic::Code::Cancelled) {
                        self.metrics.timeouts.inc();
                        return Err(CallError::Timeout);
                    }
                    if !not_sent {
                        return Err(CallError::Failed(format!("{}: {}", status.code(), status.message())));
                    }
                    if attempt == attempts {
                        return Err(CallError::Unavailable(status.message().to_string()));
                    }
                    let left = deadline.saturating_duration_since(Instant::now());
                    tokio::time::sleep(backoff.min(left)).await;
                }
            }
        }
        Err(CallError::Timeout)
    }

    async fn send(
        &self,
        call: AgentCall,
        timeout: Duration,
        trace: Option<&opentelemetry::Context>,
    ) -> Result<AgentReply, tonic::Status> {
        fn request<T>(msg: T, timeout: Duration, trace: Option<&opentelemetry::Context>) -> tonic::Request<T> {
            let mut req = tonic::Request::new(msg);
            req.set_timeout(timeout);
            if let Some(cx) = trace {
                crate::telemetry::tracing::inject(cx, req.metadata_mut());
            }
            req
        }
        let mut client = self.client();
        match call {
            AgentCall::Request(r) => Ok(AgentReply::Request(
                client
                    .execute_policy_request(request(r, timeout, trace))
                    .await?
                    .into_inner(),
            )),
            AgentCall::Response(r) => Ok(AgentReply::Response(
                client
                    .execute_policy_response(request(r, timeout, trace))
                    .await?
                    .into_inner(),
            )),
        }
    }
}
