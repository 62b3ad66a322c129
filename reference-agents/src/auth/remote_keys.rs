//! Verification keys fetched from an identity provider for `jwtValidation`:
//! a JWK set at `jwks_uri`, or found by OIDC discovery
//! (`<issuer>/.well-known/openid-configuration` names the `jwks_uri`).
//!
//! * **Cached** for the `Cache-Control: max-age` of the JWK set's answer
//!   (300 s without one), held between `jwks_cache_min_s` and
//!   `jwks_cache_max_s`.
//! * **Unknown `kid`**: a token whose key is not in the fresh set triggers
//!   a refresh, at most one per `jwks_refresh_min_ms` (1 s) for the source
//!   (a `governor` limiter): a flood of forged key ids, however many and
//!   however distinct, costs the provider one request per that interval.
//!   A `kid` that a refresh started after its token arrived did not bring
//!   is remembered for `jwks_refresh_interval_s` (10 s) and refused without
//!   another refresh meanwhile; a `kid` first seen after the last refresh
//!   is never refused for want of a turn for longer than the minimum
//!   interval, so forged key ids cannot hold back a real rotation.
//! * **Single flight**: one fetch at a time per key source; the requests
//!   that need it wait on the same fetch, each only until its own deadline
//!   (the call's deadline less a margin for the reply). A fetch runs on in
//!   the background after its requests gave up, for the next ones.
//! * **Stale keys**: when the set's lifetime is over and the provider does
//!   not answer (in time), the last set keeps verifying for `jwks_stale_s`
//!   more, each use counted and logged (at most every 10 s); after that,
//!   and when no set was ever fetched, [`Lookup::Unavailable`] (the policy
//!   answers 503: it fails closed). Failed fetches back off (1 s doubling
//!   to 30 s) so a provider that is down is not asked on every request.
//!
//! Counters per key source ([`Stats`]) go into every log line about it and
//! into the agent's metrics ([`super::metrics`]).

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::num::{NonZeroU32, NonZeroUsize};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use jsonwebtoken::Algorithm;
use lru::LruCache;
use tokio::sync::watch;
use tokio::time::Instant;
use url::Url;

use super::fetch::{self, FetchError};
use super::jwks::{find_key, jwk_set_keys, SetOrigin, VerifyKey};
use super::metrics::{bump, Stats};
use crate::ratelimit::TokioClock;

/// Lifetime of a JWK set whose answer has no `Cache-Control` lifetime.
const DEFAULT_TTL: Duration = Duration::from_secs(300);
/// Longest pause between attempts after failed fetches.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Time kept back from the call's deadline for the reply to reach the kernel.
const REPLY_MARGIN: Duration = Duration::from_millis(25);
/// How long a request with usable stale keys waits for a refresh.
const STALE_WAIT: Duration = Duration::from_millis(100);
/// Least time between two warnings about stale or missing keys.
const WARN_EVERY: Duration = Duration::from_secs(10);
/// Key sources kept at most (distinct params); beyond, the registry starts over.
const MAX_SOURCES: usize = 64;
/// Unknown key ids remembered at most per source, least recently used out.
const MAX_UNKNOWN_KIDS: usize = 4096;

/// Where the keys come from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    /// OIDC discovery from this issuer.
    Discovery(String),
    /// A JWK set URL.
    JwksUri(Url),
}

/// How remote keys are fetched and kept (from `jwtValidation`'s params).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct RemoteConfig {
    pub(crate) source: Source,
    pub(crate) ca_file: Option<PathBuf>,
    pub(crate) cache_min: Duration,
    pub(crate) cache_max: Duration,
    pub(crate) stale_for: Duration,
    /// How long a `kid` a refresh did not bring is refused without another.
    pub(crate) refresh_interval: Duration,
    /// Least time between two refreshes started by unknown `kid`s.
    pub(crate) refresh_min: Duration,
}

/// What a key lookup found.
pub(crate) enum Lookup {
    /// The key: `keys[index]`; `stale` when the set outlived its lifetime;
    /// `fresh_for`, how long the set has left of its lifetime.
    Found {
        keys: Arc<Vec<VerifyKey>>,
        index: usize,
        stale: bool,
        fresh_for: Duration,
    },
    /// The provider publishes no key with this `kid` (and algorithm).
    UnknownKey,
    /// No usable key set: never fetched, or stale past its bound.
    Unavailable,
}

struct Snapshot {
    keys: Arc<Vec<VerifyKey>>,
    fresh_until: Instant,
}

#[derive(Default)]
struct Gate {
    retry_at: Option<Instant>,
    failures: u32,
    /// When each kind of warning (stale keys, no keys) was last logged.
    last_warning: [Option<Instant>; 2],
}

/// The warnings logged at most every [`WARN_EVERY`], each on its own clock.
#[derive(Clone, Copy)]
enum Warning {
    Stale = 0,
    Unavailable = 1,
}

type Outcome = Option<Result<(), FetchError>>;

/// The fetch in flight: its outcome, when it ends, and when it started.
#[derive(Clone)]
struct Inflight {
    rx: watch::Receiver<Outcome>,
    started: Instant,
}

/// At most one refresh per `refresh_min` for unknown key ids.
type KidLimiter = RateLimiter<NotKeyed, InMemoryState, TokioClock>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The keys of one source, shared by every call that names it.
pub(crate) struct RemoteKeys {
    cfg: RemoteConfig,
    client: reqwest::Client,
    snapshot: RwLock<Option<Arc<Snapshot>>>,
    jwks_uri: Mutex<Option<Url>>,
    inflight: Mutex<Option<Inflight>>,
    gate: Mutex<Gate>,
    kid_limiter: KidLimiter,
    /// Key ids (hashed) that a refresh did not bring, until when they are
    /// refused without another.
    unknown_kids: Mutex<LruCache<u64, Instant>>,
    hasher: std::collections::hash_map::RandomState,
    stats: Stats,
}

impl RemoteKeys {
    fn new(cfg: RemoteConfig) -> Result<Self, String> {
        let client = fetch::client(cfg.ca_file.as_deref())?;
        let jwks_uri = match &cfg.source {
            Source::JwksUri(u) => Some(u.clone()),
            Source::Discovery(_) => None,
        };
        let stats = Stats::new(&source_name(&cfg.source));
        let quota = Quota::with_period(cfg.refresh_min)
            .ok_or("jwks_refresh_min_ms must be above 0")?
            .allow_burst(NonZeroU32::MIN);
        let kids = NonZeroUsize::new(MAX_UNKNOWN_KIDS).unwrap_or(NonZeroUsize::MIN);
        Ok(RemoteKeys {
            cfg,
            client,
            snapshot: RwLock::new(None),
            jwks_uri: Mutex::new(jwks_uri),
            inflight: Mutex::new(None),
            gate: Mutex::new(Gate::default()),
            kid_limiter: RateLimiter::direct_with_clock(quota, TokioClock),
            unknown_kids: Mutex::new(LruCache::new(kids)),
            hasher: std::collections::hash_map::RandomState::new(),
            stats,
        })
    }

    /// The counters.
    #[cfg(test)]
    pub(crate) fn stats(&self) -> &Stats {
        &self.stats
    }

    fn source(&self) -> String {
        source_name(&self.cfg.source)
    }

    fn current(&self) -> Option<Arc<Snapshot>> {
        self.snapshot.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The key for a token signed with `alg`, naming `kid`; waits for the
    /// provider at most until `deadline` (less a margin for the reply).
    pub(crate) async fn lookup(
        self: &Arc<Self>,
        alg: Algorithm,
        kid: Option<&str>,
        deadline: Option<Instant>,
    ) -> Lookup {
        let now = Instant::now();
        let current = self.current();
        let wait_until = deadline
            .map(|d| d.checked_sub(REPLY_MARGIN).unwrap_or(now))
            .unwrap_or(now + fetch::FETCH_TIMEOUT);
        if let Some(snap) = current.as_ref().filter(|s| now < s.fresh_until) {
            if let Some(index) = find_key(&snap.keys, alg, kid) {
                return found(snap, index, false);
            }
            return self.unknown_kid(alg, kid, now, wait_until).await;
        }
        // No keys yet, or their lifetime is over: fetch. With stale keys at
        // hand, wait only briefly; the fetch goes on for the next requests.
        let usable_stale = current
            .as_ref()
            .filter(|s| now < s.fresh_until + self.cfg.stale_for)
            .cloned();
        let wait = match usable_stale {
            Some(_) => wait_until.min(now + STALE_WAIT),
            None => wait_until,
        };
        if let Some(Ok(())) = self.refresh(wait).await {
            if let Some(snap) = self.current() {
                return match find_key(&snap.keys, alg, kid) {
                    Some(index) => found(&snap, index, false),
                    None => Lookup::UnknownKey,
                };
            }
        }
        match usable_stale {
            Some(snap) => match find_key(&snap.keys, alg, kid) {
                Some(index) => {
                    let n = bump(&self.stats.stale_used);
                    if self.may_warn(Warning::Stale) {
                        tracing::warn!(source = %self.source(), stale_used = n, failures = self.stats.failures.get(),
                            "identity provider unreachable: verifying with stale keys");
                    }
                    found(&snap, index, true)
                }
                None => Lookup::UnknownKey,
            },
            None => {
                let n = bump(&self.stats.unavailable);
                if self.may_warn(Warning::Unavailable) {
                    tracing::warn!(source = %self.source(), unavailable = n, failures = self.stats.failures.get(),
                        "no usable keys from the identity provider: refusing tokens");
                }
                Lookup::Unavailable
            }
        }
    }

    /// A `kid` the fresh set does not hold (the token arrived at `now`).
    /// Refused at once when a refresh already lacked it (remembered);
    /// otherwise it joins the fetch in flight, or starts one when the
    /// limiter gives a turn. A fetch that started after `now` and still
    /// lacks the `kid` makes it remembered for `refresh_interval`.
    async fn unknown_kid(
        self: &Arc<Self>,
        alg: Algorithm,
        kid: Option<&str>,
        now: Instant,
        wait_until: Instant,
    ) -> Lookup {
        let kid_key = self.hasher.hash_one(kid.unwrap_or(""));
        let remembered = lock(&self.unknown_kids).get(&kid_key).is_some_and(|until| now < *until);
        if remembered {
            let n = bump(&self.stats.kid_remembered);
            tracing::debug!(source = %self.source(), kid, remembered = n, "unknown key id, lacking from a recent refresh");
            return Lookup::UnknownKey;
        }
        let inflight = lock(&self.inflight).clone();
        let fetch = match inflight {
            Some(f) => f,
            None => {
                if self.kid_limiter.check().is_err() {
                    let n = bump(&self.stats.kid_refreshes_limited);
                    tracing::debug!(source = %self.source(), kid, limited = n, "unknown key id, refresh not yet allowed");
                    return Lookup::UnknownKey;
                }
                let n = bump(&self.stats.kid_refreshes);
                tracing::info!(source = %self.source(), kid, kid_refreshes = n, "unknown key id: refreshing the keys");
                match self.start_refresh() {
                    Some(f) => f,
                    None => return Lookup::UnknownKey,
                }
            }
        };
        let started = fetch.started;
        match wait(fetch.rx, wait_until).await {
            Some(Ok(())) => {
                if let Some(snap) = self.current() {
                    if let Some(index) = find_key(&snap.keys, alg, kid) {
                        return found(&snap, index, false);
                    }
                }
                // A set fetched after this token arrived lacks its key: the
                // provider does not publish it (now).
                if started >= now {
                    let until = Instant::now() + self.cfg.refresh_interval;
                    lock(&self.unknown_kids).put(kid_key, until);
                }
                Lookup::UnknownKey
            }
            // Failed or too slow: the fresh set stands, and it lacks this key.
            _ => Lookup::UnknownKey,
        }
    }

    fn may_warn(&self, kind: Warning) -> bool {
        let mut gate = lock(&self.gate);
        let now = Instant::now();
        let last = &mut gate.last_warning[kind as usize];
        if last.is_some_and(|t| now < t + WARN_EVERY) {
            return false;
        }
        *last = Some(now);
        true
    }

    /// Joins the fetch in flight or starts one (unless backing off after
    /// failures), and waits for it until `until`.
    async fn refresh(self: &Arc<Self>, until: Instant) -> Outcome {
        wait(self.start_refresh()?.rx, until).await
    }

    /// The fetch in flight, or a new one (`None` while backing off).
    fn start_refresh(self: &Arc<Self>) -> Option<Inflight> {
        let mut slot = lock(&self.inflight);
        if let Some(f) = slot.as_ref() {
            return Some(f.clone());
        }
        if lock(&self.gate).retry_at.is_some_and(|t| Instant::now() < t) {
            return None;
        }
        let (tx, rx) = watch::channel(None);
        let fetch = Inflight {
            rx,
            started: Instant::now(),
        };
        *slot = Some(fetch.clone());
        drop(slot);
        let me = Arc::clone(self);
        tokio::spawn(async move {
            let result = me.fetch().await;
            let outcome = me.record(result);
            *lock(&me.inflight) = None;
            let _ = tx.send(Some(outcome));
        });
        Some(fetch)
    }

    /// Stores a fetched set (or counts the failure and backs off).
    fn record(&self, result: Result<(Vec<VerifyKey>, Duration), FetchError>) -> Result<(), FetchError> {
        match result {
            Ok((keys, ttl)) => {
                let count = keys.len();
                let snap = Snapshot {
                    keys: Arc::new(keys),
                    fresh_until: Instant::now() + ttl,
                };
                *self.snapshot.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(snap));
                let mut gate = lock(&self.gate);
                gate.failures = 0;
                gate.retry_at = None;
                drop(gate);
                self.stats.fetched(count);
                let n = self.stats.fetches.get();
                tracing::info!(
                    source = %self.source(), keys = count, ttl_s = ttl.as_secs(), fetches = n,
                    failures = self.stats.failures.get(), kid_refreshes = self.stats.kid_refreshes.get(),
                    kid_refreshes_limited = self.stats.kid_refreshes_limited.get(),
                    kids_remembered = self.stats.kid_remembered.get(),
                    stale_used = self.stats.stale_used.get(), unavailable = self.stats.unavailable.get(),
                    "identity provider keys fetched"
                );
                Ok(())
            }
            Err(e) => {
                if matches!(self.cfg.source, Source::Discovery(_)) {
                    // The provider may have moved its keys: discover again.
                    *lock(&self.jwks_uri) = None;
                }
                let mut gate = lock(&self.gate);
                gate.failures = gate.failures.saturating_add(1);
                let backoff = Duration::from_secs(1u64 << gate.failures.min(6).saturating_sub(1)).min(MAX_BACKOFF);
                gate.retry_at = Some(Instant::now() + backoff);
                drop(gate);
                let n = bump(&self.stats.failures);
                tracing::warn!(source = %self.source(), error = %e, failures = n, retry_in_ms = backoff.as_millis() as u64,
                    "fetching identity provider keys failed");
                Err(e)
            }
        }
    }

    /// One fetch: discovery when needed, then the JWK set and its lifetime.
    async fn fetch(&self) -> Result<(Vec<VerifyKey>, Duration), FetchError> {
        let known = lock(&self.jwks_uri).clone();
        let uri = match (known, &self.cfg.source) {
            (Some(u), _) => u,
            (None, Source::JwksUri(u)) => u.clone(),
            (None, Source::Discovery(issuer)) => {
                let u = discover(&self.client, issuer).await?;
                *lock(&self.jwks_uri) = Some(u.clone());
                u
            }
        };
        let (headers, value) = fetch::get_json(&self.client, &uri).await?;
        let keys = jwk_set_keys(value, SetOrigin::Published).map_err(|reason| FetchError::Invalid {
            url: uri.to_string(),
            reason,
        })?;
        let ttl = fetch::max_age(&headers)
            .unwrap_or(DEFAULT_TTL)
            .clamp(self.cfg.cache_min, self.cfg.cache_max);
        Ok((keys, ttl))
    }
}

/// A source as logs and metrics name it: the issuer, or the JWK set URL.
fn source_name(source: &Source) -> String {
    match source {
        Source::Discovery(issuer) => issuer.clone(),
        Source::JwksUri(u) => u.to_string(),
    }
}

/// The outcome of a fetch, or `None` when it did not end by `until`.
async fn wait(mut rx: watch::Receiver<Outcome>, until: Instant) -> Outcome {
    match tokio::time::timeout_at(until, rx.wait_for(Option::is_some)).await {
        Ok(Ok(outcome)) => outcome.clone(),
        _ => None,
    }
}

fn found(snap: &Snapshot, index: usize, stale: bool) -> Lookup {
    Lookup::Found {
        keys: Arc::clone(&snap.keys),
        index,
        stale,
        fresh_for: snap.fresh_until.saturating_duration_since(Instant::now()),
    }
}

/// The `jwks_uri` of `issuer`'s OpenID configuration, whose `issuer` must
/// be `issuer` exactly (OpenID Connect Discovery §4.3).
pub(crate) async fn discover(client: &reqwest::Client, issuer: &str) -> Result<Url, FetchError> {
    discover_endpoint(client, issuer, "jwks_uri").await
}

/// The endpoint `field` (`jwks_uri`, `token_endpoint`) of `issuer`'s OpenID
/// configuration, checked as [`discover`] checks it.
pub(crate) async fn discover_endpoint(client: &reqwest::Client, issuer: &str, field: &str) -> Result<Url, FetchError> {
    let raw = format!("{}/.well-known/openid-configuration", issuer.trim_end_matches('/'));
    let invalid = |url: &str, reason: String| FetchError::Invalid {
        url: url.to_string(),
        reason,
    };
    let url = fetch::check_url("discovery URL", &raw).map_err(|r| invalid(&raw, r))?;
    let (_, doc) = fetch::get_json(client, &url).await?;
    if doc.get("issuer").and_then(|v| v.as_str()) != Some(issuer) {
        return Err(invalid(
            &raw,
            format!(
                "its issuer {} is not {issuer:?}",
                doc.get("issuer").unwrap_or(&serde_json::Value::Null)
            ),
        ));
    }
    let endpoint = doc
        .get(field)
        .and_then(|v| v.as_str())
        .ok_or_else(|| invalid(&raw, format!("no {field}")))?;
    fetch::check_url(field, endpoint).map_err(|r| invalid(&raw, r))
}

/// The key sources of one policy, by config.
#[derive(Default)]
pub(crate) struct RemoteKeySets {
    map: Mutex<HashMap<RemoteConfig, Arc<RemoteKeys>>>,
}

impl RemoteKeySets {
    /// The source for `cfg`, made on first use (an error when its
    /// `ca_file` cannot be read: then nothing is kept).
    pub(crate) fn get(&self, cfg: &RemoteConfig) -> Result<Arc<RemoteKeys>, String> {
        let mut map = lock(&self.map);
        if let Some(keys) = map.get(cfg) {
            return Ok(Arc::clone(keys));
        }
        let keys = Arc::new(RemoteKeys::new(cfg.clone())?);
        if map.len() >= MAX_SOURCES {
            map.clear();
        }
        map.insert(cfg.clone(), Arc::clone(&keys));
        Ok(keys)
    }
}

#[cfg(test)]
#[path = "remote_keys_tests.rs"]
mod tests;
