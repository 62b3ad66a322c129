//! The decision cache: request-phase outcomes of agent calls kept and
//! reused, for calls whose every policy the agent declared cacheable
//! (`PolicyInfo.cache`).
//!
//! - **Key** ([`key`]): the SHA-256 of the configuration version, the route,
//!   the agent and its connection epoch, each policy of the call as sent
//!   (name, params, `on_failure`) and the request parts the policies
//!   declared, as the agent would see them at that point of the chain.
//! - **Value**: the checked reply ([`Reply`]): instructions and metadata,
//!   applied on a hit exactly as a call's reply is, so a cached denial is
//!   the same denial and later policies see the same metadata.
//! - **Lifetime**: the shortest of the policies' declared `max_age_ms`, the
//!   reply's own `cache_max_age_ms` (a token's remaining lifetime) and
//!   `decision_cache.max_age_ms`. Failed calls are never kept.
//! - **Invalidation**: a reload or a management API change makes a new
//!   configuration version, and an agent whose connection closes (a
//!   restart) gets a new epoch, so older entries are never looked up again;
//!   they leave by eviction or age.
//! - **Bounds**: entries and bytes (`decision_cache.max_entries`,
//!   `max_bytes`): each entry weighs at least `max_bytes / max_entries`, so
//!   the byte bound implies the entry bound.
//!
//! Only request-phase calls of enforced routes are cached: shadow routes
//! and response phases always call their agents.

pub mod key;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::aggregate::{Instr, Reply};
use crate::config::DecisionCacheConfig;
use crate::telemetry::metrics::metrics;

pub use key::{CacheSpec, Key};

/// One kept outcome.
#[derive(Debug)]
pub struct Entry {
    /// The checked reply, as the call returned it.
    pub reply: Reply,
    ttl: Duration,
    weight: u32,
}

struct Lifetime;

impl moka::Expiry<Key, Arc<Entry>> for Lifetime {
    fn expire_after_create(&self, _: &Key, value: &Arc<Entry>, _: Instant) -> Option<Duration> {
        Some(value.ttl)
    }
}

/// The kernel's decision cache, shared by every snapshot.
pub struct DecisionCache {
    entries: moka::sync::Cache<Key, Arc<Entry>>,
    /// Least weight of an entry: `max_bytes / max_entries`, rounded up.
    min_weight: u32,
}

impl std::fmt::Debug for DecisionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionCache")
            .field("entries", &self.entries.entry_count())
            .finish()
    }
}

/// Fixed cost of an entry besides its instructions: key, lifetime, the
/// cache's own bookkeeping.
const ENTRY_OVERHEAD: usize = 160;

fn reply_bytes(r: &Reply) -> usize {
    let instrs: usize = r
        .instructions
        .iter()
        .map(|i| {
            48 + match i {
                Instr::SetHeader(n, v) | Instr::AppendHeader(n, v) => n.len() + v.len(),
                Instr::RemoveHeader(n) | Instr::SetPath(n) | Instr::SetMethod(n) | Instr::RemoveQuery(n) => n.len(),
                Instr::SetBody(b, ct) => b.len() + ct.as_ref().map_or(0, String::len),
                Instr::SetQuery(n, v) | Instr::SetMetadata(n, v) => n.len() + v.len(),
                Instr::Immediate(imm) => {
                    imm.body.len()
                        + imm.reason.len()
                        + imm.headers.iter().map(|(n, v)| n.len() + v.len()).sum::<usize>()
                }
                _ => 0,
            }
        })
        .sum();
    let meta: usize = r.metadata.iter().map(|(k, v)| 48 + k.len() + v.len()).sum();
    ENTRY_OVERHEAD + instrs + meta
}

impl DecisionCache {
    /// An empty cache sized by `config` (its `max_entries` and `max_bytes`).
    pub fn new(config: &DecisionCacheConfig) -> Self {
        let max_entries = config.max_entries.max(1);
        // Rounded up: entries * min_weight <= max_bytes holds only then.
        let min_weight = u32::try_from(config.max_bytes.div_ceil(max_entries))
            .unwrap_or(u32::MAX)
            .max(1);
        let entries = moka::sync::Cache::builder()
            .max_capacity(config.max_bytes)
            .weigher(|_: &Key, e: &Arc<Entry>| e.weight)
            .expire_after(Lifetime)
            .build();
        Self { entries, min_weight }
    }

    /// The live entry under `key`.
    pub fn get(&self, key: &Key) -> Option<Arc<Entry>> {
        self.entries.get(key)
    }

    /// Keeps `reply` under `key` for `ttl` (nothing for a zero `ttl`).
    pub fn put(&self, key: Key, reply: Reply, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let bytes = u32::try_from(reply_bytes(&reply)).unwrap_or(u32::MAX);
        let entry = Entry {
            reply,
            ttl,
            weight: bytes.max(self.min_weight),
        };
        self.entries.insert(key, Arc::new(entry));
        let m = metrics();
        m.decision_cache_entries
            .set(i64::try_from(self.entries.entry_count()).unwrap_or(i64::MAX));
        m.decision_cache_bytes
            .set(i64::try_from(self.entries.weighted_size()).unwrap_or(i64::MAX));
    }

    /// Entries and total weight, after pending evictions ran (for tests and
    /// the admin endpoint; not for the request path).
    pub fn size(&self) -> (u64, u64) {
        self.entries.run_pending_tasks();
        (self.entries.entry_count(), self.entries.weighted_size())
    }
}

/// What [`crate::snapshot::Snapshot`] holds: the shared store and the
/// settings of its configuration.
#[derive(Debug, Clone)]
pub struct Decisions {
    /// The store, carried from snapshot to snapshot.
    pub store: Arc<DecisionCache>,
    /// `decision_cache.enabled`.
    pub enabled: bool,
    /// `decision_cache.max_age_ms`.
    pub max_age: Duration,
}

impl Decisions {
    /// `config`'s settings over `store`.
    pub fn new(store: Arc<DecisionCache>, config: &DecisionCacheConfig) -> Self {
        Self {
            store,
            enabled: config.enabled && config.max_age_ms > 0,
            max_age: Duration::from_millis(config.max_age_ms),
        }
    }
}

#[cfg(test)]
mod tests;
