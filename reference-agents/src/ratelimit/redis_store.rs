//! Limits kept in Redis, so that every agent (and so every kernel replica)
//! using the same server shares them. Each check is one Lua script, atomic
//! on the server, timed by the server's clock (`TIME`). Keys are SHA-256
//! hashes of the limit key (raw keys may be API keys).

use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::Script;
use sha2::{Digest, Sha256};

use super::{Decision, Rate, RateLimitError, Take};

/// GCRA: KEYS[1] holds the theoretical arrival time (ms, server clock).
/// ARGV: interval (ms, float), burst. Returns {allowed, retry_after_ms, remaining}.
const GCRA_LUA: &str = r"
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local tat = tonumber(redis.call('GET', KEYS[1]))
if not tat or tat < now then tat = now end
local tolerance = interval * burst
local new_tat = tat + interval
local allow_at = new_tat - tolerance
if allow_at > now then
  return {0, math.ceil(allow_at - now), 0}
end
local ttl = math.ceil(new_tat - now)
if ttl < 1 then ttl = 1 end
redis.call('SET', KEYS[1], string.format('%.3f', new_tat), 'PX', ttl)
return {1, 0, math.floor((now + tolerance - new_tat) / interval)}
";

/// Token bucket: KEYS[1] is a hash {level, ts}. ARGV: capacity, tokens per
/// ms, cost (negative refunds), check ('1': take only if available).
/// Returns {allowed, remaining, retry_after_ms}.
const TOKENS_LUA: &str = r"
local cap = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local v = redis.call('HMGET', KEYS[1], 'level', 'ts')
local level = tonumber(v[1])
local ts = tonumber(v[2])
if not level or not ts then level = cap; ts = now end
level = math.min(cap, level + math.max(0, now - ts) * rate)
if ARGV[4] == '1' then
  local need = math.min(cost, cap)
  if level <= 0 or level < need then
    return {0, math.floor(math.max(level, 0)), math.ceil((math.max(need, 1) - level) / rate)}
  end
end
level = level - cost
if level > cap then level = cap end
if level < -cap then level = -cap end
redis.call('HSET', KEYS[1], 'level', string.format('%.3f', level), 'ts', string.format('%.3f', now))
redis.call('PEXPIRE', KEYS[1], math.ceil((cap - level) / rate) + 1000)
return {1, math.floor(math.max(level, 0)), 0}
";

/// The Redis store.
pub struct RedisStore {
    conn: ConnectionManager,
    gcra: Script,
    tokens: Script,
}

fn redis_key(kind: &str, params: &str, key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    format!("policy-agents:{kind}:{params}:{}", hex::encode(digest))
}

impl RedisStore {
    /// Connects (and reconnects when needed) to `url`.
    pub async fn connect(url: &str) -> Result<Self, RateLimitError> {
        let client = redis::Client::open(url)?;
        let conn = client.get_connection_manager().await?;
        Ok(RedisStore {
            conn,
            gcra: Script::new(GCRA_LUA),
            tokens: Script::new(TOKENS_LUA),
        })
    }

    pub(crate) async fn check_rate(&self, key: &str, rate: Rate) -> Result<Decision, RateLimitError> {
        let interval_ms = rate.interval().as_secs_f64() * 1000.0;
        let k = redis_key("rate", &format!("{interval_ms}x{}", rate.burst), key);
        let mut conn = self.conn.clone();
        let (allowed, retry_ms, remaining): (i64, i64, i64) = self
            .gcra
            .key(k)
            .arg(interval_ms)
            .arg(rate.burst)
            .invoke_async(&mut conn)
            .await?;
        Ok(Decision {
            allowed: allowed == 1,
            limit: u64::from(rate.burst),
            remaining: u64::try_from(remaining).unwrap_or(0),
            retry_after: Duration::from_millis(u64::try_from(retry_ms).unwrap_or(0)),
        })
    }

    pub(crate) async fn take_tokens(
        &self,
        key: &str,
        per_minute: u64,
        cost: i64,
        take: Take,
    ) -> Result<Decision, RateLimitError> {
        let k = redis_key("tokens", &per_minute.to_string(), key);
        let per_ms = per_minute as f64 / 60_000.0;
        let mut conn = self.conn.clone();
        let (allowed, remaining, retry_ms): (i64, i64, i64) = self
            .tokens
            .key(k)
            .arg(per_minute)
            .arg(per_ms)
            .arg(cost)
            .arg(if take == Take::IfAvailable { "1" } else { "0" })
            .invoke_async(&mut conn)
            .await?;
        Ok(Decision {
            allowed: allowed == 1,
            limit: per_minute,
            remaining: u64::try_from(remaining).unwrap_or(0),
            retry_after: Duration::from_millis(u64::try_from(retry_ms).unwrap_or(0)),
        })
    }
}
