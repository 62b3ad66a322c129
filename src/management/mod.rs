//! The management API (spec §4.4): routes read and changed over HTTP/JSON on
//! a listener of its own, with strict validation, versions and rollback.
//!
//! - [`auth`] — bearer tokens (SHA-256 hashes, constant-time compare) and roles.
//! - [`listener`] — the loopback TCP and Unix-socket listeners (SO_PEERCRED).
//! - [`handlers`] — the endpoints: HTTP in, JSON out.
//! - [`changes`] — writes: If-Match, strict checks, persistence, apply.
//! - [`strict`] — strict validation of a route against the discovered agents.
//! - [`store`] — the state file: API changes and the version history.
//! - [`client`] — the `policy-kernel config` command's HTTP client.
//! - [`fleet`] — with `management.store.etcd`: the changes and versions
//!   kept in etcd, shared by every kernel of a fleet.
//!
//! Every change goes through [`Kernel::apply`], like a SIGHUP reload, so the
//! request path still reads one `ArcSwap`. Versions here are the API's:
//! they count every change of the routes (file or API) and survive restarts.
//!
//! With `management:` set, a SIGHUP goes through [`Management::reload_file`]:
//! the file is read and the persisted API changes are applied on top (the
//! API's version of a route wins; see [`store`]).

pub mod auth;
pub mod changes;
pub mod client;
pub mod fleet;
pub mod handlers;
pub mod listener;
pub mod store;
pub mod strict;

use std::path::PathBuf;
use std::sync::{Arc, LazyLock};

use prometheus::{IntCounterVec, Opts};

use crate::config::{self, KernelConfig, ManagementConfig};
use crate::kernel::{ApplyMode, Kernel};
use crate::telemetry::metrics::metrics;
use auth::Tokens;
use store::{Source, State, Version};

static CHANGES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    let c = IntCounterVec::new(
        Opts::new(
            "policy_kernel_config_changes_total",
            "Configuration changes by source (file, api) and result (success, rejected, conflict, error)",
        ),
        &["source", "result"],
    )
    .unwrap_or_else(|e| panic!("metric policy_kernel_config_changes_total: {e}"));
    metrics()
        .registry
        .register(Box::new(c.clone()))
        .unwrap_or_else(|e| panic!("metric policy_kernel_config_changes_total: {e}"));
    c
});

/// Counts one change in `policy_kernel_config_changes_total`.
pub fn count_change(source: Source, result: &str) {
    CHANGES.with_label_values(&[source.as_str(), result]).inc();
}

/// The management API's state, shared by its listeners and SIGHUP.
pub struct Management {
    kernel: Arc<Kernel>,
    file: PathBuf,
    cfg: ManagementConfig,
    tokens: Tokens,
    backend: Backend,
}

/// Where the API's changes and versions live.
pub(crate) enum Backend {
    /// `management.state_path`: this kernel only.
    Local(tokio::sync::Mutex<State>),
    /// `management.store`: shared by the fleet.
    Fleet(Arc<fleet::Fleet>),
}

impl std::fmt::Debug for Management {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Management").field("file", &self.file).finish()
    }
}

/// The management section, tokens and state, loaded before the kernel
/// starts (so that the first snapshot already has the API's changes).
#[derive(Debug)]
pub struct Prepared {
    cfg: ManagementConfig,
    tokens: Tokens,
    boot: Boot,
}

#[derive(Debug)]
enum Boot {
    Local(State),
    Fleet(Box<fleet::Boot>),
}

impl Prepared {
    /// Loads the tokens and the state file of `config.management` and
    /// applies the persisted API changes to `config`'s routes. `None` when
    /// the management API is off. A tokens or state file that cannot be
    /// read stops the startup: persisted changes are never dropped silently.
    /// With a store, its changes are read from it (or from the cache file
    /// while it is away: [`fleet::Boot::load`]).
    pub async fn load(config: &mut KernelConfig) -> anyhow::Result<Option<Self>> {
        let Some(cfg) = config.management.clone() else {
            return Ok(None);
        };
        let tokens = Tokens::load(&cfg.tokens_file).map_err(anyhow::Error::msg)?;
        let boot = match &cfg.store {
            None => Boot::Local(State::load(&cfg.state_path).map_err(anyhow::Error::msg)?),
            Some(store) => Boot::Fleet(Box::new(
                fleet::Boot::load(&store.etcd, &cfg.state_path, &config.route_policies).await?,
            )),
        };
        let overrides = match &boot {
            Boot::Local(state) => &state.overrides,
            Boot::Fleet(b) => b.overrides(),
        };
        config.route_policies = overlay(overrides, &config.route_policies);
        Ok(Some(Self { cfg, tokens, boot }))
    }

    /// Starts the management API's state over `kernel`: records the
    /// startup's version when the routes differ from the last one, and logs
    /// persisted changes that the agents cannot serve now.
    pub async fn start(self, kernel: Arc<Kernel>, file: PathBuf) -> Arc<Management> {
        LazyLock::force(&CHANGES);
        let backend = match self.boot {
            Boot::Local(state) => Backend::Local(tokio::sync::Mutex::new(state)),
            Boot::Fleet(boot) => {
                let Some(store) = &self.cfg.store else {
                    unreachable!("a fleet boot comes from management.store")
                };
                Backend::Fleet(fleet::Fleet::start(
                    *boot,
                    kernel.clone(),
                    store.etcd.clone(),
                    self.cfg.state_path.clone(),
                    self.cfg.history,
                ))
            }
        };
        let m = Arc::new(Management {
            kernel,
            file,
            cfg: self.cfg,
            tokens: self.tokens,
            backend,
        });
        if let Backend::Local(state) = &m.backend {
            let mut state = state.lock().await;
            m.record_file_version(&mut state, "startup");
        }
        m.log_invalid_overrides().await;
        m
    }
}

/// `routes` with the API's changes on top, logging each route of the file
/// that an API change overrides.
fn overlay(overrides: &fleet::history::Overrides, routes: &[config::RoutePolicy]) -> Vec<config::RoutePolicy> {
    let (out, overridden) = store::overlay(overrides, routes);
    for name in overridden {
        let change = if overrides.get(&name).is_some_and(Option::is_some) {
            "replaced"
        } else {
            "deleted"
        };
        tracing::warn!(route = %name, change,
            "route set in the configuration file is overridden by a change made through the management API (the API's version wins)");
    }
    out
}

impl Management {
    /// The management section.
    pub fn config(&self) -> &ManagementConfig {
        &self.cfg
    }

    /// The kernel.
    pub fn kernel(&self) -> &Arc<Kernel> {
        &self.kernel
    }

    /// The accepted tokens.
    pub fn tokens(&self) -> &Tokens {
        &self.tokens
    }

    /// The current version.
    pub async fn version(&self) -> u64 {
        match &self.backend {
            Backend::Local(state) => state.lock().await.version,
            Backend::Fleet(f) => f.status().version(),
        }
    }

    /// The fleet store's sync state, when there is a store.
    pub fn store_status(&self) -> Option<Arc<fleet::status::Status>> {
        match &self.backend {
            Backend::Local(_) => None,
            Backend::Fleet(f) => Some(f.status().clone()),
        }
    }

    /// Records a version from the file when the routes in force differ from
    /// the last recorded ones, and persists it.
    fn record_file_version(&self, state: &mut State, what: &str) {
        let routes = self.kernel.snapshot().config.route_policies.clone();
        let hash = store::routes_hash(&routes);
        if state.history.last().is_some_and(|v| v.hash == hash) {
            return;
        }
        let mut next = state.clone();
        next.record(
            Version {
                version: state.version + 1,
                source: Source::File,
                token: None,
                time: store::now(),
                summary: format!("{what}: {} routes from {}", routes.len(), self.file.display()),
                hash,
                routes,
            },
            self.cfg.history,
        );
        match next.save(&self.cfg.state_path) {
            Ok(()) => {
                tracing::info!(
                    version = next.version,
                    source = "file",
                    "configuration version recorded"
                );
                *state = next;
            }
            Err(e) => tracing::error!(error = %e, path = %self.cfg.state_path.display(),
                "cannot write the management state file: this version is not in the history"),
        }
    }

    /// Logs every persisted API change that the agents cannot serve now.
    /// Such routes stay in force and are answered as §4.2 says.
    async fn log_invalid_overrides(&self) {
        let overrides = match &self.backend {
            Backend::Local(state) => state.lock().await.overrides.clone(),
            Backend::Fleet(f) => f.overrides().await,
        };
        self.log_invalid(overrides.values().flatten());
    }

    fn log_invalid<'a>(&self, routes: impl IntoIterator<Item = &'a config::RoutePolicy>) {
        let agents = self.kernel.snapshot().agents.clone();
        for route in routes {
            for r in strict::check_route(route, &agents) {
                tracing::error!(route = %r.route, phase = r.phase, index = r.index, policy = %r.policy, reason = %r.reason,
                    "a route changed through the management API cannot be served now; it is kept, and its requests get policy_not_supported_response or agent_unavailable_response");
            }
        }
    }

    /// SIGHUP: reads the file, applies the persisted API changes on top,
    /// applies the result permissively (§4.2); returns the kernel's version.
    pub async fn reload_file(&self) -> Option<u64> {
        let cfg = match config::load(&self.file) {
            Ok(cfg) => cfg,
            Err(error) => {
                metrics().reloads.with_label_values(&["failure"]).inc();
                count_change(Source::File, "rejected");
                tracing::error!(%error, path = %self.file.display(), "configuration reload rejected; the previous configuration stays in force");
                return None;
            }
        };
        let applied = match &self.backend {
            Backend::Local(state) => {
                let mut state = state.lock().await;
                let mut cfg = cfg;
                cfg.route_policies = overlay(&state.overrides, &cfg.route_policies);
                let applied = self.kernel.apply(cfg, ApplyMode::Permissive).await;
                if applied.is_ok() {
                    self.record_file_version(&mut state, "reload");
                }
                applied
            }
            Backend::Fleet(f) => f.reload(cfg).await,
        };
        match applied {
            Ok(v) => {
                metrics().reloads.with_label_values(&["success"]).inc();
                count_change(Source::File, "success");
                tracing::info!(version = v, path = %self.file.display(), "configuration reloaded, with the management API's changes on top");
                self.log_invalid_overrides().await;
                Some(v)
            }
            Err(error) => {
                metrics().reloads.with_label_values(&["failure"]).inc();
                count_change(Source::File, "error");
                tracing::error!(%error, "configuration reload rejected; the previous configuration stays in force");
                None
            }
        }
    }
}
