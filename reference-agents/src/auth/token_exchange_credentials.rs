//! `tokenExchange`'s own credentials at the token endpoint: client
//! authentication (`client_secret_basic`, `client_secret_post`,
//! `private_key_jwt`) and where secrets, keys and actor tokens are read from.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use policy_agents::{ParamError, Params};
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

/// Where a secret (client secret, actor token) is read from.
pub(super) enum Source {
    Env(String),
    File(PathBuf),
}

impl Source {
    /// One of `env` / `file` params, exactly; `None` when neither is set.
    pub(super) fn parse(p: &Params, env: &str, file: &str) -> Result<Option<Source>, ParamError> {
        let get = |name| p.get(name).map(str::trim).filter(|s| !s.is_empty());
        match (get(env), get(file)) {
            (Some(_), Some(_)) => Err(ParamError::invalid(env, "", format!("give {env} or {file}, not both"))),
            (Some(e), None) => Ok(Some(Source::Env(e.to_string()))),
            (None, Some(f)) => Ok(Some(Source::File(PathBuf::from(f)))),
            (None, None) => Ok(None),
        }
    }

    /// The value, trimmed; why not (naming the variable or file, never a value).
    pub(super) fn read(&self) -> Result<String, String> {
        let value = match self {
            Source::Env(name) => std::env::var(name).map_err(|_| format!("environment variable {name} is not set"))?,
            Source::File(path) => {
                std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?
            }
        };
        let value = value.trim().to_string();
        if value.is_empty() {
            return Err("it is empty".into());
        }
        Ok(value)
    }
}
