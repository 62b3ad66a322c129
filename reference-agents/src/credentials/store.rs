//! Where users' credentials and the connect flow's one-time records live:
//! this agent's memory, or Redis (shared by every tool agent using it, and
//! kept across restarts).
//!
//! * Credentials, sealed ([`super::vault`]), by user and upstream: in Redis a
//!   hash per user, `policy-agents:{credentials}:user:<SHA-256 of issuer and
//!   subject>`, field the upstream's name. No token and no user name is a
//!   key.
//! * One-time records (connect links, flow states, refresh locks) with a
//!   TTL, each taken once: in Redis `...:once:<name>` read with `GETDEL`.
//!
//! Redis calls time out after [`CALL_TIMEOUT`]; a failure is an error, and
//! the policies fail closed on it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

/// Connecting to Redis, and each call, give up after this.
pub const CALL_TIMEOUT: Duration = Duration::from_millis(500);
/// One-time records kept in memory, at most.
const MAX_ONCE: usize = 10_000;
/// Users kept in memory, at most.
const MAX_USERS: usize = 100_000;
const PREFIX: &str = "policy-agents:{credentials}:";

/// A store failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Redis failed or timed out.
    #[error("credentials store (redis): {0}")]
    Redis(#[from] redis::RedisError),
    /// The memory store is full.
    #[error("credentials store: {0}")]
    Full(&'static str),
}

/// The memory store's state.
#[derive(Default)]
pub struct Memory {
    once: HashMap<String, (String, u64)>,
    users: HashMap<String, BTreeMap<String, String>>,
}

/// The store.
pub enum Store {
    /// This agent's memory.
    Memory(Mutex<Memory>),
    /// Redis.
    Redis(ConnectionManager),
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Store::Memory(_) => "Store::Memory",
            Store::Redis(_) => "Store::Redis",
        })
    }
}

fn now_ms() -> u64 {
    crate::approvals::now_ms()
}

impl Store {
    /// An empty store in memory.
    pub fn memory() -> Store {
        Store::Memory(Mutex::new(Memory::default()))
    }

    /// The store in Redis at `url`, connected now.
    pub async fn redis(url: &str) -> Result<Store, StoreError> {
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CALL_TIMEOUT))
            .set_response_timeout(Some(CALL_TIMEOUT))
            .set_number_of_retries(0);
        Ok(Store::Redis(client.get_connection_manager_with_config(config).await?))
    }

    /// Whether it is shared (and outlives this agent).
    pub fn shared(&self) -> bool {
        matches!(self, Store::Redis(_))
    }

    fn mem(m: &Mutex<Memory>) -> std::sync::MutexGuard<'_, Memory> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn query<T: redis::FromRedisValue>(conn: &ConnectionManager, cmd: &redis::Cmd) -> Result<T, StoreError> {
        let mut c = conn.clone();
        match cmd.query_async(&mut c).await {
            Err(e) if e.is_connection_refusal() => Ok(cmd.query_async(&mut c).await?),
            done => Ok(done?),
        }
    }

    /// Keeps `value` under `name` for `ttl`, unless `only_new` and the name
    /// is taken: whether it was kept.
    pub async fn put_once(&self, name: &str, value: &str, ttl: Duration, only_new: bool) -> Result<bool, StoreError> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        match self {
            Store::Memory(m) => {
                let mut m = Self::mem(m);
                let now = now_ms();
                if m.once.len() >= MAX_ONCE {
                    m.once.retain(|_, (_, until)| *until > now);
                    if m.once.len() >= MAX_ONCE {
                        return Err(StoreError::Full("too many connect links and flows in progress"));
                    }
                }
                if only_new && m.once.get(name).is_some_and(|(_, until)| *until > now) {
                    return Ok(false);
                }
                m.once
                    .insert(name.to_string(), (value.to_string(), now.saturating_add(ttl_ms)));
                Ok(true)
            }
            Store::Redis(c) => {
                let mut cmd = redis::cmd("SET");
                cmd.arg(format!("{PREFIX}once:{name}")).arg(value).arg("PX").arg(ttl_ms);
                if only_new {
                    cmd.arg("NX");
                }
                let r: Option<String> = Self::query(c, &cmd).await?;
                Ok(r.is_some())
            }
        }
    }

    /// Takes the value under `name` (once: it is gone after).
    pub async fn take_once(&self, name: &str) -> Result<Option<String>, StoreError> {
        match self {
            Store::Memory(m) => {
                let mut m = Self::mem(m);
                Ok(m.once
                    .remove(name)
                    .filter(|(_, until)| *until > now_ms())
                    .map(|(v, _)| v))
            }
            Store::Redis(c) => Self::query(c, redis::cmd("GETDEL").arg(format!("{PREFIX}once:{name}"))).await,
        }
    }

    /// Forgets `name` (a lock released).
    pub async fn drop_once(&self, name: &str) -> Result<(), StoreError> {
        match self {
            Store::Memory(m) => {
                Self::mem(m).once.remove(name);
                Ok(())
            }
            Store::Redis(c) => Self::query(c, redis::cmd("DEL").arg(format!("{PREFIX}once:{name}"))).await,
        }
    }

    /// The sealed credential of `user` for `upstream`.
    pub async fn get(&self, user: &str, upstream: &str) -> Result<Option<String>, StoreError> {
        match self {
            Store::Memory(m) => Ok(Self::mem(m).users.get(user).and_then(|u| u.get(upstream)).cloned()),
            Store::Redis(c) => {
                Self::query(c, redis::cmd("HGET").arg(format!("{PREFIX}user:{user}")).arg(upstream)).await
            }
        }
    }

    /// Stores `sealed` as `user`'s credential for `upstream`.
    pub async fn put(&self, user: &str, upstream: &str, sealed: &str) -> Result<(), StoreError> {
        match self {
            Store::Memory(m) => {
                let mut m = Self::mem(m);
                if m.users.len() >= MAX_USERS && !m.users.contains_key(user) {
                    return Err(StoreError::Full("too many users with stored credentials"));
                }
                m.users
                    .entry(user.to_string())
                    .or_default()
                    .insert(upstream.to_string(), sealed.to_string());
                Ok(())
            }
            Store::Redis(c) => {
                Self::query(
                    c,
                    redis::cmd("HSET")
                        .arg(format!("{PREFIX}user:{user}"))
                        .arg(upstream)
                        .arg(sealed),
                )
                .await
            }
        }
    }

    /// Removes `user`'s credential for `upstream`: whether there was one.
    pub async fn remove(&self, user: &str, upstream: &str) -> Result<bool, StoreError> {
        match self {
            Store::Memory(m) => {
                let mut m = Self::mem(m);
                let Some(u) = m.users.get_mut(user) else {
                    return Ok(false);
                };
                let had = u.remove(upstream).is_some();
                if u.is_empty() {
                    m.users.remove(user);
                }
                Ok(had)
            }
            Store::Redis(c) => {
                let n: i64 =
                    Self::query(c, redis::cmd("HDEL").arg(format!("{PREFIX}user:{user}")).arg(upstream)).await?;
                Ok(n > 0)
            }
        }
    }

    /// `user`'s credentials: (upstream, sealed), by upstream.
    pub async fn list(&self, user: &str) -> Result<Vec<(String, String)>, StoreError> {
        match self {
            Store::Memory(m) => Ok(Self::mem(m)
                .users
                .get(user)
                .map(|u| u.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                .unwrap_or_default()),
            Store::Redis(c) => {
                let mut all: Vec<(String, String)> =
                    Self::query(c, redis::cmd("HGETALL").arg(format!("{PREFIX}user:{user}"))).await?;
                all.sort();
                Ok(all)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_time_records_are_taken_once_and_credentials_kept_per_user() {
        let s = Store::memory();
        assert!(s.put_once("link:a", "v", Duration::from_secs(60), true).await.unwrap());
        assert!(!s.put_once("link:a", "w", Duration::from_secs(60), true).await.unwrap());
        assert_eq!(s.take_once("link:a").await.unwrap().as_deref(), Some("v"));
        assert_eq!(s.take_once("link:a").await.unwrap(), None, "single use");
        s.put_once("link:b", "v", Duration::from_millis(1), false)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(s.take_once("link:b").await.unwrap(), None, "expired");

        s.put("u1", "github", "sealed-1").await.unwrap();
        s.put("u1", "jira", "sealed-2").await.unwrap();
        s.put("u2", "github", "sealed-3").await.unwrap();
        assert_eq!(s.get("u1", "github").await.unwrap().as_deref(), Some("sealed-1"));
        assert_eq!(s.list("u1").await.unwrap().len(), 2);
        assert!(s.remove("u1", "github").await.unwrap());
        assert!(!s.remove("u1", "github").await.unwrap());
        assert_eq!(s.get("u1", "github").await.unwrap(), None);
        assert_eq!(s.get("u2", "github").await.unwrap().as_deref(), Some("sealed-3"));
    }
}
