//! The Redis backend of [`super::SessionStore`].
//!
//! Keys (the session name hashed with SHA-256, in braces so that a
//! session's keys share a cluster slot):
//! * `policy-agents:planner:seen:{<hash>}`: a set of result digests (at most
//!   [`MAX_SEEN`] members: a full set is emptied before a new member, as in
//!   memory);
//! * `policy-agents:planner:stagnant:{<hash>}`: the requests in a row with
//!   no new result;
//! * `policy-agents:planner:tokens:{<hash>}`: the session's tokens;
//! * `policy-agents:planner:asked:{<hash>}`: a set of the ids of requests
//!   an MCP server sent the client, not answered yet (at most [`MAX_SEEN`]);
//! * `policy-agents:a2a:owner:{<hash>}`: the principal that created an A2A
//!   task (set once, never overwritten).
//!
//! Every write sets the key's TTL to the session TTL, so an idle session
//! disappears on its own. Each update is one Lua script, atomic on the
//! server. Calls time out after [`CALL_TIMEOUT`]; a lost connection is
//! re-established on the next call (one attempt per call, never a wait
//! through a retry schedule), so the per-request cost of a Redis outage is
//! bounded. A call refused at connection (nothing reached the server) is
//! tried once more on the fresh connection, so the first request after
//! Redis comes back is answered.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, RedisResult, Script, ScriptInvocation};
use sha2::{Digest, Sha256};

use super::{Charge, SessionStoreError, MAX_SEEN, MAX_TOKENS};

/// Connecting to Redis, and each call, give up after this.
pub const CALL_TIMEOUT: Duration = Duration::from_millis(200);

/// KEYS: seen set, stagnant counter. ARGV: max members, TTL (ms), then the
/// result digests. Returns the requests in a row with nothing new.
const RECORD_LUA: &str = r"
local max = tonumber(ARGV[1])
local ttl = ARGV[2]
local new = false
for i = 3, #ARGV do
  local r = ARGV[i]
  if redis.call('SISMEMBER', KEYS[1], r) == 0 then
    if redis.call('SCARD', KEYS[1]) >= max then redis.call('DEL', KEYS[1]) end
    redis.call('SADD', KEYS[1], r)
    new = true
  end
end
redis.call('PEXPIRE', KEYS[1], ttl)
if new then
  redis.call('SET', KEYS[2], '0', 'PX', ttl)
  return 0
end
local n = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ttl)
return n
";

/// KEYS: tokens. ARGV: delta, TTL (ms), the largest total. Returns the total.
const CHARGE_LUA: &str = r"
local v = (tonumber(redis.call('GET', KEYS[1])) or 0) + tonumber(ARGV[1])
if v < 0 then v = 0 end
local max = tonumber(ARGV[3])
if v > max then v = max end
redis.call('SET', KEYS[1], string.format('%.0f', v), 'PX', ARGV[2])
return v
";

/// KEYS: tokens. ARGV: cost, limit, TTL (ms). Adds the cost when the total
/// stays within the limit. Returns {charged (1 or 0), total}.
const TRY_CHARGE_LUA: &str = r"
local used = tonumber(redis.call('GET', KEYS[1])) or 0
local total = used + tonumber(ARGV[1])
if total > tonumber(ARGV[2]) then return {0, used} end
redis.call('SET', KEYS[1], string.format('%.0f', total), 'PX', ARGV[3])
return {1, total}
";

/// KEYS: asked set. ARGV: max members, TTL (ms), the id.
const REMEMBER_LUA: &str = r"
if redis.call('SISMEMBER', KEYS[1], ARGV[3]) == 0 and redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  redis.call('DEL', KEYS[1])
end
redis.call('SADD', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
";

/// KEYS: owner. ARGV: principal, TTL (ms). Sets the owner unless one is
/// there; returns the owner in force.
const CLAIM_LUA: &str = r"
local o = redis.call('GET', KEYS[1])
if not o then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return ARGV[1]
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return o
";

/// The Redis backend.
pub struct RedisSessions {
    conn: ConnectionManager,
    record: Script,
    charge: Script,
    try_charge: Script,
    remember: Script,
    claim: Script,
}

fn key(kind: &str, session: &str) -> String {
    let digest = Sha256::digest(session.as_bytes());
    format!("policy-agents:planner:{kind}:{{{}}}", hex::encode(digest))
}

fn owner_key(task: &str) -> String {
    let digest = Sha256::digest(task.as_bytes());
    format!("policy-agents:a2a:owner:{{{}}}", hex::encode(digest))
}

fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl RedisSessions {
    /// Connects to `url` (and reconnects when needed).
    pub async fn connect(url: &str) -> Result<Self, SessionStoreError> {
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CALL_TIMEOUT))
            .set_response_timeout(Some(CALL_TIMEOUT))
            .set_number_of_retries(0);
        let conn = client.get_connection_manager_with_config(config).await?;
        Ok(RedisSessions {
            conn,
            record: Script::new(RECORD_LUA),
            charge: Script::new(CHARGE_LUA),
            try_charge: Script::new(TRY_CHARGE_LUA),
            remember: Script::new(REMEMBER_LUA),
            claim: Script::new(CLAIM_LUA),
        })
    }

    /// Runs `script`; once more when the connection was refused (the
    /// command never reached the server, so running it again is safe).
    async fn invoke<T: FromRedisValue>(&self, script: &ScriptInvocation<'_>) -> RedisResult<T> {
        let mut conn = self.conn.clone();
        match script.invoke_async(&mut conn).await {
            Err(e) if e.is_connection_refusal() => script.invoke_async(&mut conn).await,
            done => done,
        }
    }

    pub(super) async fn record_results(
        &self,
        session: &str,
        results: &[u64],
        ttl: Duration,
    ) -> Result<u32, SessionStoreError> {
        let mut call = self.record.key(key("seen", session));
        call.key(key("stagnant", session)).arg(MAX_SEEN).arg(ttl_ms(ttl));
        for r in results {
            call.arg(format!("{r:016x}"));
        }
        let n: i64 = self.invoke(&call).await?;
        Ok(u32::try_from(n).unwrap_or(u32::MAX))
    }

    pub(super) async fn charge(&self, session: &str, delta: i64, ttl: Duration) -> Result<u64, SessionStoreError> {
        let mut call = self.charge.key(key("tokens", session));
        call.arg(delta).arg(ttl_ms(ttl)).arg(MAX_TOKENS);
        let total: i64 = self.invoke(&call).await?;
        Ok(u64::try_from(total).unwrap_or(0))
    }

    pub(super) async fn try_charge(
        &self,
        session: &str,
        cost: u64,
        limit: u64,
        ttl: Duration,
    ) -> Result<Charge, SessionStoreError> {
        let mut call = self.try_charge.key(key("tokens", session));
        call.arg(cost).arg(limit).arg(ttl_ms(ttl));
        let (charged, used): (i64, i64) = self.invoke(&call).await?;
        Ok(Charge {
            charged: charged == 1,
            used: u64::try_from(used).unwrap_or(0),
        })
    }

    pub(super) async fn used(&self, session: &str) -> Result<u64, SessionStoreError> {
        let mut conn = self.conn.clone();
        let get = redis::cmd("GET").arg(key("tokens", session)).clone();
        let v: Option<u64> = match get.query_async(&mut conn).await {
            Err(e) if e.is_connection_refusal() => get.query_async(&mut conn).await,
            done => done,
        }?;
        Ok(v.unwrap_or(0))
    }

    pub(super) async fn remember_request(
        &self,
        session: &str,
        id: &str,
        ttl: Duration,
    ) -> Result<(), SessionStoreError> {
        let mut call = self.remember.key(key("asked", session));
        call.arg(MAX_SEEN).arg(ttl_ms(ttl)).arg(id);
        let _: i64 = self.invoke(&call).await?;
        Ok(())
    }

    pub(super) async fn claim_owner(
        &self,
        task: &str,
        principal: &str,
        ttl: Duration,
    ) -> Result<String, SessionStoreError> {
        let mut call = self.claim.key(owner_key(task));
        call.arg(principal).arg(ttl_ms(ttl));
        Ok(self.invoke(&call).await?)
    }

    pub(super) async fn owner(&self, task: &str, ttl: Duration) -> Result<Option<String>, SessionStoreError> {
        let mut conn = self.conn.clone();
        let get = redis::cmd("GETEX")
            .arg(owner_key(task))
            .arg("PX")
            .arg(ttl_ms(ttl))
            .clone();
        Ok(match get.query_async(&mut conn).await {
            Err(e) if e.is_connection_refusal() => get.query_async(&mut conn).await,
            done => done,
        }?)
    }

    pub(super) async fn take_request(&self, session: &str, id: &str) -> Result<bool, SessionStoreError> {
        let mut conn = self.conn.clone();
        let srem = redis::cmd("SREM").arg(key("asked", session)).arg(id).clone();
        let n: i64 = match srem.query_async(&mut conn).await {
            Err(e) if e.is_connection_refusal() => srem.query_async(&mut conn).await,
            done => done,
        }?;
        Ok(n == 1)
    }
}
