//! `jwtValidation`: bearer JWTs signed with RS256/384/512, PS256/384/512,
//! ES256, ES384, EdDSA (Ed25519) or HS256.
//!
//! Checks the signature, `exp` and `nbf` (with `leeway_s`), `iss` and `aud`.
//! On success writes `sub`, `roles` (comma-separated) and `scope` to metadata
//! and forwards the claims listed in `forward_claims` as `x-jwt-<claim>`
//! request headers. Every failure is a 401 whose JSON body names the reason:
//! `missing_token`, `malformed`, `algorithm_not_allowed`, `unknown_key`,
//! `bad_signature`, `expired`, `not_yet_valid`, `wrong_issuer`,
//! `wrong_audience`, `missing_claim`; its `WWW-Authenticate` names
//! `resource_metadata` when that param is set (RFC 9728). When the keys
//! come from an identity provider (`jwks_uri`, `oidc_discovery`: see
//! `remote_keys`) and none is usable (never fetched, or stale past
//! `jwks_stale_s`), the answer is 503 `keys_unavailable` with `Retry-After`:
//! the policy fails closed, and says the fault is not the client's.
//!
//! Keys are chosen by the token's algorithm family: an HMAC token is only
//! checked against `hs256_secret_env`, never against a public key, and a
//! published `oct` key is never used; `none` is refused as malformed.

use std::sync::Arc;
use std::time::Duration;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{decode, decode_header, Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

use super::jwks::{find_key, Family, KeyCache, VerifyKey};
use super::remote_keys::{Lookup, RemoteKeySets};
use super::{bearer_challenge, unauthorized};
use crate::error_body;
use policy_agents::{describe, Cacheable, Deny, Policy, PolicyError, RequestContext, RequestOutcome};

pub use super::jwt_params::JwtParams;

/// The `jwtValidation` policy.
pub struct JwtValidation {
    keys: KeyCache,
    remote: RemoteKeySets,
}

impl Default for JwtValidation {
    fn default() -> Self {
        JwtValidation::new()
    }
}

impl JwtValidation {
    /// A policy whose JWKS files are re-checked for changes every 10 s.
    pub fn new() -> Self {
        JwtValidation {
            keys: KeyCache::new(Duration::from_secs(10)),
            remote: RemoteKeySets::default(),
        }
    }
}

/// Why a token was refused (the `reason` of the 401).
fn reason(kind: &ErrorKind) -> &'static str {
    match kind {
        ErrorKind::ExpiredSignature => "expired",
        ErrorKind::ImmatureSignature => "not_yet_valid",
        ErrorKind::InvalidSignature => "bad_signature",
        ErrorKind::InvalidIssuer => "wrong_issuer",
        ErrorKind::InvalidAudience => "wrong_audience",
        ErrorKind::MissingRequiredClaim(c) if c == "iss" => "wrong_issuer",
        ErrorKind::MissingRequiredClaim(c) if c == "aud" => "wrong_audience",
        ErrorKind::MissingRequiredClaim(_) => "missing_claim",
        ErrorKind::InvalidAlgorithm | ErrorKind::UnsupportedAlgorithm => "algorithm_not_allowed",
        _ => "malformed",
    }
}

/// A claim as a header value: strings as they are, other values as JSON.
fn claim_text(v: &Value) -> String {
    let s = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    s.chars().filter(|c| !matches!(c, '\r' | '\n' | '\0')).collect()
}

/// A claim name as a header-name suffix.
fn header_suffix(claim: &str) -> String {
    claim
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect()
}

/// Roles from `roles` (list or comma/space-separated string) or Keycloak's `realm_access.roles`.
fn roles(claims: &Map<String, Value>) -> Vec<String> {
    let raw = claims
        .get("roles")
        .or_else(|| claims.get("realm_access").and_then(|r| r.get("roles")));
    match raw {
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(String::from).collect(),
        Some(Value::String(s)) => s
            .split([',', ' '])
            .filter(|r| !r.is_empty())
            .map(String::from)
            .collect(),
        _ => Vec::new(),
    }
}

/// Scopes from `scope` (space-separated string) or `scp` (list or string).
fn scope(claims: &Map<String, Value>) -> Option<String> {
    match claims.get("scope").or_else(|| claims.get("scp"))? {
        Value::String(s) => Some(s.clone()),
        Value::Array(items) => Some(items.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" ")),
        _ => None,
    }
}

/// Why no key verifies a token.
enum NoKey {
    /// A 401 with this reason.
    Refused(&'static str),
    /// The identity provider's keys are not available: 503.
    Unavailable,
}

impl JwtValidation {
    /// The key for a token header.
    async fn key_for(
        &self,
        params: &JwtParams,
        alg: Algorithm,
        kid: Option<&str>,
        ctx: &RequestContext<'_>,
    ) -> Result<Result<KeyRef, NoKey>, PolicyError> {
        let allowed = params.algorithms.as_ref().is_none_or(|a| a.contains(&alg));
        let Some(family) = Family::of(alg).filter(|_| allowed) else {
            return Ok(Err(NoKey::Refused("algorithm_not_allowed")));
        };
        if family == Family::Hmac {
            return Ok(match &params.hs256_secret_env {
                Some(var) => {
                    let key = self.keys.secret(var).map_err(|e| PolicyError::new(e.to_string()))?;
                    Ok(KeyRef::Secret(key))
                }
                None => Err(NoKey::Refused("algorithm_not_allowed")),
            });
        }
        if let Some(cfg) = &params.remote {
            let source = self
                .remote
                .get(cfg)
                .map_err(|e| PolicyError::new(format!("jwtValidation: ca_file: {e}")))?;
            return Ok(match source.lookup(alg, kid, ctx.call.deadline).await {
                Lookup::Found {
                    keys,
                    index,
                    stale,
                    fresh_for,
                } => Ok(KeyRef::Set {
                    keys,
                    index,
                    stale,
                    fresh_for: Some(fresh_for),
                }),
                Lookup::UnknownKey => Err(NoKey::Refused("unknown_key")),
                Lookup::Unavailable => Err(NoKey::Unavailable),
            });
        }
        let Some(path) = &params.jwks_file else {
            return Ok(Err(NoKey::Refused("algorithm_not_allowed")));
        };
        let keys = self.keys.jwks(path).map_err(|e| PolicyError::new(e.to_string()))?;
        if !keys.iter().any(|k| k.fits(family, alg)) {
            return Ok(Err(NoKey::Refused("algorithm_not_allowed")));
        }
        Ok(match find_key(&keys, alg, kid) {
            Some(index) => Ok(KeyRef::Set {
                keys,
                index,
                stale: false,
                fresh_for: None,
            }),
            None => Err(NoKey::Refused("unknown_key")),
        })
    }
}

/// A key held either alone or inside a cached key set.
enum KeyRef {
    Secret(Arc<DecodingKey>),
    Set {
        keys: Arc<Vec<VerifyKey>>,
        index: usize,
        stale: bool,
        /// What is left of a remote set's lifetime.
        fresh_for: Option<std::time::Duration>,
    },
}

impl KeyRef {
    fn key(&self) -> Option<&DecodingKey> {
        match self {
            KeyRef::Secret(k) => Some(k),
            KeyRef::Set { keys, index, .. } => keys.get(*index).map(|k| &k.key),
        }
    }
}

/// The 503 when the identity provider's keys are not available.
fn keys_unavailable() -> RequestOutcome {
    RequestOutcome::denied_with(
        Deny::json(503, &error_body("unavailable", "keys_unavailable"))
            .header("retry-after", "5")
            .reason("idp_unavailable"),
    )
}

fn validation(params: &JwtParams, alg: Algorithm) -> Validation {
    let mut v = Validation::new(alg);
    v.leeway = params.leeway_s;
    v.validate_exp = true;
    v.validate_nbf = true;
    let mut required = vec!["exp"];
    if let Some(iss) = &params.issuer {
        v.set_issuer(&[iss]);
        required.push("iss");
    }
    if params.audience.is_empty() {
        v.validate_aud = false;
    } else {
        v.set_audience(&params.audience);
        required.push("aud");
    }
    v.set_required_spec_claims(&required);
    v
}

impl Policy for JwtValidation {
    type Params = JwtParams;
    describe! { name: "jwtValidation" }

    fn param_schema(&self) -> &[&str] {
        super::jwt_params::PARAMS
    }

    /// An accepted token's outcome depends on the token, the params and the
    /// keys: the kernel may keep it until the token's `exp`, at most a
    /// minute (the bound on a key removed from a key set). Refusals are
    /// never kept: some depend on the clock (`nbf`) or on a key set that
    /// could not be fetched.
    fn cache(&self) -> Option<Cacheable> {
        Some(Cacheable::for_at_most(CACHE_MAX_AGE).header("authorization"))
    }

    async fn on_request(&self, params: &JwtParams, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let out = decide(self, params, ctx).await?;
        Ok(if out.denial().is_some() { out.no_store() } else { out })
    }
}

/// `jwtValidation`'s decision.
async fn decide(
    policy: &JwtValidation,
    params: &JwtParams,
    ctx: &RequestContext<'_>,
) -> Result<RequestOutcome, PolicyError> {
    let rm = params.resource_metadata.as_deref();
    let invalid = bearer_challenge(Some("invalid_token"), None, rm);
    let token = ctx.request.header("authorization").and_then(|h| {
        let (scheme, token) = h.trim().split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then_some(token.trim())
    });
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        return Ok(unauthorized("missing_token", &bearer_challenge(None, None, rm)));
    };
    let header = match decode_header(token) {
        Ok(h) => h,
        Err(_) => return Ok(unauthorized("malformed", &invalid)),
    };
    let key = match policy.key_for(params, header.alg, header.kid.as_deref(), ctx).await? {
        Ok(found) => found,
        Err(NoKey::Refused(why)) => return Ok(unauthorized(why, &invalid)),
        Err(NoKey::Unavailable) => return Ok(keys_unavailable()),
    };
    let Some(decoding) = key.key() else {
        return Ok(unauthorized("unknown_key", &invalid));
    };
    let claims = match decode::<Map<String, Value>>(token, decoding, &validation(params, header.alg)) {
        Ok(data) => data.claims,
        Err(e) => return Ok(unauthorized(reason(e.kind()), &invalid)),
    };
    let mut out = RequestOutcome::proceed()
        .set_metadata("auth_method", "jwt")
        .cache_for_at_most(until_exp(&claims));
    if let KeyRef::Set { stale, fresh_for, .. } = key {
        if params.remote.is_some() {
            out = out.set_metadata("jwt.keys", if stale { "stale" } else { "fresh" });
            // Kept no longer than the keys it was verified with.
            out = out.cache_for_at_most(if stale {
                Duration::ZERO
            } else {
                fresh_for.unwrap_or_default()
            });
        }
    }
    Ok(with_claims(out, &claims, &params.forward_claims))
}

/// How long the kernel may keep an accepted token's outcome.
pub const CACHE_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(60);

/// The time left until the token's `exp`, rounded down to milliseconds;
/// zero without `exp` a number (never kept) or once it passed.
fn until_exp(claims: &Map<String, Value>) -> std::time::Duration {
    let Some(exp) = claims.get("exp").and_then(Value::as_f64) else {
        return std::time::Duration::ZERO;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    let left = exp - now;
    if left.is_finite() && left > 0.0 {
        std::time::Duration::from_millis((left * 1000.0).floor() as u64)
    } else {
        std::time::Duration::ZERO
    }
}

/// The metadata and forwarded headers of an accepted token's claims (also
/// used by `tokenIntrospection` on an introspection answer).
pub(crate) fn with_claims(mut out: RequestOutcome, claims: &Map<String, Value>, forward: &[String]) -> RequestOutcome {
    if let Some(sub) = claims.get("sub").and_then(Value::as_str) {
        out = out.set_metadata("sub", sub);
    }
    let roles = roles(claims);
    if !roles.is_empty() {
        out = out.set_metadata("roles", roles.join(","));
    }
    if let Some(scope) = scope(claims) {
        out = out.set_metadata("scope", scope);
    }
    for claim in forward {
        if let Some(v) = claims.get(claim) {
            out = out.set_header(format!("x-jwt-{}", header_suffix(claim)), claim_text(v));
        }
    }
    out
}

#[cfg(test)]
#[path = "jwt_tests.rs"]
mod tests;
