//! The immutable snapshot the request path reads: compiled routes, agents,
//! configured responses and settings. It is loaded once per stream from one
//! `ArcSwap`, so both phases of a request see the same snapshot, and it is
//! rebuilt (never mutated) on reload or when discovery changes what agents
//! support.

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::aggregate::Immediate;
use crate::config::{encode_params, KernelConfig, OnFailure, PhaseValidation, ResponseConfig};
use crate::decisions::{CacheSpec, DecisionCache, Decisions};
use crate::proto::{self, PolicyPhase};
use crate::registry::AgentHandle;
use crate::telemetry::metrics::RouteMetrics;

/// Which phase a chain runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Before the upstream.
    Request,
    /// After the upstream.
    Response,
}

impl Phase {
    /// Lower-case name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Request => "request",
            Phase::Response => "response",
        }
    }

    fn allows(self, declared: PolicyPhase) -> bool {
        matches!(
            (self, declared),
            (_, PolicyPhase::RequestResponse)
                | (Phase::Request, PolicyPhase::Request)
                | (Phase::Response, PolicyPhase::Response)
        )
    }
}

/// One chain entry, compiled against the discovered agents.
#[derive(Debug, Clone)]
pub struct CompiledPolicy {
    /// The policy as sent to agents (params already encoded).
    pub proto: proto::Policy,
    /// `proto`, encoded once: what calls carry.
    pub wire: bytes::Bytes,
    /// The entry's `on_failure`.
    pub on_failure: Option<OnFailure>,
    /// Index of the preferred agent.
    pub preferred: Option<usize>,
    /// Indices of agents that declare this policy for this phase and accept
    /// its params. Empty: the route is invalid.
    pub candidates: Vec<usize>,
    /// Why `candidates` is empty, for logs.
    pub problem: Option<String>,
    /// The candidates on which the policy requires the body.
    pub body_agents: Vec<usize>,
    /// The candidates on which it can take a response body piece by piece
    /// (`streams_response_body`; response chains only).
    pub stream_agents: Vec<usize>,
    /// The stream agents on which it streams only event streams
    /// (`streams_event_streams_only`): other bodies are buffered for it.
    pub event_stream_agents: Vec<usize>,
    /// The candidates on which its request-phase outcome may be cached, with
    /// what keys it (request chains only).
    pub cache: Vec<(usize, Arc<CacheSpec>)>,
    /// Decision cache hits and misses of this entry, when it is cacheable
    /// somewhere.
    pub cache_metrics: Option<CacheCounters>,
}

/// Decision cache counters of one chain entry.
#[derive(Debug, Clone)]
pub struct CacheCounters {
    /// Answered from the cache.
    pub hit: prometheus::IntCounter,
    /// Looked up, not found: the agent was called.
    pub miss: prometheus::IntCounter,
}

impl CacheCounters {
    fn new(route: &str, policy: &str) -> Self {
        let vec = &crate::telemetry::metrics::metrics().decision_cache;
        Self {
            hit: vec.with_label_values(&[route, policy, "hit"]),
            miss: vec.with_label_values(&[route, policy, "miss"]),
        }
    }
}

impl CompiledPolicy {
    /// What keys this entry's outcome on `agent`, when it is cacheable there.
    pub fn cache_on(&self, agent: usize) -> Option<&CacheSpec> {
        self.cache.iter().find(|(a, _)| *a == agent).map(|(_, s)| &**s)
    }
}

/// A compiled chain.
#[derive(Debug, Clone, Default)]
pub struct Chain {
    /// Its policies, in order.
    pub policies: Vec<CompiledPolicy>,
    /// True when some candidate of some policy requires the body.
    pub needs_body: bool,
    /// True when some candidate of some policy can stream the response body.
    pub may_stream: bool,
}

/// A compiled route.
#[derive(Debug)]
pub struct Route {
    /// The route name.
    pub name: String,
    /// The route's version: the first 16 hex digits of the SHA-256 of its
    /// configuration, the same on every kernel serving the same route.
    /// Agents get it, and the name, as metadata `route.version` and
    /// `route.name` (approvals bind to them).
    pub version: String,
    /// `enforce` or `shadow`.
    pub mode: crate::config::RouteMode,
    /// The request chain.
    pub request: Chain,
    /// The response chain.
    pub response: Chain,
    /// Round-robin counter for choosing among equally good agents.
    pub rr: AtomicUsize,
    /// Metric handles of this route, indexed by agent.
    pub metrics: RouteMetrics,
    /// The route's `decision_cache` switch.
    pub decision_cache: bool,
}

impl Route {
    /// Metadata `route.name` and `route.version`, as agents get them.
    pub fn identity(&self) -> [(&str, &str); 2] {
        [("route.name", &self.name), ("route.version", &self.version)]
    }

    /// The chain of `phase`.
    pub fn chain(&self, phase: Phase) -> &Chain {
        match phase {
            Phase::Request => &self.request,
            Phase::Response => &self.response,
        }
    }

    /// Problems that make the route invalid, for logs.
    pub fn problems(&self) -> Vec<String> {
        self.request
            .policies
            .iter()
            .chain(&self.response.policies)
            .filter_map(|p| p.problem.clone())
            .collect()
    }
}

/// The configured immediate responses.
#[derive(Debug, Clone)]
pub struct Responses {
    /// Policy not supported by any agent.
    pub not_supported: Immediate,
    /// Every supporting agent unhealthy.
    pub unavailable: Immediate,
    /// A policy denied because its agent failed.
    pub failure: Immediate,
    /// Too many streams in progress.
    pub overload: Immediate,
    /// A request body over `server.max_request_body_bytes`.
    pub too_large: Immediate,
}

/// Everything the request path needs, immutable.
#[derive(Debug)]
pub struct Snapshot {
    /// Configuration version: 1 at startup, +1 per successful reload.
    pub version: u64,
    /// Routes by name.
    pub routes: HashMap<String, Arc<Route>>,
    /// Metric handles for requests that match no route (label `unknown`).
    pub unknown: RouteMetrics,
    /// Agents; indices in routes refer to this list.
    pub agents: Vec<Arc<AgentHandle>>,
    /// Configured responses.
    pub responses: Responses,
    /// Response-phase validation mode.
    pub phase_validation: PhaseValidation,
    /// Header to read the route name from, when configured.
    pub route_name_header: Option<String>,
    /// Budget of one phase's chain.
    pub phase_timeout: Duration,
    /// The configuration this snapshot was built from.
    pub config: Arc<KernelConfig>,
    /// The decision cache and its settings.
    pub decisions: Decisions,
}

fn immediate(r: &ResponseConfig, reason: &str) -> Immediate {
    Immediate {
        status: r.status_code,
        headers: r
            .headers
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), Bytes::from(v.clone())))
            .collect(),
        body: Bytes::from(r.body.clone()),
        reason: reason.to_string(),
    }
}

impl Snapshot {
    /// Compiles `config` against the agents' current discovery results,
    /// with a new, empty decision cache. `agents` must hold one handle per
    /// configured agent, in config order.
    pub fn build(config: Arc<KernelConfig>, agents: Vec<Arc<AgentHandle>>, version: u64) -> Self {
        let store = Arc::new(DecisionCache::new(&config.decision_cache));
        Self::build_over(config, agents, version, store)
    }

    /// [`Snapshot::build`] with `store` as its decision cache: the one the
    /// kernel keeps across reloads and rediscoveries.
    pub fn build_over(
        config: Arc<KernelConfig>,
        agents: Vec<Arc<AgentHandle>>,
        version: u64,
        store: Arc<DecisionCache>,
    ) -> Self {
        let by_name: HashMap<&str, usize> = agents.iter().enumerate().map(|(i, a)| (a.name(), i)).collect();
        let names: Vec<&str> = agents.iter().map(|a| a.name()).collect();
        let routes = config
            .route_policies
            .iter()
            .map(|r| {
                let route = Route {
                    version: crate::management::store::routes_hash(std::slice::from_ref(r))[..16].to_string(),
                    name: r.route_name.clone(),
                    mode: r.mode,
                    request: compile_chain(
                        &r.route_name,
                        &r.request_policy_chain,
                        Phase::Request,
                        &agents,
                        &by_name,
                    ),
                    response: compile_chain(
                        &r.route_name,
                        &r.response_policy_chain,
                        Phase::Response,
                        &agents,
                        &by_name,
                    ),
                    rr: AtomicUsize::new(0),
                    metrics: RouteMetrics::new(&r.route_name, &names),
                    decision_cache: r.decision_cache,
                };
                (r.route_name.clone(), Arc::new(route))
            })
            .collect();
        Self {
            version,
            routes,
            unknown: RouteMetrics::new("unknown", &[]),
            agents,
            responses: Responses {
                not_supported: immediate(&config.policy_not_supported_response, "policy_not_supported"),
                unavailable: immediate(&config.agent_unavailable_response, "agent_unavailable"),
                failure: immediate(&config.policy_failure_response, "policy_execution_failed"),
                overload: immediate(&config.overload_response, "overloaded"),
                too_large: immediate(&config.payload_too_large_response, "payload_too_large"),
            },
            phase_validation: config.response_phase_validation,
            route_name_header: config.server.route_name_header.as_ref().map(|h| h.to_ascii_lowercase()),
            phase_timeout: Duration::from_millis(config.server.phase_timeout_ms),
            decisions: Decisions::new(store, &config.decision_cache),
            config,
        }
    }

    /// Logs every invalid route with its problems; returns how many there are.
    pub fn log_invalid_routes(&self) -> usize {
        let mut invalid = 0;
        for route in self.routes.values() {
            let problems = route.problems();
            if !problems.is_empty() {
                invalid += 1;
                tracing::error!(route = %route.name, ?problems, "route invalid: requests to it get policy_not_supported_response");
            }
        }
        invalid
    }
}

/// Policy names starting with this are the kernel's own: no agent's
/// declaration of one is used, so a route using one never runs a chain.
pub const RESERVED_POLICY_PREFIX: &str = "policy-kernel/";

/// The policy of the route put in force for a value in the fleet's store
/// that is not a valid route: reserved, so the route answers
/// `policy_not_supported_response` (fails closed) on every kernel.
pub const STORE_VALUE_INVALID: &str = "policy-kernel/store-value-invalid";

fn reserved(policy: &str) -> bool {
    policy.starts_with(RESERVED_POLICY_PREFIX)
}

fn compile_chain(
    route: &str,
    entries: &[crate::config::ChainEntry],
    phase: Phase,
    agents: &[Arc<AgentHandle>],
    by_name: &HashMap<&str, usize>,
) -> Chain {
    let mut needs_body = false;
    let mut may_stream = false;
    let policies = entries
        .iter()
        .map(|e| {
            // Params were checked by config validation; encode cannot fail here.
            let params = encode_params(&e.params).unwrap_or_default();
            let mut candidates = Vec::new();
            let mut body_agents = Vec::new();
            let mut stream_agents = Vec::new();
            let mut event_stream_agents = Vec::new();
            let mut cache = Vec::new();
            let mut reasons = Vec::new();
            for (i, a) in agents.iter().enumerate() {
                // A reserved name is never matched, whatever an agent declares.
                let Some(info) = a.policy(&e.policy).filter(|_| !reserved(&e.policy)) else {
                    continue;
                };
                if !phase.allows(info.supported_phases()) {
                    reasons.push(format!("agent {:?} declares it for another phase", a.name()));
                    continue;
                }
                if let Some(bad) = params.keys().find(|k| !info.param_schema.contains(k)) {
                    reasons.push(format!(
                        "param {bad:?} is not in its param_schema on agent {:?}",
                        a.name()
                    ));
                    continue;
                }
                if let Some(missing) = info.required_params.iter().find(|k| !params.contains_key(*k)) {
                    reasons.push(format!(
                        "required param {missing:?} is missing for agent {:?}",
                        a.name()
                    ));
                    continue;
                }
                needs_body |= info.requires_body;
                if info.requires_body {
                    body_agents.push(i);
                    if info.streams_response_body && phase == Phase::Response {
                        stream_agents.push(i);
                        if info.streams_event_streams_only {
                            event_stream_agents.push(i);
                        }
                        may_stream = true;
                    }
                }
                if phase == Phase::Request {
                    match CacheSpec::resolve(info.cache.as_ref(), &params) {
                        Ok(Some(spec)) => cache.push((i, Arc::new(spec))),
                        Ok(None) => {}
                        Err(err) => tracing::warn!(agent = a.name(), policy = %e.policy, route, error = %err,
                            "decision cache declaration not usable: the policy is called every time"),
                    }
                }
                candidates.push(i);
            }
            let problem = candidates.is_empty().then(|| {
                if e.policy == STORE_VALUE_INVALID {
                    format!(
                        "the configuration store's value for route {route:?} is not a valid route: \
                         every request gets policy_not_supported_response until the route is written again"
                    )
                } else if reasons.is_empty() {
                    format!(
                        "{} policy {:?}: no discovered agent declares it",
                        phase.as_str(),
                        e.policy
                    )
                } else {
                    format!("{} policy {:?}: {}", phase.as_str(), e.policy, reasons.join("; "))
                }
            });
            let proto = proto::Policy {
                name: e.policy.clone(),
                params: params.into_iter().collect(),
                on_failure: e.on_failure.map(|f| f.as_str().to_string()).unwrap_or_default(),
            };
            CompiledPolicy {
                wire: crate::wire::encode_policy(&proto),
                proto,
                on_failure: e.on_failure,
                preferred: e.agent.as_deref().and_then(|a| by_name.get(a).copied()),
                candidates,
                problem,
                body_agents,
                stream_agents,
                event_stream_agents,
                cache_metrics: (!cache.is_empty()).then(|| CacheCounters::new(route, &e.policy)),
                cache,
            }
        })
        .collect();
    Chain {
        policies,
        needs_body,
        may_stream,
    }
}
