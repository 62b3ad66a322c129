//! The OAuth 2.0 parts of the connect flow and of refreshing: PKCE (S256),
//! authorization URLs, the token endpoint (authorization code, refresh
//! token; the gateway authenticates with `client_secret_basic`), endpoint
//! discovery, and the check of the login's ID token (signature against the
//! identity provider's published keys, issuer, audience, nonce, expiry).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::{decode, decode_header, Validation};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use url::Url;

use crate::auth::fetch::{self, FetchError};
use crate::auth::jwks::{find_key, jwk_set_keys, SetOrigin};
use crate::auth::remote_keys::discover_endpoint;

/// 256 random bits, base64url: states, nonces, link ids, PKCE verifiers.
pub fn random_token() -> Result<String, String> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| format!("no randomness: {e}"))?;
    Ok(URL_SAFE_NO_PAD.encode(b))
}

/// The S256 challenge of a PKCE verifier (RFC 7636).
pub fn challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// A failure at a provider.
#[derive(Debug, thiserror::Error)]
pub enum OauthError {
    /// Unreachable, 5xx, or an unreadable answer.
    #[error("{0}")]
    Unavailable(String),
    /// The provider refused (`error` of RFC 6749 §5.2, and its description).
    #[error("the provider refused: {0}")]
    Refused(String),
}

impl From<FetchError> for OauthError {
    fn from(e: FetchError) -> Self {
        OauthError::Unavailable(e.to_string())
    }
}

/// `field` of `issuer`'s OpenID configuration.
pub async fn discover(client: &reqwest::Client, issuer: &str, field: &str) -> Result<Url, OauthError> {
    Ok(discover_endpoint(client, issuer, field).await?)
}

/// What the token endpoint answered.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    /// `access_token`.
    pub access_token: String,
    /// `refresh_token`.
    pub refresh_token: Option<String>,
    /// `expires_in`, seconds.
    pub expires_in: Option<u64>,
    /// `id_token`.
    pub id_token: Option<String>,
    /// `scope`.
    pub scope: Option<String>,
}

fn form_value(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// A token request with `form` at `endpoint`, as `client_id` with `secret`
/// (`client_secret_basic`, RFC 6749 §2.3.1).
pub async fn token(
    client: &reqwest::Client,
    endpoint: &Url,
    client_id: &str,
    secret: &str,
    form: &[(&str, &str)],
) -> Result<Tokens, OauthError> {
    let body = form
        .iter()
        .map(|(k, v)| format!("{k}={}", form_value(v)))
        .collect::<Vec<_>>()
        .join("&");
    let auth =
        base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", form_value(client_id), form_value(secret)));
    let resp = client
        .post(endpoint.clone())
        .header("content-type", "application/x-www-form-urlencoded")
        .header("accept", "application/json")
        .header("authorization", format!("Basic {auth}"))
        .body(body)
        .send()
        .await
        .map_err(|e| OauthError::Unavailable(format!("{endpoint}: {}", fetch::error_chain(&e))))?;
    let status = resp.status().as_u16();
    let (_, bytes) = fetch::any_body(endpoint, resp).await?;
    let v: Value = serde_json::from_slice(&bytes)
        .map_err(|_| OauthError::Unavailable(format!("{endpoint}: HTTP {status}, not JSON")))?;
    if status == 400 || status == 401 {
        let code = v.get("error").and_then(Value::as_str).unwrap_or("invalid_request");
        let why = v.get("error_description").and_then(Value::as_str).unwrap_or("");
        return Err(OauthError::Refused(format!("{code}: {why}")));
    }
    if status != 200 {
        return Err(OauthError::Unavailable(format!("{endpoint}: HTTP {status}")));
    }
    let text = |k: &str| v.get(k).and_then(Value::as_str).map(String::from);
    let access_token = text("access_token")
        .filter(|t| !t.is_empty() && t.len() <= 16 * 1024 && !t.contains(['\r', '\n']))
        .ok_or_else(|| OauthError::Unavailable(format!("{endpoint}: no usable access_token")))?;
    Ok(Tokens {
        access_token,
        refresh_token: text("refresh_token"),
        expires_in: v.get("expires_in").and_then(Value::as_u64),
        id_token: text("id_token"),
        scope: text("scope"),
    })
}

/// The authorization URL: `endpoint` with the code flow's parameters.
#[allow(clippy::too_many_arguments)]
pub fn authorize_url(
    endpoint: &Url,
    client_id: &str,
    redirect_uri: &str,
    scope: &str,
    state: &str,
    verifier: &str,
    nonce: Option<&str>,
    resource: Option<&str>,
) -> String {
    let mut u = endpoint.clone();
    {
        let mut q = u.query_pairs_mut();
        q.append_pair("response_type", "code")
            .append_pair("client_id", client_id)
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("scope", scope)
            .append_pair("state", state)
            .append_pair("code_challenge", &challenge(verifier))
            .append_pair("code_challenge_method", "S256");
        if let Some(n) = nonce {
            q.append_pair("nonce", n);
        }
        if let Some(r) = resource {
            q.append_pair("resource", r);
        }
    }
    u.to_string()
}

/// The subject of the login's `id_token`, checked: signed by one of
/// `issuer`'s published keys, issued by `issuer` for `client_id`, with
/// `nonce`, not expired.
pub async fn id_token_subject(
    client: &reqwest::Client,
    issuer: &str,
    client_id: &str,
    nonce: &str,
    id_token: &str,
) -> Result<String, OauthError> {
    let header = decode_header(id_token).map_err(|e| OauthError::Refused(format!("id_token: {e}")))?;
    let jwks = discover(client, issuer, "jwks_uri").await?;
    let (_, set) = fetch::get_json(client, &jwks).await?;
    let keys = jwk_set_keys(set, SetOrigin::Published).map_err(|e| OauthError::Unavailable(format!("{jwks}: {e}")))?;
    let i = find_key(&keys, header.alg, header.kid.as_deref())
        .ok_or_else(|| OauthError::Refused("id_token: no published key verifies it".into()))?;
    let mut v = Validation::new(header.alg);
    v.set_issuer(&[issuer]);
    v.set_audience(&[client_id]);
    v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
    v.leeway = 30;
    let claims = decode::<Map<String, Value>>(id_token, &keys[i].key, &v)
        .map_err(|e| OauthError::Refused(format!("id_token: {e}")))?
        .claims;
    if claims.get("nonce").and_then(Value::as_str) != Some(nonce) {
        return Err(OauthError::Refused("id_token: the nonce is not this sign-in's".into()));
    }
    claims
        .get("sub")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .ok_or_else(|| OauthError::Refused("id_token: no subject".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkce_and_authorization_urls_are_as_rfc_7636_and_6749_say() {
        // RFC 7636 appendix B.
        assert_eq!(
            challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
        let u = authorize_url(
            &Url::parse("https://as.example/authorize?x=1").unwrap(),
            "gw",
            "http://127.0.0.1:1/connect/callback",
            "openid repo",
            "st",
            "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk",
            Some("n1"),
            None,
        );
        let u = Url::parse(&u).unwrap();
        let q: std::collections::HashMap<_, _> = u.query_pairs().into_owned().collect();
        assert_eq!(q["x"], "1");
        assert_eq!(q["redirect_uri"], "http://127.0.0.1:1/connect/callback");
        assert_eq!(q["scope"], "openid repo");
        assert_eq!(q["code_challenge_method"], "S256");
        assert_eq!(q["code_challenge"], "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
        assert_eq!(q["nonce"], "n1");
        assert!(!q.contains_key("resource"));
        assert_ne!(random_token().unwrap(), random_token().unwrap());
    }
}
