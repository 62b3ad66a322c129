//! `jwtValidation`: bearer JWTs signed with RS256, ES256 or HS256.
//!
//! Checks the signature, `exp` and `nbf` (with `leeway_s`), `iss` and `aud`.
//! On success writes `sub`, `roles` (comma-separated) and `scope` to metadata
//! and forwards the claims listed in `forward_claims` as `x-jwt-<claim>`
//! request headers. Every failure is a 401 whose JSON body names the reason:
//! `missing_token`, `malformed`, `algorithm_not_allowed`, `unknown_key`,
//! `bad_signature`, `expired`, `not_yet_valid`, `wrong_issuer`,
//! `wrong_audience`, `missing_claim`.

use std::path::PathBuf;
use std::time::Duration;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{decode, decode_header, Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

use super::jwks::{Family, KeyCache};
use super::unauthorized;
use policy_agents::{describe, FromParams, ParamError, Params, Policy, PolicyError, RequestContext, RequestOutcome};

const CHALLENGE: &str = "Bearer error=\"invalid_token\"";

/// Parameters of `jwtValidation`.
#[derive(Debug, Clone)]
pub struct JwtParams {
    issuer: Option<String>,
    audience: Vec<String>,
    jwks_file: Option<PathBuf>,
    hs256_secret_env: Option<String>,
    leeway_s: u64,
    forward_claims: Vec<String>,
}

impl FromParams for JwtParams {
    fn from_params(p: &Params) -> Result<Self, ParamError> {
        let params = JwtParams {
            issuer: p
                .get("issuer")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from),
            audience: p.list("audience")?,
            jwks_file: p
                .get("jwks_file")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(PathBuf::from),
            hs256_secret_env: p
                .get("hs256_secret_env")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from),
            leeway_s: p.parse_or("leeway_s", 30)?,
            forward_claims: p.list("forward_claims")?,
        };
        if params.jwks_file.is_none() && params.hs256_secret_env.is_none() {
            return Err(ParamError::Missing("jwks_file or hs256_secret_env".into()));
        }
        Ok(params)
    }
}

/// The `jwtValidation` policy.
pub struct JwtValidation {
    keys: KeyCache,
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

impl JwtValidation {
    /// The key for a token header, or the 401 reason when there is none.
    fn key_for(
        &self,
        params: &JwtParams,
        alg: Algorithm,
        kid: Option<&str>,
    ) -> Result<Result<DecodingKeyRef, &'static str>, PolicyError> {
        let Some(family) = Family::of(alg) else {
            return Ok(Err("algorithm_not_allowed"));
        };
        if family == Family::Hmac {
            if let Some(var) = &params.hs256_secret_env {
                let key = self.keys.secret(var).map_err(|e| PolicyError::new(e.to_string()))?;
                return Ok(Ok(DecodingKeyRef::Secret(key)));
            }
        }
        let Some(path) = &params.jwks_file else {
            return Ok(Err("algorithm_not_allowed"));
        };
        let keys = self.keys.jwks(path).map_err(|e| PolicyError::new(e.to_string()))?;
        if !keys.iter().any(|k| k.family == family) {
            return Ok(Err("algorithm_not_allowed"));
        }
        let index = keys
            .iter()
            .position(|k| k.family == family && (kid.is_none() || k.kid.as_deref() == kid));
        Ok(match index {
            Some(i) => Ok(DecodingKeyRef::Set(keys, i)),
            None => Err("unknown_key"),
        })
    }
}

/// A key held either alone or inside a cached JWKS.
enum DecodingKeyRef {
    Secret(std::sync::Arc<DecodingKey>),
    Set(std::sync::Arc<Vec<super::jwks::VerifyKey>>, usize),
}

impl DecodingKeyRef {
    fn key(&self) -> Option<&DecodingKey> {
        match self {
            DecodingKeyRef::Secret(k) => Some(k),
            DecodingKeyRef::Set(keys, i) => keys.get(*i).map(|k| &k.key),
        }
    }
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
        &[
            "issuer",
            "audience",
            "jwks_file",
            "hs256_secret_env",
            "leeway_s",
            "forward_claims",
        ]
    }

    async fn on_request(&self, params: &JwtParams, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let token = ctx.request.header("authorization").and_then(|h| {
            let (scheme, token) = h.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then_some(token.trim())
        });
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Ok(unauthorized("missing_token", "Bearer"));
        };
        let header = match decode_header(token) {
            Ok(h) => h,
            Err(_) => return Ok(unauthorized("malformed", CHALLENGE)),
        };
        let key = match self.key_for(params, header.alg, header.kid.as_deref())? {
            Ok(found) => found,
            Err(why) => return Ok(unauthorized(why, CHALLENGE)),
        };
        let Some(key) = key.key() else {
            return Ok(unauthorized("unknown_key", CHALLENGE));
        };
        let claims = match decode::<Map<String, Value>>(token, key, &validation(params, header.alg)) {
            Ok(data) => data.claims,
            Err(e) => return Ok(unauthorized(reason(e.kind()), CHALLENGE)),
        };
        let mut out = RequestOutcome::proceed().set_metadata("auth_method", "jwt");
        if let Some(sub) = claims.get("sub").and_then(Value::as_str) {
            out = out.set_metadata("sub", sub);
        }
        let roles = roles(&claims);
        if !roles.is_empty() {
            out = out.set_metadata("roles", roles.join(","));
        }
        if let Some(scope) = scope(&claims) {
            out = out.set_metadata("scope", scope);
        }
        for claim in &params.forward_claims {
            if let Some(v) = claims.get(claim) {
                out = out.set_header(format!("x-jwt-{}", header_suffix(claim)), claim_text(v));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
#[path = "jwt_tests.rs"]
mod tests;
