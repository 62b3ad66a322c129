//! The kernel's shared state: the current [`Snapshot`] behind one `ArcSwap`,
//! and the background work that keeps it current as agents are discovered.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::Notify;

use crate::config::KernelConfig;
use crate::registry::{self, AgentHandle};
use crate::snapshot::Snapshot;
use crate::telemetry::metrics::metrics;

/// How [`Kernel::apply`] treats routes that cannot be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyMode {
    /// Mark them invalid and serve the rest (startup and SIGHUP, spec §4.2).
    Permissive,
    /// Refuse the whole configuration (management API, spec §4.4).
    Strict,
}

/// Why a configuration was not applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Strict mode: some routes cannot be served by the discovered agents.
    #[error("routes cannot be served: {}", .0.join("; "))]
    InvalidRoutes(Vec<String>),
}

/// Shared kernel state.
pub struct Kernel {
    snapshot: ArcSwap<Snapshot>,
    /// One permit per stream in progress (`server.max_concurrent_streams`,
    /// fixed at startup).
    streams: Arc<tokio::sync::Semaphore>,
    /// Serialises [`Kernel::apply`].
    applying: tokio::sync::Mutex<()>,
    /// Serialises snapshot rebuilds (never taken on the request path).
    rebuild: Mutex<()>,
    changed: Arc<Notify>,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel")
            .field("version", &self.snapshot.load().version)
            .finish()
    }
}

impl Kernel {
    /// Creates the agents of `config`, runs a first discovery round against
    /// all of them concurrently, publishes the first snapshot (version 1),
    /// and starts the per-agent health tasks. Agents that are down are
    /// logged and picked up later by their health task.
    pub async fn start(config: KernelConfig) -> Arc<Self> {
        let agents: Vec<Arc<AgentHandle>> = config.agents.iter().cloned().map(AgentHandle::new).collect();
        futures::future::join_all(agents.iter().map(|a| registry::health::round(a))).await;
        let down: Vec<&str> = agents
            .iter()
            .filter(|a| a.discovered().is_none())
            .map(|a| a.name())
            .collect();
        if !agents.is_empty() && down.len() == agents.len() {
            tracing::error!(agents = ?down, "no agent could be discovered: every route with policies is invalid until one comes up");
        } else if !down.is_empty() {
            tracing::warn!(agents = ?down, "agents not discovered at startup; they are retried in the background");
        }
        let snapshot = Snapshot::build(Arc::new(config), agents.clone(), 1);
        snapshot.log_invalid_routes();
        metrics().config_version.set(1);
        let streams = Arc::new(tokio::sync::Semaphore::new(
            snapshot.config.server.max_concurrent_streams as usize,
        ));
        let kernel = Arc::new(Self {
            streams,
            snapshot: ArcSwap::from_pointee(snapshot),
            applying: tokio::sync::Mutex::new(()),
            rebuild: Mutex::new(()),
            changed: Arc::new(Notify::new()),
        });
        for a in &agents {
            registry::spawn_watch(a, Arc::clone(&kernel.changed));
        }
        spawn_rebuilder(Arc::downgrade(&kernel), Arc::clone(&kernel.changed));
        kernel
    }

    /// A permit for one more stream, or `None` when
    /// `server.max_concurrent_streams` are in progress.
    pub fn try_stream(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        Arc::clone(&self.streams).try_acquire_owned().ok()
    }

    /// The current snapshot. Load it once per stream.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    /// Recompiles the current configuration against the agents' latest
    /// discovery results (same version) and publishes it.
    pub fn refresh(&self) {
        let _guard = self.rebuild.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.snapshot.load_full();
        let next = Snapshot::build_over(
            Arc::clone(&current.config),
            current.agents.clone(),
            current.version,
            Arc::clone(&current.decisions.store),
        );
        let was_invalid = current.routes.values().filter(|r| !r.problems().is_empty()).count();
        let now_invalid = next.log_invalid_routes();
        if now_invalid < was_invalid {
            tracing::info!(invalid_routes = now_invalid, "agent discovery made routes valid");
        }
        self.snapshot.store(Arc::new(next));
    }

    /// Applies a validated configuration: agents are rediscovered (new ones
    /// created, removed ones dropped once in-flight streams release them,
    /// same-socket ones renewed keeping their connections), routes are
    /// compiled, and the new snapshot is swapped in with the next version.
    /// Streams in flight finish on the snapshot they started with.
    pub async fn apply(&self, config: KernelConfig, mode: ApplyMode) -> Result<u64, ApplyError> {
        let _one_at_a_time = self.applying.lock().await;
        let current = self.snapshot();
        let fixed = current.config.restart_only_changes(&config);
        if !fixed.is_empty() {
            tracing::warn!(fields = ?fixed, "these settings take effect only at the next restart; the running kernel keeps its values");
        }
        let agents: Vec<Arc<AgentHandle>> = config
            .agents
            .iter()
            .map(|c| {
                match current.agents.iter().find(|a| {
                    a.name() == c.name
                        && a.config.socket_path == c.socket_path
                        && a.config.expected_peer() == c.expected_peer()
                }) {
                    Some(old) => old.renew(c.clone()),
                    None => AgentHandle::new(c.clone()),
                }
            })
            .collect();
        futures::future::join_all(agents.iter().map(|a| registry::health::rediscover(a))).await;
        let level = config.observability.log_level.clone();
        let next = Snapshot::build_over(
            Arc::new(config),
            agents.clone(),
            current.version + 1,
            Arc::clone(&current.decisions.store),
        );
        let invalid: Vec<String> = next.routes.values().flat_map(|r| r.problems()).collect();
        if mode == ApplyMode::Strict && !invalid.is_empty() {
            return Err(ApplyError::InvalidRoutes(invalid));
        }
        next.log_invalid_routes();
        for a in &agents {
            registry::spawn_watch(a, Arc::clone(&self.changed));
        }
        let version = next.version;
        {
            let _guard = self.rebuild.lock().unwrap_or_else(|e| e.into_inner());
            self.snapshot.store(Arc::new(next));
        }
        metrics().config_version.set(i64::try_from(version).unwrap_or(i64::MAX));
        crate::telemetry::set_level(&level);
        Ok(version)
    }

    /// Applies new routes over the agents as they are (no rediscovery): the
    /// configuration in force with `routes`, compiled against the agents'
    /// last discovery, swapped in with the next version. For changes of the
    /// routes alone (the fleet store's), whose cost should not grow with a
    /// discovery call per agent.
    pub async fn apply_routes(&self, routes: Vec<crate::config::RoutePolicy>) -> u64 {
        let _one_at_a_time = self.applying.lock().await;
        let current = self.snapshot();
        let mut config = (*current.config).clone();
        config.route_policies = routes;
        let next = Snapshot::build_over(
            Arc::new(config),
            current.agents.clone(),
            current.version + 1,
            Arc::clone(&current.decisions.store),
        );
        next.log_invalid_routes();
        let version = next.version;
        {
            let _guard = self.rebuild.lock().unwrap_or_else(|e| e.into_inner());
            self.snapshot.store(Arc::new(next));
        }
        metrics().config_version.set(i64::try_from(version).unwrap_or(i64::MAX));
        version
    }

    /// Waits until every agent of the current snapshot is healthy, or
    /// `timeout` passes; returns whether they all are. For tools and tests.
    pub async fn wait_healthy(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.snapshot().agents.iter().all(|a| a.is_healthy()) {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn spawn_rebuilder(kernel: Weak<Kernel>, changed: Arc<Notify>) {
    tokio::spawn(async move {
        loop {
            changed.notified().await;
            let Some(kernel) = kernel.upgrade() else { break };
            kernel.refresh();
        }
    });
}
