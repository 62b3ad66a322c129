//! The configuration types, one per YAML section, with their defaults and the
//! structural validation of each.

use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{encode_params, find_line, invalid, ConfigError, ResponseConfig};
use crate::http::valid_header_name;

/// The whole file: everything sits under the `policy_kernel` key.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// The kernel configuration.
    pub policy_kernel: KernelConfig,
}

/// The kernel configuration (`policy_kernel:`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelConfig {
    /// Listener settings.
    #[serde(default)]
    pub server: ServerConfig,
    /// The policy agents the kernel may call.
    #[serde(default)]
    pub agents: Vec<AgentConfig>,
    /// Route name to policy chains.
    #[serde(default)]
    pub route_policies: Vec<RoutePolicy>,
    /// Answer when a route uses a policy that no agent supports (default 500).
    #[serde(default = "ResponseConfig::not_supported_default")]
    pub policy_not_supported_response: ResponseConfig,
    /// Answer when every agent supporting a policy is unhealthy (default 503).
    #[serde(default = "ResponseConfig::unavailable_default")]
    pub agent_unavailable_response: ResponseConfig,
    /// Answer when a policy denies because its agent failed (default 500).
    #[serde(default = "ResponseConfig::failure_default")]
    pub policy_failure_response: ResponseConfig,
    /// Answer when `server.max_concurrent_streams` are in progress (default 503).
    #[serde(default = "ResponseConfig::overload_default")]
    pub overload_response: ResponseConfig,
    /// Answer when a request body that a policy needs is declared or counted
    /// larger than `server.max_request_body_bytes` (default 413).
    #[serde(default = "ResponseConfig::too_large_default")]
    pub payload_too_large_response: ResponseConfig,
    /// Whether the response phase re-checks agent health (§6.3).
    #[serde(default)]
    pub response_phase_validation: PhaseValidation,
    /// Metrics, logs and traces.
    #[serde(default)]
    pub observability: ObservabilityConfig,
    /// The management API (off when absent).
    #[serde(default)]
    pub management: Option<super::ManagementConfig>,
    /// The cache of outcomes that agents declare cacheable.
    #[serde(default)]
    pub decision_cache: super::DecisionCacheConfig,
}

/// `server:`: where the kernel listens for Envoy.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// IP address of the TCP listener. Default `127.0.0.1`.
    pub address: String,
    /// TCP port of the listener; 0 picks a free port. Unset: no TCP listener
    /// when `socket_path` is set, port 9001 otherwise (see
    /// [`ServerConfig::tcp_addr`]).
    pub port: Option<u16>,
    /// Optional Unix socket path to serve on (Envoy `pipe` address).
    pub socket_path: Option<PathBuf>,
    /// TLS with client-certificate verification on the TCP listener.
    pub tls: Option<TlsConfig>,
    /// Uids allowed to connect to `socket_path` (checked with SO_PEERCRED on
    /// every connection). Unset: any process the socket's mode lets in.
    pub allowed_peer_uids: Option<Vec<u32>>,
    /// Maximum ext_proc streams (HTTP requests) in progress at once, across
    /// all connections. Beyond it a new request is answered at once with
    /// `overload_response` instead of queueing. Default 1000.
    pub max_concurrent_streams: u32,
    /// Optional request header to read the route name from when Envoy sends
    /// neither the `xds.route_name` attribute nor `x-route-name` metadata.
    /// The client controls this header: only enable it behind a proxy that
    /// overwrites it.
    pub route_name_header: Option<String>,
    /// Time budget of one phase's whole chain, in ms. Each agent call gets the
    /// smaller of its agent's `timeout_ms` and what is left of this budget.
    /// Keep Envoy's `message_timeout` above it. Default 2000, at most 30000.
    pub phase_timeout_ms: u64,
    /// How long in-flight streams may run after SIGTERM, in ms. Default 5000.
    pub drain_timeout_ms: u64,
    /// Threads that run requests. 0 (the default): one per CPU the process
    /// may run on (its affinity mask, e.g. `taskset`, or the container's CPU
    /// set). 1: a single-threaded runtime, the cheapest per request when the
    /// kernel has one core. Fixed at startup. At most 256.
    pub worker_threads: u16,
    /// Largest request body, in bytes, the kernel has Envoy buffer for a
    /// policy that needs the body. A larger declared body (`content-length`)
    /// is answered with `payload_too_large_response` before Envoy buffers
    /// anything; a body without a declared length is counted as it arrives
    /// and refused the same way past the limit or Envoy's buffer limit
    /// ([`crate::envoy::body_limit`]). Keep it at most Envoy's buffer limit
    /// (`per_connection_buffer_limit_bytes`, 1 MiB by default): a body Envoy
    /// is switched to buffer by the kernel is not held to that limit.
    /// Default 1048576, at most 15728640 (the agent call limit is 16 MiB).
    pub max_request_body_bytes: u64,
    /// Generations under `policy-kernel supervise` and the generation header.
    pub generations: super::GenerationsConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            address: "127.0.0.1".into(),
            port: None,
            socket_path: None,
            tls: None,
            allowed_peer_uids: None,
            max_concurrent_streams: 1000,
            route_name_header: None,
            phase_timeout_ms: 2000,
            drain_timeout_ms: 5000,
            worker_threads: 0,
            max_request_body_bytes: 1024 * 1024,
            generations: Default::default(),
        }
    }
}

/// Port of the TCP listener when neither `port` nor `socket_path` is set.
pub const DEFAULT_PORT: u16 = 9001;

/// `server.tls:`: the TCP listener speaks TLS and accepts only clients whose
/// certificate is signed by `client_ca_path`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The kernel's certificate chain (PEM).
    pub cert_path: PathBuf,
    /// The private key of `cert_path` (PEM).
    pub key_path: PathBuf,
    /// CA certificates (PEM) that sign the clients' (Envoy's) certificates.
    pub client_ca_path: PathBuf,
}

impl ServerConfig {
    /// The address of the TCP ext_proc listener, if there is one: there is
    /// when `port` is set, or when no `socket_path` is (then on
    /// [`DEFAULT_PORT`]). `None` when `address` is not an IP address
    /// (refused by validation).
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        let port = match (self.port, &self.socket_path) {
            (Some(p), _) => p,
            (None, None) => DEFAULT_PORT,
            (None, Some(_)) => return None,
        };
        let ip: IpAddr = self.address.parse().ok()?;
        Some(SocketAddr::new(ip, port))
    }

    /// The risk of this listener setup, when there is one: a TCP listener
    /// without TLS on an address other hosts can reach lets anything that
    /// reaches it run requests through the policies.
    pub fn exposure_warning(&self) -> Option<String> {
        let addr = self.tcp_addr()?;
        if self.tls.is_some() || addr.ip().is_loopback() {
            return None;
        }
        Some(format!(
            "server: ext_proc listens on TCP {addr} without TLS: anything that can reach this address can open ext_proc streams unauthenticated and make the kernel call its agents (probe API keys and tokens, spend other clients' rate limits, fill the audit journal). Serve Envoy on server.socket_path only, bind a loopback address, or set server.tls"
        ))
    }
}

/// One entry of `agents:`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// Unique agent name, used in logs, metrics and chain `agent:` preferences.
    pub name: String,
    /// Path of the agent's Unix socket.
    pub socket_path: PathBuf,
    /// Per-call timeout in ms. Default 500, at most 5000.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Retries of calls that provably never reached the agent.
    #[serde(default)]
    pub retry: RetryConfig,
    /// Interval between health checks, in ms. Default 5000.
    #[serde(default = "default_health_interval_ms")]
    pub health_check_interval_ms: u64,
    /// Health check timeout, in ms. Default 100.
    #[serde(default = "default_health_timeout_ms")]
    pub health_check_timeout_ms: u64,
    /// When a call to this agent fails and the policy has no `on_failure`:
    /// true continues the chain, false (default) answers with
    /// `policy_failure_response`.
    #[serde(default)]
    pub fail_open: bool,
    /// Calls in flight to this agent at most; a call beyond it fails at once
    /// (and follows `on_failure`), so one slow agent cannot hold every
    /// stream. Default 256.
    #[serde(default = "default_max_calls")]
    pub max_concurrent_calls: u32,
    /// Circuit breaker of this agent.
    #[serde(default)]
    pub circuit_breaker: CircuitBreakerConfig,
    /// The uid the process serving `socket_path` must run as (checked with
    /// SO_PEERCRED on every new connection). Default: the kernel's own uid.
    #[serde(default)]
    pub expected_uid: Option<u32>,
    /// The gid it must run as. Default: any.
    #[serde(default)]
    pub expected_gid: Option<u32>,
    /// Send policy calls on the agent's call stream when it serves one
    /// (`serves_call_stream`). Default true; false keeps unary calls.
    #[serde(default = "default_true")]
    pub call_stream: bool,
}

fn default_true() -> bool {
    true
}

impl AgentConfig {
    /// The identity the agent's process must have: `expected_uid` (default:
    /// the kernel's effective uid) and `expected_gid` when set.
    pub fn expected_peer(&self) -> policy_net::ExpectedPeer {
        policy_net::ExpectedPeer {
            // SAFETY: geteuid has no preconditions and cannot fail.
            uid: self.expected_uid.unwrap_or_else(|| unsafe { libc::geteuid() }),
            gid: self.expected_gid,
        }
    }
}

fn default_max_calls() -> u32 {
    256
}

/// `circuit_breaker:` of an agent.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CircuitBreakerConfig {
    /// Consecutive failed calls (timeouts, unreachable, gRPC errors) that open
    /// the circuit. Default 5; 0 disables the breaker.
    pub failure_threshold: u32,
    /// How long the circuit stays open before one probe call, in ms. Default 30000.
    pub cooldown_ms: u64,
}

impl Default for CircuitBreakerConfig {
    fn default() -> Self {
        Self {
            failure_threshold: 5,
            cooldown_ms: 30_000,
        }
    }
}

fn default_timeout_ms() -> u64 {
    500
}
fn default_health_interval_ms() -> u64 {
    5000
}
fn default_health_timeout_ms() -> u64 {
    100
}

/// `retry:` of an agent. Only calls that provably did not reach the agent
/// (the connection could not be made) are retried, within the call's deadline.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    /// Total attempts, including the first. Default 1 (no retry), at most 10.
    pub max_attempts: u32,
    /// Pause between attempts, in ms. Default 100.
    pub backoff_ms: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            max_attempts: 1,
            backoff_ms: 100,
        }
    }
}

/// One entry of `route_policies:`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RoutePolicy {
    /// The Envoy route name (the route's `name` in Envoy's route config).
    pub route_name: String,
    /// `enforce` (default): the chain's decision is applied. `shadow`: the
    /// chain runs and its decision is logged and counted, but Envoy always
    /// gets a plain CONTINUE.
    #[serde(default)]
    pub mode: RouteMode,
    /// Policies run before the upstream is called, in order.
    #[serde(default)]
    pub request_policy_chain: Vec<ChainEntry>,
    /// Policies run on the upstream's response, in order.
    #[serde(default)]
    pub response_policy_chain: Vec<ChainEntry>,
    /// `false` turns the decision cache off for this route: every request
    /// calls its agents. Default true.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub decision_cache: bool,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

/// `mode` of a route.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteMode {
    /// The chain's decision is applied.
    #[default]
    Enforce,
    /// The chain runs; its decision is only recorded.
    Shadow,
}

impl RouteMode {
    /// Lower-case name for logs and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            RouteMode::Enforce => "enforce",
            RouteMode::Shadow => "shadow",
        }
    }
}

/// One policy in a chain.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ChainEntry {
    /// Policy name, as agents declare it.
    pub policy: String,
    /// Parameters; scalars are sent as strings, lists and maps as JSON.
    #[serde(default)]
    pub params: BTreeMap<String, serde_yaml::Value>,
    /// What to do when the call for this policy fails. Unset: the agent's
    /// `fail_open` decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<OnFailure>,
    /// Preferred agent, used when it is healthy and supports the policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

/// `on_failure` of a chain entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnFailure {
    /// Answer with `policy_failure_response`.
    Deny,
    /// Skip the failed group and go on with the chain.
    Continue,
    /// Stop the chain, keeping the results so far.
    SkipRemaining,
}

impl OnFailure {
    /// The wire form sent to agents.
    pub fn as_str(self) -> &'static str {
        match self {
            OnFailure::Deny => "deny",
            OnFailure::Continue => "continue",
            OnFailure::SkipRemaining => "skip_remaining",
        }
    }
}

/// `response_phase_validation`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseValidation {
    /// Use the plan made in the request phase (default).
    #[default]
    Permissive,
    /// Re-check agent health before the response phase; answer with
    /// `agent_unavailable_response` when a planned agent became unhealthy.
    Strict,
}

/// `observability:`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ObservabilityConfig {
    /// Port of the metrics and health endpoints. Default 9090; 0 disables them.
    pub metrics_port: u16,
    /// Address of the metrics and health endpoints. Default 127.0.0.1.
    pub metrics_address: String,
    /// Log level: trace, debug, info, warn or error. Default info.
    pub log_level: String,
    /// Tracing settings.
    pub tracing: TracingConfig,
}

impl Default for ObservabilityConfig {
    fn default() -> Self {
        Self {
            metrics_port: 9090,
            metrics_address: "127.0.0.1".into(),
            log_level: "info".into(),
            tracing: TracingConfig::default(),
        }
    }
}

/// `observability.tracing:`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TracingConfig {
    /// Whether spans are recorded. Default true.
    pub enabled: bool,
    /// Fraction of requests traced, 0.0-1.0. Default 0.01.
    pub sampling_rate: f64,
    /// OTLP endpoint to export spans to; unset: no export.
    pub otlp_endpoint: Option<String>,
}

impl Default for TracingConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            sampling_rate: 0.01,
            otlp_endpoint: None,
        }
    }
}

const LOG_LEVELS: [&str; 5] = ["trace", "debug", "info", "warn", "error"];

impl KernelConfig {
    /// The settings that only take effect at startup (listeners, runtime,
    /// stream limit, drain, metrics endpoint, tracing export) whose value in
    /// `next` differs from this one, by field name: a reload keeps them as
    /// they are and says so.
    pub fn restart_only_changes(&self, next: &KernelConfig) -> Vec<&'static str> {
        let (s, n) = (&self.server, &next.server);
        let (o, m) = (&self.observability, &next.observability);
        let (t, u) = (&o.tracing, &m.tracing);
        [
            ("server.address", s.address != n.address),
            ("server.port", s.port != n.port),
            ("server.socket_path", s.socket_path != n.socket_path),
            ("server.tls", s.tls != n.tls),
            ("server.allowed_peer_uids", s.allowed_peer_uids != n.allowed_peer_uids),
            ("server.worker_threads", s.worker_threads != n.worker_threads),
            (
                "server.max_concurrent_streams",
                s.max_concurrent_streams != n.max_concurrent_streams,
            ),
            ("server.drain_timeout_ms", s.drain_timeout_ms != n.drain_timeout_ms),
            ("server.generations", s.generations != n.generations),
            ("observability.metrics_port", o.metrics_port != m.metrics_port),
            ("observability.metrics_address", o.metrics_address != m.metrics_address),
            ("observability.tracing.enabled", t.enabled != u.enabled),
            (
                "observability.tracing.sampling_rate",
                t.sampling_rate != u.sampling_rate,
            ),
            (
                "observability.tracing.otlp_endpoint",
                t.otlp_endpoint != u.otlp_endpoint,
            ),
            ("management", self.management != next.management),
            (
                "decision_cache.max_entries",
                self.decision_cache.max_entries != next.decision_cache.max_entries,
            ),
            (
                "decision_cache.max_bytes",
                self.decision_cache.max_bytes != next.decision_cache.max_bytes,
            ),
        ]
        .into_iter()
        .filter_map(|(field, changed)| changed.then_some(field))
        .collect()
    }

    /// Checks everything serde cannot: ranges, uniqueness, references and
    /// header legality. `text` is the source, used to report lines.
    pub fn validate(&self, text: &str) -> Result<(), ConfigError> {
        let p = "policy_kernel";
        self.server.validate(text)?;
        self.decision_cache.validate(&format!("{p}.decision_cache"))?;
        let mut agent_names = HashSet::new();
        for (i, a) in self.agents.iter().enumerate() {
            let f = format!("{p}.agents[{i}]");
            if a.name.is_empty() {
                return Err(invalid(format!("{f}.name"), "must not be empty", None));
            }
            if !agent_names.insert(a.name.as_str()) {
                let line = find_line(text, "name", &a.name, 1);
                return Err(invalid(
                    format!("{f}.name"),
                    format!("duplicate agent name {:?}", a.name),
                    line,
                ));
            }
            a.validate(&f, text)?;
        }
        let mut routes = HashSet::new();
        for (i, r) in self.route_policies.iter().enumerate() {
            let f = format!("{p}.route_policies[{i}]");
            if r.route_name.is_empty() {
                return Err(invalid(format!("{f}.route_name"), "must not be empty", None));
            }
            if !routes.insert(r.route_name.as_str()) {
                let line = find_line(text, "route_name", &r.route_name, 1);
                return Err(invalid(
                    format!("{f}.route_name"),
                    format!("duplicate route name {:?}", r.route_name),
                    line,
                ));
            }
            for (chain, entries) in [
                ("request_policy_chain", &r.request_policy_chain),
                ("response_policy_chain", &r.response_policy_chain),
            ] {
                for (j, e) in entries.iter().enumerate() {
                    e.validate(&format!("{f}.{chain}[{j}]"), &agent_names, text)?;
                }
            }
        }
        for (name, resp) in [
            ("policy_not_supported_response", &self.policy_not_supported_response),
            ("agent_unavailable_response", &self.agent_unavailable_response),
            ("policy_failure_response", &self.policy_failure_response),
            ("overload_response", &self.overload_response),
            ("payload_too_large_response", &self.payload_too_large_response),
        ] {
            resp.validate(&format!("{p}.{name}"))?;
        }
        let o = &self.observability;
        if !LOG_LEVELS.contains(&o.log_level.as_str()) {
            return Err(invalid(
                format!("{p}.observability.log_level"),
                format!("{:?} is not one of {}", o.log_level, LOG_LEVELS.join(", ")),
                find_line(text, "log_level", &o.log_level, 0),
            ));
        }
        if o.metrics_address.parse::<IpAddr>().is_err() {
            return Err(invalid(
                format!("{p}.observability.metrics_address"),
                format!("{:?} is not an IP address", o.metrics_address),
                None,
            ));
        }
        if !(0.0..=1.0).contains(&o.tracing.sampling_rate) {
            return Err(invalid(
                format!("{p}.observability.tracing.sampling_rate"),
                "must be between 0.0 and 1.0",
                None,
            ));
        }
        if let Some(m) = &self.management {
            m.validate()?;
        }
        if let Some(endpoint) = &o.tracing.otlp_endpoint {
            check_otlp_endpoint(endpoint).map_err(|reason| {
                invalid(
                    format!("{p}.observability.tracing.otlp_endpoint"),
                    reason,
                    find_line(text, "otlp_endpoint", endpoint, 0),
                )
            })?;
        }
        Ok(())
    }
}

/// The OTLP exporter speaks gRPC over plaintext HTTP/2: the endpoint must be
/// `http://HOST[:PORT]`. (Without a scheme the exporter would assume https,
/// which this build does not support, and refuse to start.)
fn check_otlp_endpoint(endpoint: &str) -> Result<(), String> {
    let example = "give http://HOST:PORT, e.g. http://127.0.0.1:4317";
    let uri: http::Uri = endpoint
        .parse()
        .map_err(|_| format!("{endpoint:?} is not a URL; {example}"))?;
    match uri.scheme_str() {
        Some("http") if uri.host().is_some_and(|h| !h.is_empty()) => Ok(()),
        Some("http") => Err(format!("{endpoint:?} has no host; {example}")),
        Some("https") => Err(format!(
            "{endpoint:?}: https is not supported (export is plaintext gRPC); {example}"
        )),
        _ => Err(format!("{endpoint:?} does not start with http://; {example}")),
    }
}

impl ServerConfig {
    fn validate(&self, text: &str) -> Result<(), ConfigError> {
        let f = "policy_kernel.server";
        if self.address.parse::<IpAddr>().is_err() {
            return Err(invalid(
                format!("{f}.address"),
                format!("{:?} is not an IP address", self.address),
                find_line(text, "address", &self.address, 0),
            ));
        }
        if self.tls.is_some() && self.tcp_addr().is_none() {
            return Err(invalid(
                format!("{f}.tls"),
                "there is no TCP listener to protect: set server.port (server.tls applies to the TCP listener only)",
                None,
            ));
        }
        if self.allowed_peer_uids.is_some() && self.socket_path.is_none() {
            return Err(invalid(
                format!("{f}.allowed_peer_uids"),
                "needs server.socket_path (it limits who may connect to that socket)",
                None,
            ));
        }
        if self.allowed_peer_uids.as_ref().is_some_and(|u| u.is_empty()) {
            return Err(invalid(
                format!("{f}.allowed_peer_uids"),
                "must list at least one uid (leave it unset to allow any)",
                None,
            ));
        }
        if self.max_concurrent_streams == 0 {
            return Err(invalid(
                format!("{f}.max_concurrent_streams"),
                "must be at least 1",
                None,
            ));
        }
        if !(1..=15 * 1024 * 1024).contains(&self.max_request_body_bytes) {
            return Err(invalid(
                format!("{f}.max_request_body_bytes"),
                "must be 1-15728640",
                None,
            ));
        }
        if self.worker_threads > 256 {
            return Err(invalid(format!("{f}.worker_threads"), "must be 0-256", None));
        }
        if !(1..=30_000).contains(&self.phase_timeout_ms) {
            return Err(invalid(format!("{f}.phase_timeout_ms"), "must be 1-30000", None));
        }
        if let Some(h) = &self.route_name_header {
            if !valid_header_name(h.as_bytes()) || h.starts_with(':') {
                return Err(invalid(format!("{f}.route_name_header"), "not a header name", None));
            }
        }
        self.generations.validate(&format!("{f}.generations"))?;
        Ok(())
    }
}

impl AgentConfig {
    fn validate(&self, f: &str, text: &str) -> Result<(), ConfigError> {
        if self.socket_path.as_os_str().is_empty() {
            return Err(invalid(format!("{f}.socket_path"), "must not be empty", None));
        }
        if !(1..=5000).contains(&self.timeout_ms) {
            return Err(invalid(
                format!("{f}.timeout_ms"),
                format!("{} is out of range 1-5000", self.timeout_ms),
                find_line(text, "timeout_ms", &self.timeout_ms.to_string(), 0),
            ));
        }
        if self.max_concurrent_calls == 0 {
            return Err(invalid(format!("{f}.max_concurrent_calls"), "must be at least 1", None));
        }
        if !(1..=10).contains(&self.retry.max_attempts) {
            return Err(invalid(format!("{f}.retry.max_attempts"), "must be 1-10", None));
        }
        if self.health_check_interval_ms < 10 {
            return Err(invalid(
                format!("{f}.health_check_interval_ms"),
                "must be at least 10",
                None,
            ));
        }
        if !(1..=60_000).contains(&self.health_check_timeout_ms) {
            return Err(invalid(format!("{f}.health_check_timeout_ms"), "must be 1-60000", None));
        }
        Ok(())
    }
}

impl ChainEntry {
    fn validate(&self, f: &str, agents: &HashSet<&str>, text: &str) -> Result<(), ConfigError> {
        if self.policy.is_empty() {
            return Err(invalid(format!("{f}.policy"), "must not be empty", None));
        }
        if let Some(a) = &self.agent {
            if !agents.contains(a.as_str()) {
                return Err(invalid(
                    format!("{f}.agent"),
                    format!("no agent named {a:?} is configured"),
                    find_line(text, "agent", a, 0),
                ));
            }
        }
        encode_params(&self.params)
            .map(|_| ())
            .map_err(|(name, reason)| invalid(format!("{f}.params.{name}"), reason, None))
    }
}
