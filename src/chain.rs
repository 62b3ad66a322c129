//! Executes one phase's plan: groups are called one after another in chain
//! order; each reply is checked, then applied to the context the next agent
//! sees and merged into the phase's mutations (spec §7, §8, §9).
//!
//! A failed call (timeout, unreachable agent, gRPC error, invalid reply)
//! applies the `on_failure` of the group's first policy: `deny` answers with
//! `policy_failure_response`, `continue` skips the group, `skip_remaining`
//! stops the chain keeping what was done. Without `on_failure`, the agent's
//! `fail_open` decides between continue and deny.

use tokio::time::Instant;

use crate::aggregate::{
    convert_request_reply, convert_response_reply, Immediate, Metadata, Mutations, Next, Reply, RequestCtx, ResponseCtx,
};
use crate::config::OnFailure;
use crate::plan::Plan;
use crate::proto;
use crate::registry::{AgentCall, AgentReply, CallError};
use crate::snapshot::{Phase, Route, Snapshot};

/// How a phase's chain ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Go on with these mutations (possibly none).
    Continue(Mutations),
    /// Answer the client with this.
    Immediate(Immediate),
}

/// One failed group, for logs and metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// Agent name.
    pub agent: String,
    /// 1-based group position.
    pub step: usize,
    /// What went wrong.
    pub error: CallError,
    /// What was done about it.
    pub action: &'static str,
}

/// What happened while running a chain.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Agent calls made (one per group reached).
    pub calls: usize,
    /// Agents called, in order.
    pub sequence: Vec<String>,
    /// Failed groups.
    pub failures: Vec<Failure>,
    /// True when a `SkipRemainingPolicies` or `skip_remaining` stopped it.
    pub skipped: bool,
}

/// A phase's view of the request: builds its calls, checks and applies replies.
trait PhaseState {
    fn message(&self, id: &str, policies: Vec<proto::Policy>, meta: &Metadata) -> AgentCall;
    fn check(&self, id: &str, reply: AgentReply) -> Result<Reply, CallError>;
    fn apply(&mut self, r: &Reply, muts: &mut Mutations, meta: &mut Metadata, n: usize) -> Next;
}

struct RequestState<'a>(&'a mut RequestCtx);

impl PhaseState for RequestState<'_> {
    fn message(&self, id: &str, policies: Vec<proto::Policy>, meta: &Metadata) -> AgentCall {
        AgentCall::Request(proto::PolicyRequestPhase {
            request_id: id.to_string(),
            policies,
            request_data: Some(self.0.to_proto()),
            deadline_ms: 0,
            policy_metadata: meta.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        })
    }
    fn check(&self, id: &str, reply: AgentReply) -> Result<Reply, CallError> {
        match reply {
            AgentReply::Request(r) => convert_request_reply(id, r).map_err(|e| CallError::Invalid(e.to_string())),
            AgentReply::Response(_) => Err(CallError::Invalid("reply of the wrong phase".into())),
        }
    }
    fn apply(&mut self, r: &Reply, muts: &mut Mutations, meta: &mut Metadata, n: usize) -> Next {
        self.0.apply(r, muts, meta, n)
    }
}

struct ResponseState<'a> {
    request: &'a RequestCtx,
    response: &'a mut ResponseCtx,
}

impl PhaseState for ResponseState<'_> {
    fn message(&self, id: &str, policies: Vec<proto::Policy>, meta: &Metadata) -> AgentCall {
        AgentCall::Response(proto::PolicyResponsePhase {
            request_id: id.to_string(),
            policies,
            request_data: Some(self.request.to_proto()),
            response_data: Some(self.response.to_proto()),
            deadline_ms: 0,
            policy_metadata: meta.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        })
    }
    fn check(&self, id: &str, reply: AgentReply) -> Result<Reply, CallError> {
        match reply {
            AgentReply::Response(r) => convert_response_reply(id, r).map_err(|e| CallError::Invalid(e.to_string())),
            AgentReply::Request(_) => Err(CallError::Invalid("reply of the wrong phase".into())),
        }
    }
    fn apply(&mut self, r: &Reply, muts: &mut Mutations, meta: &mut Metadata, n: usize) -> Next {
        self.response.apply(r, muts, meta, n)
    }
}

/// Everything a chain run needs besides the phase state.
pub struct Run<'a> {
    /// The stream's snapshot.
    pub snap: &'a Snapshot,
    /// The matched route.
    pub route: &'a Route,
    /// The request id sent to agents.
    pub request_id: &'a str,
    /// Metadata, accumulated over both phases.
    pub meta: &'a mut Metadata,
    /// Filled in while running.
    pub report: Report,
}

impl Run<'_> {
    /// Runs the request chain on `ctx`.
    pub async fn request(&mut self, plan: &Plan, ctx: &mut RequestCtx) -> Outcome {
        self.run(Phase::Request, plan, &mut RequestState(ctx)).await
    }

    /// Runs the response chain on `response`, with the request as it was sent.
    pub async fn response(&mut self, plan: &Plan, request: &RequestCtx, response: &mut ResponseCtx) -> Outcome {
        self.run(Phase::Response, plan, &mut ResponseState { request, response })
            .await
    }

    async fn run<S: PhaseState>(&mut self, phase: Phase, plan: &Plan, state: &mut S) -> Outcome {
        let chain = self.route.chain(phase);
        let deadline = Instant::now() + self.snap.phase_timeout;
        let mut muts = Mutations::default();
        for (n, group) in plan.iter().enumerate() {
            let Some(agent) = self.snap.agents.get(group.agent) else {
                continue;
            };
            let Some(entries) = chain.policies.get(group.policies.clone()) else {
                continue;
            };
            let policies = entries.iter().map(|p| p.proto.clone()).collect();
            let call = state.message(self.request_id, policies, self.meta);
            let call_deadline = deadline.min(Instant::now() + agent.timeout());
            self.report.calls += 1;
            self.report.sequence.push(agent.name().to_string());
            let result = agent
                .execute(call, call_deadline)
                .await
                .and_then(|reply| state.check(self.request_id, reply));
            let reply = match result {
                Ok(reply) => reply,
                Err(error) => {
                    let on_failure = entries.first().and_then(|p| p.on_failure);
                    let action = match on_failure {
                        Some(f) => f,
                        None if agent.config.fail_open => OnFailure::Continue,
                        None => OnFailure::Deny,
                    };
                    tracing::warn!(
                        request_id = self.request_id, route = %self.route.name, phase = phase.as_str(),
                        agent = agent.name(), step = n + 1, failure_reason = %error,
                        on_failure_action = action.as_str(), "agent call failed"
                    );
                    self.report.failures.push(Failure {
                        agent: agent.name().to_string(),
                        step: n + 1,
                        error,
                        action: action.as_str(),
                    });
                    match action {
                        OnFailure::Deny => return Outcome::Immediate(self.snap.responses.failure.clone()),
                        OnFailure::Continue => continue,
                        OnFailure::SkipRemaining => {
                            self.report.skipped = true;
                            break;
                        }
                    }
                }
            };
            match state.apply(&reply, &mut muts, self.meta, n) {
                Next::Continue => {}
                Next::Skip => {
                    self.report.skipped = true;
                    break;
                }
                Next::Immediate(imm) => return Outcome::Immediate(imm),
            }
        }
        Outcome::Continue(muts)
    }
}
