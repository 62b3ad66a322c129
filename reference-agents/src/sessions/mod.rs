//! Per-session state of the reference policies, in one store with two
//! backends, shared by the agents that keep state across requests
//! (`planner-agent`'s `futilityGuard`, `contextBudget`,
//! `contextBudgetStream`; `tool-agent`'s `mcpServerRequestGuard` and the A2A
//! task owners):
//!
//! * in memory (the default): one LRU cache per kind of state (the `lru`
//!   crate), at most [`MAX_SESSIONS`] sessions each, the least recently used
//!   dropped first; a session idle longer than its TTL starts over;
//! * in Redis ([`SessionStore::redis`], `planner-agent --redis-url`), so
//!   that every planner agent using the server sees one session: each update
//!   is one Lua script, atomic on the server; every key carries the session
//!   TTL (`PEXPIRE` on each write) and the set of result digests holds at most
//!   [`MAX_SEEN`] members. Keys are SHA-256 hashes of the session name.
//!
//! The kinds of state are those of the policies: the tool results a
//! session has seen and its turns in a row with nothing new
//! ([`SessionStore::record_results`]), its cumulative tokens
//! ([`SessionStore::charge`], [`SessionStore::used`]), and, for
//! `mcpServerRequestGuard` (tool-agent), the ids of the requests an MCP
//! server sent the client and the client has not answered yet
//! ([`SessionStore::remember_request`], [`SessionStore::take_request`]; at
//! most [`MAX_SEEN`] per session), and, for the A2A policies, the principal
//! that created each task ([`SessionStore::claim_owner`],
//! [`SessionStore::owner`]: the first claim wins and is never overwritten).
//!
//! A Redis failure is an error ([`SessionStoreError`]); the policies turn it
//! into a failure of the call ([`SessionStoreError::policy_error`]), which
//! the route's `on_failure` decides, as for the rate limits.

use std::collections::HashSet;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lru::LruCache;
use serde_json::json;

mod redis_store;

use self::redis_store::RedisSessions;
use policy_agents::{Deny, PolicyError};

/// Sessions kept in memory at most, per kind of state.
pub const MAX_SESSIONS: usize = 10_000;
/// Result digests remembered per session at most.
pub const MAX_SEEN: usize = 1024;

/// A failure of the session store.
#[derive(Debug, thiserror::Error)]
pub enum SessionStoreError {
    /// Redis could not be reached, timed out or refused the script.
    #[error("session store (redis): {0}")]
    Redis(#[from] redis::RedisError),
}

impl SessionStoreError {
    /// The failure of a call of `policy`: under `on_failure: deny`, a 503
    /// JSON answer with reason `session_store_unavailable` and
    /// `Retry-After: 1`.
    pub fn policy_error(&self, policy: &str) -> PolicyError {
        let body = json!({
            "error": format!("{policy}: the session store is unavailable"),
            "reason": "session_store_unavailable",
        });
        PolicyError::new(format!("{policy}: {self}")).with_deny(
            Deny::json(503, &body)
                .header("retry-after", "1")
                .reason("session_store_unavailable"),
        )
    }
}

/// What `futilityGuard` remembers of a session.
#[derive(Debug, Default)]
struct Seen {
    results: HashSet<u64>,
    stagnant: u32,
}

impl Seen {
    /// Records the results of one request; the turns in a row with nothing new.
    fn record(&mut self, results: &[u64]) -> u32 {
        let mut new = false;
        for r in results {
            if self.results.len() >= MAX_SEEN && !self.results.contains(r) {
                // Full: forget the oldest knowledge rather than grow.
                self.results.clear();
            }
            new |= self.results.insert(*r);
        }
        self.stagnant = if new { 0 } else { self.stagnant.saturating_add(1) };
        self.stagnant
    }
}

/// Whether a value last touched at `stamp` is still alive at `now`.
fn fresh(stamp: Instant, ttl: Duration, now: Instant) -> bool {
    now.saturating_duration_since(stamp) <= ttl
}

/// One LRU cache of per-session values, each forgotten after its TTL idle.
struct Sessions<V> {
    map: Mutex<LruCache<String, (V, Instant)>>,
}

impl<V: Default> Sessions<V> {
    fn new(capacity: NonZeroUsize) -> Self {
        Sessions {
            map: Mutex::new(LruCache::new(capacity)),
        }
    }

    /// Updates the value of `key` (a fresh one when absent or expired).
    fn update<R>(&self, key: &str, ttl: Duration, now: Instant, f: impl FnOnce(&mut V) -> R) -> R {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let entry = map.get_or_insert_mut(key.to_string(), || (V::default(), now));
        if !fresh(entry.1, ttl, now) {
            entry.0 = V::default();
        }
        entry.1 = now;
        f(&mut entry.0)
    }

    /// Reads the value of `key`, if present and not expired.
    fn read<R>(&self, key: &str, ttl: Duration, now: Instant, f: impl FnOnce(&V) -> R) -> Option<R> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(key).filter(|(_, t)| fresh(*t, ttl, now)).map(|(v, _)| f(v))
    }

    fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// The in-memory backend.
pub struct MemorySessions {
    seen: Sessions<Seen>,
    tokens: Sessions<u64>,
    asked: Sessions<HashSet<String>>,
    owners: Sessions<Option<String>>,
}

impl MemorySessions {
    fn new(capacity: NonZeroUsize) -> Self {
        MemorySessions {
            seen: Sessions::new(capacity),
            tokens: Sessions::new(capacity),
            asked: Sessions::new(capacity),
            owners: Sessions::new(capacity),
        }
    }

    pub(super) fn remember_request_at(&self, session: &str, id: &str, ttl: Duration, now: Instant) {
        self.asked.update(session, ttl, now, |ids| {
            if ids.len() >= MAX_SEEN && !ids.contains(id) {
                ids.clear();
            }
            ids.insert(id.to_string());
        })
    }

    pub(super) fn take_request_at(&self, session: &str, id: &str, ttl: Duration, now: Instant) -> bool {
        let mut map = self.asked.map.lock().unwrap_or_else(|e| e.into_inner());
        match map.get_mut(session) {
            Some((ids, stamp)) if fresh(*stamp, ttl, now) => ids.remove(id),
            _ => false,
        }
    }

    pub(super) fn claim_owner_at(&self, key: &str, principal: &str, ttl: Duration, now: Instant) -> String {
        self.owners.update(key, ttl, now, |owner| {
            owner.get_or_insert_with(|| principal.to_string()).clone()
        })
    }

    pub(super) fn owner_at(&self, key: &str, ttl: Duration, now: Instant) -> Option<String> {
        self.owners.read(key, ttl, now, Clone::clone).flatten()
    }

    pub(super) fn record_results_at(&self, session: &str, results: &[u64], ttl: Duration, now: Instant) -> u32 {
        self.seen.update(session, ttl, now, |s| s.record(results))
    }

    pub(super) fn charge_at(&self, session: &str, delta: i64, ttl: Duration, now: Instant) -> u64 {
        self.tokens.update(session, ttl, now, |used| {
            *used = add_clamped(*used, delta);
            *used
        })
    }

    pub(super) fn try_charge_at(&self, session: &str, cost: u64, limit: u64, ttl: Duration, now: Instant) -> Charge {
        let (cost, limit) = (cost.min(MAX_TOKENS), limit.min(MAX_TOKENS));
        let mut map = self.tokens.map.lock().unwrap_or_else(|e| e.into_inner());
        let used = map
            .get(session)
            .filter(|(_, t)| fresh(*t, ttl, now))
            .map_or(0, |(u, _)| *u);
        let total = used.saturating_add(cost);
        if total > limit {
            return Charge { charged: false, used };
        }
        map.put(session.to_string(), (total, now));
        Charge {
            charged: true,
            used: total,
        }
    }

    pub(super) fn used_at(&self, session: &str, ttl: Duration, now: Instant) -> u64 {
        self.tokens.read(session, ttl, now, |u| *u).unwrap_or(0)
    }
}

/// The answer of [`SessionStore::try_charge`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charge {
    /// True when the cost fitted and was added.
    pub charged: bool,
    /// The session's total: after the charge, or as it stays when refused.
    pub used: u64,
}

/// `used + delta`, within `0..=MAX_TOKENS`.
fn add_clamped(used: u64, delta: i64) -> u64 {
    (i128::from(used) + i128::from(delta)).clamp(0, i128::from(MAX_TOKENS)) as u64
}

/// The largest session total kept (2^53 - 1: exact in Redis' Lua numbers too).
pub const MAX_TOKENS: u64 = (1 << 53) - 1;

/// The distinct results of a request, the last [`MAX_SEEN`] at most, in order.
fn distinct_recent(results: &[u64]) -> Vec<u64> {
    let mut seen = HashSet::with_capacity(results.len());
    let mut out: Vec<u64> = results.iter().copied().filter(|r| seen.insert(*r)).collect();
    if out.len() > MAX_SEEN {
        out.drain(..out.len() - MAX_SEEN);
    }
    out
}

/// Where session state is kept: cheap to clone, clones share the sessions.
#[derive(Clone)]
pub enum SessionStore {
    /// In this process (the default).
    Memory(Arc<MemorySessions>),
    /// In Redis, shared by every agent using the same server.
    Redis(Arc<RedisSessions>),
}

impl std::fmt::Debug for SessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SessionStore::Memory(_) => "SessionStore::Memory",
            SessionStore::Redis(_) => "SessionStore::Redis",
        })
    }
}

impl Default for SessionStore {
    fn default() -> Self {
        SessionStore::memory()
    }
}

impl SessionStore {
    /// An in-memory store of at most [`MAX_SESSIONS`] sessions per kind.
    pub fn memory() -> Self {
        SessionStore::memory_with_capacity(NonZeroUsize::new(MAX_SESSIONS).unwrap_or(NonZeroUsize::MIN))
    }

    /// An in-memory store of at most `sessions` sessions per kind.
    pub fn memory_with_capacity(sessions: NonZeroUsize) -> Self {
        SessionStore::Memory(Arc::new(MemorySessions::new(sessions)))
    }

    /// A Redis store (`redis://host:port/db`, `redis+unix:///path.sock`),
    /// connected now; later failures reconnect on the next call.
    pub async fn redis(url: &str) -> Result<Self, SessionStoreError> {
        Ok(SessionStore::Redis(Arc::new(RedisSessions::connect(url).await?)))
    }

    /// Records the tool results (digests) of one request of `session`: the
    /// requests in a row, this one included, that brought no result the
    /// session had not seen.
    pub async fn record_results(
        &self,
        session: &str,
        results: &[u64],
        ttl: Duration,
    ) -> Result<u32, SessionStoreError> {
        let results = distinct_recent(results);
        match self {
            SessionStore::Memory(m) => Ok(m.record_results_at(session, &results, ttl, Instant::now())),
            SessionStore::Redis(r) => r.record_results(session, &results, ttl).await,
        }
    }

    /// Adds `delta` tokens (negative gives back) to `session`: its new total.
    pub async fn charge(&self, session: &str, delta: i64, ttl: Duration) -> Result<u64, SessionStoreError> {
        match self {
            SessionStore::Memory(m) => Ok(m.charge_at(session, delta, ttl, Instant::now())),
            SessionStore::Redis(r) => r.charge(session, delta, ttl).await,
        }
    }

    /// Adds `cost` tokens to `session` if its total stays within `limit`
    /// (one atomic step; a refusal changes nothing, not even the session's
    /// idle time). Values are capped at [`MAX_TOKENS`].
    pub async fn try_charge(
        &self,
        session: &str,
        cost: u64,
        limit: u64,
        ttl: Duration,
    ) -> Result<Charge, SessionStoreError> {
        match self {
            SessionStore::Memory(m) => Ok(m.try_charge_at(session, cost, limit, ttl, Instant::now())),
            SessionStore::Redis(r) => {
                r.try_charge(session, cost.min(MAX_TOKENS), limit.min(MAX_TOKENS), ttl)
                    .await
            }
        }
    }

    /// The tokens `session` used (0 when unknown or expired).
    pub async fn used(&self, session: &str, ttl: Duration) -> Result<u64, SessionStoreError> {
        match self {
            SessionStore::Memory(m) => Ok(m.used_at(session, ttl, Instant::now())),
            SessionStore::Redis(r) => r.used(session).await,
        }
    }

    /// Remembers that the server asked the client request `id` (JSON text)
    /// in `session`.
    pub async fn remember_request(&self, session: &str, id: &str, ttl: Duration) -> Result<(), SessionStoreError> {
        match self {
            SessionStore::Memory(m) => {
                m.remember_request_at(session, id, ttl, Instant::now());
                Ok(())
            }
            SessionStore::Redis(r) => r.remember_request(session, id, ttl).await,
        }
    }

    /// Records `principal` as the owner of `key` (an A2A task) unless it has
    /// one: the owner in force, kept for `ttl` after its last use.
    pub async fn claim_owner(&self, key: &str, principal: &str, ttl: Duration) -> Result<String, SessionStoreError> {
        match self {
            SessionStore::Memory(m) => Ok(m.claim_owner_at(key, principal, ttl, Instant::now())),
            SessionStore::Redis(r) => r.claim_owner(key, principal, ttl).await,
        }
    }

    /// The owner of `key`, if known and not expired (each read keeps it
    /// for another `ttl` in Redis; in memory, reads do not extend it).
    pub async fn owner(&self, key: &str, ttl: Duration) -> Result<Option<String>, SessionStoreError> {
        match self {
            SessionStore::Memory(m) => Ok(m.owner_at(key, ttl, Instant::now())),
            SessionStore::Redis(r) => r.owner(key, ttl).await,
        }
    }

    /// Forgets request `id` of `session`: true when the server had asked it
    /// (and it was not answered yet, nor expired).
    pub async fn take_request(&self, session: &str, id: &str, ttl: Duration) -> Result<bool, SessionStoreError> {
        match self {
            SessionStore::Memory(m) => Ok(m.take_request_at(session, id, ttl, Instant::now())),
            SessionStore::Redis(r) => r.take_request(session, id).await,
        }
    }

    /// Sessions kept in memory now (futility state, token totals); `None` in Redis.
    pub fn memory_sessions(&self) -> Option<(usize, usize)> {
        match self {
            SessionStore::Memory(m) => Some((m.seen.len(), m.tokens.len())),
            SessionStore::Redis(_) => None,
        }
    }
}

/// A token delta from a reported usage and an estimate, in `i64`.
pub fn delta(usage: u64, estimate: u64) -> i64 {
    (i128::from(usage) - i128::from(estimate)).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

#[cfg(test)]
mod tests;
