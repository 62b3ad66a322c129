//! `tokenExchange`'s own credentials at the token endpoint: client
//! authentication (`client_secret_basic`, `client_secret_post`,
//! `private_key_jwt`) and where secrets, keys and actor tokens are read from.

use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use url::Url;

/// How the gateway authenticates at the token endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ClientAuth {
    /// `client_secret_basic`.
    Basic,
    /// `client_secret_post`.
    Post,
    /// `private_key_jwt` (RFC 7523): an assertion signed with this
    /// algorithm, with this `kid` in its header if given.
    PrivateKeyJwt { alg: Algorithm, kid: Option<String> },
}

/// How long a client assertion is valid.
const ASSERTION_LIFETIME: u64 = 60;
pub(super) const ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// A signed client assertion for `endpoint` (RFC 7523 §3: `iss` = `sub` =
/// the client id, `aud` = the token endpoint, a fresh `jti`).
pub(super) fn client_assertion(
    client_id: &str,
    alg: Algorithm,
    kid: Option<&str>,
    pem: &str,
    endpoint: &Url,
) -> Result<String, String> {
    let pem = pem.as_bytes();
    let key = match alg {
        Algorithm::RS256
        | Algorithm::RS384
        | Algorithm::RS512
        | Algorithm::PS256
        | Algorithm::PS384
        | Algorithm::PS512 => EncodingKey::from_rsa_pem(pem),
        Algorithm::ES256 | Algorithm::ES384 => EncodingKey::from_ec_pem(pem),
        Algorithm::EdDSA => EncodingKey::from_ed_pem(pem),
        _ => return Err(format!("{alg:?} is not a signing algorithm for private_key_jwt")),
    }
    .map_err(|e| format!("the private key: {e}"))?;
    let mut jti = [0u8; 16];
    getrandom::fill(&mut jti).map_err(|e| format!("no random jti: {e}"))?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let claims = serde_json::json!({
        "iss": client_id, "sub": client_id, "aud": endpoint.as_str(),
        "jti": hex::encode(jti), "iat": now, "exp": now + ASSERTION_LIFETIME,
    });
    let mut header = Header::new(alg);
    header.kid = kid.map(String::from);
    jsonwebtoken::encode(&header, &claims, &key).map_err(|e| format!("signing: {e}"))
}

/// The claims of a JWT's payload, unverified (the subject token was
/// verified by the policy before; the actor token is the gateway's own).
pub(super) fn claims(token: &str) -> Option<serde_json::Map<String, serde_json::Value>> {
    use base64::Engine;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The actor token's `sub` (or `client_id`), for logs and the journal.
pub(super) fn actor_name(actor: &str) -> Option<String> {
    let c = claims(actor)?;
    c.get("sub")
        .or_else(|| c.get("client_id"))
        .and_then(|v| v.as_str())
        .map(String::from)
}

/// Why the actor may not act for the subject (RFC 8693 §4.4): the subject
/// token's `may_act` names claims the actor token must carry, each equal.
/// `None` when it may (or the subject token says nothing). An actor token
/// that cannot be read is refused when `may_act` asks.
pub(super) fn may_act_refused(subject: &str, actor: &str) -> Option<String> {
    let may = claims(subject)?.get("may_act")?.clone();
    let Some(may) = may.as_object() else {
        return Some("the subject token's may_act is not an object".into());
    };
    let Some(actor) = claims(actor) else {
        return Some("may_act asks, and the actor token is not a JWT".into());
    };
    for (k, want) in may {
        if actor.get(k) != Some(want) {
            return Some(format!("the actor's {k} is not the one may_act names"));
        }
    }
    None
}

#[cfg(test)]
mod may_act_tests {
    use super::*;
    use base64::Engine;

    fn jwt(claims: serde_json::Value) -> String {
        let e = |v: &serde_json::Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        format!("{}.{}.sig", e(&serde_json::json!({"alg": "none"})), e(&claims))
    }

    #[test]
    fn an_actor_acts_only_where_may_act_lets_it() {
        let subject = jwt(serde_json::json!({"sub": "alice", "may_act": {"sub": "agent-7", "iss": "https://idp"}}));
        let good = jwt(serde_json::json!({"sub": "agent-7", "iss": "https://idp"}));
        let other = jwt(serde_json::json!({"sub": "agent-8", "iss": "https://idp"}));
        assert_eq!(may_act_refused(&subject, &good), None);
        assert!(may_act_refused(&subject, &other).unwrap().contains("sub"));
        assert!(may_act_refused(&subject, "opaque").unwrap().contains("not a JWT"));
        let free = jwt(serde_json::json!({"sub": "alice"}));
        assert_eq!(may_act_refused(&free, &other), None, "no may_act: the provider decides");
        assert_eq!(actor_name(&good).as_deref(), Some("agent-7"));
    }
}
