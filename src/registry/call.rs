//! One policy call to an agent: deadline, gRPC deadline, and retries of
//! attempts that provably never reached the agent.

use std::time::Duration;

use tokio::time::Instant;

use http::uri::PathAndQuery;
use policy_net::codec::ContiguousCodec;

use super::{AgentHandle, TransportError};
use crate::proto::{PolicyRequestResponse, PolicyResponseChunkReply, PolicyResponseResponse};
use crate::wire::EncodedCall;

/// A call of either phase, encoded ([`crate::wire`]).
#[derive(Debug, Clone)]
pub enum AgentCall {
    /// `ExecutePolicyRequest` with an encoded `PolicyRequestPhase`.
    Request(EncodedCall),
    /// `ExecutePolicyResponse` with an encoded `PolicyResponsePhase`.
    Response(EncodedCall),
    /// `ExecutePolicyResponseChunk` with an encoded `PolicyResponseChunk`:
    /// a piece of a streamed response body.
    Chunk(EncodedCall),
}

/// gRPC paths of the two policy methods (as in the generated client).
const EXECUTE_REQUEST: &str = "/policy_kernel.agent.v1.PolicyAgent/ExecutePolicyRequest";
const EXECUTE_RESPONSE: &str = "/policy_kernel.agent.v1.PolicyAgent/ExecutePolicyResponse";
const EXECUTE_CHUNK: &str = "/policy_kernel.agent.v1.PolicyAgent/ExecutePolicyResponseChunk";

/// The reply of either phase.
#[derive(Debug, Clone)]
pub enum AgentReply {
    /// Reply to `ExecutePolicyRequest`.
    Request(PolicyRequestResponse),
    /// Reply to `ExecutePolicyResponse`.
    Response(PolicyResponseResponse),
    /// Reply to `ExecutePolicyResponseChunk`.
    Chunk(PolicyResponseChunkReply),
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
    /// The call itself was refused: too large to send, or the agent answered
    /// with a gRPC code that blames the request (INVALID_ARGUMENT,
    /// RESOURCE_EXHAUSTED, ...).
    #[error("call rejected: {0}")]
    Rejected(String),
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
            CallError::Failed(_) | CallError::Rejected(_) => 3,
            CallError::Invalid(_) => 4,
        }
    }

    /// Whether the failure says something about the agent's health (and so
    /// counts toward its circuit breaker): timeouts, unreachable agents and
    /// broken transports do; errors about the request itself, invalid
    /// replies (the agent is up) and local shedding do not.
    pub fn charges_agent(&self) -> bool {
        matches!(
            self,
            CallError::Timeout | CallError::Unavailable(_) | CallError::Failed(_)
        )
    }

    /// Short label for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            CallError::Timeout => "timeout",
            CallError::Unavailable(_) => "unavailable",
            CallError::Failed(_) => "error",
            CallError::Rejected(_) => "rejected",
            CallError::Invalid(_) => "invalid_reply",
            CallError::Shed(why) => why,
        }
    }
}

/// gRPC codes an agent uses for a problem with the request, not with itself.
fn blames_request(code: tonic::Code) -> bool {
    use tonic::Code::*;
    matches!(
        code,
        InvalidArgument | ResourceExhausted | OutOfRange | FailedPrecondition
    )
}

/// Reopens a half-open circuit whose probe call was dropped unfinished.
struct ProbeGuard<'a> {
    circuit: &'a super::circuit::Circuit,
    settled: bool,
}

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.circuit.probe_abandoned();
        }
    }
}

impl AgentCall {
    fn encoded_len(&self) -> usize {
        use prost::Message;
        match self {
            AgentCall::Request(r) | AgentCall::Response(r) | AgentCall::Chunk(r) => r.encoded_len(),
        }
    }

    /// A description of the problem when the encoded call, `len` bytes, is
    /// over [`super::client::MAX_REPLY_BYTES`], which the transport would
    /// refuse with an opaque protocol error.
    fn oversized(len: usize) -> Option<String> {
        (len > super::client::MAX_REPLY_BYTES).then(|| {
            format!(
                "call too large: {len} bytes, over the {}-byte gRPC message limit",
                super::client::MAX_REPLY_BYTES
            )
        })
    }

    fn set_deadline(&mut self, ms: i64) {
        match self {
            AgentCall::Request(r) | AgentCall::Response(r) | AgentCall::Chunk(r) => r.deadline_ms = ms,
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
        let len = call.encoded_len();
        if let Some(too_big) = AgentCall::oversized(len) {
            return Err(CallError::Rejected(too_big));
        }
        // The call stream, when the agent serves one and the call is small
        // enough for it; else unary calls. Decided once for every attempt.
        let stream = self.call_stream().filter(|_| len <= super::mux::MAX_STREAMED_CALL);
        if !self.circuit.try_call() {
            return Err(CallError::Shed("circuit_open"));
        }
        // Settles the circuit if this future is dropped mid-call (stream reset).
        let mut guard = ProbeGuard {
            circuit: &self.circuit,
            settled: false,
        };
        let result = self.attempts(call, stream, deadline, trace).await;
        guard.settled = true;
        match &result {
            Ok(_) => self.circuit.success(),
            Err(e) if e.charges_agent() => {
                if self.circuit.failure() {
                    tracing::warn!(agent = self.name(), error = %e, "circuit opened: the agent counts as unavailable until a probe succeeds");
                }
            }
            // The agent answered: it is up, whatever it said.
            Err(_) => self.circuit.success(),
        }
        self.metrics.circuit.set(self.circuit.state() as i64);
        result
    }

    async fn attempts(
        &self,
        call: AgentCall,
        stream: Option<&super::mux::CallStream>,
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
            // Boxed: the gRPC call's future is several KiB; kept inline it would
            // be copied into every future that awaits it, up to the stream's.
            let send = Box::pin(self.send(this, stream, deadline, remaining, trace));
            // The call stream bounds its calls by their deadline with one
            // timer per stream (see mux); a unary call gets a timer of its own.
            let outcome = match stream {
                Some(_) => Ok(send.await),
                None => tokio::time::timeout(remaining, send).await,
            };
            match outcome {
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
                        let text = format!("{}: {}", status.code(), status.message());
                        return Err(if blames_request(status.code()) {
                            CallError::Rejected(text)
                        } else {
                            CallError::Failed(text)
                        });
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
        stream: Option<&super::mux::CallStream>,
        deadline: Instant,
        timeout: Duration,
        trace: Option<&opentelemetry::Context>,
    ) -> Result<AgentReply, tonic::Status> {
        if let Some(stream) = stream {
            return stream.call(call, deadline, trace, &self.metrics.stream_calls).await;
        }
        let mut grpc = self.call_client();
        match call {
            AgentCall::Request(r) => unary(&mut grpc, EXECUTE_REQUEST, r, timeout, trace)
                .await
                .map(AgentReply::Request),
            AgentCall::Response(r) => unary(&mut grpc, EXECUTE_RESPONSE, r, timeout, trace)
                .await
                .map(AgentReply::Response),
            AgentCall::Chunk(c) => unary(&mut grpc, EXECUTE_CHUNK, c, timeout, trace)
                .await
                .map(AgentReply::Chunk),
        }
    }
}

/// One encoded call to the policy method at `path`, as the generated
/// client's methods make it (its HTTP service is always ready: UnixHttp
/// connects in `call`), with the gRPC timeout and the trace context.
async fn unary<Q: prost::Message + Send + 'static, R: prost::Message + Default + Send + 'static>(
    grpc: &mut super::CallClient,
    path: &'static str,
    call: Q,
    timeout: Duration,
    trace: Option<&opentelemetry::Context>,
) -> Result<R, tonic::Status> {
    let mut req = tonic::Request::new(call);
    req.set_timeout(timeout);
    if let Some(cx) = trace {
        crate::telemetry::tracing::inject(cx, req.metadata_mut());
    }
    let codec = ContiguousCodec::<Q, R>::default();
    Ok(grpc
        .unary(req, PathAndQuery::from_static(path), codec)
        .await?
        .into_inner())
}
