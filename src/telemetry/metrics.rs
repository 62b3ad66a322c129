//! Prometheus metrics (spec §10.1 plus the kernel's own).
//!
//! Families live in one process-wide registry. The request path never looks
//! labels up: each snapshot resolves the handles of its routes and agents
//! once ([`RouteMetrics`], [`AgentMetrics`]), so recording is a few atomic
//! adds. Only rare paths (immediate responses, partial failures) resolve
//! labels at the time. Label values are bounded: `route` is a configured
//! route name or `unknown`, `agent` a configured agent name or `none`, and
//! agent-supplied reasons are reduced to a short token.

use std::sync::LazyLock;

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

const DURATION_BUCKETS: [f64; 9] = [0.001, 0.005, 0.010, 0.025, 0.050, 0.100, 0.250, 0.500, 1.0];
const CALL_BUCKETS: [f64; 6] = [1.0, 2.0, 3.0, 4.0, 5.0, 10.0];

/// Outcomes of one agent call, the `status` label of `requests_total`.
pub const CALL_STATUSES: [&str; 5] = ["ok", "timeout", "unavailable", "error", "invalid_reply"];

/// Every metric family.
pub struct Metrics {
    /// The registry `/metrics` renders.
    pub registry: Registry,
    /// `policy_kernel_requests_total{route,agent,status}`.
    pub requests: IntCounterVec,
    /// `policy_kernel_request_duration_seconds{route,agent}`.
    pub duration: HistogramVec,
    /// `policy_kernel_agent_health{agent}`.
    pub agent_health: IntGaugeVec,
    /// `policy_kernel_agent_timeouts_total{agent}`.
    pub agent_timeouts: IntCounterVec,
    /// `policy_kernel_agent_stream_calls_total{agent}`.
    pub agent_stream_calls: IntCounterVec,
    /// `policy_kernel_config_reload_total{status}`.
    pub reloads: IntCounterVec,
    /// `policy_kernel_agent_calls_per_request{route}`.
    pub calls_per_request: HistogramVec,
    /// `policy_kernel_chain_execution_duration_seconds{route,num_agents}`.
    pub chain_duration: HistogramVec,
    /// `policy_kernel_partial_chain_failures_total{route,failed_agent,failure_type}`.
    pub partial_failures: IntCounterVec,
    /// `policy_kernel_instruction_conflicts_total{route,conflict_type}`.
    pub conflicts: IntCounterVec,
    /// `policy_kernel_config_version`.
    pub config_version: IntGauge,
    /// `policy_kernel_active_streams`.
    pub active_streams: IntGauge,
    /// `policy_kernel_ready`: 1 while `/readyz` answers ready, else 0.
    pub ready: IntGauge,
    /// `policy_kernel_immediate_responses_total{route,status,reason}`.
    pub immediate: IntCounterVec,
    /// `policy_kernel_agent_circuit_state{agent}`: 0 closed, 1 open, 2 half-open.
    pub circuit: IntGaugeVec,
    /// `policy_kernel_agent_identity_mismatch_total{agent}`: agent connections
    /// closed because the peer's uid or gid was not the expected one.
    pub agent_identity_mismatch: IntCounterVec,
    /// `policy_kernel_ext_proc_peers_refused_total{reason}`: connections to
    /// the kernel's socket refused by `server.allowed_peer_uids`.
    pub ext_proc_peers_refused: IntCounterVec,
    /// `policy_kernel_decision_cache_total{route,policy,result}`: lookups of
    /// the decision cache, `hit` or `miss`.
    pub decision_cache: IntCounterVec,
    /// `policy_kernel_decision_cache_entries`.
    pub decision_cache_entries: IntGauge,
    /// `policy_kernel_decision_cache_bytes`: the entries' weight.
    pub decision_cache_bytes: IntGauge,
}

fn counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).unwrap_or_else(|e| panic!("metric {name}: {e}"));
    r.register(Box::new(c.clone()))
        .unwrap_or_else(|e| panic!("metric {name}: {e}"));
    c
}

fn histogram(r: &Registry, name: &str, help: &str, labels: &[&str], buckets: &[f64]) -> HistogramVec {
    let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets.to_vec()), labels)
        .unwrap_or_else(|e| panic!("metric {name}: {e}"));
    r.register(Box::new(h.clone()))
        .unwrap_or_else(|e| panic!("metric {name}: {e}"));
    h
}

fn gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).unwrap_or_else(|e| panic!("metric {name}: {e}"));
    r.register(Box::new(g.clone()))
        .unwrap_or_else(|e| panic!("metric {name}: {e}"));
    g
}

impl Metrics {
    // Registration only fails on a programming error (duplicate or malformed
    // names), caught by the first test that touches metrics.
    fn new() -> Self {
        let r = Registry::new();
        let process = prometheus::process_collector::ProcessCollector::for_self();
        let _ = r.register(Box::new(process));
        let agent_health = IntGaugeVec::new(
            Opts::new(
                "policy_kernel_agent_health",
                "Agent health status (0=unhealthy, 1=healthy)",
            ),
            &["agent"],
        )
        .unwrap_or_else(|e| panic!("metric agent_health: {e}"));
        r.register(Box::new(agent_health.clone()))
            .unwrap_or_else(|e| panic!("metric agent_health: {e}"));
        let circuit = IntGaugeVec::new(
            Opts::new(
                "policy_kernel_agent_circuit_state",
                "Agent circuit breaker (0=closed, 1=open, 2=half-open)",
            ),
            &["agent"],
        )
        .unwrap_or_else(|e| panic!("metric circuit: {e}"));
        r.register(Box::new(circuit.clone()))
            .unwrap_or_else(|e| panic!("metric circuit: {e}"));
        // Counted by the log writer, which must not depend on this registry.
        r.register(Box::new(super::stdout::dropped_counter().clone()))
            .unwrap_or_else(|e| panic!("metric log_lines_dropped: {e}"));
        let reloads = counter(
            &r,
            "policy_kernel_config_reload_total",
            "Total number of config reload attempts",
            &["status"],
        );
        // Both outcomes exist from the start at 0, so that the first failed
        // reload is an increase Prometheus sees, not a series that appears.
        for status in ["success", "failure"] {
            reloads.with_label_values(&[status]);
        }
        Self {
            requests: counter(
                &r,
                "policy_kernel_requests_total",
                "Total number of requests processed",
                &["route", "agent", "status"],
            ),
            duration: histogram(
                &r,
                "policy_kernel_request_duration_seconds",
                "Request processing duration",
                &["route", "agent"],
                &DURATION_BUCKETS,
            ),
            agent_health,
            agent_timeouts: counter(
                &r,
                "policy_kernel_agent_timeouts_total",
                "Total number of agent timeouts",
                &["agent"],
            ),
            agent_stream_calls: counter(
                &r,
                "policy_kernel_agent_stream_calls_total",
                "Policy calls sent on the agent's call stream (the rest are unary calls)",
                &["agent"],
            ),
            reloads,
            calls_per_request: histogram(
                &r,
                "policy_kernel_agent_calls_per_request",
                "Number of agent calls per request (multi-agent execution)",
                &["route"],
                &CALL_BUCKETS,
            ),
            chain_duration: histogram(
                &r,
                "policy_kernel_chain_execution_duration_seconds",
                "Total duration for executing full policy chain",
                &["route", "num_agents"],
                &DURATION_BUCKETS,
            ),
            partial_failures: counter(
                &r,
                "policy_kernel_partial_chain_failures_total",
                "Total number of partial policy chain failures",
                &["route", "failed_agent", "failure_type"],
            ),
            conflicts: counter(
                &r,
                "policy_kernel_instruction_conflicts_total",
                "Number of instruction conflicts during aggregation",
                &["route", "conflict_type"],
            ),
            config_version: gauge(
                &r,
                "policy_kernel_config_version",
                "Version of the active configuration",
            ),
            active_streams: gauge(&r, "policy_kernel_active_streams", "ext_proc streams in progress"),
            ready: gauge(
                &r,
                "policy_kernel_ready",
                "1 while the kernel is ready (configuration loaded, ext_proc listening, not draining)",
            ),
            immediate: counter(
                &r,
                "policy_kernel_immediate_responses_total",
                "Immediate responses sent to clients",
                &["route", "status", "reason"],
            ),
            circuit,
            agent_identity_mismatch: counter(
                &r,
                "policy_kernel_agent_identity_mismatch_total",
                "Agent connections closed because the peer uid or gid was not the expected one",
                &["agent"],
            ),
            ext_proc_peers_refused: counter(
                &r,
                "policy_kernel_ext_proc_peers_refused_total",
                "Connections to the kernel's ext_proc socket refused by server.allowed_peer_uids",
                &["reason"],
            ),
            decision_cache: counter(
                &r,
                "policy_kernel_decision_cache_total",
                "Decision cache lookups by route and policy: hit (no agent call) or miss",
                &["route", "policy", "result"],
            ),
            decision_cache_entries: gauge(
                &r,
                "policy_kernel_decision_cache_entries",
                "Entries in the decision cache, as of the last insert",
            ),
            decision_cache_bytes: gauge(
                &r,
                "policy_kernel_decision_cache_bytes",
                "Weight of the decision cache's entries in bytes, as of the last insert",
            ),
            registry: r,
        }
    }

    /// Text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = prometheus::TextEncoder::new().encode_utf8(&self.registry.gather(), &mut out);
        out
    }
}

/// The process-wide metrics.
pub fn metrics() -> &'static Metrics {
    static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);
    &METRICS
}

/// Handles of one agent on one route.
#[derive(Debug, Clone)]
pub struct AgentRouteMetrics {
    /// `requests_total` per call outcome, in [`CALL_STATUSES`] order.
    pub calls: [IntCounter; 5],
    /// Call duration.
    pub duration: Histogram,
}

/// Handles of one route, resolved when the snapshot is built.
#[derive(Debug, Clone)]
pub struct RouteMetrics {
    /// The route label.
    pub route: String,
    /// Per agent of the snapshot, by index.
    pub agents: Vec<AgentRouteMetrics>,
    /// `requests_total{agent="none"}`: passthrough / not supported / unavailable.
    pub no_call: [IntCounter; 3],
    /// Calls per request.
    pub calls_per_request: Histogram,
    /// Chain duration by number of distinct agents (index = count).
    pub chain_duration: Vec<Histogram>,
    /// Conflicts: header, body, request_line, status.
    pub conflicts: [IntCounter; 4],
}

/// Index into [`RouteMetrics::no_call`].
#[derive(Debug, Clone, Copy)]
pub enum NoCall {
    /// Unknown route or empty chain.
    Passthrough = 0,
    /// Validation stage 1 failed.
    NotSupported = 1,
    /// Validation stage 2 failed.
    Unavailable = 2,
}

impl RouteMetrics {
    /// Resolves the handles of `route` over `agents` (names, in order).
    pub fn new(route: &str, agents: &[&str]) -> Self {
        let m = metrics();
        let agent_metrics = agents
            .iter()
            .map(|a| AgentRouteMetrics {
                calls: CALL_STATUSES.map(|s| m.requests.with_label_values(&[route, a, s])),
                duration: m.duration.with_label_values(&[route, a]),
            })
            .collect();
        Self {
            route: route.to_string(),
            agents: agent_metrics,
            no_call: ["passthrough", "policy_not_supported", "agent_unavailable"]
                .map(|s| m.requests.with_label_values(&[route, "none", s])),
            calls_per_request: m.calls_per_request.with_label_values(&[route]),
            chain_duration: (0..=agents.len())
                .map(|n| m.chain_duration.with_label_values(&[route, &n.to_string()]))
                .collect(),
            conflicts: ["header", "body", "request_line", "status"].map(|c| m.conflicts.with_label_values(&[route, c])),
        }
    }

    /// Counts an immediate response (resolves labels: not a hot path).
    pub fn immediate(&self, status: u16, reason: &str) {
        metrics()
            .immediate
            .with_label_values(&[&self.route, &status.to_string(), &reason_label(reason)])
            .inc();
    }

    /// Counts a failed group.
    pub fn partial_failure(&self, agent: &str, failure_type: &str) {
        metrics()
            .partial_failures
            .with_label_values(&[&self.route, agent, failure_type])
            .inc();
    }
}

/// Per-agent handles.
#[derive(Debug, Clone)]
pub struct AgentMetrics {
    /// `agent_timeouts_total{agent}`.
    pub timeouts: IntCounter,
    /// `agent_stream_calls_total{agent}`.
    pub stream_calls: IntCounter,
    /// `agent_health{agent}`.
    pub health: IntGauge,
    /// `agent_circuit_state{agent}`.
    pub circuit: IntGauge,
}

impl AgentMetrics {
    /// Resolves the handles of agent `name`.
    pub fn new(name: &str) -> Self {
        let m = metrics();
        Self {
            timeouts: m.agent_timeouts.with_label_values(&[name]),
            stream_calls: m.agent_stream_calls.with_label_values(&[name]),
            health: m.agent_health.with_label_values(&[name]),
            circuit: m.circuit.with_label_values(&[name]),
        }
    }
}

/// Agent-supplied reasons become a short lower-case token, so that a
/// misbehaving agent cannot create unbounded label values.
pub fn reason_label(reason: &str) -> String {
    let ok = !reason.is_empty()
        && reason.len() <= 48
        && reason
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_');
    if ok {
        reason.to_string()
    } else {
        "other".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_bounded() {
        assert_eq!(reason_label("rate_limited"), "rate_limited");
        assert_eq!(reason_label("Bad Reason!"), "other");
        assert_eq!(reason_label(&"a".repeat(49)), "other");
        assert_eq!(reason_label(""), "other");
    }

    #[test]
    fn all_families_render() {
        let rm = RouteMetrics::new("r-test", &["a-test"]);
        rm.agents[0].calls[0].inc();
        rm.immediate(401, "authentication_failed");
        let text = metrics().render();
        for name in [
            "policy_kernel_requests_total",
            "policy_kernel_request_duration_seconds",
            "policy_kernel_agent_calls_per_request",
            "policy_kernel_chain_execution_duration_seconds",
            "policy_kernel_instruction_conflicts_total",
            "policy_kernel_config_version",
            "policy_kernel_active_streams",
            "policy_kernel_immediate_responses_total",
        ] {
            assert!(text.contains(name), "{name} missing");
        }
        assert!(text.contains(r#"policy_kernel_requests_total{agent="a-test",route="r-test",status="ok"} 1"#));
    }

    /// Alerts read these before anything happened: a reload failure must be
    /// an increase from 0, and readiness a value, not a missing series.
    #[test]
    fn reload_outcomes_and_readiness_render_before_any_event() {
        let text = metrics().render();
        for status in ["success", "failure"] {
            let prefix = format!("policy_kernel_config_reload_total{{status=\"{status}\"}} ");
            assert!(
                text.lines().any(|l| l.starts_with(&prefix)),
                "{prefix} missing:\n{text}"
            );
        }
        assert!(text.lines().any(|l| l.starts_with("policy_kernel_ready ")), "{text}");
    }
}
