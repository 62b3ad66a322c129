//! In-memory limits: one keyed `governor` GCRA limiter per distinct
//! (interval, burst), and token buckets for `tokenBasedRateLimit`.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::clock::Clock;
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};
use tokio::time::Instant;

use super::{Decision, Rate, RateLimitError, Take, TokioClock};

type Limiter = RateLimiter<String, DashMapStateStore<String>, TokioClock, StateInformationMiddleware>;

/// Drop idle keys every this many checks of a limiter.
const SWEEP_EVERY: u64 = 4096;
/// Sweep full token buckets when there are more than this many.
const MAX_BUCKETS: usize = 10_000;

struct Keyed {
    limiter: Limiter,
    checks: AtomicU64,
}

/// A token bucket: `level` tokens at `updated`.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    level: f64,
    updated: Instant,
}

/// The in-memory store.
#[derive(Default)]
pub struct MemoryStore {
    limiters: Mutex<HashMap<(Duration, u32), Arc<Keyed>>>,
    buckets: Mutex<HashMap<(u64, String), Bucket>>,
}

fn limiter_for(rate: Rate) -> Result<Keyed, RateLimitError> {
    let burst =
        NonZeroU32::new(rate.burst).ok_or_else(|| RateLimitError::InvalidRate("burst must be at least 1".into()))?;
    let quota = Quota::with_period(rate.interval())
        .ok_or_else(|| RateLimitError::InvalidRate("zero interval".into()))?
        .allow_burst(burst);
    let limiter = RateLimiter::new(quota, DashMapStateStore::default(), TokioClock);
    Ok(Keyed {
        limiter,
        checks: AtomicU64::new(0),
    })
}

impl MemoryStore {
    fn keyed(&self, rate: Rate) -> Result<Arc<Keyed>, RateLimitError> {
        let id = (rate.interval(), rate.burst);
        let mut limiters = self
            .limiters
            .lock()
            .map_err(|_| RateLimitError::InvalidRate("limiter table poisoned".into()))?;
        if let Some(k) = limiters.get(&id) {
            return Ok(Arc::clone(k));
        }
        let keyed = Arc::new(limiter_for(rate)?);
        limiters.insert(id, Arc::clone(&keyed));
        Ok(keyed)
    }

    /// GCRA check of one request.
    pub(crate) fn check_rate(&self, key: &str, rate: Rate) -> Result<Decision, RateLimitError> {
        let keyed = self.keyed(rate)?;
        if keyed.checks.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            keyed.limiter.retain_recent();
            keyed.limiter.shrink_to_fit();
        }
        let limit = u64::from(rate.burst);
        Ok(match keyed.limiter.check_key(&key.to_string()) {
            Ok(state) => Decision {
                allowed: true,
                limit,
                remaining: u64::from(state.remaining_burst_capacity()),
                retry_after: Duration::ZERO,
            },
            Err(not_until) => Decision {
                allowed: false,
                limit,
                remaining: 0,
                retry_after: not_until.wait_time_from(TokioClock.now()),
            },
        })
    }

    /// Token-bucket take (see [`Take`]).
    pub(crate) fn take_tokens(&self, key: &str, per_minute: u64, cost: i64, take: Take) -> Decision {
        let capacity = per_minute as f64;
        let per_sec = capacity / 60.0;
        let now = Instant::now();
        let Ok(mut buckets) = self.buckets.lock() else {
            // A poisoned table only follows a panic elsewhere; fail open on it.
            return Decision {
                allowed: true,
                limit: per_minute,
                remaining: 0,
                retry_after: Duration::ZERO,
            };
        };
        if buckets.len() > MAX_BUCKETS {
            buckets.retain(|(tpm, _), b| {
                let refill = now.duration_since(b.updated).as_secs_f64() * (*tpm as f64) / 60.0;
                b.level + refill < *tpm as f64
            });
        }
        let bucket = buckets.entry((per_minute, key.to_string())).or_insert(Bucket {
            level: capacity,
            updated: now,
        });
        let elapsed = now.duration_since(bucket.updated).as_secs_f64();
        bucket.level = (bucket.level + elapsed * per_sec).min(capacity);
        bucket.updated = now;
        let cost = cost as f64;
        if take == Take::IfAvailable {
            let need = cost.min(capacity);
            if bucket.level <= 0.0 || bucket.level < need {
                let wait = (need.max(1.0) - bucket.level) / per_sec;
                return Decision {
                    allowed: false,
                    limit: per_minute,
                    remaining: bucket.level.max(0.0) as u64,
                    retry_after: Duration::from_secs_f64(wait.max(0.0)),
                };
            }
        }
        bucket.level = (bucket.level - cost).clamp(-capacity, capacity);
        Decision {
            allowed: true,
            limit: per_minute,
            remaining: bucket.level.max(0.0) as u64,
            retry_after: Duration::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn gcra_refills_with_paused_time() {
        let store = MemoryStore::default();
        let rate = Rate {
            per_second: 2.0,
            burst: 2,
        };
        let first = store.check_rate("k", rate).unwrap();
        assert!(first.allowed);
        assert_eq!(first.remaining, 1);
        assert!(store.check_rate("k", rate).unwrap().allowed);
        let denied = store.check_rate("k", rate).unwrap();
        assert!(!denied.allowed);
        assert_eq!(denied.retry_after, Duration::from_millis(500));
        assert!(store.check_rate("other", rate).unwrap().allowed, "keys are separate");

        tokio::time::advance(Duration::from_millis(500)).await;
        assert!(store.check_rate("k", rate).unwrap().allowed);
        assert!(!store.check_rate("k", rate).unwrap().allowed);
        tokio::time::advance(Duration::from_secs(5)).await;
        let full = store.check_rate("k", rate).unwrap();
        assert_eq!((full.allowed, full.remaining), (true, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn token_buckets_refill_charge_and_refund() {
        let store = MemoryStore::default();
        let take = |cost, how| store.take_tokens("k", 600, cost, how);
        assert_eq!(take(500, Take::IfAvailable).remaining, 100);
        let denied = take(200, Take::IfAvailable);
        assert!(!denied.allowed);
        assert_eq!(denied.retry_after, Duration::from_secs(10), "100 tokens at 10/s");
        // The upstream reported 300 more than estimated: debt.
        assert_eq!(take(300, Take::Always).remaining, 0);
        assert!(!take(1, Take::IfAvailable).allowed);
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(take(-50, Take::Always).remaining, 150, "-200 + 300 refill + 50 refund");
        tokio::time::advance(Duration::from_secs(600)).await;
        assert_eq!(take(0, Take::IfAvailable).remaining, 600, "capped at capacity");
    }
}
