//! The parameters of `jwtValidation`, checked: one key source for
//! asymmetric tokens (`jwks_uri`, `oidc_discovery` from `issuer`, or
//! `jwks_file`) and/or `hs256_secret_env`; bounds for remote keys; the
//! resource metadata URL its challenges name.

use std::path::PathBuf;
use std::time::Duration;

use jsonwebtoken::Algorithm;
use policy_agents::{FromParams, ParamError, Params};

use super::fetch;
use super::remote_keys::{RemoteConfig, Source};

/// Longest lifetime or stale bound a param may set (a week).
const MAX_SECS: u64 = 7 * 24 * 3600;

/// Parameters of `jwtValidation`.
#[derive(Debug, Clone)]
pub struct JwtParams {
    pub(crate) issuer: Option<String>,
    pub(crate) audience: Vec<String>,
    pub(crate) jwks_file: Option<PathBuf>,
    pub(crate) hs256_secret_env: Option<String>,
    pub(crate) leeway_s: u64,
    pub(crate) forward_claims: Vec<String>,
    /// Where remote keys come from, and how they are kept.
    pub(crate) remote: Option<RemoteConfig>,
    /// Algorithms accepted (param `algorithms`); `None`: every supported one.
    pub(crate) algorithms: Option<Vec<Algorithm>>,
    /// Named in `WWW-Authenticate` (RFC 9728 `resource_metadata`).
    pub(crate) resource_metadata: Option<String>,
}

/// The param names of `jwtValidation`.
pub(crate) const PARAMS: &[&str] = &[
    "issuer",
    "audience",
    "jwks_file",
    "hs256_secret_env",
    "leeway_s",
    "forward_claims",
    "jwks_uri",
    "oidc_discovery",
    "ca_file",
    "jwks_cache_min_s",
    "jwks_cache_max_s",
    "jwks_stale_s",
    "jwks_refresh_interval_s",
    "jwks_refresh_min_ms",
    "algorithms",
    "resource_metadata",
];

fn text(p: &Params, name: &str) -> Option<String> {
    p.get(name).map(str::trim).filter(|s| !s.is_empty()).map(String::from)
}

/// The `algorithms` param: names of supported asymmetric algorithms or HS256.
fn algorithms(p: &Params) -> Result<Option<Vec<Algorithm>>, ParamError> {
    let names = p.list("algorithms")?;
    if names.is_empty() {
        return Ok(None);
    }
    let mut out = Vec::new();
    for name in &names {
        let alg: Algorithm = name
            .parse()
            .map_err(|_| ParamError::invalid("algorithms", name, "not a JWS algorithm"))?;
        if super::jwks::Family::of(alg).is_none() {
            return Err(ParamError::invalid(
                "algorithms",
                name,
                "not supported (RS256/384/512, PS256/384/512, ES256, ES384, EdDSA, HS256)",
            ));
        }
        out.push(alg);
    }
    Ok(Some(out))
}

/// A URL clients are sent to: absolute http(s), nothing a header could not carry.
pub(crate) fn public_url(name: &str, p: &Params) -> Result<Option<String>, ParamError> {
    let Some(raw) = text(p, name) else {
        return Ok(None);
    };
    let url = url::Url::parse(&raw).map_err(|e| ParamError::invalid(name, &raw, e.to_string()))?;
    if !matches!(url.scheme(), "https" | "http") || url.host().is_none() {
        return Err(ParamError::invalid(name, &raw, "not an absolute http(s) URL"));
    }
    // Url percent-encodes quotes and controls, so the text fits a quoted-string.
    Ok(Some(url.to_string()))
}

fn secs(p: &Params, name: &str, default: u64, min: u64) -> Result<Duration, ParamError> {
    let v: u64 = p.parse_or(name, default)?;
    if v < min || v > MAX_SECS {
        return Err(ParamError::invalid(
            name,
            &v.to_string(),
            format!("must be between {min} and {MAX_SECS}"),
        ));
    }
    Ok(Duration::from_secs(v))
}

fn remote(p: &Params, issuer: Option<&String>) -> Result<Option<RemoteConfig>, ParamError> {
    let discovery = p.bool_or("oidc_discovery", false)?;
    let source = match (text(p, "jwks_uri"), discovery) {
        (Some(_), true) => {
            return Err(ParamError::invalid(
                "oidc_discovery",
                "true",
                "give either jwks_uri or oidc_discovery, not both",
            ))
        }
        (Some(raw), false) => Source::JwksUri(fetch::url_param("jwks_uri", &raw)?),
        (None, true) => {
            let Some(issuer) = issuer else {
                return Err(ParamError::Missing("issuer (oidc_discovery needs it)".into()));
            };
            fetch::url_param("issuer", issuer)?;
            Source::Discovery(issuer.clone())
        }
        (None, false) => return Ok(None),
    };
    let cache_min = secs(p, "jwks_cache_min_s", 60, 1)?;
    let cache_max = secs(p, "jwks_cache_max_s", 86400, 1)?;
    if cache_min > cache_max {
        return Err(ParamError::invalid(
            "jwks_cache_min_s",
            &cache_min.as_secs().to_string(),
            "is above jwks_cache_max_s",
        ));
    }
    let refresh_interval = secs(p, "jwks_refresh_interval_s", 10, 1)?;
    let min_ms: u64 = p.parse_or("jwks_refresh_min_ms", 1000)?;
    let refresh_min = Duration::from_millis(min_ms);
    if !(100..=60_000).contains(&min_ms) || refresh_min > refresh_interval {
        return Err(ParamError::invalid(
            "jwks_refresh_min_ms",
            &min_ms.to_string(),
            "must be between 100 and 60000, and at most jwks_refresh_interval_s",
        ));
    }
    Ok(Some(RemoteConfig {
        source,
        ca_file: text(p, "ca_file").map(PathBuf::from),
        cache_min,
        cache_max,
        stale_for: secs(p, "jwks_stale_s", 3600, 0)?,
        refresh_interval,
        refresh_min,
    }))
}

impl FromParams for JwtParams {
    fn from_params(p: &Params) -> Result<Self, ParamError> {
        let issuer = text(p, "issuer");
        let remote = remote(p, issuer.as_ref())?;
        let jwks_file = text(p, "jwks_file").map(PathBuf::from);
        if remote.is_some() && jwks_file.is_some() {
            return Err(ParamError::invalid(
                "jwks_file",
                jwks_file
                    .as_ref()
                    .map(|f| f.display().to_string())
                    .as_deref()
                    .unwrap_or(""),
                "give one key source: jwks_file, jwks_uri or oidc_discovery",
            ));
        }
        if p.get("ca_file").is_some() && remote.is_none() {
            return Err(ParamError::invalid(
                "ca_file",
                p.get("ca_file").unwrap_or(""),
                "only with jwks_uri or oidc_discovery",
            ));
        }
        let params = JwtParams {
            issuer,
            audience: p.list("audience")?,
            jwks_file,
            hs256_secret_env: text(p, "hs256_secret_env"),
            leeway_s: p.parse_or("leeway_s", 30)?,
            forward_claims: p.list("forward_claims")?,
            remote,
            algorithms: algorithms(p)?,
            resource_metadata: public_url("resource_metadata", p)?,
        };
        if params.jwks_file.is_none() && params.hs256_secret_env.is_none() && params.remote.is_none() {
            return Err(ParamError::Missing(
                "a key source: jwks_uri, oidc_discovery (with issuer), jwks_file or hs256_secret_env".into(),
            ));
        }
        Ok(params)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(pairs: &[(&str, &str)]) -> Result<JwtParams, ParamError> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        JwtParams::from_params(&Params::new(map))
    }

    #[test]
    fn remote_sources_and_their_bounds() {
        let p = parse(&[
            ("oidc_discovery", "true"),
            ("issuer", "https://idp.example.com/realms/a"),
        ])
        .unwrap();
        let r = p.remote.unwrap();
        assert_eq!(r.source, Source::Discovery("https://idp.example.com/realms/a".into()));
        assert_eq!((r.cache_min.as_secs(), r.cache_max.as_secs()), (60, 86400));
        assert_eq!((r.stale_for.as_secs(), r.refresh_interval.as_secs()), (3600, 10));
        assert_eq!(r.refresh_min, Duration::from_secs(1));
        let p = parse(&[("jwks_uri", "http://127.0.0.1:9/jwks"), ("jwks_stale_s", "0")]).unwrap();
        assert!(matches!(p.remote.unwrap().source, Source::JwksUri(_)));
        for bad in [
            vec![("oidc_discovery", "true")],
            vec![("jwks_uri", "http://idp.example.com/jwks")],
            vec![
                ("jwks_uri", "https://a/jwks"),
                ("oidc_discovery", "true"),
                ("issuer", "https://a"),
            ],
            vec![("jwks_uri", "https://a/jwks"), ("jwks_file", "/x.json")],
            vec![
                ("jwks_uri", "https://a/jwks"),
                ("jwks_cache_min_s", "100"),
                ("jwks_cache_max_s", "10"),
            ],
            vec![("jwks_uri", "https://a/jwks"), ("jwks_refresh_interval_s", "0")],
            vec![("jwks_uri", "https://a/jwks"), ("jwks_refresh_min_ms", "50")],
            vec![
                ("jwks_uri", "https://a/jwks"),
                ("jwks_refresh_interval_s", "2"),
                ("jwks_refresh_min_ms", "3000"),
            ],
            vec![("jwks_file", "/x.json"), ("ca_file", "/ca.pem")],
            vec![("jwks_file", "/x.json"), ("algorithms", "[\"none\"]")],
            vec![("jwks_file", "/x.json"), ("algorithms", "[\"HS512\"]")],
            vec![("jwks_file", "/x.json"), ("resource_metadata", "/relative")],
            vec![],
        ] {
            assert!(parse(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn algorithms_and_resource_metadata() {
        let p = parse(&[
            ("jwks_file", "/x.json"),
            ("algorithms", "[\"RS256\",\"EdDSA\"]"),
            (
                "resource_metadata",
                "https://api.example.com/.well-known/oauth-protected-resource/mcp",
            ),
        ])
        .unwrap();
        assert_eq!(p.algorithms, Some(vec![Algorithm::RS256, Algorithm::EdDSA]));
        assert_eq!(
            p.resource_metadata.as_deref(),
            Some("https://api.example.com/.well-known/oauth-protected-resource/mcp")
        );
    }
}
