//! The agent registry: one handle per configured agent, holding its pooled
//! client, its health, and what discovery learned about it.
//!
//! Health and discovery run in one background task per agent
//! ([`health::watch`]). The request path only reads the handle's atomic
//! health flag; discovery results are folded into the snapshot (see
//! [`crate::snapshot`]) whenever they change.

mod call;
pub mod circuit;
mod client;
pub mod health;
pub mod mux;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use tokio::sync::Semaphore;

pub use call::{AgentCall, AgentReply, CallError};
pub use client::{connect_lazy, h2_builder, AgentClient, CallClient, TransportError};
pub use health::{discover, spawn_watch, Discovered};

use crate::config::AgentConfig;
use crate::proto::PolicyInfo;
use crate::telemetry::metrics::AgentMetrics;

/// One configured agent.
pub struct AgentHandle {
    /// The agent's configuration.
    pub config: AgentConfig,
    /// The agent's metric handles.
    pub metrics: AgentMetrics,
    client: AgentClient,
    /// `client`'s connection, for unary policy calls.
    grpc: CallClient,
    /// The call stream on that connection, for agents that serve it.
    stream: Arc<mux::CallStream>,
    /// The agent's circuit breaker.
    pub circuit: circuit::Circuit,
    /// Permits for calls in flight (`max_concurrent_calls`).
    calls: Semaphore,
    healthy: AtomicBool,
    discovered: ArcSwapOption<Discovered>,
}

impl std::fmt::Debug for AgentHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentHandle")
            .field("name", &self.config.name)
            .field("healthy", &self.is_healthy())
            .finish()
    }
}

impl AgentHandle {
    /// A handle with a lazily connecting client; not healthy, not discovered.
    pub fn new(config: AgentConfig) -> Arc<Self> {
        let (client, grpc, stream) = connect_lazy(&config.socket_path, &config.name, config.expected_peer());
        Arc::new(Self {
            metrics: AgentMetrics::new(&config.name),
            circuit: circuit_of(&config),
            calls: Semaphore::new(config.max_concurrent_calls as usize),
            config,
            client,
            grpc,
            stream,
            healthy: AtomicBool::new(false),
            discovered: ArcSwapOption::empty(),
        })
    }

    /// A handle with a new configuration for the same socket: it shares the
    /// connection pool, health and discovery results of `self`, so a reload
    /// that only changes timeouts does not disturb traffic.
    pub fn renew(&self, config: AgentConfig) -> Arc<Self> {
        Arc::new(Self {
            metrics: AgentMetrics::new(&config.name),
            circuit: circuit_of(&config),
            calls: Semaphore::new(config.max_concurrent_calls as usize),
            config,
            client: self.client.clone(),
            grpc: self.grpc.clone(),
            stream: Arc::clone(&self.stream),
            healthy: AtomicBool::new(self.is_healthy()),
            discovered: ArcSwapOption::new(self.discovered()),
        })
    }

    /// The agent's name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Whether planning may use the agent: healthy, and its circuit not open.
    pub fn is_available(&self) -> bool {
        self.is_healthy() && !self.circuit.blocks()
    }

    /// Whether the last health check passed.
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
    }

    /// Records the health check outcome; returns the previous value.
    pub fn set_healthy(&self, healthy: bool) -> bool {
        self.metrics.health.set(i64::from(healthy));
        self.healthy.swap(healthy, Ordering::AcqRel)
    }

    /// What discovery learned, if it ever succeeded.
    pub fn discovered(&self) -> Option<Arc<Discovered>> {
        self.discovered.load_full()
    }

    /// Stores a discovery result; returns true when the policies changed.
    pub fn set_discovered(&self, d: Discovered) -> bool {
        let changed = self
            .discovered
            .load()
            .as_ref()
            .map(|old| old.policies != d.policies)
            .unwrap_or(true);
        self.discovered.store(Some(Arc::new(d)));
        changed
    }

    /// The policy this agent declared under `name`, if any.
    pub fn policy(&self, name: &str) -> Option<PolicyInfo> {
        self.discovered
            .load()
            .as_ref()
            .and_then(|d| d.policies.get(name).cloned())
    }

    /// The client (cheap to clone: the connection pool is shared).
    pub fn client(&self) -> AgentClient {
        self.client.clone()
    }

    /// The client for unary policy calls (same connection).
    fn call_client(&self) -> CallClient {
        self.grpc.clone()
    }

    /// The call stream, when discovery said the agent serves it.
    fn call_stream(&self) -> Option<&mux::CallStream> {
        let serves = self.config.call_stream && self.discovered.load().as_ref().is_some_and(|d| d.call_stream);
        serves.then_some(&*self.stream)
    }

    /// The agent's connection epoch: it changes whenever the kernel's
    /// connection to the agent is made or ends (an agent restart always
    /// does both). Keys the decision cache.
    pub fn epoch(&self) -> u64 {
        self.stream.epoch()
    }

    /// Per-call timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.config.timeout_ms)
    }
}

fn circuit_of(config: &AgentConfig) -> circuit::Circuit {
    circuit::Circuit::new(
        config.circuit_breaker.failure_threshold,
        Duration::from_millis(config.circuit_breaker.cooldown_ms),
    )
}

/// Policies an agent declared, by name.
pub type PolicyIndex = HashMap<String, PolicyInfo>;
