//! What a kernel knows about its sync with the fleet's store: shown by
//! `/readyz`, `/config` and `GET /v1/config`, and exported as metrics.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus::{IntCounter, IntGauge, IntGaugeVec, Opts};
use serde_json::{json, Value};

use crate::telemetry::metrics::metrics;

/// Where the routes in force came from at startup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Read from the store.
    Store,
    /// The store was unreachable: the local cache file.
    Cache,
    /// The store was unreachable and there was no cache: the file only.
    FileOnly,
}

impl Origin {
    fn as_str(self) -> &'static str {
        match self {
            Origin::Store => "store",
            Origin::Cache => "cache",
            Origin::FileOnly => "file_only",
        }
    }
}

/// The sync state, shared by the watch loop and the endpoints.
#[derive(Debug)]
pub struct Status {
    origin: Origin,
    watching: AtomicBool,
    synced: AtomicBool,
    revision: AtomicU64,
    version: AtomicU64,
    applied: AtomicU64,
    /// When this kernel last knew it had the store's current routes (ms
    /// since the epoch): refreshed while the watch is up and at each full
    /// read; frozen from the moment the watch is lost.
    last_sync_ms: AtomicU64,
    routes: Mutex<InForce>,
}

/// What the routes in force are, for the fleet-wide comparison.
#[derive(Debug, Default, Clone)]
struct InForce {
    /// SHA-256 (hex) of the routes in force, sorted by name.
    digest: String,
    /// Routes whose stored value is not a valid route (they refuse).
    invalid: Vec<String>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

struct Metrics {
    revision: IntGauge,
    watch_up: IntGauge,
    sync_age: IntGauge,
    applied: IntCounter,
    full_reads: IntCounter,
    routes: IntGaugeVec,
    invalid: IntGauge,
}

/// Hex digits of the routes' digest in the `digest` label (64 bits).
pub const DIGEST_LABEL_LEN: usize = 16;

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let r = &metrics().registry;
    let gauge = |name: &str, help: &str| {
        let g = IntGauge::new(name, help).unwrap_or_else(|e| panic!("metric {name}: {e}"));
        r.register(Box::new(g.clone()))
            .unwrap_or_else(|e| panic!("metric {name}: {e}"));
        g
    };
    let counter = |name: &str, help: &str| {
        let c = IntCounter::new(name, help).unwrap_or_else(|e| panic!("metric {name}: {e}"));
        r.register(Box::new(c.clone()))
            .unwrap_or_else(|e| panic!("metric {name}: {e}"));
        c
    };
    Metrics {
        revision: gauge(
            "policy_kernel_config_store_revision",
            "The configuration store's revision this kernel has applied",
        ),
        watch_up: gauge(
            "policy_kernel_config_store_watch_up",
            "1 while this kernel watches the configuration store, 0 while it cannot",
        ),
        sync_age: gauge(
            "policy_kernel_config_store_sync_age_seconds",
            "Seconds since this kernel last knew it had the store's routes (0 while watching)",
        ),
        applied: counter(
            "policy_kernel_config_store_changes_applied_total",
            "Store revisions applied to this kernel's routes",
        ),
        full_reads: counter(
            "policy_kernel_config_store_full_reads_total",
            "Full reads of the store (first sync, or after etcd compacted the revision to resume from)",
        ),
        routes: {
            let name = "policy_kernel_config_store_routes_info";
            let g = IntGaugeVec::new(
                Opts::new(
                    name,
                    "1, labelled with the fleet's version in force here and the leading 64 bits (hex) of \
                     the SHA-256 of the routes in force: kernels at one version with different digests \
                     serve different routes",
                ),
                &["version", "digest"],
            )
            .unwrap_or_else(|e| panic!("metric {name}: {e}"));
            r.register(Box::new(g.clone()))
                .unwrap_or_else(|e| panic!("metric {name}: {e}"));
            g
        },
        invalid: gauge(
            "policy_kernel_config_store_invalid_routes",
            "Routes whose value in the store is not a valid route: each refuses every request \
             (policy_not_supported_response) until it is written again",
        ),
    }
});

impl Status {
    /// A status for a kernel that started from `origin` at `revision`,
    /// last in sync with the store at `synced_ms` (ms since the epoch;
    /// `None`: now).
    pub fn new(origin: Origin, revision: u64, version: u64, synced_ms: Option<u64>) -> Self {
        LazyLock::force(&METRICS);
        METRICS.revision.set(revision as i64);
        METRICS.watch_up.set(0);
        let status = Self {
            origin,
            watching: AtomicBool::new(false),
            synced: AtomicBool::new(origin == Origin::Store),
            revision: AtomicU64::new(revision),
            version: AtomicU64::new(version),
            applied: AtomicU64::new(0),
            last_sync_ms: AtomicU64::new(synced_ms.unwrap_or_else(now_ms)),
            routes: Mutex::default(),
        };
        status.tick();
        status
    }

    /// The fleet's version in force here.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Whether the watch is up (writes are taken only then).
    pub fn watching(&self) -> bool {
        self.watching.load(Ordering::Acquire)
    }

    /// The watch is up (or down). Going down freezes the time of the last
    /// sync at now (it was up until now); a retry that fails while it is
    /// down changes nothing, so the sync age grows through an outage.
    pub fn set_watching(&self, up: bool) {
        let was = self.watching.swap(up, Ordering::AcqRel);
        if up || was {
            self.last_sync_ms.store(now_ms(), Ordering::Release);
        }
        METRICS.watch_up.set(i64::from(up));
        if up {
            self.synced.store(true, Ordering::Release);
        }
        self.tick();
    }

    /// When this kernel last knew it had the store's current routes (ms
    /// since the epoch): now while the watch is up.
    pub fn synced_ms(&self) -> u64 {
        if self.watching() {
            let now = now_ms();
            self.last_sync_ms.store(now, Ordering::Release);
            return now;
        }
        self.last_sync_ms.load(Ordering::Acquire)
    }

    /// The routes in force changed (or the version they are at): `digest`
    /// is their digest, `invalid` the routes whose stored value is not a
    /// valid route.
    pub fn set_routes(&self, version: u64, digest: String, invalid: Vec<String>) {
        let mut routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        METRICS.routes.reset();
        let short = digest.get(..DIGEST_LABEL_LEN).unwrap_or(&digest);
        let version = version.to_string();
        METRICS.routes.with_label_values(&[version.as_str(), short]).set(1);
        METRICS.invalid.set(invalid.len() as i64);
        *routes = InForce { digest, invalid };
    }

    /// A store revision was applied.
    pub fn applied(&self, revision: u64, version: u64) {
        self.revision.store(revision, Ordering::Release);
        self.version.store(version, Ordering::Release);
        self.applied.fetch_add(1, Ordering::AcqRel);
        METRICS.revision.set(revision as i64);
        METRICS.applied.inc();
    }

    /// The store was read in full at `revision`: the routes were current
    /// at this moment.
    pub fn full_read(&self, revision: u64, version: u64) {
        self.last_sync_ms.store(now_ms(), Ordering::Release);
        self.revision.store(revision, Ordering::Release);
        self.version.store(version, Ordering::Release);
        METRICS.revision.set(revision as i64);
        METRICS.full_reads.inc();
    }

    /// Seconds since the kernel last knew it had the store's current
    /// routes (0 while watching).
    pub fn sync_age_secs(&self) -> u64 {
        now_ms().saturating_sub(self.synced_ms()) / 1000
    }

    /// Updates the sync-age gauge.
    pub fn tick(&self) {
        METRICS.sync_age.set(self.sync_age_secs() as i64);
    }

    /// Whether the routes in force may be behind the store's.
    pub fn stale(&self) -> bool {
        !self.watching()
    }

    /// The status as JSON.
    pub fn json(&self) -> Value {
        let synced = self.synced.load(Ordering::Acquire);
        let routes = self.routes.lock().unwrap_or_else(|e| e.into_inner()).clone();
        json!({
            "backend": "etcd",
            "watching": self.watching(),
            "stale": self.stale(),
            "started_from": self.origin.as_str(),
            "ever_synced": synced,
            "revision": self.revision.load(Ordering::Acquire),
            "version": self.version(),
            "changes_applied": self.applied.load(Ordering::Acquire),
            "seconds_since_sync": self.sync_age_secs(),
            "routes_digest": routes.digest,
            "invalid_routes": routes.invalid,
        })
    }
}
