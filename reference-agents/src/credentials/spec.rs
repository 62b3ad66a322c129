//! The params of `upstreamCredential`, checked once per distinct set. They
//! travel with each connect link (the connect page needs the same
//! providers), so they name secrets (an environment variable or a file)
//! and never hold one.

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::secret::Secret;
use policy_agents::{ParamError, Params};

/// The params `upstreamCredential` reads.
pub const KEYS: &[&str] = &[
    "upstream",
    "source",
    "header",
    "scheme",
    "login_issuer",
    "login_client_id",
    "login_client_secret_env",
    "login_client_secret_file",
    "issuer",
    "authorization_endpoint",
    "token_endpoint",
    "client_id",
    "client_secret_env",
    "client_secret_file",
    "scope",
    "resource",
    "connect_url",
    "link_ttl_s",
    "refresh_margin_s",
];

/// Where the user's credential comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// OAuth authorization code with PKCE at the upstream's own server.
    Oauth,
    /// An API key the user pastes on the connect page.
    ApiKey,
}

/// An OAuth client at a provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Client {
    /// The provider's issuer (its endpoints found by discovery).
    pub issuer: Option<String>,
    /// The authorization endpoint, when given.
    pub authorization_endpoint: Option<String>,
    /// The token endpoint, when given.
    pub token_endpoint: Option<String>,
    /// The gateway's client id there.
    pub client_id: String,
    /// Its secret (`client_secret_basic`).
    pub secret: Secret,
}

/// Parsed params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    /// The upstream's name: the key of its credentials.
    pub upstream: String,
    /// Where credentials come from.
    pub source: Source,
    /// The header the upstream reads (lowercase).
    pub header: String,
    /// The scheme before the credential (`Bearer`), or none.
    pub scheme: Option<String>,
    /// The identity provider the person opening a link signs in at (the
    /// issuer of the callers' tokens).
    pub login: Client,
    /// The upstream's authorization server (`source: oauth`).
    pub oauth: Option<Client>,
    /// The scope asked of it.
    pub scope: Option<String>,
    /// The resource asked of it (RFC 8707).
    pub resource: Option<String>,
    /// The connect page's base URL, when given.
    pub connect_url: Option<String>,
    /// How long a link may wait to be opened, s.
    pub link_ttl_s: u64,
    /// How long before expiry a token is refreshed, s.
    pub refresh_margin_s: u64,
}

fn required_secret(p: &Params, env: &str, file: &str) -> Result<Secret, ParamError> {
    Secret::parse(p, env, file)?.ok_or_else(|| ParamError::invalid(env, "", format!("{env} or {file} is required")))
}

fn url_param(name: &str, v: &str) -> Result<String, ParamError> {
    let u = url::Url::parse(v).map_err(|e| ParamError::invalid(name, v, format!("not a URL: {e}")))?;
    if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none() {
        return Err(ParamError::invalid(name, v, "not an http(s) URL with a host"));
    }
    Ok(v.trim_end_matches('/').to_string())
}

fn number(p: &Params, name: &str, default: u64, max: u64) -> Result<u64, ParamError> {
    match p.get(name).map(str::trim).filter(|s| !s.is_empty()) {
        None => Ok(default),
        Some(v) => match v.parse::<u64>() {
            Ok(n) if n >= 1 && n <= max => Ok(n),
            _ => Err(ParamError::invalid(
                name,
                v,
                format!("expected a whole number from 1 to {max}"),
            )),
        },
    }
}

impl Spec {
    /// The link TTL.
    pub fn link_ttl(&self) -> Duration {
        Duration::from_secs(self.link_ttl_s)
    }

    /// Reads the params.
    pub fn parse(p: &Params) -> Result<Spec, ParamError> {
        let get = |k: &str| p.get(k).map(str::trim).filter(|s| !s.is_empty());
        let upstream = get("upstream").ok_or_else(|| ParamError::invalid("upstream", "", "is required"))?;
        if upstream.len() > 64
            || !upstream
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        {
            return Err(ParamError::invalid(
                "upstream",
                upstream,
                "1 to 64 letters, digits, '.', '_' or '-'",
            ));
        }
        let source = match get("source") {
            None | Some("oauth") => Source::Oauth,
            Some("api_key") => Source::ApiKey,
            Some(o) => return Err(ParamError::invalid("source", o, "expected oauth or api_key")),
        };
        let header = get("header").unwrap_or("authorization").to_ascii_lowercase();
        if header.is_empty() || !header.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            return Err(ParamError::invalid("header", &header, "not a header name"));
        }
        let scheme = match get("scheme") {
            Some("none") => None,
            Some(s) if s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b)) => Some(s.to_string()),
            Some(s) => return Err(ParamError::invalid("scheme", s, "a token such as Bearer, or none")),
            None if header == "authorization" => Some("Bearer".to_string()),
            None => None,
        };
        let login_issuer = get("login_issuer").ok_or_else(|| {
            ParamError::invalid(
                "login_issuer",
                "",
                "is required: the identity provider the person opening a connect link signs in at",
            )
        })?;
        let login = Client {
            issuer: Some(url_param("login_issuer", login_issuer)?),
            authorization_endpoint: None,
            token_endpoint: None,
            client_id: get("login_client_id")
                .ok_or_else(|| ParamError::invalid("login_client_id", "", "is required"))?
                .to_string(),
            secret: required_secret(p, "login_client_secret_env", "login_client_secret_file")?,
        };
        let oauth = match source {
            Source::ApiKey => None,
            Source::Oauth => {
                let issuer = get("issuer").map(|v| url_param("issuer", v)).transpose()?;
                let authorization_endpoint = get("authorization_endpoint")
                    .map(|v| url_param("authorization_endpoint", v))
                    .transpose()?;
                let token_endpoint = get("token_endpoint")
                    .map(|v| url_param("token_endpoint", v))
                    .transpose()?;
                if issuer.is_none() && (authorization_endpoint.is_none() || token_endpoint.is_none()) {
                    return Err(ParamError::invalid(
                        "issuer",
                        "",
                        "source oauth needs issuer, or authorization_endpoint and token_endpoint",
                    ));
                }
                Some(Client {
                    issuer,
                    authorization_endpoint,
                    token_endpoint,
                    client_id: get("client_id")
                        .ok_or_else(|| ParamError::invalid("client_id", "", "is required for source oauth"))?
                        .to_string(),
                    secret: required_secret(p, "client_secret_env", "client_secret_file")?,
                })
            }
        };
        let connect_url = get("connect_url").map(|v| url_param("connect_url", v)).transpose()?;
        Ok(Spec {
            upstream: upstream.to_string(),
            source,
            header,
            scheme,
            login,
            oauth,
            scope: get("scope").map(String::from),
            resource: get("resource").map(String::from),
            connect_url,
            link_ttl_s: number(p, "link_ttl_s", 600, 86_400)?,
            refresh_margin_s: number(p, "refresh_margin_s", 60, 3_600)?,
        })
    }

    /// The header value for `credential`.
    pub fn header_value(&self, credential: &str) -> String {
        match &self.scheme {
            Some(s) => format!("{s} {credential}"),
            None => credential.to_string(),
        }
    }
}
