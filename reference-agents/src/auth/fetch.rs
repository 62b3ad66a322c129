//! The HTTP side of the identity policies (`jwtValidation`'s remote keys,
//! `tokenIntrospection`): endpoint checks, one client per CA file, bounded
//! reads and `Cache-Control`.
//!
//! Endpoints must be `https://`. Plain `http://` is accepted only for a
//! loopback host (`127.0.0.0/8`, `::1`, `localhost`): a provider on the same
//! machine, as in the end-to-end tests; nothing else travels in clear text.
//! Redirects are not followed (a redirect could leave the checked scheme and
//! host), proxies are not read from the environment.

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use policy_agents::ParamError;
use reqwest::header::{HeaderMap, CACHE_CONTROL};
use url::{Host, Url};

/// Largest discovery document, JWK set or introspection answer read.
pub(crate) const MAX_BODY: usize = 1 << 20;
/// How long one HTTP exchange with the provider may take at most, whatever
/// the request's deadline (a fetch started for one request outlives it and
/// serves the next ones).
pub(crate) const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Why talking to the identity provider failed (logged, never shown to clients).
#[derive(Debug, Clone, thiserror::Error)]
pub enum FetchError {
    /// Connecting, TLS, or the exchange failed or timed out.
    #[error("{url}: {reason}")]
    Transport {
        /// The URL asked.
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// The provider answered with another status than 200.
    #[error("{url}: HTTP {status}")]
    Status {
        /// The URL asked.
        url: String,
        /// The status.
        status: u16,
    },
    /// The answer is not what was asked for.
    #[error("{url}: {reason}")]
    Invalid {
        /// The URL asked.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
}

fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(Host::Ipv4(ip)) => IpAddr::V4(ip).is_loopback(),
        Some(Host::Ipv6(ip)) => IpAddr::V6(ip).is_loopback(),
        None => false,
    }
}

/// Checks an endpoint URL: `https`, or `http` to a loopback host; no
/// credentials in it. `what` names it in errors.
pub(crate) fn check_url(what: &str, raw: &str) -> Result<Url, String> {
    let url = Url::parse(raw.trim()).map_err(|e| format!("{what} {raw:?} is not a URL: {e}"))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!("{what} must not carry credentials"));
    }
    match url.scheme() {
        "https" => Ok(url),
        "http" if is_loopback(&url) => Ok(url),
        "http" => Err(format!(
            "{what} {raw:?} must be https (plain http only to a loopback host)"
        )),
        other => Err(format!("{what} {raw:?}: scheme {other} is not https")),
    }
}

/// A param holding an endpoint URL, checked by [`check_url`].
pub(crate) fn url_param(name: &str, raw: &str) -> Result<Url, ParamError> {
    check_url(name, raw).map_err(|why| ParamError::invalid(name, raw, &why))
}

fn read_ca(path: &Path) -> Result<Vec<reqwest::Certificate>, String> {
    let pem = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no PEM certificate in it", path.display()));
    }
    Ok(certs)
}

/// An HTTP client for provider endpoints; `ca_file` adds private CAs to the
/// system's and Mozilla's roots.
pub(crate) fn client(ca_file: Option<&Path>) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(5))
        .timeout(FETCH_TIMEOUT)
        .user_agent(concat!("policy-kernel-auth-agent/", env!("CARGO_PKG_VERSION")));
    if let Some(path) = ca_file {
        for cert in read_ca(path)? {
            builder = builder.add_root_certificate(cert);
        }
    }
    builder.build().map_err(|e| e.to_string())
}

/// Reads an answer's body, at most [`MAX_BODY`] bytes, after checking its status.
pub(crate) async fn body(url: &Url, resp: reqwest::Response) -> Result<(HeaderMap, Vec<u8>), FetchError> {
    let status = resp.status().as_u16();
    if status != 200 {
        return Err(FetchError::Status {
            url: url.to_string(),
            status,
        });
    }
    any_body(url, resp).await
}

/// Reads an answer's body, at most [`MAX_BODY`] bytes, whatever its status.
pub(crate) async fn any_body(url: &Url, resp: reqwest::Response) -> Result<(HeaderMap, Vec<u8>), FetchError> {
    let transport = |e: reqwest::Error| FetchError::Transport {
        url: url.to_string(),
        reason: e.to_string(),
    };
    let headers = resp.headers().clone();
    let mut resp = resp;
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(transport)? {
        if out.len() + chunk.len() > MAX_BODY {
            return Err(FetchError::Invalid {
                url: url.to_string(),
                reason: format!("answer larger than {MAX_BODY} bytes"),
            });
        }
        out.extend_from_slice(&chunk);
    }
    Ok((headers, out))
}

/// GETs `url` and returns its JSON body and the headers.
pub(crate) async fn get_json(
    client: &reqwest::Client,
    url: &Url,
) -> Result<(HeaderMap, serde_json::Value), FetchError> {
    let resp = client
        .get(url.clone())
        .header("accept", "application/json")
        .send()
        .await
        .map_err(|e| FetchError::Transport {
            url: url.to_string(),
            reason: error_chain(&e),
        })?;
    let (headers, bytes) = body(url, resp).await?;
    let value = serde_json::from_slice(&bytes).map_err(|e| FetchError::Invalid {
        url: url.to_string(),
        reason: format!("not JSON: {e}"),
    })?;
    Ok((headers, value))
}

/// An error with its sources (reqwest's top-level message hides the cause).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// The lifetime `Cache-Control` gives an answer: `max-age` (`s-maxage` is
/// for shared caches, not us), zero for `no-store` / `no-cache`, `None`
/// without a usable directive.
pub(crate) fn max_age(headers: &HeaderMap) -> Option<Duration> {
    let mut age = None;
    for value in headers.get_all(CACHE_CONTROL) {
        let Ok(text) = value.to_str() else {
            continue;
        };
        for directive in text.split(',').map(str::trim) {
            let lower = directive.to_ascii_lowercase();
            if lower == "no-store" || lower == "no-cache" {
                return Some(Duration::ZERO);
            }
            if let Some(v) = lower.strip_prefix("max-age=") {
                if let Ok(secs) = v.trim_matches('"').parse::<u64>() {
                    age = Some(Duration::from_secs(secs));
                }
            }
        }
    }
    age
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn only_https_or_loopback_http() {
        assert!(check_url("u", "https://idp.example.com/realms/x").is_ok());
        assert!(check_url("u", "http://127.0.0.1:8080/jwks").is_ok());
        assert!(check_url("u", "http://[::1]:8080/jwks").is_ok());
        assert!(check_url("u", "http://localhost/jwks").is_ok());
        for bad in [
            "http://idp.example.com/jwks",
            "http://10.0.0.1/jwks",
            "ftp://idp.example.com/",
            "https://user:pw@idp.example.com/",
            "not a url",
        ] {
            assert!(check_url("u", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cache_control_max_age() {
        let mut h = HeaderMap::new();
        assert_eq!(max_age(&h), None);
        h.insert(
            CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=600, must-revalidate"),
        );
        assert_eq!(max_age(&h), Some(Duration::from_secs(600)));
        h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        assert_eq!(max_age(&h), Some(Duration::ZERO));
        h.insert(CACHE_CONTROL, HeaderValue::from_static("max-age=oops"));
        assert_eq!(max_age(&h), None);
    }

    #[test]
    fn ca_file_must_hold_a_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        assert!(client(Some(&empty)).unwrap_err().contains("no PEM certificate"));
        assert!(client(Some(Path::new("/nonexistent/ca.pem"))).is_err());
        assert!(client(None).is_ok());
    }
}
