//! Many kernels, one configuration: the management API's changes kept in
//! etcd (`management.store.etcd`), watched and applied by every kernel.
//!
//! - [`etcd`] — the keys, the client, the full read and the one
//!   transaction per write.
//! - [`history`] — versions as route steps, so any kept version can be read
//!   and restored whatever etcd compacted.
//! - [`status`] — the sync state behind `/readyz`, `/config` and metrics.
//! - `watch` — the watch loop: resume from the last revision applied, a
//!   full read when etcd compacted it.
//!
//! **Versions** are etcd revisions: a write's version is the revision of
//! its transaction, which rewrites the `head` key and compares its mod
//! revision with `If-Match`, so of concurrent writers at one version, on any
//! kernels, exactly one wins.
//!
//! **Routes in force** are the file's, with the store's slots on top (as
//! with `state_path`). Each kernel applies every store revision once, in
//! order, through [`Kernel::apply`], and writes what it applied to its
//! cache file (`management.state_path`), which it serves from when it
//! starts while the store is away.

pub mod etcd;
pub mod history;
pub mod status;
mod watch;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::Client;
use hyper::StatusCode;
use serde::{Deserialize, Serialize};

use super::changes::{ApiError, Plan};
use super::store::{self, overlay};
use crate::config::{EtcdConfig, KernelConfig, RoutePolicy};
use crate::kernel::{ApplyError, ApplyMode, Kernel};
use etcd::{Committed, Keys, Read};
use history::{Entry, Overrides, Slot, Step};
use status::{Origin, Status};

/// What this kernel has applied from the store.
#[derive(Debug, Clone, Default)]
pub struct View {
    /// The configuration file's routes.
    pub file_routes: Vec<RoutePolicy>,
    /// The store's slots.
    pub overrides: Overrides,
    /// The fleet's version (the head's revision).
    pub version: u64,
    /// The store revision applied through.
    pub revision: u64,
    /// The head's history position.
    pub seq: u64,
}

impl View {
    /// The routes in force: the file's with the store's slots on top.
    pub fn routes(&self) -> Vec<RoutePolicy> {
        overlay(&self.overrides, &self.file_routes).0
    }

    /// SHA-256 (hex) of the routes in force, sorted by name: the same on
    /// kernels with the same file and the same store content.
    pub fn digest(&self) -> String {
        let mut routes = self.routes();
        routes.sort_by(|a, b| a.route_name.cmp(&b.route_name));
        store::routes_hash(&routes)
    }

    /// The routes whose stored value is not a valid route.
    pub fn invalid(&self) -> Vec<String> {
        self.overrides
            .iter()
            .filter(|(_, r)| r.as_ref().is_some_and(etcd::is_refusing))
            .map(|(name, _)| name.clone())
            .collect()
    }

    fn take(&mut self, read: Read) {
        self.overrides = read.overrides;
        self.version = read.version;
        self.revision = read.revision;
        self.seq = read.head.seq;
    }
}

/// The cache file: what the kernel last applied from the store.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CacheFile {
    prefix: String,
    revision: u64,
    version: u64,
    seq: u64,
    /// When the kernel last knew these were the store's current routes (ms
    /// since the epoch). Absent in caches of older kernels: the file's
    /// modification time stands for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    synced_ms: Option<u64>,
    overrides: Overrides,
}

/// Writes each cache the fleet hands over (the latest, when several came
/// meanwhile) until the fleet is dropped.
async fn write_cache(path: PathBuf, mut pending: tokio::sync::watch::Receiver<Option<CacheFile>>) {
    while pending.changed().await.is_ok() {
        let Some(cache) = pending.borrow_and_update().clone() else {
            continue;
        };
        let to = path.clone();
        let written = tokio::task::spawn_blocking(move || {
            let json = serde_json::to_vec(&cache).map_err(std::io::Error::other)?;
            store::write_atomic(&to, &json)
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        if let Err(e) = written {
            tracing::error!(error = %e, path = %path.display(),
                "cannot write the store cache: a restart while the store is away would serve older routes");
        }
    }
}

fn read_cache(path: &Path, prefix: &str) -> Result<Option<CacheFile>, String> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read the store cache {}: {e}", path.display())),
    };
    let mut cache: CacheFile =
        serde_json::from_slice(&bytes).map_err(|e| format!("store cache {}: {e}", path.display()))?;
    if cache.synced_ms.is_none() {
        cache.synced_ms = std::fs::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as u64);
    }
    if cache.prefix != prefix {
        tracing::warn!(path = %path.display(), cached = %cache.prefix, prefix,
            "the store cache is for another prefix; it is not used");
        return Ok(None);
    }
    Ok(Some(cache))
}

/// The store's routes read before the kernel starts.
pub struct Boot {
    view: View,
    origin: Origin,
    client: Option<Client>,
    /// From a cache: when it was last known current.
    synced_ms: Option<u64>,
}

impl std::fmt::Debug for Boot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Boot")
            .field("origin", &self.origin)
            .field("version", &self.view.version)
            .finish()
    }
}

impl Boot {
    /// Reads the store (within its timeouts); when it cannot be reached,
    /// the cache file; else the file's routes alone. Every fallback is
    /// logged. A cache that cannot be read, needed because the store is
    /// away, stops the start: the routes are never silently dropped.
    pub async fn load(etcd: &EtcdConfig, cache_path: &Path, file_routes: &[RoutePolicy]) -> anyhow::Result<Self> {
        let keys = Keys::new(&etcd.prefix);
        let mut view = View {
            file_routes: file_routes.to_vec(),
            ..View::default()
        };
        let wait = Duration::from_millis(etcd.connect_timeout_ms + etcd.request_timeout_ms);
        let first = tokio::time::timeout(wait, async {
            let mut client = etcd::connect(etcd).await?;
            let read = etcd::read_all(&mut client, &keys).await.map_err(|e| e.to_string())?;
            Ok::<_, String>((client, read))
        })
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {} ms", wait.as_millis())));
        match first {
            Ok((client, read)) => {
                view.take(read);
                tracing::info!(version = view.version, revision = view.revision, routes = view.overrides.len(),
                    endpoints = %etcd.endpoints.join(","), "configuration store read");
                Ok(Self {
                    view,
                    origin: Origin::Store,
                    client: Some(client),
                    synced_ms: None,
                })
            }
            Err(error) => match read_cache(cache_path, &etcd.prefix).map_err(anyhow::Error::msg)? {
                Some(c) => {
                    tracing::error!(%error, cache = %cache_path.display(), version = c.version, revision = c.revision,
                        "configuration store unreachable: serving the routes last applied from it (they may be stale)");
                    view.overrides = c.overrides;
                    view.version = c.version;
                    view.revision = c.revision;
                    view.seq = c.seq;
                    Ok(Self {
                        view,
                        origin: Origin::Cache,
                        client: None,
                        // Unknown: as stale as can be.
                        synced_ms: Some(c.synced_ms.unwrap_or(0)),
                    })
                }
                None => {
                    tracing::error!(%error, cache = %cache_path.display(),
                        "configuration store unreachable and no cache of it: serving the file's routes until it is back");
                    Ok(Self {
                        view,
                        origin: Origin::FileOnly,
                        client: None,
                        synced_ms: None,
                    })
                }
            },
        }
    }

    /// The store's slots, to lay over the file's routes.
    pub fn overrides(&self) -> &Overrides {
        &self.view.overrides
    }
}

/// One kernel's link to the fleet's store.
pub struct Fleet {
    etcd: EtcdConfig,
    keys: Keys,
    keep: usize,
    kernel: Arc<Kernel>,
    client: tokio::sync::Mutex<Option<Client>>,
    view: tokio::sync::Mutex<View>,
    applied: tokio::sync::watch::Sender<(u64, u64)>,
    writes: tokio::sync::Mutex<()>,
    status: Arc<Status>,
    cache: tokio::sync::watch::Sender<Option<CacheFile>>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet").field("prefix", &self.keys.prefix()).finish()
    }
}

fn unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "store_unavailable",
        format!("the configuration store (etcd) cannot be reached: {e}"),
    )
}

impl Fleet {
    /// Links `kernel` (started with `boot`'s routes) to the store and starts
    /// watching it.
    pub fn start(boot: Boot, kernel: Arc<Kernel>, etcd: EtcdConfig, cache_path: PathBuf, keep: usize) -> Arc<Self> {
        let status = Arc::new(Status::new(
            boot.origin,
            boot.view.revision,
            boot.view.version,
            boot.synced_ms,
        ));
        status.set_routes(boot.view.version, boot.view.digest(), boot.view.invalid());
        let (applied, _) = tokio::sync::watch::channel((boot.view.revision, boot.view.version));
        let (cache, pending) = tokio::sync::watch::channel(None);
        tokio::spawn(write_cache(cache_path, pending));
        let fleet = Arc::new(Self {
            cache,
            keys: Keys::new(&etcd.prefix),
            etcd,
            keep,
            kernel,
            client: tokio::sync::Mutex::new(boot.client),
            applied,
            writes: tokio::sync::Mutex::new(()),
            status,
            view: tokio::sync::Mutex::new(boot.view),
        });
        if boot.origin == Origin::Store {
            if let Ok(view) = fleet.view.try_lock() {
                fleet.save_cache(&view);
            }
        }
        tokio::spawn(watch::run(fleet.clone()));
        fleet
    }

    /// The sync state.
    pub fn status(&self) -> &Arc<Status> {
        &self.status
    }

    /// A client, connecting when there is none yet.
    async fn client(&self) -> Result<Client, String> {
        let mut slot = self.client.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let c = etcd::connect(&self.etcd).await?;
        *slot = Some(c.clone());
        Ok(c)
    }

    /// Applies `view`'s routes to the kernel (as a reload would, without
    /// asking the agents again: only the routes changed; the writer checked
    /// them strictly).
    async fn apply_view(&self, view: &View, why: &str) {
        let snapshot = self.kernel.apply_routes(view.routes()).await;
        self.status.set_routes(view.version, view.digest(), view.invalid());
        tracing::info!(
            version = view.version,
            revision = view.revision,
            snapshot,
            why,
            "configuration store change applied"
        );
    }

    /// Hands `view` to the cache writer, which writes the latest view it
    /// was given (off the watch loop, so that a large cache file does not
    /// hold back the next change; changes in a burst are written once).
    fn save_cache(&self, view: &View) {
        self.cache.send_replace(Some(CacheFile {
            prefix: self.keys.prefix().to_string(),
            revision: view.revision,
            version: view.version,
            seq: view.seq,
            synced_ms: Some(self.status.synced_ms()),
            overrides: view.overrides.clone(),
        }));
    }

    /// The store's slots in force here.
    pub async fn overrides(&self) -> Overrides {
        self.view.lock().await.overrides.clone()
    }

    /// SIGHUP: the file's new routes, with the store's slots on top.
    pub async fn reload(&self, mut cfg: KernelConfig) -> Result<u64, ApplyError> {
        let mut view = self.view.lock().await;
        let file_routes = cfg.route_policies.clone();
        cfg.route_policies = super::overlay(&view.overrides, &file_routes);
        let v = self.kernel.apply(cfg, ApplyMode::Permissive).await?;
        view.file_routes = file_routes;
        self.status.set_routes(view.version, view.digest(), view.invalid());
        Ok(v)
    }

    /// The history, oldest first, as `(version, entry)`.
    pub async fn history(&self) -> Result<Vec<(u64, Entry)>, ApiError> {
        let mut client = self.client().await.map_err(unavailable)?;
        etcd::read_history(&mut client, &self.keys).await.map_err(unavailable)
    }

    /// The routes of version `n` (with this kernel's file routes), from
    /// `entries` as [`Fleet::history`] read them.
    pub async fn routes_at(&self, entries: &[(u64, Entry)], n: u64) -> Result<Vec<RoutePolicy>, ApiError> {
        let view = self.view.lock().await;
        let at = history::overrides_at(&view.overrides, entries, n).ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "version_not_found",
                format!("version {n} is not in the history (GET /v1/versions)"),
            )
        })?;
        Ok(overlay(&at, &view.file_routes).0)
    }

    /// Waits (at most `wait`) until this kernel has applied `version`.
    async fn caught_up(&self, version: u64, wait: Duration) {
        let mut rx = self.applied.subscribe();
        let _ = tokio::time::timeout(wait, rx.wait_for(|(_, v)| *v >= version)).await;
    }

    /// One write through this kernel: `plan` (given a rollback's target
    /// routes) says what changes; it is stored in one transaction that
    /// holds only at version `if_match`, then applied here before the
    /// answer. Returns the new version.
    pub async fn write(
        &self,
        token: &str,
        if_match: u64,
        rollback: Option<u64>,
        plan: impl FnOnce(Option<Vec<RoutePolicy>>) -> Result<Plan, ApiError>,
    ) -> Result<u64, ApiError> {
        let _one_at_a_time = self.writes.lock().await;
        if !self.status.watching() {
            return Err(unavailable(
                "this kernel is not watching it now, so writes wait until it is back",
            ));
        }
        // A version seen through another kernel may not be applied here yet.
        self.caught_up(if_match, Duration::from_secs(1)).await;
        let target = match rollback {
            Some(n) => Some(self.routes_at(&self.history().await?, n).await?),
            None => None,
        };
        let (seq, before) = {
            let view = self.view.lock().await;
            if view.version != if_match {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "version_conflict",
                    format!("If-Match {if_match} is stale: the current version is {}", view.version),
                ));
            }
            (view.seq, view.overrides.clone())
        };
        let plan = plan(target)?;
        let steps: Vec<Step> = plan
            .set
            .iter()
            .map(|(name, route)| Step {
                route: name.clone(),
                before: Slot::of(&before, name),
                after: route.clone().map_or(Slot::Deleted, |r| Slot::Route(Box::new(r))),
            })
            .filter(|s| s.before != s.after)
            .collect();
        if steps.len() + 3 > etcd::MAX_TXN_OPS {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "change_too_large",
                format!(
                    "this change sets {} routes; one etcd transaction takes at most {} (--max-txn-ops)",
                    steps.len(),
                    etcd::MAX_TXN_OPS - 3
                ),
            ));
        }
        let entry = Entry {
            seq: seq + 1,
            token: Some(token.to_string()),
            time: store::now(),
            summary: plan.summary,
            hash: store::routes_hash(&plan.next_cfg.route_policies),
            steps,
        };
        let mut client = self.client().await.map_err(unavailable)?;
        match etcd::commit(&mut client, &self.keys, if_match, &entry, self.keep).await {
            Ok(Committed::Done(version)) => {
                self.caught_up(version, Duration::from_millis(self.etcd.request_timeout_ms))
                    .await;
                Ok(version)
            }
            Ok(Committed::Conflict(current)) => Err(ApiError::new(
                StatusCode::CONFLICT,
                "version_conflict",
                format!("If-Match {if_match} is stale: the current version is {current}"),
            )),
            Err(e) => Err(unavailable(format!(
                "{e}; the write may or may not be stored (GET /v1/config gives the version)"
            ))),
        }
    }
}
