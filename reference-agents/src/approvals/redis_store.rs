//! The Redis backend of [`super::Approvals`]: the pending requests, grants
//! and events of every agent (and every kernel's agents) using one server.
//!
//! It keeps the state machine of [`super::store::Store`], step for step:
//! the same answers, journal records, events and metrics. The rules that
//! decide (who may see or decide a request, which grant covers a call, how
//! constraints apply) run here in Rust on what a script read; every change
//! is one Lua script, atomic on the server, that first checks that what
//! was read still holds (the request's version, or the grant it takes)
//! and otherwise changes nothing and has the operation read again.
//!
//! Keys, all under one hash tag (`{approvals}`) so that a script's keys
//! share a cluster slot:
//! * `policy-agents:{approvals}:approval:<id>`: a request, a hash: `j` its
//!   JSON ([`Approval`]; its state, version and attempts are those of the
//!   fields `s`, `v` and `n`), and while a grant it gave stands, `g` the
//!   grant's key, `gj` the grant (JSON), `ge` its expiry (Unix ms). A
//!   pending request has no TTL (there are at most `Limits::total`); once
//!   decided or expired it lives [`KEEP`] longer than its grant;
//! * `...:expiries`: a sorted set of the pending requests by expiry (its size
//!   is the number pending); `...:pending`: a hash, call key → pending
//!   request; `...:principals`: a hash, SHA-256 of a principal → its
//!   pending requests;
//! * `...:grants:<key>`: a sorted set of the approvals whose grants stand
//!   under a call, session or tool key (SHA-256, [`CallBinding`]), in the
//!   order given (`...:grant_seq`, bumped by each decision); its TTL that
//!   of its longest grant;
//! * `...:history`: the requests decided or expired, the last
//!   [`MAX_HISTORY`] (older ones without a standing grant are deleted);
//!   `...:all`: a sorted set of the requests kept, for the API's list;
//! * `...:events`: the events, a sorted set by id (`...:event_id`, `INCR`),
//!   the last [`MAX_EVENTS`].
//!
//! Expiry is lazy, as in memory: each operation first expires the pending
//! requests whose time is up, each by a script that only one agent wins,
//! so `approval.expired` is emitted (and journaled, and counted) once.
//! An `allow_once` grant is taken by a script that removes it: of
//! concurrent calls, only the one whose script removed it is granted.
//!
//! Calls time out after [`CALL_TIMEOUT`]; a failure is an error
//! ([`StoreError`]): a call that needs approval fails (closed), the API
//! answers 503. A call that timed out may still have run on the server (a
//! consumed `allow_once` grant stays consumed: the caller asks again).
//! Times are the agents' clocks (Unix ms), as in memory.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, RedisResult, Script, ScriptInvocation};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::binding::{principal, CallBinding};
use super::constraints::Constraints;
use super::decision::{decision, expiry_denial, AT_EXPIRY};
use super::redis_scripts::{
    ASK_LUA, CONSUME_LUA, DECIDE_LUA, DUE_LUA, EVENTS_LUA, EXPIRE_LUA, FIXED, LIST_LUA, LOAD_LUA, PRELUDE, REVOKE_LUA,
};
use super::rule::{ApprovalRule, Approvers, GrantKind, OnExpiry};
use super::store::{
    may_view, record, refused, Approval, Check, DecideBody, Effects, Event, Filter, Limits, Refused, State, MAX_EVENTS,
    MAX_HISTORY,
};
use crate::rules::Caller;
use policy_agents::{Deny, PolicyError};

/// Connecting to Redis, and each call, give up after this.
pub const CALL_TIMEOUT: Duration = Duration::from_millis(500);
/// A decided or expired request is kept this long after its grant ends (or
/// after it left pending, without a grant), for the API and the events.
pub const KEEP: Duration = Duration::from_secs(86_400);
/// The longest TTL set on a key (100 years, in ms).
const MAX_TTL_MS: u64 = 100 * 365 * 86_400_000;
/// Rounds of read-then-change an operation tries when what it read changed
/// under it, before it fails.
const ROUNDS: usize = 64;
/// Requests expired per sweep script.
const SWEEP_BATCH: usize = 100;

/// A failure of the Redis store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Redis could not be reached, timed out or refused a script.
    #[error("approvals store (redis): {0}")]
    Redis(#[from] redis::RedisError),
    /// The store held something this agent cannot read, or kept changing.
    #[error("approvals store (redis): {0}")]
    State(String),
}

impl StoreError {
    /// The failure of a call that needs approval: under `on_failure:
    /// deny`, a 503 JSON answer with reason `session_store_unavailable`
    /// and `Retry-After: 1`, as for the other state in Redis
    /// ([`crate::sessions::SessionStoreError::policy_error`]).
    pub fn policy_error(&self) -> PolicyError {
        let body = json!({
            "error": "approvals: the approvals store is unavailable",
            "reason": "session_store_unavailable",
        });
        PolicyError::new(format!("approvals: {self}")).with_deny(
            Deny::json(503, &body)
                .header("retry-after", "1")
                .reason("session_store_unavailable"),
        )
    }
}

impl From<StoreError> for Refused {
    /// The API's answer: 503, reason `approvals_store_unavailable`.
    fn from(e: StoreError) -> Refused {
        refused(503, "approvals_store_unavailable", e.to_string())
    }
}

fn bad(what: impl std::fmt::Display) -> StoreError {
    StoreError::State(what.to_string())
}

/// A standing grant, as kept in a request's `gj`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredGrant {
    kind: GrantKind,
    expires_ms: u64,
    constraints: Option<Constraints>,
    reason: Option<String>,
    alternative: Option<String>,
}

/// An event as kept (its id is the server's).
#[derive(Serialize, Deserialize)]
struct StoredEvent {
    kind: String,
    data: Value,
    approvers: Approvers,
    principal: String,
}

const KINDS: [&str; 5] = [
    "approval.requested",
    "approval.decided",
    "approval.expired",
    "approval.consumed",
    "approval.revoked",
];

fn event_json(kind: &str, a: &Approval) -> String {
    json!({
        "kind": kind,
        "data": a.to_json(),
        "approvers": a.terms.approvers,
        "principal": a.binding.principal,
    })
    .to_string()
}

/// SHA-256 (hex): how principals are named in keys.
pub(super) fn hashed(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn state_of(s: &str) -> Result<State, StoreError> {
    serde_json::from_value(Value::String(s.to_string())).map_err(|_| bad(format!("unknown state {s:?}")))
}

/// A request from its fields `j`, `s`, `v`, `n`.
fn approval(j: Option<&str>, s: Option<&str>, v: Option<&str>, n: Option<&str>) -> Result<Approval, StoreError> {
    let (Some(j), Some(s), Some(v), Some(n)) = (j, s, v, n) else {
        return Err(bad("a request without its fields"));
    };
    let mut a: Approval = serde_json::from_str(j).map_err(|e| bad(format!("a request's JSON: {e}")))?;
    a.state = state_of(s)?;
    a.version = v.parse().map_err(|_| bad("a request's version"))?;
    a.attempts = n.parse().map_err(|_| bad("a request's attempts"))?;
    Ok(a)
}

fn number(s: &str) -> Result<u64, StoreError> {
    s.parse::<u64>()
        .or_else(|_| s.parse::<f64>().map(|f| f as u64))
        .map_err(|_| bad(format!("not a number: {s:?}")))
}

/// A grant a load found.
struct Loaded {
    key: usize,
    id: String,
    grant: StoredGrant,
    approval: Approval,
}

/// The Redis backend.
pub struct RedisApprovals {
    conn: ConnectionManager,
    limits: Limits,
    prefix: String,
    fixed: Vec<String>,
    due: Script,
    expire: Script,
    load: Script,
    consume: Script,
    ask: Script,
    decide: Script,
    revoke: Script,
    list: Script,
    events: Script,
    pending: AtomicUsize,
}

impl RedisApprovals {
    /// Connects to `url` (and reconnects when needed).
    pub async fn connect(url: &str, limits: Limits) -> Result<Self, StoreError> {
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CALL_TIMEOUT))
            .set_response_timeout(Some(CALL_TIMEOUT))
            .set_number_of_retries(0);
        let conn = client.get_connection_manager_with_config(config).await?;
        let prefix = "policy-agents:{approvals}:".to_string();
        let script = |body: &str| Script::new(&format!("{PRELUDE}{body}"));
        Ok(RedisApprovals {
            conn,
            limits,
            fixed: FIXED.iter().map(|k| format!("{prefix}{k}")).collect(),
            prefix,
            due: script(DUE_LUA),
            expire: script(EXPIRE_LUA),
            load: script(LOAD_LUA),
            consume: script(CONSUME_LUA),
            ask: script(ASK_LUA),
            decide: script(DECIDE_LUA),
            revoke: script(REVOKE_LUA),
            list: script(LIST_LUA),
            events: script(EVENTS_LUA),
            pending: AtomicUsize::new(0),
        })
    }

    /// The key that seals the gateway's MCP `requestState`, shared by every
    /// agent on this Redis: made by the first agent that connects (`SET NX`),
    /// read by the others.
    pub async fn state_key(&self) -> Result<[u8; 32], StoreError> {
        let name = format!("{}state-key", self.prefix);
        let fresh =
            super::random_key().ok_or_else(|| StoreError::State("no OS randomness for the state key".into()))?;
        let mut conn = self.conn.clone();
        let _: Option<String> = redis::cmd("SET")
            .arg(&name)
            .arg(hex::encode(fresh))
            .arg("NX")
            .query_async(&mut conn)
            .await?;
        let stored: String = redis::cmd("GET").arg(&name).query_async(&mut conn).await?;
        let bytes = hex::decode(stored.trim()).ok().filter(|b| b.len() == 32);
        let bytes = bytes.ok_or_else(|| StoreError::State(format!("{name} in Redis is not 32 hex-encoded bytes")))?;
        let mut key = [0u8; 32];
        key.copy_from_slice(&bytes);
        Ok(key)
    }

    /// Pending requests, as the last script that counted them saw.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }

    fn saw_pending(&self, n: impl TryInto<usize>) {
        if let Ok(n) = n.try_into() {
            self.pending.store(n, Ordering::Relaxed);
        }
    }

    /// `script` with the fixed keys and the prefix, ready for its args.
    fn prepare<'a>(&'a self, script: &'a Script) -> ScriptInvocation<'a> {
        let mut call = script.prepare_invoke();
        for k in &self.fixed {
            call.key(k);
        }
        call.arg(&self.prefix);
        call
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

    /// Request `id` and its grant's key, if kept.
    async fn read(&self, id: &str) -> Result<Option<(Approval, Option<String>)>, StoreError> {
        let mut conn = self.conn.clone();
        let get = redis::cmd("HMGET")
            .arg(format!("{}approval:{id}", self.prefix))
            .arg("j")
            .arg("s")
            .arg("v")
            .arg("n")
            .arg("g")
            .clone();
        let r: Vec<Option<String>> = match get.query_async(&mut conn).await {
            Err(e) if e.is_connection_refusal() => get.query_async(&mut conn).await,
            done => done,
        }?;
        if r.first().is_none_or(Option::is_none) {
            return Ok(None);
        }
        let f = |i: usize| r.get(i).and_then(Option::as_deref);
        Ok(Some((approval(f(0), f(1), f(2), f(3))?, f(4).map(String::from))))
    }

    /// Expires the requests whose time is up (each once, whichever agent
    /// gets there first).
    pub async fn sweep(&self, now: u64, fx: &mut Effects) -> Result<(), StoreError> {
        for _ in 0..ROUNDS {
            let mut call = self.prepare(&self.due);
            call.arg(now).arg(SWEEP_BATCH);
            let r: Vec<Option<String>> = self.invoke(&call).await?;
            let Some(Some(pending)) = r.first() else {
                return Err(bad("sweep: no count"));
            };
            self.saw_pending(number(pending)?);
            let due = &r[1..];
            let mut changed = false;
            for row in due.chunks(5) {
                let f = |i: usize| row.get(i).and_then(Option::as_deref);
                let id = f(0).unwrap_or_default();
                let mut expire = self.prepare(&self.expire);
                expire.arg(id);
                let expired = match approval(f(1), f(2), f(3), f(4)) {
                    Ok(a) if a.terms.on_expiry == OnExpiry::Deny => {
                        if !self.deny_at_expiry(&a, now, fx).await? {
                            changed = true;
                        }
                        continue;
                    }
                    Ok(mut a) => {
                        let read = a.version;
                        a.state = State::Expired;
                        a.version += 1;
                        expire
                            .arg(read)
                            .arg(a.binding.call_key())
                            .arg(hashed(&a.binding.principal))
                            .arg(event_json("approval.expired", &a))
                            .arg(ms(KEEP));
                        Some(a)
                    }
                    // The request is gone: only its place in the index.
                    Err(_) if f(1).is_none() => {
                        expire.arg("-").arg("-").arg("-").arg("-").arg(ms(KEEP));
                        None
                    }
                    Err(e) => {
                        // Not this agent's to read (another version's?): left as it is.
                        tracing::warn!(approval = id, error = %e, "cannot expire an approval request");
                        continue;
                    }
                };
                expire.arg(MAX_HISTORY).arg(MAX_EVENTS);
                let out: Vec<i64> = self.invoke(&expire).await?;
                match (out.first(), expired) {
                    (Some(1), Some(a)) => {
                        self.saw_pending(out.get(1).copied().unwrap_or(0));
                        fx.records.push(record("expired", &a, json!({})));
                        fx.expired += 1;
                        fx.announce("approval.expired", &a);
                    }
                    (Some(-1), _) => changed = true,
                    _ => {}
                }
            }
            if due.len() < SWEEP_BATCH * 5 && !changed {
                return Ok(());
            }
        }
        // Requests that kept changing stay due: the next operation expires them.
        Ok(())
    }

    /// The grants under `keys`, in the order a call tries them, and the
    /// grants' sequence as read.
    async fn load(&self, keys: &[String], now: u64) -> Result<(String, Vec<Loaded>), StoreError> {
        let mut call = self.prepare(&self.load);
        call.arg(now);
        for k in keys {
            call.arg(k);
        }
        let (seq, rows): (String, Vec<Vec<Option<String>>>) = self.invoke(&call).await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let f = |i: usize| row.get(i).and_then(Option::as_deref);
            let key = f(0).and_then(|k| k.parse::<usize>().ok()).unwrap_or(1) - 1;
            let grant: StoredGrant =
                serde_json::from_str(f(2).unwrap_or_default()).map_err(|e| bad(format!("a grant's JSON: {e}")))?;
            out.push(Loaded {
                key,
                id: f(1).unwrap_or_default().to_string(),
                grant,
                approval: approval(f(3), f(4), f(5), f(6))?,
            });
        }
        Ok((seq, out))
    }

    /// Decides a call that an `approve` rule named `rule` governs (as
    /// [`super::store::Store::check`]).
    #[allow(clippy::too_many_arguments)]
    pub async fn check(
        &self,
        binding: CallBinding,
        args: &Value,
        preview: Value,
        rule: &str,
        terms: &ApprovalRule,
        new_id: impl FnOnce() -> String,
        now: u64,
        fx: &mut Effects,
    ) -> Result<Check, StoreError> {
        let call = binding.call_key();
        let mut keys = vec![call.clone()];
        keys.extend(binding.session_key());
        keys.push(binding.tool_key());
        let fresh = Approval::pending(new_id(), binding, preview, rule, terms, now);
        let expires_ms = fresh.expires_ms;
        let fresh_json = to_json(&fresh)?;
        let principal = hashed(&fresh.binding.principal);
        for _ in 0..ROUNDS {
            self.sweep(now, fx).await?;
            let (seq, grants) = self.load(&keys, now).await?;
            // The first grant that covers the call, key by key, in order.
            let found = grants.into_iter().find_map(|g| match g.grant.kind {
                GrantKind::AllowConstrained => {
                    let rewritten = g.grant.constraints.as_ref().and_then(|c| c.apply(args))?;
                    let changed = (&rewritten != args).then_some(rewritten);
                    Some((g, changed))
                }
                _ => Some((g, None)),
            });
            if let Some((g, rewritten)) = found {
                let a = g.approval;
                if g.grant.kind == GrantKind::Deny {
                    fx.records.push(record("refused", &a, json!({"grant": "deny"})));
                    return Ok(Check::Denied {
                        id: g.id,
                        reason: g.grant.reason,
                        alternative: g.grant.alternative,
                    });
                }
                let mut extra = json!({"grant": g.grant.kind.as_str(), "call_digest": fresh.binding.args_digest});
                if let Some(r) = &rewritten {
                    extra["rewritten_digest"] = json!(super::binding::digest(r));
                }
                if g.grant.kind == GrantKind::AllowOnce {
                    let mut done = a.clone();
                    done.state = State::Consumed;
                    done.version += 1;
                    let mut take = self.prepare(&self.consume);
                    take.arg(&g.id)
                        .arg(a.version)
                        .arg(&seq)
                        .arg(&keys[g.key])
                        .arg(event_json("approval.consumed", &done))
                        .arg(ms(KEEP))
                        .arg(MAX_EVENTS);
                    let took: i64 = self.invoke(&take).await?;
                    if took != 1 {
                        // Another call took it, or the grants changed.
                        continue;
                    }
                    fx.records.push(record("released", &done, extra));
                    fx.announce("approval.consumed", &done);
                } else {
                    fx.records.push(record("released", &a, extra));
                }
                return Ok(Check::Granted {
                    approval: g.id,
                    grant: g.grant.kind,
                    args: rewritten,
                });
            }
            let mut ask = self.prepare(&self.ask);
            ask.arg(now)
                .arg(&seq)
                .arg(&call)
                .arg(&principal)
                .arg(self.limits.per_principal)
                .arg(self.limits.total)
                .arg(&fresh.id)
                .arg(&fresh_json)
                .arg(expires_ms)
                .arg(now)
                .arg(event_json("approval.requested", &fresh))
                .arg(MAX_EVENTS);
            let out: Vec<String> = self.invoke(&ask).await?;
            let field = |i: usize| out.get(i).map(String::as_str).unwrap_or_default();
            match field(0) {
                "again" | "created" => {
                    self.saw_pending(number(field(3))?);
                    let created = field(0) == "created";
                    if created {
                        fx.records.push(record(
                            "requested",
                            &fresh,
                            json!({"rule": fresh.rule, "expires_ms": expires_ms, "session": fresh.binding.session}),
                        ));
                        fx.announce("approval.requested", &fresh);
                    }
                    return Ok(Check::Pending {
                        id: field(1).to_string(),
                        created,
                        expires_ms: number(field(2))?,
                    });
                }
                "limited" => {
                    return Ok(Check::Limited(if field(1) == "principal" {
                        "principal"
                    } else {
                        "total"
                    }))
                }
                _ => continue,
            }
        }
        Err(bad("the approvals kept changing under this call: try again"))
    }

    /// One request, as `viewer` may see it.
    pub async fn get(&self, id: &str, viewer: &Caller, now: u64, fx: &mut Effects) -> Result<Approval, Refused> {
        self.sweep(now, fx).await?;
        match self.read(id).await? {
            Some((a, _)) if may_view(&a, viewer) => Ok(a),
            // Not told apart from an unknown id: ids are not to be probed.
            _ => Err(unknown(id)),
        }
    }

    /// The requests `viewer` may see, newest first, filtered, and the
    /// newest event's id.
    pub async fn list(
        &self,
        viewer: &Caller,
        filter: &Filter<'_>,
        now: u64,
        fx: &mut Effects,
    ) -> Result<(Vec<Value>, u64), Refused> {
        self.sweep(now, fx).await?;
        let call = self.prepare(&self.list);
        let (last, rows): (String, Vec<Vec<Option<String>>>) = self.invoke(&call).await.map_err(StoreError::from)?;
        let mut out = Vec::new();
        for row in rows {
            let f = |i: usize| row.get(i).and_then(Option::as_deref);
            let a = approval(f(1), f(2), f(3), f(4))?;
            if may_view(&a, viewer) && filter.admits(&a) {
                out.push(a);
            }
        }
        out.sort_by(|a, b| b.created_ms.cmp(&a.created_ms).then(a.id.cmp(&b.id)));
        let list = out.iter().take(500).map(Approval::to_json).collect();
        Ok((list, number(&last)?))
    }

    /// An approver's decision on request `id` (as [`super::store::Store::decide`]:
    /// the same checks, in the same order).
    pub async fn decide(
        &self,
        id: &str,
        approver: &Caller,
        body: DecideBody,
        if_match: Option<&str>,
        now: u64,
        fx: &mut Effects,
    ) -> Result<Value, Refused> {
        for _ in 0..ROUNDS {
            self.sweep(now, fx).await?;
            let Some((a, _)) = self.read(id).await? else {
                return Err(unknown(id));
            };
            let (key, expires_ms, who) = decision(&a, id, approver, &body, if_match, now)?;
            let Some(done) = self.commit(&a, &who, &body, &key, expires_ms, now).await? else {
                // Changed since read: read again.
                continue;
            };
            fx.records.push(record(
                "decided",
                &done,
                json!({"by": who, "grant": body.grant.as_str(), "grant_expires_ms": expires_ms}),
            ));
            fx.decided = Some((body.grant, now.saturating_sub(a.created_ms)));
            fx.announce("approval.decided", &done);
            return Ok(done.to_json());
        }
        Err(bad(format!("approval {id} kept changing: try again")).into())
    }

    /// Writes decision `body` by `who` on request `a` as read, its grant
    /// under `key` until `expires_ms`: the request as decided, or `None`
    /// when it changed since read.
    async fn commit(
        &self,
        a: &Approval,
        who: &str,
        body: &DecideBody,
        key: &str,
        expires_ms: u64,
        now: u64,
    ) -> Result<Option<Approval>, StoreError> {
        let grant = StoredGrant {
            kind: body.grant,
            expires_ms,
            constraints: body.constraints.clone(),
            reason: body.reason.clone(),
            alternative: body.alternative.clone(),
        };
        let mut done = a.clone();
        done.apply_decision(who, body, now);
        // TTLs in whole ms, within what Redis takes (a rule may give a
        // grant centuries).
        let grant_ttl = expires_ms.saturating_sub(now).clamp(1, MAX_TTL_MS);
        let mut call = self.prepare(&self.decide);
        call.arg(&a.id)
            .arg(a.version)
            .arg(grant_ttl)
            .arg(a.binding.call_key())
            .arg(hashed(&a.binding.principal))
            .arg(key)
            .arg(to_json(&grant)?)
            .arg(expires_ms)
            .arg(to_json(&done)?)
            .arg(done.state.as_str())
            .arg(event_json("approval.decided", &done))
            .arg(grant_ttl.saturating_add(ms(KEEP)).min(MAX_TTL_MS))
            .arg(MAX_HISTORY)
            .arg(MAX_EVENTS);
        let out: Vec<i64> = self.invoke(&call).await?;
        if out.first() != Some(&1) {
            return Ok(None);
        }
        self.saw_pending(out.get(1).copied().unwrap_or(0));
        Ok(Some(done))
    }

    /// Denies request `a` at its expiry (`on_expiry: deny`): whether this
    /// agent did (another may have, or it changed since read).
    async fn deny_at_expiry(&self, a: &Approval, now: u64, fx: &mut Effects) -> Result<bool, StoreError> {
        let (body, key, until) = expiry_denial(a, now);
        let Some(done) = self.commit(a, AT_EXPIRY, &body, &key, until, now).await? else {
            return Ok(false);
        };
        fx.records.push(record(
            "decided",
            &done,
            json!({"by": AT_EXPIRY, "grant": "deny", "grant_expires_ms": until, "reason": body.reason}),
        ));
        fx.auto_denied += 1;
        fx.announce("approval.decided", &done);
        Ok(true)
    }

    /// Revokes the standing grant that approval `id` gave.
    pub async fn revoke(&self, id: &str, by: &Caller, now: u64, fx: &mut Effects) -> Result<Value, Refused> {
        for _ in 0..ROUNDS {
            self.sweep(now, fx).await?;
            let Some((a, key)) = self.read(id).await? else {
                return Err(unknown(id));
            };
            if !a.terms.approvers.admit(by) {
                return Err(refused(
                    403,
                    "not_an_approver",
                    format!("{} may not revoke approval {id}'s grant", principal(by)),
                ));
            }
            let Some(key) = key else {
                return Err(refused(409, "no_grant", format!("approval {id} has no standing grant")));
            };
            let mut done = a.clone();
            done.state = State::Revoked;
            done.version += 1;
            let mut call = self.prepare(&self.revoke);
            call.arg(id)
                .arg(a.version)
                .arg(&key)
                .arg(event_json("approval.revoked", &done))
                .arg(ms(KEEP))
                .arg(MAX_EVENTS);
            let out: i64 = self.invoke(&call).await.map_err(StoreError::from)?;
            if out != 1 {
                continue;
            }
            fx.records.push(record("revoked", &done, json!({"by": principal(by)})));
            fx.announce("approval.revoked", &done);
            return Ok(done.to_json());
        }
        Err(bad(format!("approval {id} kept changing: try again")).into())
    }

    /// The newest event's id (0: none yet).
    pub async fn last_event_id(&self) -> Result<u64, StoreError> {
        let mut conn = self.conn.clone();
        let get = redis::cmd("GET").arg(format!("{}event_id", self.prefix)).clone();
        let v: Option<String> = match get.query_async(&mut conn).await {
            Err(e) if e.is_connection_refusal() => get.query_async(&mut conn).await,
            done => done,
        }?;
        v.map_or(Ok(0), |v| number(&v))
    }

    /// Events after `after`; `None` when some of them were already dropped.
    pub async fn events_after(&self, after: u64, now: u64, fx: &mut Effects) -> Result<Option<Vec<Event>>, Refused> {
        self.sweep(now, fx).await?;
        let mut call = self.prepare(&self.events);
        call.arg(after);
        let (first, rows): (Option<String>, Vec<String>) = self.invoke(&call).await.map_err(StoreError::from)?;
        if let Some(first) = first {
            if after.saturating_add(1) < number(&first)? {
                return Ok(None);
            }
        }
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let (id, body) = row.split_once(' ').ok_or_else(|| bad("an event without its id"))?;
            let ev: StoredEvent = serde_json::from_str(body).map_err(|e| bad(format!("an event's JSON: {e}")))?;
            let kind = KINDS
                .iter()
                .find(|k| **k == ev.kind)
                .ok_or_else(|| bad(format!("unknown event {:?}", ev.kind)))?;
            out.push(Event::new(number(id)?, kind, ev.data, ev.approvers, ev.principal));
        }
        Ok(Some(out))
    }
}

/// The JSON a script writes.
fn to_json(v: &impl Serialize) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| bad(format!("JSON: {e}")))
}

fn unknown(id: &str) -> Refused {
    refused(404, "unknown_approval", format!("no approval {id}"))
}
