//! Executes one phase's plan: groups are called one after another in chain
//! order; each reply is checked, then applied to the context the next agent
//! sees and merged into the phase's mutations (spec §7, §8, §9).
//!
//! A failed call (timeout, unreachable agent, gRPC error, invalid reply)
//! applies the `on_failure` of the group's first policy: `deny` answers with
//! `policy_failure_response`, `continue` skips the group, `skip_remaining`
//! stops the chain keeping what was done. Without `on_failure`, the agent's
//! `fail_open` decides between continue and deny.

use opentelemetry::KeyValue;
use tokio::time::Instant;

use crate::aggregate::{
    convert_request_reply, convert_response_reply, Immediate, Metadata, Mutations, Next, Reply, RequestCtx, ResponseCtx,
};
use crate::config::{OnFailure, RouteMode};
use crate::decisions;
use crate::plan::{Group, Plan};
use crate::registry::{AgentCall, AgentReply, CallError};
use crate::snapshot::{CompiledPolicy, Phase, Route, Snapshot};
use crate::telemetry::tracing::{end, RequestTrace};
use crate::wire;

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

/// One agent call.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRecord {
    /// Agent index in the snapshot.
    pub agent: usize,
    /// The phase.
    pub phase: Phase,
    /// Chain positions of the group's policies.
    pub policies: std::ops::Range<usize>,
    /// Call duration.
    pub duration: std::time::Duration,
    /// Instructions the reply carried (0 when it failed).
    pub instructions: usize,
}

/// What happened while running the chains of one request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Agent calls, in order, both phases.
    pub calls: Vec<CallRecord>,
    /// Failed groups.
    pub failures: Vec<Failure>,
    /// True when a `SkipRemainingPolicies` or `skip_remaining` stopped a chain.
    pub skipped: bool,
    /// Instruction conflicts seen while merging.
    pub conflicts: u32,
}

/// A phase's view of the request: builds its calls, checks and applies replies.
trait PhaseState {
    /// The request as the next agent sees it, in the phase whose outcomes
    /// may be cached.
    fn cacheable_request(&self) -> Option<&RequestCtx>;
    fn message(&self, id: &str, policies: &[CompiledPolicy], meta: &Metadata, route: &Route) -> AgentCall;
    fn check(&self, id: &str, reply: AgentReply) -> Result<Reply, CallError>;
    fn apply(&mut self, r: &Reply, muts: &mut Mutations, meta: &mut Metadata, n: usize) -> Next;
}

struct RequestState<'a>(&'a mut RequestCtx);

impl PhaseState for RequestState<'_> {
    fn cacheable_request(&self) -> Option<&RequestCtx> {
        Some(self.0)
    }
    fn message(&self, id: &str, policies: &[CompiledPolicy], meta: &Metadata, route: &Route) -> AgentCall {
        AgentCall::Request(wire::request_call(
            id,
            policies.iter().map(|p| &p.wire),
            self.0,
            meta,
            &route.identity(),
        ))
    }
    fn check(&self, id: &str, reply: AgentReply) -> Result<Reply, CallError> {
        match reply {
            AgentReply::Request(r) => convert_request_reply(id, r).map_err(|e| CallError::Invalid(e.to_string())),
            _ => Err(CallError::Invalid("reply of the wrong phase".into())),
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
    fn cacheable_request(&self) -> Option<&RequestCtx> {
        None
    }
    fn message(&self, id: &str, policies: &[CompiledPolicy], meta: &Metadata, route: &Route) -> AgentCall {
        AgentCall::Response(wire::response_call(
            id,
            policies.iter().map(|p| &p.wire),
            self.request,
            self.response,
            meta,
            &route.identity(),
        ))
    }
    fn check(&self, id: &str, reply: AgentReply) -> Result<Reply, CallError> {
        match reply {
            AgentReply::Response(r) => convert_response_reply(id, r).map_err(|e| CallError::Invalid(e.to_string())),
            _ => Err(CallError::Invalid("reply of the wrong phase".into())),
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
    pub report: &'a mut Report,
    /// The request's trace, when sampled.
    pub trace: Option<&'a RequestTrace>,
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
        let metrics = &self.route.metrics;
        let started = Instant::now();
        let deadline = started + self.snap.phase_timeout;
        let mut muts = Mutations::default();
        let mut outcome = None;
        let multi = plan.len() > 1;
        let chain_cx = self.trace.map(|t| {
            if multi {
                RequestTrace::child(
                    t.context(),
                    "kernel.execute_policy_chain",
                    vec![KeyValue::new("phase", phase.as_str())],
                )
            } else {
                t.context().clone()
            }
        });
        for (n, group) in plan.iter().enumerate() {
            let Some(agent) = self.snap.agents.get(group.agent) else {
                continue;
            };
            let Some(entries) = chain.policies.get(group.policies.clone()) else {
                continue;
            };
            let cache = self.cache_key(group, entries, &*state);
            let hit = cache.as_ref().and_then(|(key, _)| self.snap.decisions.store.get(key));
            if cache.is_some() {
                for p in entries {
                    if let Some(c) = &p.cache_metrics {
                        if hit.is_some() { &c.hit } else { &c.miss }.inc();
                    }
                }
            }
            let called;
            let reply = if let Some(entry) = &hit {
                &entry.reply
            } else {
                let call = state.message(self.request_id, entries, self.meta, self.route);
                let call_started = Instant::now();
                let call_cx = chain_cx.as_ref().map(|parent| {
                    let names: Vec<opentelemetry::StringValue> =
                        entries.iter().map(|p| p.proto.name.clone().into()).collect();
                    let mut attrs = vec![KeyValue::new("agent.name", agent.name().to_string())];
                    if multi {
                        attrs.push(KeyValue::new("policies", opentelemetry::Value::Array(names.into())));
                        attrs.push(KeyValue::new("group.index", (n + 1) as i64));
                        RequestTrace::child_named(parent, format!("kernel.agent_call.{}", n + 1), attrs)
                    } else {
                        attrs.push(KeyValue::new("policy.names", opentelemetry::Value::Array(names.into())));
                        attrs.push(KeyValue::new("policy.count", entries.len() as i64));
                        RequestTrace::child(parent, "kernel.agent_call", attrs)
                    }
                });
                // Boxed: a large future kept inline is copied by every future
                // that awaits it, up to the stream's.
                let result =
                    Box::pin(agent.execute(call, deadline.min(call_started + agent.timeout()), call_cx.as_ref()))
                        .await
                        .and_then(|reply| state.check(self.request_id, reply));
                if let Some(cx) = call_cx {
                    end(cx);
                }
                let duration = call_started.elapsed();
                let status = match &result {
                    Ok(_) => 0,
                    Err(e) => e.status_index(),
                };
                if let Some(m) = metrics.agents.get(group.agent) {
                    m.calls[status].inc();
                    m.duration.observe(duration.as_secs_f64());
                }
                self.report.calls.push(CallRecord {
                    agent: group.agent,
                    phase,
                    policies: group.policies.clone(),
                    duration,
                    instructions: result.as_ref().map(|r| r.instructions.len()).unwrap_or(0),
                });
                called = match result {
                    Ok(reply) => reply,
                    Err(error) => {
                        let action = match entries.first().and_then(|p| p.on_failure) {
                            Some(f) => f,
                            None if agent.config.fail_open => OnFailure::Continue,
                            None => OnFailure::Deny,
                        };
                        self.failure(phase, group, n, error, action);
                        match action {
                            OnFailure::Deny => {
                                outcome = Some(Outcome::Immediate(self.snap.responses.failure.clone()));
                                break;
                            }
                            OnFailure::Continue => continue,
                            OnFailure::SkipRemaining => {
                                self.report.skipped = true;
                                break;
                            }
                        }
                    }
                };
                if let Some((key, max_age)) = cache {
                    let asked = called
                        .cache_max_age_ms
                        .map(|ms| std::time::Duration::from_millis(u64::from(ms)));
                    let ttl = asked.map_or(max_age, |a| a.min(max_age));
                    self.snap.decisions.store.put(key, called.clone(), ttl);
                }
                &called
            };
            let update_cx = chain_cx
                .as_ref()
                .filter(|_| multi)
                .map(|parent| RequestTrace::child_named(parent, format!("kernel.context_update.{}", n + 1), vec![]));
            let next = state.apply(reply, &mut muts, self.meta, n);
            if let Some(cx) = update_cx {
                end(cx);
            }
            match next {
                Next::Continue => {}
                Next::Skip => {
                    self.report.skipped = true;
                    break;
                }
                Next::Immediate(imm) => {
                    outcome = Some(Outcome::Immediate(imm));
                    break;
                }
            }
        }
        if multi {
            if let Some(cx) = chain_cx {
                end(cx);
            }
        }
        self.report.conflicts += muts.conflict_count();
        if let Some(t) = self.trace.filter(|_| multi) {
            let responses = self.report.calls.iter().filter(|c| c.phase == phase).count();
            let instructions: usize = self
                .report
                .calls
                .iter()
                .filter(|c| c.phase == phase)
                .map(|c| c.instructions)
                .sum();
            end(RequestTrace::child(
                t.context(),
                "kernel.aggregate_responses",
                vec![
                    KeyValue::new("response.count", responses as i64),
                    KeyValue::new("instruction.count", instructions as i64),
                    KeyValue::new("conflicts.detected", i64::from(muts.conflict_count())),
                ],
            ));
        }
        let mut agents: Vec<usize> = plan.iter().map(|g| g.agent).collect();
        agents.sort_unstable();
        agents.dedup();
        if let Some(h) = metrics.chain_duration.get(agents.len()) {
            h.observe(started.elapsed().as_secs_f64());
        }
        let c = muts.conflicts;
        for (counter, n) in metrics
            .conflicts
            .iter()
            .zip([c.header, c.body, c.request_line, c.status])
        {
            if n > 0 {
                counter.inc_by(u64::from(n));
            }
        }
        outcome.unwrap_or(Outcome::Continue(muts))
    }

    /// The decision cache key of `group`'s call and the longest an outcome
    /// may be kept, when the call may be answered from the cache: an
    /// enforced route with the cache on, a request phase, and every policy
    /// of the group declared cacheable on its agent.
    fn cache_key<S: PhaseState>(
        &self,
        group: &Group,
        entries: &[CompiledPolicy],
        state: &S,
    ) -> Option<(decisions::Key, std::time::Duration)> {
        let d = &self.snap.decisions;
        if !d.enabled || !self.route.decision_cache || self.route.mode == RouteMode::Shadow {
            return None;
        }
        let request = state.cacheable_request()?;
        let mut max_age = d.max_age;
        for p in entries {
            max_age = max_age.min(p.cache_on(group.agent)?.max_age);
        }
        let scope = decisions::key::Scope {
            version: self.snap.version,
            route: &self.route.name,
            agent: group.agent,
            epoch: self.snap.agents.get(group.agent)?.epoch(),
        };
        let specs = entries
            .iter()
            .filter_map(|p| Some((&p.wire[..], p.cache_on(group.agent)?)));
        let key = decisions::key::key(scope, specs, request, self.meta)?;
        Some((key, max_age))
    }

    /// Records and logs a failed group (spec §10.2, partial chain failure).
    fn failure(&mut self, phase: Phase, group: &Group, n: usize, error: CallError, action: OnFailure) {
        let chain = self.route.chain(phase);
        let name = self.snap.agents.get(group.agent).map(|a| a.name()).unwrap_or("");
        let group = group.policies.clone();
        let range = match action {
            OnFailure::Continue => group.clone(),
            _ => group.start..chain.policies.len(),
        };
        let skipped: Vec<&str> = chain
            .policies
            .get(range)
            .unwrap_or_default()
            .iter()
            .map(|p| p.proto.name.as_str())
            .collect();
        let metadata = serde_json::json!({
            "phase": phase.as_str(),
            "total_policies": chain.policies.len(),
            "executed_policies": group.start,
            "failed_at_agent": name,
            "failed_at_step": n + 1,
            "failure_reason": error.to_string(),
            "on_failure_action": action.as_str(),
            "policies_skipped": skipped,
        });
        tracing::warn!(
            request_id = self.request_id,
            route_name = %self.route.name,
            metadata_json = %metadata,
            "Partial policy chain execution due to agent failure"
        );
        self.route.metrics.partial_failure(name, error.kind());
        self.report.failures.push(Failure {
            agent: name.to_string(),
            step: n + 1,
            error,
            action: action.as_str(),
        });
    }
}
