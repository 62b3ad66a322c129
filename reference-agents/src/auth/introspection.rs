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
//! * The provider unreachable, slow past the call's deadline, or answering
//!   an error: 503 `introspection_unavailable`: it fails closed.
//!
//! Answers are cached under the SHA-256 of the token (never the token):
//! active ones until `exp` and at most `cache_max_s`, inactive ones for
//! `inactive_cache_s`; at most 10,000 tokens, least recently used first out.
//! At most 32 introspections are in flight per policy: beyond, 503, so a
//! flood of made-up tokens cannot turn into a flood at the provider.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
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
];
const MAX_TOKENS: usize = 10_000;
const MAX_IN_FLIGHT: usize = 32;
const REPLY_MARGIN: Duration = Duration::from_millis(25);

/// Parsed params of `tokenIntrospection`.
#[derive(Debug)]
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
        })
    }
}

/// A cached answer: the claims of an active token, or `None` for inactive.
#[derive(Clone)]
struct Entry {
    claims: Option<Arc<Map<String, Value>>>,
    until: Instant,
}

/// The `tokenIntrospection` policy.
pub struct TokenIntrospection {
    params: ParamCache<Config>,
    cache: Arc<Mutex<LruCache<[u8; 32], Entry>>>,
    in_flight: Arc<Semaphore>,
}

impl Default for TokenIntrospection {
    fn default() -> Self {
        TokenIntrospection::new()
    }
}

impl TokenIntrospection {
    /// A policy with empty caches.
    pub fn new() -> Self {
        let cap = NonZeroUsize::new(MAX_TOKENS).unwrap_or(NonZeroUsize::MIN);
        TokenIntrospection {
            params: ParamCache::new(KEYS),
            cache: Arc::new(Mutex::new(LruCache::new(cap))),
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        }
    }
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

/// Asks the provider about `token`: the answer's JSON object.
async fn introspect(cfg: &Config, secret: &str, token: &str) -> Result<Map<String, Value>, FetchError> {
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
    let (_, bytes) = fetch::body(url, resp).await?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(map)) if map.get("active").is_some_and(Value::is_boolean) => Ok(map),
        _ => Err(FetchError::Invalid {
            url: url.to_string(),
            reason: "not an introspection answer (no boolean `active`)".into(),
        }),
    }
}

/// The entry for an answer, and how long it may be kept.
fn entry_for(cfg: &Config, answer: Map<String, Value>) -> Entry {
    let now = Instant::now();
    if answer.get("active") != Some(&Value::Bool(true)) {
        return Entry {
            claims: None,
            until: now + cfg.inactive_cache,
        };
    }
    let ttl = match answer.get("exp").and_then(Value::as_u64) {
        Some(exp) => Duration::from_secs(exp.saturating_sub(unix_now())).min(cfg.cache_max),
        None => cfg.cache_max,
    };
    Entry {
        claims: Some(Arc::new(answer)),
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

impl TokenIntrospection {
    /// The cached or fresh entry for `token`; `None` when the provider
    /// could not answer in time. A fetch that outlives the call still fills
    /// the cache for the client's retry.
    async fn entry(
        &self,
        cfg: &Arc<Config>,
        token: &str,
        deadline: Option<Instant>,
    ) -> Result<Option<Entry>, PolicyError> {
        let key = cache_key(cfg, token);
        let now = Instant::now();
        {
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(e) = cache.get(&key) {
                if now < e.until {
                    return Ok(Some(e.clone()));
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
        let Ok(permit) = Arc::clone(&self.in_flight).try_acquire_owned() else {
            tracing::warn!(policy = NAME, "{MAX_IN_FLIGHT} introspections in flight: refusing");
            return Ok(None);
        };
        let (cfg2, cache, token) = (Arc::clone(cfg), Arc::clone(&self.cache), token.to_string());
        let task = tokio::spawn(async move {
            let _permit = permit;
            let result = introspect(&cfg2, &secret, &token).await;
            match result {
                Ok(answer) => {
                    let entry = entry_for(&cfg2, answer);
                    let result = if entry.claims.is_some() { "active" } else { "inactive" };
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
            .flatten())
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
        let Some(entry) = self.entry(&cfg, token, ctx.call.deadline).await? else {
            return Ok(unavailable());
        };
        let Some(claims) = entry.claims else {
            return Ok(unauthorized("inactive_token", &invalid));
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
