//! `futilityGuard`: halts agent sessions that go nowhere (request phase).
//!
//! Reads the tool steps of the history the runtime sends back
//! ([`super::history`]) and detects:
//! * `repeated_failure`: the last `repeat_threshold` answered calls are the
//!   same call (tool and arguments) with the same failing result;
//! * `oscillation`: the last answered calls alternate between two distinct
//!   call-and-result pairs, A→B→A→B (`oscillation_cycles` times);
//! * `stagnation`: per session (header `session_header`, or metadata
//!   `session_metadata`), `stagnation_turns` requests in a row bring no
//!   tool result the session had not seen.
//!
//! Outcome, by `action`: `flag` (request header `flag_header` to the
//! upstream, metadata) or `deny` (`deny_status` with a JSON error, reason
//! `futility_detected`). Session state lives in a [`SessionStore`] (in
//! memory, or in Redis shared by several agents), bounded: each session is
//! forgotten after `session_ttl_s` without a request and remembers at most
//! [`MAX_SEEN`] results; in memory at most [`MAX_SESSIONS`] sessions, least
//! recently used first out. A store failure fails the call
//! ([`SessionStoreError::policy_error`]).

use std::time::Duration;

use serde_json::{json, Value};

use super::history::{steps, Step};
use super::plan_critic::config_error_named;
use crate::param_cache::ParamCache;
use crate::sessions::{SessionStore, SessionStoreError};
pub use crate::sessions::{MAX_SEEN, MAX_SESSIONS};
use crate::tool::metadata_text;
use policy_agents::{describe, Deny, ParamError, Params, Policy, PolicyError, RequestContext, RequestOutcome};

const NAME: &str = "futilityGuard";
const KEYS: &[&str] = &[
    "repeat_threshold",
    "oscillation_cycles",
    "stagnation_turns",
    "session_header",
    "session_metadata",
    "session_ttl_s",
    "action",
    "deny_status",
    "flag_header",
];

/// Parsed params of `futilityGuard`.
#[derive(Debug)]
pub struct FutilityConfig {
    repeat: usize,
    cycles: usize,
    stagnation: u32,
    session_header: String,
    session_metadata: Option<String>,
    ttl: Duration,
    deny: bool,
    deny_status: u16,
    flag_header: String,
}

impl FutilityConfig {
    fn parse(p: &Params) -> Result<Self, ParamError> {
        let at_least = |name: &str, v: usize, min: usize| {
            if v < min {
                Err(ParamError::invalid(
                    name,
                    &v.to_string(),
                    format!("must be at least {min}"),
                ))
            } else {
                Ok(v)
            }
        };
        let repeat = at_least("repeat_threshold", p.parse_or("repeat_threshold", 4)?, 2)?;
        let cycles = at_least("oscillation_cycles", p.parse_or("oscillation_cycles", 2)?, 2)?;
        let stagnation = at_least("stagnation_turns", p.parse_or("stagnation_turns", 5)?, 1)? as u32;
        let ttl = at_least("session_ttl_s", p.parse_or("session_ttl_s", 3600)?, 1)?;
        let deny = match p.get("action").map(str::trim) {
            None | Some("") | Some("flag") => false,
            Some("deny") => true,
            Some(other) => return Err(ParamError::invalid("action", other, "expected flag or deny")),
        };
        let deny_status: u16 = p.parse_or("deny_status", 409)?;
        if !(400..=599).contains(&deny_status) {
            return Err(ParamError::invalid(
                "deny_status",
                &deny_status.to_string(),
                "expected a 4xx or 5xx status",
            ));
        }
        let name = |key: &str, default: &str| -> Result<String, ParamError> {
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
        };
        Ok(FutilityConfig {
            repeat,
            cycles,
            stagnation,
            session_header: name("session_header", "x-session-id")?,
            session_metadata: p
                .get("session_metadata")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from),
            ttl: Duration::from_secs(ttl as u64),
            deny,
            deny_status,
            flag_header: name("flag_header", "x-futility-detected")?,
        })
    }
}

/// A detected pattern and the tool it involves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detected {
    /// `repeated_failure`, `oscillation` or `stagnation`.
    pub pattern: &'static str,
    /// The tool (the last one of the pattern).
    pub tool: String,
}

/// The patterns of the answered steps that need no session.
pub fn detect(cfg: &FutilityConfig, all: &[Step]) -> Option<Detected> {
    let answered: Vec<&Step> = all.iter().filter(|s| s.result.is_some()).collect();
    let last = *answered.last()?;
    if answered.len() >= cfg.repeat {
        let tail = &answered[answered.len() - cfg.repeat..];
        if tail
            .iter()
            .all(|s| s.error && s.call == last.call && s.result == last.result)
        {
            return Some(Detected {
                pattern: "repeated_failure",
                tool: last.tool.clone(),
            });
        }
    }
    let window = 2 * cfg.cycles;
    if answered.len() >= window {
        let tail = &answered[answered.len() - window..];
        let pair = |s: &Step| (s.call, s.result);
        let (a, b) = (pair(tail[0]), pair(tail[1]));
        if a != b
            && tail
                .iter()
                .enumerate()
                .all(|(i, s)| pair(s) == if i % 2 == 0 { a } else { b })
        {
            return Some(Detected {
                pattern: "oscillation",
                tool: last.tool.clone(),
            });
        }
    }
    None
}

/// The `futilityGuard` policy.
pub struct FutilityGuard {
    cache: ParamCache<FutilityConfig>,
    store: SessionStore,
}

impl std::fmt::Debug for FutilityGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FutilityGuard")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl Default for FutilityGuard {
    fn default() -> Self {
        FutilityGuard::new()
    }
}

impl FutilityGuard {
    /// A policy keeping its sessions in memory.
    pub fn new() -> Self {
        FutilityGuard::with_store(SessionStore::memory())
    }

    /// A policy keeping its sessions in `store`.
    pub fn with_store(store: SessionStore) -> Self {
        FutilityGuard {
            cache: ParamCache::new(KEYS),
            store,
        }
    }

    /// Records one request of `session`: true when it is stagnant now.
    async fn stagnant(&self, cfg: &FutilityConfig, session: &str, all: &[Step]) -> Result<bool, SessionStoreError> {
        let results: Vec<u64> = all.iter().filter_map(|s| s.result).collect();
        if results.is_empty() {
            return Ok(false);
        }
        let turns = self.store.record_results(session, &results, cfg.ttl).await?;
        Ok(turns >= cfg.stagnation)
    }

    async fn decide(
        &self,
        cfg: &FutilityConfig,
        ctx: &RequestContext<'_>,
        doc: &Value,
    ) -> Result<RequestOutcome, PolicyError> {
        let all = steps(doc);
        let session = cfg
            .session_metadata
            .as_deref()
            .and_then(|k| ctx.metadata.get(k))
            .or_else(|| ctx.request.header(&cfg.session_header))
            .filter(|s| !s.is_empty());
        let stagnant = match session {
            Some(s) => self.stagnant(cfg, s, &all).await.map_err(|e| e.policy_error(NAME))?,
            None => false,
        };
        let found = detect(cfg, &all).or_else(|| {
            stagnant.then(|| Detected {
                pattern: "stagnation",
                tool: all.last().map(|s| s.tool.clone()).unwrap_or_default(),
            })
        });
        let out = RequestOutcome::proceed().set_metadata("futility.steps", all.len().to_string());
        let Some(d) = found else {
            return Ok(out.set_metadata("futility.decision", "ok"));
        };
        tracing::info!(policy = NAME, request_id = %ctx.call.request_id, pattern = d.pattern, tool = %metadata_text(&d.tool), "futile session detected");
        let tool = metadata_text(&d.tool);
        if cfg.deny {
            let body = json!({
                "error": format!("the session is not making progress: {} ({})", d.pattern, tool),
                "reason": "futility_detected",
                "pattern": d.pattern,
                "tool": tool,
            });
            return Ok(
                RequestOutcome::denied_with(Deny::json(cfg.deny_status, &body).reason("futility_detected"))
                    .set_metadata("futility.decision", "deny")
                    .set_metadata("futility.pattern", d.pattern)
                    .set_metadata("futility.tool", tool),
            );
        }
        Ok(out
            .set_header(cfg.flag_header.clone(), d.pattern)
            .set_metadata("futility.decision", "flag")
            .set_metadata("futility.pattern", d.pattern)
            .set_metadata("futility.tool", tool))
    }
}

impl Policy for FutilityGuard {
    type Params = Params;
    describe! { name: NAME, params: KEYS, body: true }

    async fn on_request(&self, params: &Params, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let cfg = self
            .cache
            .get(params, FutilityConfig::parse)
            .map_err(|e| config_error_named(NAME, &e))?;
        let Some(body) = ctx.request.body() else {
            return Err(PolicyError::new(format!(
                "{NAME}: the request body was not included (the policy requires it)"
            )));
        };
        let doc: Value = match serde_json::from_slice(body) {
            Ok(d) => d,
            Err(_) if body.is_empty() => return Ok(RequestOutcome::proceed()),
            Err(e) => {
                return Ok(RequestOutcome::proceed()
                    .set_metadata("futility.decision", "unreadable")
                    .set_metadata("futility.error", metadata_text(&format!("request is not JSON: {e}"))))
            }
        };
        self.decide(&cfg, ctx, &doc).await
    }
}

#[cfg(test)]
#[path = "futility_tests.rs"]
mod tests;
