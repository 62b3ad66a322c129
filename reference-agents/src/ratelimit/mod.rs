//! Rate-limiting policies of `ratelimit-agent`.
//!
//! * [`RateLimit`] (`rateLimit`): requests per second with a burst, GCRA.
//! * [`TokenBasedRateLimit`] (`tokenBasedRateLimit`): LLM tokens per minute,
//!   estimated from the prompt, then corrected with the upstream's `usage`.
//!
//! Both keep their state in a [`Backend`]: in memory (GCRA through
//! `governor`, token buckets of our own), or in Redis (Lua scripts doing the
//! same atomically) so that several kernel replicas share limits. Time comes
//! from tokio's clock, so tests can pause and advance it.

mod clock;
mod key;
mod memory;
mod rate;
mod redis_store;
pub mod stream_usage;
mod tokens;

pub use clock::TokioClock;
pub use key::KeySpec;
pub use memory::MemoryStore;
pub use rate::RateLimit;
pub use redis_store::RedisStore;
pub use tokens::{estimate_tokens, TokenBasedRateLimit};

use std::sync::Arc;
use std::time::Duration;

/// A failure of the rate-limit state store.
#[derive(Debug, thiserror::Error)]
pub enum RateLimitError {
    /// Redis could not be reached or refused the script.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// The rate parameters cannot form a quota.
    #[error("invalid rate: {0}")]
    InvalidRate(String),
}

impl From<RateLimitError> for policy_agents::PolicyError {
    fn from(e: RateLimitError) -> Self {
        policy_agents::PolicyError::new(e.to_string())
    }
}

/// A request-rate limit: `per_second` on average, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Requests per second (may be fractional, > 0).
    pub per_second: f64,
    /// Requests allowed at once (>= 1).
    pub burst: u32,
}

impl Rate {
    /// The time between two requests at the sustained rate.
    pub fn interval(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.per_second)
    }
}

/// The answer of a limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// True when the request (or the tokens) may go.
    pub allowed: bool,
    /// The capacity (burst, or tokens per minute).
    pub limit: u64,
    /// What is left after this request.
    pub remaining: u64,
    /// When a denied request may be retried.
    pub retry_after: Duration,
}

/// How token-bucket tokens are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Take `cost` only if the bucket holds it (request phase).
    IfAvailable,
    /// Take `cost` (or give back when negative) whatever the level (response
    /// phase correction); the bucket may go into debt.
    Always,
}

/// Where limits are kept.
#[derive(Clone)]
pub enum Backend {
    /// In this process (the default).
    Memory(Arc<MemoryStore>),
    /// In Redis, shared by every agent that uses the same server.
    Redis(Arc<RedisStore>),
}

impl Backend {
    /// An in-memory backend.
    pub fn memory() -> Self {
        Backend::Memory(Arc::new(MemoryStore::default()))
    }

    /// A Redis backend (`redis://host:port/db`, `redis+unix:///path.sock`).
    pub async fn redis(url: &str) -> Result<Self, RateLimitError> {
        Ok(Backend::Redis(Arc::new(RedisStore::connect(url).await?)))
    }

    /// Checks one request against `rate` for `key`.
    pub async fn check_rate(&self, key: &str, rate: Rate) -> Result<Decision, RateLimitError> {
        match self {
            Backend::Memory(m) => m.check_rate(key, rate),
            Backend::Redis(r) => r.check_rate(key, rate).await,
        }
    }

    /// Takes `cost` tokens from the bucket of `key` holding `per_minute` tokens.
    pub async fn take_tokens(
        &self,
        key: &str,
        per_minute: u64,
        cost: i64,
        take: Take,
    ) -> Result<Decision, RateLimitError> {
        match self {
            Backend::Memory(m) => Ok(m.take_tokens(key, per_minute, cost, take)),
            Backend::Redis(r) => r.take_tokens(key, per_minute, cost, take).await,
        }
    }
}

/// `Retry-After` in whole seconds, at least 1.
pub(crate) fn retry_after_secs(d: Duration) -> u64 {
    (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1)
}
