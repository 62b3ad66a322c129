//! `contextBudget`: cumulative tokens per agent session, with the runtimes'
//! context-budget verdicts (both phases, buffered).
//!
//! Request phase: the prompt's tokens are estimated (characters / 4, as
//! `tokenBasedRateLimit` does, the same code) and added to the session's
//! total; past `budget` the request is denied, 429 with a JSON body. The
//! response phase charges the usage the upstream reports (`usage.total_tokens`,
//! or `prompt_tokens + completion_tokens`, or Anthropic `input_tokens +
//! output_tokens`) instead of the estimate, and answers the verdict as
//! response header `verdict_header` and metadata `context.verdict`:
//! `ok`, then `delegate`, `checkpoint`, `summarize` as the total passes
//! `delegate_at`, `checkpoint_at`, `summarize_at` (fractions of `budget`).
//!
//! Session totals live in a [`SessionStore`], like `futilityGuard`'s
//! sessions (in memory, or in Redis shared by several agents), each
//! forgotten after `session_ttl_s` idle; in memory at most [`MAX_SESSIONS`],
//! least recently used first out.

use std::time::Duration;

use serde_json::{json, Value};

use super::plan_critic::config_error_named;
use crate::param_cache::ParamCache;
use crate::ratelimit::estimate_tokens;
use crate::ratelimit::stream_usage::usage_tokens;
pub use crate::sessions::MAX_SESSIONS;
use crate::sessions::{delta, SessionStore};
use policy_agents::{
    describe, Deny, Metadata, ParamError, Params, Policy, PolicyError, RequestContext, RequestOutcome, RequestView,
    ResponseContext, ResponseOutcome,
};

const NAME: &str = "contextBudget";
pub(super) const KEYS: &[&str] = &[
    "budget",
    "delegate_at",
    "checkpoint_at",
    "summarize_at",
    "session_header",
    "session_metadata",
    "session_ttl_s",
    "verdict_header",
];

/// Parsed params of `contextBudget`.
#[derive(Debug)]
pub struct BudgetConfig {
    budget: u64,
    thresholds: [(f64, &'static str); 3],
    session_header: String,
    session_metadata: Option<String>,
    ttl: Duration,
    verdict_header: String,
}

fn header_name(p: &Params, key: &str, default: &str) -> Result<String, ParamError> {
    let v = p
        .get(key)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .unwrap_or(default)
        .to_ascii_lowercase();
    if v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        Ok(v)
    } else {
        Err(ParamError::invalid(key, &v, "not a header name"))
    }
}

impl BudgetConfig {
    pub(super) fn parse(p: &Params) -> Result<Self, ParamError> {
        let raw = p.required("budget")?;
        let budget: u64 = p.parse_or("budget", 0)?;
        if budget == 0 {
            return Err(ParamError::invalid("budget", raw, "must be at least 1"));
        }
        let fraction = |key: &str, default: f64| -> Result<f64, ParamError> {
            let v: f64 = p.parse_or(key, default)?;
            if v > 0.0 && v <= 1.0 {
                Ok(v)
            } else {
                Err(ParamError::invalid(
                    key,
                    &v.to_string(),
                    "expected a fraction in (0, 1]",
                ))
            }
        };
        let d = fraction("delegate_at", 0.5)?;
        let c = fraction("checkpoint_at", 0.7)?;
        let s = fraction("summarize_at", 0.85)?;
        if !(d <= c && c <= s) {
            return Err(ParamError::invalid(
                "checkpoint_at",
                &c.to_string(),
                "thresholds must grow: delegate_at <= checkpoint_at <= summarize_at",
            ));
        }
        let ttl: u64 = p.parse_or("session_ttl_s", 3600)?;
        if ttl == 0 {
            return Err(ParamError::invalid("session_ttl_s", "0", "must be at least 1"));
        }
        Ok(BudgetConfig {
            budget,
            thresholds: [(s, "summarize"), (c, "checkpoint"), (d, "delegate")],
            session_header: header_name(p, "session_header", "x-session-id")?,
            session_metadata: p
                .get("session_metadata")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from),
            ttl: Duration::from_secs(ttl),
            verdict_header: header_name(p, "verdict_header", "x-context-budget")?,
        })
    }

    /// Param `budget`.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// The verdict for a session total.
    pub fn verdict(&self, used: u64) -> &'static str {
        let ratio = used as f64 / self.budget as f64;
        self.thresholds
            .iter()
            .find(|(at, _)| ratio >= *at)
            .map_or("ok", |(_, v)| *v)
    }

    pub(super) fn session<'a>(&self, request: &RequestView<'a>, metadata: &'a Metadata) -> Option<&'a str> {
        self.session_metadata
            .as_deref()
            .and_then(|k| metadata.get(k))
            .or_else(|| request.header(&self.session_header))
            .filter(|s| !s.is_empty())
    }
}

/// The tokens a JSON completion reports using.
pub fn reported_usage(body: &[u8]) -> Option<u64> {
    let doc: Value = serde_json::from_slice(body).ok()?;
    let usage = doc.get("usage")?;
    usage_tokens(usage).or_else(|| {
        let n = |k: &str| usage.get(k).and_then(Value::as_u64);
        match (n("input_tokens"), n("output_tokens")) {
            (None, None) => None,
            (i, o) => Some(i.unwrap_or(0).saturating_add(o.unwrap_or(0))),
        }
    })
}

/// The `contextBudget` policy.
pub struct ContextBudget {
    pub(super) cache: ParamCache<BudgetConfig>,
    store: SessionStore,
}

impl std::fmt::Debug for ContextBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextBudget")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl Default for ContextBudget {
    fn default() -> Self {
        ContextBudget::new()
    }
}

impl ContextBudget {
    /// A policy keeping its sessions in memory.
    pub fn new() -> Self {
        ContextBudget::with_store(SessionStore::memory())
    }

    /// A policy keeping its sessions in `store` (a clone of another
    /// policy's store shares its sessions).
    pub fn with_store(store: SessionStore) -> Self {
        ContextBudget {
            cache: ParamCache::new(KEYS),
            store,
        }
    }

    /// Replaces the request's estimate of `session` by the reported `usage`
    /// (when there is one): the session's total.
    pub(super) async fn settle(
        &self,
        policy: &str,
        cfg: &BudgetConfig,
        session: &str,
        metadata: &Metadata,
        usage: Option<u64>,
    ) -> Result<u64, PolicyError> {
        let estimate: u64 = metadata
            .get("context.estimate")
            .and_then(|e| e.parse().ok())
            .unwrap_or(0);
        let total = match usage {
            Some(u) => self.store.charge(session, delta(u, estimate), cfg.ttl).await,
            None => self.store.used(session, cfg.ttl).await,
        };
        total.map_err(|e| e.policy_error(policy))
    }

    /// The request phase of `policy` (this one or its streaming twin).
    pub(super) async fn request_phase(
        &self,
        policy: &str,
        params: &Params,
        ctx: &RequestContext<'_>,
    ) -> Result<RequestOutcome, PolicyError> {
        let cfg = self
            .cache
            .get(params, BudgetConfig::parse)
            .map_err(|e| config_error_named(policy, &e))?;
        let Some(session) = cfg.session(&ctx.request, ctx.metadata) else {
            return Ok(RequestOutcome::proceed().set_metadata("context.verdict", "no_session"));
        };
        let estimate = ctx.request.body().map_or(0, estimate_tokens);
        let charge = self
            .store
            .try_charge(session, estimate, cfg.budget, cfg.ttl)
            .await
            .map_err(|e| e.policy_error(policy))?;
        if !charge.charged {
            let body = json!({
                "error": format!("the session's context budget of {} tokens is spent", cfg.budget),
                "reason": "context_budget_exceeded",
                "used": charge.used,
                "estimate": estimate,
                "budget": cfg.budget,
            });
            return Ok(
                RequestOutcome::denied_with(Deny::json(429, &body).reason("context_budget_exceeded"))
                    .set_metadata("context.verdict", "exceeded")
                    .set_metadata("context.used", charge.used.to_string())
                    .set_metadata("context.budget", cfg.budget.to_string()),
            );
        }
        Ok(RequestOutcome::proceed()
            .set_metadata("context.verdict", cfg.verdict(charge.used))
            .set_metadata("context.used", charge.used.to_string())
            .set_metadata("context.estimate", estimate.to_string())
            .set_metadata("context.budget", cfg.budget.to_string()))
    }
}

impl Policy for ContextBudget {
    type Params = Params;
    describe! { name: NAME, params: KEYS, phases: Both, body: true }

    async fn on_request(&self, params: &Params, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        self.request_phase(NAME, params, ctx).await
    }

    async fn on_response(&self, params: &Params, ctx: &ResponseContext<'_>) -> Result<ResponseOutcome, PolicyError> {
        let cfg = self
            .cache
            .get(params, BudgetConfig::parse)
            .map_err(|e| config_error_named(NAME, &e))?;
        let Some(session) = cfg.session(&ctx.request, ctx.metadata) else {
            return Ok(ResponseOutcome::proceed());
        };
        let usage = ctx.response.body().and_then(reported_usage);
        let total = self.settle(NAME, &cfg, session, ctx.metadata, usage).await?;
        let verdict = cfg.verdict(total);
        Ok(ResponseOutcome::proceed()
            .set_header(cfg.verdict_header.clone(), verdict)
            .set_metadata("context.verdict", verdict)
            .set_metadata("context.used", total.to_string())
            .set_metadata("context.budget", cfg.budget.to_string()))
    }
}

#[cfg(test)]
#[path = "budget_tests.rs"]
mod tests;
