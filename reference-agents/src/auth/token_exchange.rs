//! `tokenExchange`: the caller's validated bearer token exchanged at the
//! identity provider's token endpoint (RFC 8693) for a token issued for the
//! upstream; the caller's token never reaches the upstream.
//!
//! It runs after `jwtValidation` or `tokenIntrospection` in the same chain:
//! it requires their metadata (`auth_method` = `jwt` or `introspection`,
//! `sub`) and exchanges the request's bearer token (the one they validated).
//! * The token endpoint is `token_endpoint`, or found by OIDC discovery from
//!   `issuer` (found once, looked up again after a failure).
//! * The form carries `audience` and `resource` (lists), `scope`,
//!   `requested_token_type`, `subject_token_type` (default access token) and
//!   an optional actor token (`actor_token_env` or `actor_token_file`).
//!   The client authenticates with `client_secret_basic` (default) or
//!   `client_secret_post`, the secret from `client_secret_env` or
//!   `client_secret_file`, or with `private_key_jwt` (RFC 7523), the PEM
//!   key from `private_key_env` or `private_key_file` (`private_key_alg`,
//!   default RS256; `private_key_kid`); read when an exchange is made,
//!   never logged.
//! * Success: `header` (default `authorization`) gets the exchanged token
//!   (`Bearer <token>` in `authorization`; the token alone in a named header,
//!   and then `authorization` is removed).
//! * Failure: the request is denied, the upstream is not called (see
//!   [`Failure`]).
//!
//! Exchanged tokens are cached under the SHA-256 of the target params, the
//! actor token and the subject token (never a token), for the lesser of
//! `expires_in`, the subject token's `exp` and `cache_max_s`, less
//! `margin_s`; refusals for `negative_cache_s`. At most 10,000 entries,
//! least recently used first out. Concurrent misses of one key share one
//! call to the provider. Listed in the response chain too, the policy evicts
//! on an upstream 401 the entry the request used.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use jsonwebtoken::Algorithm;
use lru::LruCache;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio::time::Instant;
use url::Url;

use super::fetch;
use super::remote_keys::discover_endpoint;
use super::{bearer_challenge, metrics, unauthorized};
use crate::error_body;
use crate::param_cache::ParamCache;
use crate::secret::Secret;
use credentials::{client_assertion, ClientAuth, ASSERTION_TYPE};
use policy_agents::{
    describe, Deny, ParamError, Params, Policy, PolicyError, RequestContext, RequestOutcome, ResponseContext,
    ResponseOutcome,
};

const NAME: &str = "tokenExchange";
const KEYS: &[&str] = &[
    "issuer",
    "token_endpoint",
    "client_id",
    "client_auth",
    "client_secret_env",
    "client_secret_file",
    "private_key_env",
    "private_key_file",
    "private_key_alg",
    "private_key_kid",
    "audience",
    "resource",
    "scope",
    "requested_token_type",
    "subject_token_type",
    "actor_token_env",
    "actor_token_file",
    "actor_token_type",
    "header",
    "ca_file",
    "margin_s",
    "cache_max_s",
    "negative_cache_s",
];
const GRANT: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN: &str = "urn:ietf:params:oauth:token-type:access_token";
const MAX_ENTRIES: usize = 10_000;
/// Longest exchanged token put in a header.
const MAX_TOKEN_LEN: usize = 16 * 1024;
const REPLY_MARGIN: Duration = Duration::from_millis(25);
/// The metadata key holding the hex cache key a request used (for eviction
/// on an upstream 401).
const KEY_METADATA: &str = "token_exchange.key";

/// Where the token endpoint comes from.
enum Endpoint {
    Given(Url),
    Issuer { issuer: String, found: Mutex<Option<Url>> },
}

/// Parsed params of `tokenExchange`.
struct Config {
    endpoint: Endpoint,
    /// The endpoint or issuer, for metrics and logs.
    label: String,
    client_id: String,
    client_auth: ClientAuth,
    secret: Secret,
    audience: Vec<String>,
    resource: Vec<String>,
    scope: Option<String>,
    requested_token_type: Option<String>,
    subject_token_type: String,
    actor: Option<(Secret, String)>,
    header: String,
    client: reqwest::Client,
    margin: Duration,
    cache_max: Duration,
    negative: Duration,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn valid_header_name(h: &str) -> bool {
    !h.is_empty()
        && h.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"-_".contains(&c))
        && !matches!(h, "host" | "content-length" | "transfer-encoding" | "connection")
}

impl Config {
    fn parse(p: &Params) -> Result<Self, ParamError> {
        let opt = |name: &str| p.get(name).map(str::trim).filter(|s| !s.is_empty()).map(String::from);
        let (endpoint, label) = match (opt("token_endpoint"), opt("issuer")) {
            (Some(e), None) => {
                let url = fetch::url_param("token_endpoint", &e)?;
                (Endpoint::Given(url), e)
            }
            (None, Some(issuer)) => {
                fetch::url_param("issuer", &issuer)?;
                let found = Mutex::new(None);
                (
                    Endpoint::Issuer {
                        issuer: issuer.clone(),
                        found,
                    },
                    issuer,
                )
            }
            _ => {
                return Err(ParamError::invalid(
                    "token_endpoint",
                    "",
                    "give token_endpoint or issuer, exactly one",
                ))
            }
        };
        let client_auth = match opt("client_auth").as_deref() {
            None | Some("client_secret_basic") => ClientAuth::Basic,
            Some("client_secret_post") => ClientAuth::Post,
            Some("private_key_jwt") => {
                let raw = opt("private_key_alg").unwrap_or_else(|| "RS256".into());
                let alg = raw
                    .parse::<Algorithm>()
                    .ok()
                    .filter(|a| !matches!(a, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512))
                    .ok_or_else(|| ParamError::invalid("private_key_alg", &raw, "RS*, PS*, ES256, ES384 or EdDSA"))?;
                ClientAuth::PrivateKeyJwt {
                    alg,
                    kid: opt("private_key_kid"),
                }
            }
            Some(other) => {
                return Err(ParamError::invalid(
                    "client_auth",
                    other,
                    "client_secret_basic, client_secret_post or private_key_jwt",
                ))
            }
        };
        let (env, file) = match client_auth {
            ClientAuth::PrivateKeyJwt { .. } => ("private_key_env", "private_key_file"),
            _ => ("client_secret_env", "client_secret_file"),
        };
        let secret = Secret::parse(p, env, file)?
            .ok_or_else(|| ParamError::invalid(env, "", format!("give {env} or {file}")))?;
        let actor = Secret::parse(p, "actor_token_env", "actor_token_file")?
            .map(|s| (s, opt("actor_token_type").unwrap_or_else(|| ACCESS_TOKEN.to_string())));
        let resource = p.list("resource")?;
        for r in &resource {
            let url = Url::parse(r).map_err(|e| ParamError::invalid("resource", r, e.to_string()))?;
            if url.fragment().is_some() {
                return Err(ParamError::invalid("resource", r, "an absolute URI without a fragment"));
            }
        }
        let header = opt("header")
            .unwrap_or_else(|| "authorization".into())
            .to_ascii_lowercase();
        if !valid_header_name(&header) {
            return Err(ParamError::invalid(
                "header",
                &header,
                "not a header name the gateway may set",
            ));
        }
        let ca_file = opt("ca_file").map(PathBuf::from);
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
            label,
            client_id: p.required("client_id")?.trim().to_string(),
            client_auth,
            secret,
            audience: p.list("audience")?,
            resource,
            scope: opt("scope"),
            requested_token_type: opt("requested_token_type"),
            subject_token_type: opt("subject_token_type").unwrap_or_else(|| ACCESS_TOKEN.to_string()),
            actor,
            header,
            client,
            margin: secs("margin_s", 30)?,
            cache_max: secs("cache_max_s", 3600)?,
            negative: secs("negative_cache_s", 5)?,
        })
    }

    /// The token endpoint: given, or discovered (and kept once found).
    async fn token_endpoint(&self) -> Result<Url, Failure> {
        match &self.endpoint {
            Endpoint::Given(url) => Ok(url.clone()),
            Endpoint::Issuer { issuer, found } => {
                if let Some(url) = lock(found).clone() {
                    return Ok(url);
                }
                let url = discover_endpoint(&self.client, issuer, "token_endpoint")
                    .await
                    .map_err(|e| {
                        tracing::warn!(policy = NAME, error = %e, "token endpoint discovery failed");
                        Failure::Unavailable
                    })?;
                *lock(found) = Some(url.clone());
                Ok(url)
            }
        }
    }
}

/// Why no exchanged token: each denies the request, the upstream not called.
///
/// | failure | status |
/// |---|---|
/// | `Unavailable`: provider unreachable, 5xx, too slow, discovery failed | 503, `Retry-After` |
/// | `InvalidGrant`, `InvalidRequest`: the subject token refused | 401, `WWW-Authenticate` |
/// | `InvalidTarget`, `InvalidScope`, `UnauthorizedClient` | 403 |
/// | `InvalidClient`, `InvalidResponse`, `NoCredentials` (the gateway's own) | 502 |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    Unavailable,
    InvalidGrant,
    InvalidRequest,
    InvalidTarget,
    InvalidScope,
    UnauthorizedClient,
    InvalidClient,
    InvalidResponse,
    NoCredentials,
}

impl Failure {
    /// The failure an RFC 6749 §5.2 `error` code names.
    fn from_code(code: &str) -> Failure {
        match code {
            "invalid_grant" => Failure::InvalidGrant,
            "invalid_request" => Failure::InvalidRequest,
            "invalid_target" => Failure::InvalidTarget,
            "invalid_scope" => Failure::InvalidScope,
            "unauthorized_client" => Failure::UnauthorizedClient,
            "invalid_client" => Failure::InvalidClient,
            _ => Failure::InvalidResponse,
        }
    }

    /// The reason in the error body, logs and metrics.
    fn code(self) -> &'static str {
        match self {
            Failure::Unavailable => "unavailable",
            Failure::InvalidGrant => "invalid_grant",
            Failure::InvalidRequest => "invalid_request",
            Failure::InvalidTarget => "invalid_target",
            Failure::InvalidScope => "invalid_scope",
            Failure::UnauthorizedClient => "unauthorized_client",
            Failure::InvalidClient => "invalid_client",
            Failure::InvalidResponse => "invalid_response",
            Failure::NoCredentials => "client_credentials_unavailable",
        }
    }

    /// Refusals by the provider are cached (negative cache); outages,
    /// malformed answers and missing credentials are not.
    fn cacheable(self) -> bool {
        !matches!(
            self,
            Failure::Unavailable | Failure::InvalidResponse | Failure::NoCredentials
        )
    }

    fn deny(self) -> RequestOutcome {
        let code = self.code();
        let deny = match self {
            Failure::Unavailable => {
                Deny::json(503, &error_body("unavailable", "token_exchange_unavailable")).header("retry-after", "5")
            }
            Failure::InvalidGrant | Failure::InvalidRequest => {
                let challenge = bearer_challenge(Some("invalid_token"), None, None);
                return unauthorized(code, &challenge).deny_reason("token_exchange_refused");
            }
            Failure::InvalidTarget | Failure::InvalidScope | Failure::UnauthorizedClient => {
                Deny::json(403, &error_body("forbidden", code))
            }
            Failure::InvalidClient | Failure::InvalidResponse | Failure::NoCredentials => {
                Deny::json(502, &error_body("bad_gateway", code))
            }
        };
        RequestOutcome::denied_with(deny.reason(format!("token_exchange_{code}")))
    }
}

/// What a flight ends with.
type Done = Result<Arc<str>, Failure>;

/// A cached exchange or refusal.
#[derive(Clone)]
struct Entry {
    done: Done,
    until: Instant,
}

type Cache = Arc<Mutex<LruCache<[u8; 32], Entry>>>;
type Flights = Arc<Mutex<HashMap<[u8; 32], watch::Receiver<Option<Done>>>>>;

/// The `tokenExchange` policy.
pub struct TokenExchange {
    params: ParamCache<Config>,
    cache: Cache,
    flights: Flights,
}

impl Default for TokenExchange {
    fn default() -> Self {
        TokenExchange::new()
    }
}

impl TokenExchange {
    /// A policy with an empty cache.
    pub fn new() -> Self {
        let cap = NonZeroUsize::new(MAX_ENTRIES).unwrap_or(NonZeroUsize::MIN);
        TokenExchange {
            params: ParamCache::new(KEYS),
            cache: Arc::new(Mutex::new(LruCache::new(cap))),
            flights: Arc::new(Mutex::new(HashMap::new())),
        }
    }
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The first 8 hex digits of a token's SHA-256: all logs show of a token.
fn short_hash(token: &str) -> String {
    hex::encode(&Sha256::digest(token.as_bytes())[..4])
}

/// The cache key: the target params, the actor token and the subject
/// token, hashed (length-prefixed, so no two lists give one key).
fn cache_key(cfg: &Config, actor: Option<&str>, subject: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    let mut part = |s: &str| {
        h.update((s.len() as u64).to_be_bytes());
        h.update(s.as_bytes());
    };
    part(&cfg.label);
    part(&cfg.client_id);
    part(&cfg.subject_token_type);
    part(cfg.requested_token_type.as_deref().unwrap_or(""));
    part(cfg.scope.as_deref().unwrap_or(""));
    part(&cfg.audience.join("\n"));
    part(&cfg.resource.join("\n"));
    part(actor.unwrap_or(""));
    part(subject);
    h.finalize().into()
}

/// The `exp` of a JWT subject token (already validated by an earlier
/// policy); `None` for opaque tokens.
fn subject_exp(token: &str) -> Option<u64> {
    credentials::claims(token)?.get("exp")?.as_u64()
}

/// How long an exchanged token may be cached.
fn lifetime(cfg: &Config, expires_in: Option<u64>, subject_exp: Option<u64>) -> Duration {
    let mut life = cfg.cache_max;
    if let Some(e) = expires_in {
        life = life.min(Duration::from_secs(e));
    }
    if let Some(exp) = subject_exp {
        life = life.min(Duration::from_secs(exp.saturating_sub(unix_now())));
    }
    life.saturating_sub(cfg.margin)
}

/// The token and `expires_in` of a token response, if it is a valid one.
fn token_response(bytes: &[u8]) -> Option<(Arc<str>, Option<u64>)> {
    let v: Value = serde_json::from_slice(bytes).ok()?;
    let token = v.get("access_token")?.as_str()?;
    let printable = token.bytes().all(|c| (0x21..=0x7e).contains(&c));
    if token.is_empty() || token.len() > MAX_TOKEN_LEN || !printable {
        return None;
    }
    v.get("token_type")?.as_str()?;
    if v.get("issued_token_type").is_some_and(|t| !t.is_string()) {
        return None;
    }
    let expires_in = match v.get("expires_in") {
        None => None,
        Some(e) => Some(e.as_u64()?),
    };
    Some((Arc::from(token), expires_in))
}

/// The form of one exchange; `assertion` for `private_key_jwt`.
fn form(cfg: &Config, secret: &str, subject: &str, actor: Option<&str>, assertion: Option<&str>) -> String {
    let mut f = url::form_urlencoded::Serializer::new(String::new());
    f.append_pair("grant_type", GRANT)
        .append_pair("subject_token", subject)
        .append_pair("subject_token_type", &cfg.subject_token_type);
    if let (Some(token), Some((_, kind))) = (actor, &cfg.actor) {
        f.append_pair("actor_token", token)
            .append_pair("actor_token_type", kind);
    }
    for a in &cfg.audience {
        f.append_pair("audience", a);
    }
    for r in &cfg.resource {
        f.append_pair("resource", r);
    }
    if let Some(s) = &cfg.scope {
        f.append_pair("scope", s);
    }
    if let Some(t) = &cfg.requested_token_type {
        f.append_pair("requested_token_type", t);
    }
    match (&cfg.client_auth, assertion) {
        (ClientAuth::Post, _) => {
            f.append_pair("client_id", &cfg.client_id)
                .append_pair("client_secret", secret);
        }
        (ClientAuth::PrivateKeyJwt { .. }, Some(jwt)) => {
            f.append_pair("client_id", &cfg.client_id)
                .append_pair("client_assertion_type", ASSERTION_TYPE)
                .append_pair("client_assertion", jwt);
        }
        _ => {}
    }
    f.finish()
}

/// `application/x-www-form-urlencoded` of one value (RFC 6749 §2.3.1).
fn form_value(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// One exchange at the provider: the token and its `expires_in`.
async fn exchange(cfg: &Config, subject: &str, actor: Option<&str>) -> Result<(Arc<str>, Option<u64>), Failure> {
    let url = cfg.token_endpoint().await?;
    let no_credentials = |why: String| {
        tracing::error!(policy = NAME, client_id = %cfg.client_id, "client credentials unavailable: {why}");
        Failure::NoCredentials
    };
    let secret = cfg.secret.read().map_err(no_credentials)?;
    let assertion = match &cfg.client_auth {
        ClientAuth::PrivateKeyJwt { alg, kid } => {
            Some(client_assertion(&cfg.client_id, *alg, kid.as_deref(), &secret, &url).map_err(no_credentials)?)
        }
        _ => None,
    };
    let mut req = cfg
        .client
        .post(url.clone())
        .header("content-type", "application/x-www-form-urlencoded")
        .header("accept", "application/json")
        .body(form(cfg, &secret, subject, actor, assertion.as_deref()));
    if cfg.client_auth == ClientAuth::Basic {
        let pair = format!("{}:{}", form_value(&cfg.client_id), form_value(&secret));
        let basic = base64::engine::general_purpose::STANDARD.encode(pair);
        req = req.header("authorization", format!("Basic {basic}"));
    }
    let started = std::time::Instant::now();
    let sent = req.send().await;
    let result = match sent {
        Ok(resp) => {
            let status = resp.status().as_u16();
            fetch::any_body(&url, resp).await.map(|(_, body)| (status, body))
        }
        Err(e) => Err(fetch::FetchError::Transport {
            url: url.to_string(),
            reason: fetch::error_chain(&e),
        }),
    };
    metrics::exchange_latency(&cfg.label, started.elapsed().as_secs_f64());
    let (status, body) = result.map_err(|e| {
        tracing::warn!(policy = NAME, error = %e, "token endpoint unreachable");
        Failure::Unavailable
    })?;
    match status {
        200 => token_response(&body).ok_or_else(|| {
            tracing::warn!(policy = NAME, endpoint = %url, "not a token response");
            Failure::InvalidResponse
        }),
        500.. => {
            tracing::warn!(policy = NAME, endpoint = %url, status, "token endpoint failed");
            Err(Failure::Unavailable)
        }
        _ => {
            let code = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v.get("error")?.as_str().map(String::from));
            let failure = code.as_deref().map_or(Failure::InvalidResponse, Failure::from_code);
            if matches!(failure, Failure::InvalidClient | Failure::InvalidResponse) {
                tracing::warn!(policy = NAME, endpoint = %url, status, error = code.as_deref().unwrap_or("-"),
                    "token endpoint refused the gateway or answered nonsense");
            }
            Err(failure)
        }
    }
}

/// A request's exchange: its subject, actor and cache key.
struct Ask {
    key: [u8; 32],
    sub: String,
    subject: String,
    actor: Option<String>,
}

impl TokenExchange {
    /// The token for `ask`, and the outcome (`hit`, `miss`, `shared`).
    async fn token(&self, cfg: &Arc<Config>, ask: Ask, deadline: Option<Instant>) -> (Done, &'static str) {
        let now = Instant::now();
        let key = ask.key;
        let (rx, outcome) = {
            let mut flights = lock(&self.flights);
            {
                let mut cache = lock(&self.cache);
                if let Some(e) = cache.get(&key) {
                    if now < e.until {
                        return (e.done.clone(), "hit");
                    }
                    cache.pop(&key);
                    metrics::exchange_cache_entries(cache.len());
                }
            }
            // A flight whose sender is gone (its task panicked) is replaced.
            match flights.get(&key).filter(|rx| rx.has_changed().is_ok()) {
                Some(rx) => (rx.clone(), "shared"),
                None => {
                    let (tx, rx) = watch::channel(None);
                    flights.insert(key, rx.clone());
                    self.lead(Arc::clone(cfg), ask, tx);
                    (rx, "miss")
                }
            }
        };
        let until = deadline
            .map(|d| d.checked_sub(REPLY_MARGIN).unwrap_or(now))
            .unwrap_or(now + fetch::FETCH_TIMEOUT);
        let mut rx = rx;
        let done = match tokio::time::timeout_at(until, rx.wait_for(Option::is_some)).await {
            Ok(Ok(v)) => v.clone().unwrap_or(Err(Failure::Unavailable)),
            _ => Err(Failure::Unavailable),
        };
        (done, outcome)
    }

    /// Starts the one exchange of `ask.key`: it fills the cache (even when
    /// the request that started it is gone) and wakes the waiters.
    fn lead(&self, cfg: Arc<Config>, ask: Ask, tx: watch::Sender<Option<Done>>) {
        let (cache, flights) = (Arc::clone(&self.cache), Arc::clone(&self.flights));
        tokio::spawn(async move {
            let result = exchange(&cfg, &ask.subject, ask.actor.as_deref()).await;
            let now = Instant::now();
            let (done, keep) = match result {
                Ok((token, expires_in)) => {
                    let life = lifetime(&cfg, expires_in, subject_exp(&ask.subject));
                    tracing::info!(policy = NAME, sub = %ask.sub, actor = %cfg.client_id,
                        actor_token = ask.actor.as_deref().map(short_hash).as_deref().unwrap_or("-"),
                        audience = %cfg.audience.join(","), resource = %cfg.resource.join(","),
                        subject_token = %short_hash(&ask.subject), issued_token = %short_hash(&token),
                        cached_s = life.as_secs(), outcome = "exchanged", "token exchanged");
                    (Ok(Arc::clone(&token)), Some(life).filter(|l| !l.is_zero()))
                }
                Err(f) => {
                    tracing::info!(policy = NAME, sub = %ask.sub, actor = %cfg.client_id,
                        actor_token = ask.actor.as_deref().map(short_hash).as_deref().unwrap_or("-"),
                        audience = %cfg.audience.join(","), resource = %cfg.resource.join(","),
                        subject_token = %short_hash(&ask.subject), outcome = f.code(), "token exchange failed");
                    let keep = (f.cacheable() && !cfg.negative.is_zero()).then_some(cfg.negative);
                    (Err(f), keep)
                }
            };
            {
                let mut flights = lock(&flights);
                let mut cache = lock(&cache);
                if let Some(life) = keep {
                    cache.put(
                        ask.key,
                        Entry {
                            done: done.clone(),
                            until: now + life,
                        },
                    );
                }
                metrics::exchange_cache_entries(cache.len());
                flights.remove(&ask.key);
            }
            let _ = tx.send(Some(done));
        });
    }
}

/// The bearer token of the request.
fn bearer<'a>(ctx: &RequestContext<'a>) -> Option<&'a str> {
    let h = ctx.request.header("authorization")?;
    let (scheme, token) = h.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

impl Policy for TokenExchange {
    type Params = Params;
    describe! { name: NAME, params: KEYS, required: &["client_id"], phases: Both }

    async fn on_request(&self, params: &Params, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let cfg = self
            .params
            .get(params, Config::parse)
            .map_err(|e| PolicyError::new(format!("{NAME}: {e}")))?;
        let validated = matches!(ctx.metadata.get("auth_method"), Some("jwt" | "introspection"));
        let sub = ctx.metadata.get("sub").filter(|_| validated);
        let (Some(sub), Some(subject)) = (sub, bearer(ctx)) else {
            tracing::warn!(
                policy = NAME,
                "no caller validated by jwtValidation or tokenIntrospection before"
            );
            return Ok(
                unauthorized("caller_not_validated", &bearer_challenge(None, None, None))
                    .deny_reason("token_exchange_unauthenticated"),
            );
        };
        let actor = match &cfg.actor {
            None => None,
            Some((source, _)) => match source.read() {
                Ok(token) => Some(token),
                Err(why) => {
                    tracing::error!(policy = NAME, "actor token unavailable: {why}");
                    metrics::exchange(&cfg.label, Failure::NoCredentials.code());
                    return Ok(Failure::NoCredentials.deny());
                }
            },
        };
        let audience = cfg
            .audience
            .iter()
            .chain(&cfg.resource)
            .cloned()
            .collect::<Vec<_>>()
            .join(" ");
        let acting = actor.as_deref().and_then(credentials::actor_name);
        // What the journal keeps of the exchange: never a token.
        let audit = |out: RequestOutcome, outcome: &str| {
            let out = out
                .set_metadata("token_exchange", outcome)
                .set_metadata("token_exchange.audience", &audience)
                .set_metadata("token_exchange.subject_token", short_hash(subject));
            match &acting {
                Some(a) => out.set_metadata("token_exchange.actor", a),
                None => out,
            }
        };
        if let Some(why) = actor.as_deref().and_then(|a| credentials::may_act_refused(subject, a)) {
            tracing::warn!(
                policy = NAME,
                sub,
                actor = acting.as_deref().unwrap_or("-"),
                "{why}: refused"
            );
            metrics::exchange(&cfg.label, "may_act_refused");
            let deny =
                Deny::json(403, &error_body("forbidden", "may_act_refused")).reason("token_exchange_may_act_refused");
            return Ok(audit(RequestOutcome::denied_with(deny), "may_act_refused"));
        }
        let key = cache_key(&cfg, actor.as_deref(), subject);
        let ask = Ask {
            key,
            sub: sub.to_string(),
            subject: subject.to_string(),
            actor,
        };
        let (done, outcome) = self.token(&cfg, ask, ctx.call.deadline).await;
        let token = match done {
            Ok(token) => token,
            Err(f) => {
                metrics::exchange(&cfg.label, f.code());
                tracing::debug!(policy = NAME, sub, audience = %cfg.audience.join(","),
                    subject_token = %short_hash(subject), outcome = f.code(), "request denied");
                return Ok(audit(f.deny(), f.code()));
            }
        };
        metrics::exchange(&cfg.label, outcome);
        tracing::debug!(policy = NAME, sub, audience = %cfg.audience.join(","),
            subject_token = %short_hash(subject), outcome, "token exchange");
        let out = audit(
            RequestOutcome::proceed().set_metadata(KEY_METADATA, hex::encode(key)),
            outcome,
        );
        Ok(if cfg.header == "authorization" {
            out.set_header("authorization", format!("Bearer {token}"))
        } else {
            out.remove_header("authorization").set_header(&cfg.header, &*token)
        })
    }

    /// An upstream 401: the exchanged token the request used is evicted.
    async fn on_response(&self, _params: &Params, ctx: &ResponseContext<'_>) -> Result<ResponseOutcome, PolicyError> {
        if ctx.response.status() == 401 {
            let key = ctx
                .metadata
                .get(KEY_METADATA)
                .and_then(|k| hex::decode(k).ok())
                .and_then(|k| <[u8; 32]>::try_from(k).ok());
            if let Some(key) = key {
                let mut cache = lock(&self.cache);
                if cache.pop(&key).is_some() {
                    metrics::exchange_cache_entries(cache.len());
                    tracing::info!(policy = NAME, "upstream answered 401: exchanged token evicted");
                }
            }
        }
        Ok(ResponseOutcome::proceed())
    }
}

#[path = "token_exchange_credentials.rs"]
mod credentials;
#[cfg(test)]
#[path = "token_exchange_tests.rs"]
mod tests;
