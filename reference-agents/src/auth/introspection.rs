//! `tokenIntrospection`: opaque bearer tokens checked at the identity
//! provider's RFC 7662 introspection endpoint.
//!
//! The policy POSTs `token=<token>&token_type_hint=access_token` with the
//! client's credentials (`client_secret_basic`: HTTP Basic with the
//! form-encoded `client_id` and the secret from `client_secret_env`).
//! * `active: true` (and `exp`/`nbf`, `iss` = `issuer`, `aud` holding one of
//!   `audience` when those params are set): the request goes on with the
//!   metadata `jwtValidation` sets (`sub`, `roles`, `scope`, plus
//!   `auth_method=introspection`), so `roleCheck` and the MCP rules work
//!   unchanged. Without `sub` (client-credentials tokens at some providers),
//!   `sub` is the answer's `client_id`, as in RFC 9068 access tokens.
//! * `active: false`, or a check failing: 401 `inactive_token` (or the
//!   check's reason), with an `invalid_token` challenge.
//! * The client's mistakes are 401s, never a provider outage: a token that
//!   is not RFC 6750 `b64token` syntax or longer than 4096 bytes is
//!   `malformed` (no call); the provider's 400 `unsupported_token_type`
//!   (e.g. oidc-provider given a JWT access token) is `unsupported_token_type`,
//!   its 400 `invalid_request` / `invalid_token` / `invalid_grant` is
//!   `unknown_token`.
//! * The provider unreachable, slow past the call's deadline, or answering
//!   any other error: 503 `introspection_unavailable`: it fails closed.
//!
//! Answers are cached under the SHA-256 of the token (never the token):
//! active ones until `exp` and at most `cache_max_s`, inactive and refused
//! ones for `inactive_cache_s`; at most 10,000 tokens, least recently used
//! first out.
//!
//! **Bounds.** A token not in the cache is introspected only within three
//! bounds: `max_introspections_per_s` per route (per param set; 20 a second
//! by default, as a burst of as many), 100 a second (burst 100) for the
//! whole agent (`auth-agent --introspections-per-s`), and 32 in flight. Beyond any of them the token is refused
//! without a call: 503 `introspection_rate_limited` with `Retry-After: 1`,
//! the denial's reason `introspection_limited`, counted in
//! `policy_agent_introspection_limited_total{endpoint, limit}`. So a flood
//! of made-up tokens costs the provider at most that rate.

use std::num::{NonZeroU32, NonZeroUsize};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use lru::LruCache;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use url::Url;

use super::fetch::{self, FetchError};
use super::jwt::with_claims;
use super::jwt_params::public_url;
use super::{bearer_challenge, unauthorized};
use crate::error_body;
use crate::param_cache::ParamCache;
use crate::ratelimit::TokioClock;
use policy_agents::{describe, Deny, ParamError, Params, Policy, PolicyError, RequestContext, RequestOutcome};

const NAME: &str = "tokenIntrospection";
const KEYS: &[&str] = &[
    "introspection_endpoint",
    "client_id",
    "client_secret_env",
    "ca_file",
    "cache_max_s",
    "inactive_cache_s",
    "issuer",
    "audience",
    "forward_claims",
    "resource_metadata",
    "max_introspections_per_s",
];
const MAX_TOKENS: usize = 10_000;
const MAX_IN_FLIGHT: usize = 32;
const REPLY_MARGIN: Duration = Duration::from_millis(25);
/// Introspections a second (and burst) of one route, unless its params say.
const ROUTE_PER_S: u32 = 20;
/// Introspections a second (and burst) of every route together, unless
/// `auth-agent --introspections-per-s` says.
pub const INTROSPECTIONS_PER_S: u32 = 100;
/// Longest token sent to the provider.
const MAX_TOKEN_LEN: usize = 4096;
/// Least time between two warnings about refused introspections.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// A rate limit: `per_s` a second, as a burst of as many.
type Limiter = RateLimiter<NotKeyed, InMemoryState, TokioClock>;

fn limiter(per_s: u32) -> Limiter {
    let n = NonZeroU32::new(per_s).unwrap_or(NonZeroU32::MIN);
    RateLimiter::direct_with_clock(Quota::per_second(n).allow_burst(n), TokioClock)
}

/// Parsed params of `tokenIntrospection`, with the route's rate limit.
struct Config {
    endpoint: Url,
    client_id: String,
    secret_env: String,
    client: reqwest::Client,
    cache_max: Duration,
    inactive_cache: Duration,
    issuer: Option<String>,
    audience: Vec<String>,
    forward_claims: Vec<String>,
    resource_metadata: Option<String>,
    per_s: u32,
    limiter: Limiter,
}

impl Config {
    fn parse(p: &Params) -> Result<Self, ParamError> {
        let endpoint = fetch::url_param("introspection_endpoint", p.required("introspection_endpoint")?)?;
        let ca_file = p
            .get("ca_file")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(PathBuf::from);
        let client = fetch::client(ca_file.as_deref())
            .map_err(|e| ParamError::invalid("ca_file", p.get("ca_file").unwrap_or(""), e))?;
        let secs = |name: &str, default: u64| -> Result<Duration, ParamError> {
            let v: u64 = p.parse_or(name, default)?;
            if v > 86400 {
                return Err(ParamError::invalid(name, &v.to_string(), "at most 86400"));
            }
            Ok(Duration::from_secs(v))
        };
        let per_s: u32 = p.parse_or("max_introspections_per_s", ROUTE_PER_S)?;
        if !(1..=10_000).contains(&per_s) {
            return Err(ParamError::invalid(
                "max_introspections_per_s",
                &per_s.to_string(),
                "must be between 1 and 10000",
            ));
        }
        Ok(Config {
            endpoint,
            client_id: p.required("client_id")?.trim().to_string(),
            secret_env: p.required("client_secret_env")?.trim().to_string(),
            client,
            cache_max: secs("cache_max_s", 60)?,
            inactive_cache: secs("inactive_cache_s", 10)?,
            issuer: p
                .get("issuer")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from),
            audience: p.list("audience")?,
            forward_claims: p.list("forward_claims")?,
            resource_metadata: public_url("resource_metadata", p)?,
            per_s,
            limiter: limiter(per_s),
        })
    }
}

/// What the provider said of a token.
#[derive(Clone)]
enum Verdict {
    /// Active, with these claims.
    Active(Arc<Map<String, Value>>),
    /// Refused, for this reason (`inactive_token`, `unsupported_token_type`,
    /// `unknown_token`).
    Refused(&'static str),
}

/// A cached answer.
#[derive(Clone)]
struct Entry {
    verdict: Verdict,
    until: Instant,
}

/// Why a token got no answer from the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NoAnswer {
    /// Refused without a call: beyond this bound (`route`, `total`, `in_flight`).
    Limited(&'static str),
    /// The provider failed or did not answer in time.
    Unavailable,
}

/// The `tokenIntrospection` policy.
pub struct TokenIntrospection {
    params: ParamCache<Config>,
    cache: Arc<Mutex<LruCache<[u8; 32], Entry>>>,
    in_flight: Arc<Semaphore>,
    total: Limiter,
    total_per_s: u32,
    last_warning: Mutex<Option<Instant>>,
}

impl Default for TokenIntrospection {
    fn default() -> Self {
        TokenIntrospection::new()
    }
}

impl TokenIntrospection {
    /// A policy with empty caches.
    pub fn new() -> Self {
        TokenIntrospection::with_total_per_s(INTROSPECTIONS_PER_S)
    }

    /// A policy whose routes together introspect at most `per_s` tokens a
    /// second, as a burst of as many (at least 1).
    pub fn with_total_per_s(per_s: u32) -> Self {
        let cap = NonZeroUsize::new(MAX_TOKENS).unwrap_or(NonZeroUsize::MIN);
        TokenIntrospection {
            params: ParamCache::new(KEYS),
            cache: Arc::new(Mutex::new(LruCache::new(cap))),
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            total: limiter(per_s),
            total_per_s: per_s.max(1),
            last_warning: Mutex::new(None),
        }
    }
}

/// RFC 6750 `b64token` (`1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`),
/// at most [`MAX_TOKEN_LEN`] bytes.
fn well_formed(token: &str) -> bool {
    let body = token.trim_end_matches('=');
    token.len() <= MAX_TOKEN_LEN
        && !body.is_empty()
        && body
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"-._~+/".contains(&c))
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The cache key: the endpoint and client, then the token, hashed.
fn cache_key(cfg: &Config, token: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(cfg.endpoint.as_str().as_bytes());
    h.update([0]);
    h.update(cfg.client_id.as_bytes());
    h.update([0]);
    h.update(token.as_bytes());
    h.finalize().into()
}

/// `application/x-www-form-urlencoded` of one value.
fn form(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// What the provider answered: an introspection answer, or a 400 refusing
/// the token itself (RFC 6749 §5.2 error codes).
enum Answer {
    Introspected(Map<String, Value>),
    TokenRefused(&'static str),
}

/// The reason for a 400 whose OAuth `error` says the token is at fault;
/// `None` for errors that are the gateway's or the provider's
/// (`invalid_client`, `unauthorized_client`, ...).
fn token_refusal(body: &[u8]) -> Option<&'static str> {
    let v: Value = serde_json::from_slice(body).ok()?;
    match v.get("error")?.as_str()? {
        "unsupported_token_type" => Some("unsupported_token_type"),
        "invalid_request" | "invalid_token" | "invalid_grant" => Some("unknown_token"),
        _ => None,
    }
}

/// Asks the provider about `token`.
async fn introspect(cfg: &Config, secret: &str, token: &str) -> Result<Answer, FetchError> {
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", form(&cfg.client_id), form(secret)));
    let body = format!("token={}&token_type_hint=access_token", form(token));
    let url = &cfg.endpoint;
    let resp = cfg
        .client
        .post(url.clone())
        .header("authorization", format!("Basic {basic}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("accept", "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| FetchError::Transport {
            url: url.to_string(),
            reason: fetch::error_chain(&e),
        })?;
    let status = resp.status().as_u16();
    if status == 400 {
        let (_, bytes) = fetch::any_body(url, resp).await?;
        return match token_refusal(&bytes) {
            Some(reason) => Ok(Answer::TokenRefused(reason)),
            None => Err(FetchError::Invalid {
                url: url.to_string(),
                reason: format!("HTTP 400: {}", String::from_utf8_lossy(&bytes[..bytes.len().min(200)])),
            }),
        };
    }
    let (_, bytes) = fetch::body(url, resp).await?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(map)) if map.get("active").is_some_and(Value::is_boolean) => Ok(Answer::Introspected(map)),
        _ => Err(FetchError::Invalid {
            url: url.to_string(),
            reason: "not an introspection answer (no boolean `active`)".into(),
        }),
    }
}

/// The entry for an answer, and how long it may be kept.
fn entry_for(cfg: &Config, answer: Answer) -> Entry {
    let now = Instant::now();
    let refused = |reason| Entry {
        verdict: Verdict::Refused(reason),
        until: now + cfg.inactive_cache,
    };
    let answer = match answer {
        Answer::TokenRefused(reason) => return refused(reason),
        Answer::Introspected(map) => map,
    };
    if answer.get("active") != Some(&Value::Bool(true)) {
        return refused("inactive_token");
    }
    let ttl = match answer.get("exp").and_then(Value::as_u64) {
        Some(exp) => Duration::from_secs(exp.saturating_sub(unix_now())).min(cfg.cache_max),
        None => cfg.cache_max,
    };
    Entry {
        verdict: Verdict::Active(Arc::new(answer)),
        until: now + ttl,
    }
}

/// Why an active answer is still refused, if it is.
fn refusal(cfg: &Config, claims: &Map<String, Value>) -> Option<&'static str> {
    let now = unix_now();
    if claims.get("exp").and_then(Value::as_u64).is_some_and(|exp| exp <= now) {
        return Some("expired");
    }
    if claims.get("nbf").and_then(Value::as_u64).is_some_and(|nbf| nbf > now) {
        return Some("not_yet_valid");
    }
    if let Some(iss) = &cfg.issuer {
        if claims.get("iss").and_then(Value::as_str) != Some(iss) {
            return Some("wrong_issuer");
        }
    }
    if !cfg.audience.is_empty() {
        let held: Vec<&str> = match claims.get("aud") {
            Some(Value::String(s)) => vec![s],
            Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !cfg.audience.iter().any(|a| held.contains(&a.as_str())) {
            return Some("wrong_audience");
        }
    }
    None
}

fn unavailable() -> RequestOutcome {
    RequestOutcome::denied_with(
        Deny::json(503, &error_body("unavailable", "introspection_unavailable"))
            .header("retry-after", "5")
            .reason("idp_unavailable"),
    )
}

/// Refused without a call: beyond the introspection bounds.
fn limited() -> RequestOutcome {
    RequestOutcome::denied_with(
        Deny::json(503, &error_body("unavailable", "introspection_rate_limited"))
            .header("retry-after", "1")
            .reason("introspection_limited"),
    )
}

impl TokenIntrospection {
    /// Takes a turn within the bounds: the in-flight permit, the route's
    /// rate, the agent's rate; or the bound that refused it.
    fn turn(&self, cfg: &Config) -> Result<tokio::sync::OwnedSemaphorePermit, &'static str> {
        let permit = Arc::clone(&self.in_flight)
            .try_acquire_owned()
            .map_err(|_| "in_flight")?;
        cfg.limiter.check().map_err(|_| "route")?;
        self.total.check().map_err(|_| "total")?;
        Ok(permit)
    }

    /// Counts (and at most every [`WARN_EVERY`] logs) a refused introspection.
    fn refused(&self, cfg: &Config, bound: &'static str) {
        let n = super::metrics::introspection_limited(cfg.endpoint.as_str(), bound);
        let mut last = self.last_warning.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if last.is_none_or(|t| now >= t + WARN_EVERY) {
            *last = Some(now);
            tracing::warn!(
                policy = NAME, endpoint = %cfg.endpoint, bound, refused = n,
                route_per_s = cfg.per_s, total_per_s = self.total_per_s, in_flight = MAX_IN_FLIGHT,
                "introspection bound reached: refusing unknown tokens without asking the provider"
            );
        }
    }

    /// The cached or fresh entry for `token`, or why there is none. A fetch
    /// that outlives the call still fills the cache for the client's retry.
    async fn entry(
        &self,
        cfg: &Arc<Config>,
        token: &str,
        deadline: Option<Instant>,
    ) -> Result<Result<Entry, NoAnswer>, PolicyError> {
        let key = cache_key(cfg, token);
        let now = Instant::now();
        {
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(e) = cache.get(&key) {
                if now < e.until {
                    return Ok(Ok(e.clone()));
                }
                cache.pop(&key);
            }
        }
        let secret = std::env::var(&cfg.secret_env)
            .ok()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                PolicyError::new(format!(
                    "{NAME}: environment variable {} (client_secret_env) is not set",
                    cfg.secret_env
                ))
            })?;
        let permit = match self.turn(cfg) {
            Ok(permit) => permit,
            Err(bound) => {
                self.refused(cfg, bound);
                return Ok(Err(NoAnswer::Limited(bound)));
            }
        };
        let (cfg2, cache, token) = (Arc::clone(cfg), Arc::clone(&self.cache), token.to_string());
        let task = tokio::spawn(async move {
            let _permit = permit;
            let result = introspect(&cfg2, &secret, &token).await;
            match result {
                Ok(answer) => {
                    let entry = entry_for(&cfg2, answer);
                    let result = match entry.verdict {
                        Verdict::Active(_) => "active",
                        Verdict::Refused("inactive_token") => "inactive",
                        Verdict::Refused(_) => "refused",
                    };
                    super::metrics::introspected(cfg2.endpoint.as_str(), result);
                    cache.lock().unwrap_or_else(|e| e.into_inner()).put(key, entry.clone());
                    Some(entry)
                }
                Err(e) => {
                    super::metrics::introspected(cfg2.endpoint.as_str(), "error");
                    tracing::warn!(policy = NAME, error = %e, "token introspection failed");
                    None
                }
            }
        });
        let until = deadline
            .map(|d| d.checked_sub(REPLY_MARGIN).unwrap_or(now))
            .unwrap_or(now + fetch::FETCH_TIMEOUT);
        Ok(tokio::time::timeout_at(until, task)
            .await
            .ok()
            .and_then(Result::ok)
            .flatten()
            .ok_or(NoAnswer::Unavailable))
    }
}

impl Policy for TokenIntrospection {
    type Params = Params;
    describe! { name: NAME, params: KEYS, required: &["introspection_endpoint", "client_id", "client_secret_env"] }

    async fn on_request(&self, params: &Params, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let cfg = self
            .params
            .get(params, Config::parse)
            .map_err(|e| PolicyError::new(format!("{NAME}: {e}")))?;
        let rm = cfg.resource_metadata.as_deref();
        let token = ctx.request.header("authorization").and_then(|h| {
            let (scheme, token) = h.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then_some(token.trim())
        });
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Ok(unauthorized("missing_token", &bearer_challenge(None, None, rm)));
        };
        let invalid = bearer_challenge(Some("invalid_token"), None, rm);
        if !well_formed(token) {
            return Ok(unauthorized("malformed", &invalid));
        }
        let entry = match self.entry(&cfg, token, ctx.call.deadline).await? {
            Ok(entry) => entry,
            Err(NoAnswer::Limited(_)) => return Ok(limited()),
            Err(NoAnswer::Unavailable) => return Ok(unavailable()),
        };
        let claims = match entry.verdict {
            Verdict::Active(claims) => claims,
            Verdict::Refused(reason) => return Ok(unauthorized(reason, &invalid)),
        };
        if let Some(why) = refusal(&cfg, &claims) {
            return Ok(unauthorized(why, &invalid));
        }
        let mut out = RequestOutcome::proceed().set_metadata("auth_method", "introspection");
        if claims.get("sub").is_none() {
            if let Some(client) = claims.get("client_id").and_then(Value::as_str) {
                out = out.set_metadata("sub", client);
            }
        }
        Ok(with_claims(out, &claims, &cfg.forward_claims))
    }
}

#[cfg(test)]
#[path = "introspection_tests.rs"]
mod tests;
