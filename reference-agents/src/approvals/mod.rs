//! Approvals: a person in the loop for risky calls.
//!
//! A rule with effect `approve` ([`crate::rules`]) lets a call through only
//! with a grant. The first such call becomes a pending request bound to the
//! exact call ([`binding`]: principal, route and version, endpoint, method,
//! target, canonical-argument digest, session); an approver decides it
//! through the approvals API ([`api`], the `approvals` policy, on a route of
//! its own behind Envoy, so the route's auth policies name the approver);
//! the grant they give ([`store`]) then lets the same call through when it
//! is retried: once, for the session, always (until revoked or its cap), or
//! only in a constrained form ([`constraints`]). `deny` refuses the call
//! with the approver's reason until the request would have expired.
//!
//! The state ([`Approvals`]) is this agent's, in memory
//! ([`Approvals::memory`]: the policies that ask (`mcpToolAuthorization`,
//! `a2aAuthorization`) and the API that decides must run in the same
//! agent), or in Redis ([`Approvals::redis`], [`redis_store`]: shared by
//! every agent using the server, so any of them may ask and any decide).
//! Every change is written to the hash-chained journal
//! (`--approvals-journal`) of the agent that made it, when one is set, and
//! counted in the Prometheus series of [`metrics`].

pub mod api;
pub mod binding;
pub mod constraints;
mod decision;
pub mod metrics;
pub mod notices;
pub mod notify;
pub mod outcome;
mod preview;
mod redis_scripts;
pub mod redis_store;
mod rule;
pub mod store;

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

pub use binding::CallBinding;
pub use constraints::Constraints;
pub use preview::preview;
pub use rule::{ApprovalRule, Approvers, GrantKind, OnExpiry};
pub use store::{Check, DecideBody, Event, Filter, Limits, Refused};

use crate::guardrail::Journal;
use crate::rules::Caller;
use policy_agents::PolicyError;
use redis_store::{RedisApprovals, StoreError};
use store::{Effects, Store};

/// Pending approvals and grants, shared by the policies of one agent (in
/// memory), or by every agent using one Redis.
pub struct Approvals {
    backend: Backend,
    /// Seals the `requestState` of the MCP 2026-07-28 answers to held
    /// calls (random here; shared by every agent on one Redis).
    sealer: crate::mcp::state::Sealer,
    journal: OnceLock<Journal>,
    /// Woken after every decision this agent makes ([`notices`] reads the
    /// events then).
    changed: tokio::sync::Notify,
    /// This store, for the task that expires its requests on time.
    me: std::sync::Weak<Approvals>,
    /// Whether that task runs.
    sweeping: std::sync::atomic::AtomicBool,
}

/// How often requests of rules that announce or deny at expiry are expired
/// when no call or API request came first.
pub const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

enum Backend {
    Memory(Mutex<Store>),
    Redis(RedisApprovals),
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals").finish_non_exhaustive()
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A fresh request id: 128 random bits, hex.
fn new_id() -> String {
    let mut b = [0u8; 16];
    if getrandom::fill(&mut b).is_err() {
        // No OS randomness: fall back on a hash of the time and a counter
        // (ids must not repeat; they are not the only check on a decision).
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let d = binding::digest(&serde_json::json!([now_ms(), n, std::process::id()]));
        return d[..32].to_string();
    }
    hex::encode(b)
}

/// 256 random bits, or `None` without OS randomness.
pub(crate) fn random_key() -> Option<[u8; 32]> {
    let mut k = [0u8; 32];
    getrandom::fill(&mut k).ok().map(|_| k)
}

impl Approvals {
    /// An empty store in memory with `limits`.
    pub fn memory(limits: Limits) -> Arc<Approvals> {
        // Without OS randomness, a key from the time and the process (the
        // seal is not the only check: a held call is released by its exact
        // binding in the store).
        let key = random_key().unwrap_or_else(|| {
            use sha2::Digest;
            sha2::Sha256::digest(format!("{} {} state-key", now_ms(), std::process::id())).into()
        });
        Arc::new_cyclic(|me| Approvals {
            sealer: crate::mcp::state::Sealer::new(key),
            backend: Backend::Memory(Mutex::new(Store::new(limits))),
            journal: OnceLock::new(),
            changed: tokio::sync::Notify::new(),
            me: me.clone(),
            sweeping: Default::default(),
        })
    }

    /// The store in Redis (`redis://host:port/db`, `redis+unix:///path.sock`)
    /// with `limits` on this agent's requests, connected now; later
    /// failures reconnect on the next call.
    pub async fn redis(url: &str, limits: Limits) -> Result<Arc<Approvals>, StoreError> {
        let backend = RedisApprovals::connect(url, limits).await?;
        let key = backend.state_key().await?;
        Ok(Arc::new_cyclic(|me| Approvals {
            sealer: crate::mcp::state::Sealer::new(key),
            backend: Backend::Redis(backend),
            journal: OnceLock::new(),
            changed: tokio::sync::Notify::new(),
            me: me.clone(),
            sweeping: Default::default(),
        }))
    }

    /// What seals the gateway's own MCP `requestState`.
    pub fn sealer(&self) -> &crate::mcp::state::Sealer {
        &self.sealer
    }

    /// Expires (or denies) the requests whose time is up, now.
    pub async fn sweep(&self) -> Result<(), PolicyError> {
        let mut fx = Effects::default();
        let now = now_ms();
        let swept = match &self.backend {
            Backend::Memory(s) => {
                Self::lock(s).sweep(now, &mut fx);
                Ok(())
            }
            Backend::Redis(r) => r.sweep(now, &mut fx).await.map_err(|e| e.policy_error()),
        };
        let done = self.finish(fx).await;
        swept?;
        done
    }

    /// Starts the task that sweeps every [`SWEEP_EVERY`] while this store
    /// lives (once): a rule's requests are announced as expired, or
    /// denied, on time, not at the next call.
    fn sweep_on_time(&self) {
        use std::sync::atomic::Ordering;
        if self.sweeping.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.me.clone();
        tokio::spawn(async move {
            let mut failing = false;
            loop {
                tokio::time::sleep(SWEEP_EVERY).await;
                let Some(a) = me.upgrade() else { return };
                match a.sweep().await {
                    Ok(()) => failing = false,
                    Err(e) if !failing => {
                        failing = true;
                        tracing::warn!(error = %e, "expiring approval requests");
                    }
                    Err(_) => {}
                }
            }
        });
    }

    /// Records every change in `journal` from now on (once).
    pub fn set_journal(&self, journal: Journal) {
        let _ = self.journal.set(journal);
    }

    /// Forces the journal's lines to disk.
    pub async fn sync_journal(&self) -> Result<(), PolicyError> {
        match self.journal.get() {
            Some(j) => j
                .sync()
                .await
                .map_err(|e| PolicyError::new(format!("approvals journal: {e}"))),
            None => Ok(()),
        }
    }

    fn lock(store: &Mutex<Store>) -> MutexGuard<'_, Store> {
        store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Journals and counts what an operation did (in Redis, also what it
    /// did before it failed).
    async fn finish(&self, fx: Effects) -> Result<(), PolicyError> {
        if fx.decided.is_some() || fx.auto_denied > 0 {
            self.changed.notify_waiters();
        }
        metrics::expired(fx.expired);
        metrics::auto_denied(fx.auto_denied);
        if !fx.announce.is_empty() {
            let now = now_ms();
            for (kind, a) in &fx.announce {
                notify::announce(kind, a, now);
            }
        }
        if let Some((grant, waited_ms)) = fx.decided {
            metrics::decided(grant, waited_ms);
        }
        metrics::pending(match &self.backend {
            Backend::Memory(s) => Self::lock(s).pending(),
            Backend::Redis(r) => r.pending(),
        });
        if let Some(j) = self.journal.get() {
            let at = now_ms();
            for mut r in fx.records {
                r.entry("at_ms").or_insert_with(|| at.into());
                j.append(r)
                    .await
                    .map_err(|e| PolicyError::new(format!("approvals journal: {e}")))?;
            }
        }
        Ok(())
    }

    /// Records that the call approval `id` let through was answered by the
    /// server with `status` (the `approvals` policy in the route's
    /// response chain), so the journal tells a released call that ran from
    /// one that never did.
    pub async fn executed(&self, id: &str, grant: &str, status: u16, route: &str) -> Result<(), PolicyError> {
        let mut r = serde_json::Map::new();
        r.insert("event".into(), "executed".into());
        r.insert("approval_id".into(), id.into());
        r.insert("grant".into(), grant.into());
        r.insert("status".into(), status.into());
        r.insert("route".into(), route.into());
        self.finish(Effects {
            records: vec![r],
            ..Effects::default()
        })
        .await
    }

    /// Decides a call governed by `approve` rule `rule` with `terms`:
    /// granted, pending (created on first sight), denied or limited. The
    /// journal records each request and each release; when it cannot be
    /// written, or Redis fails, the call fails (closed: in Redis, with a
    /// 503 `session_store_unavailable` under `on_failure: deny`).
    pub async fn check(
        &self,
        mut binding: CallBinding,
        args: &Value,
        rule: &str,
        terms: &ApprovalRule,
    ) -> Result<Check, PolicyError> {
        binding.rule.clone_from(&terms.digest);
        if terms.needs_sweeping() {
            self.sweep_on_time();
        }
        let mut fx = Effects::default();
        let now = now_ms();
        let check = match &self.backend {
            Backend::Memory(s) => {
                let mut s = Self::lock(s);
                Ok(s.check(binding, args, || preview(args), rule, terms, new_id, now, &mut fx))
            }
            // One round trip: the request it may create is written whole.
            Backend::Redis(r) => {
                r.check(binding, args, preview(args), rule, terms, new_id, now, &mut fx)
                    .await
            }
        };
        let done = self.finish(fx).await;
        let check = check.map_err(|e| e.policy_error())?;
        metrics::checked(&check);
        done?;
        Ok(check)
    }

    /// Request `id` as `viewer` may see it, with its ETag.
    pub async fn get(&self, id: &str, viewer: &Caller) -> Result<(Value, String), Refused> {
        let mut fx = Effects::default();
        let out = match &self.backend {
            Backend::Memory(s) => {
                let mut s = Self::lock(s);
                s.get(id, viewer, now_ms(), &mut fx).map(|a| (a.to_json(), a.etag()))
            }
            Backend::Redis(r) => r
                .get(id, viewer, now_ms(), &mut fx)
                .await
                .map(|a| (a.to_json(), a.etag())),
        };
        self.finish(fx).await.map_err(journal_refusal)?;
        out
    }

    /// The requests `viewer` may see, and the newest event id.
    pub async fn list(&self, viewer: &Caller, filter: &Filter<'_>) -> Result<(Vec<Value>, u64), Refused> {
        let mut fx = Effects::default();
        let out = match &self.backend {
            Backend::Memory(s) => {
                let mut s = Self::lock(s);
                Ok((s.list(viewer, filter, now_ms(), &mut fx), s.last_event_id()))
            }
            Backend::Redis(r) => r.list(viewer, filter, now_ms(), &mut fx).await,
        };
        self.finish(fx).await.map_err(journal_refusal)?;
        out
    }

    /// An approver's decision.
    pub async fn decide(
        &self,
        id: &str,
        approver: &Caller,
        body: DecideBody,
        if_match: Option<&str>,
    ) -> Result<Value, Refused> {
        let mut fx = Effects::default();
        let out = match &self.backend {
            Backend::Memory(s) => {
                let mut s = Self::lock(s);
                s.decide(id, approver, body, if_match, now_ms(), &mut fx)
            }
            Backend::Redis(r) => r.decide(id, approver, body, if_match, now_ms(), &mut fx).await,
        };
        self.finish(fx).await.map_err(journal_refusal)?;
        out
    }

    /// Revokes approval `id`'s standing grant.
    pub async fn revoke(&self, id: &str, by: &Caller) -> Result<Value, Refused> {
        let mut fx = Effects::default();
        let out = match &self.backend {
            Backend::Memory(s) => {
                let mut s = Self::lock(s);
                s.revoke(id, by, now_ms(), &mut fx)
            }
            Backend::Redis(r) => r.revoke(id, by, now_ms(), &mut fx).await,
        };
        self.finish(fx).await.map_err(journal_refusal)?;
        out
    }

    /// The events after `after` that `viewer` may see; `None` when some
    /// were dropped since (reload the list).
    pub async fn events_after(&self, after: u64, viewer: &Caller) -> Result<Option<Vec<Event>>, Refused> {
        let out = self.events_since(after).await?;
        Ok(out.map(|evs| evs.into_iter().filter(|e| e.visible_to(viewer)).collect()))
    }

    /// Every event after `after` (for this agent's own use, never a
    /// caller's); `None` when some were dropped since.
    pub(crate) async fn events_since(&self, after: u64) -> Result<Option<Vec<Event>>, Refused> {
        let mut fx = Effects::default();
        let out = match &self.backend {
            Backend::Memory(s) => {
                let mut s = Self::lock(s);
                s.sweep(now_ms(), &mut fx);
                Ok(s.events_after(after))
            }
            Backend::Redis(r) => r.events_after(after, now_ms(), &mut fx).await,
        };
        self.finish(fx).await.map_err(journal_refusal)?;
        out
    }

    /// The newest event's id (0: none yet).
    pub(crate) async fn last_event_id(&self) -> Result<u64, Refused> {
        match &self.backend {
            Backend::Memory(s) => Ok(Self::lock(s).last_event_id()),
            Backend::Redis(r) => r.last_event_id().await.map_err(Refused::from),
        }
    }

    /// Resolves after the next decision this agent makes.
    pub(crate) fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.changed.notified()
    }
}

/// Checks a call that `need` governs, by `caller` through the request of
/// `ctx`, with its `method`, `target`, `args` and `session`; fails (closed)
/// when the policy was given no approvals.
#[allow(clippy::too_many_arguments)]
pub async fn check_call(
    approvals: Option<&Approvals>,
    need: &crate::rules::ApprovalNeed<'_>,
    caller: &Caller,
    ctx: &policy_agents::RequestContext<'_>,
    method: &str,
    target: &str,
    args: &Value,
    session: Option<&str>,
) -> Result<Check, PolicyError> {
    let Some(approvals) = approvals else {
        return Err(PolicyError::new(format!(
            "rule {} needs approval, but this agent keeps no approvals",
            need.rule
        )));
    };
    let binding = CallBinding::new(caller, ctx.metadata, &ctx.request, method, target, args, session);
    approvals.check(binding, args, need.rule, need.terms).await
}

/// The approval page of a route's policy: param `approval_page`, or
/// `{scheme}://{authority}/approvals/page` of the request.
pub fn page_url(p: &policy_agents::Params, request: &policy_agents::RequestView<'_>) -> String {
    crate::pages::page_url(p.get("approval_page"), request, "/approvals/page")
}

fn journal_refusal(e: PolicyError) -> Refused {
    Refused {
        status: 500,
        reason: "journal_unavailable",
        message: e.to_string(),
    }
}

#[cfg(test)]
mod redis_tests;
#[cfg(test)]
pub(crate) mod tests;
