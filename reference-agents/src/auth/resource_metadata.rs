//! RFC 9728 (OAuth 2.0 Protected Resource Metadata): the
//! `oauthProtectedResource` policy that serves the metadata document, and
//! the `WWW-Authenticate: Bearer` challenges that point clients to it.
//!
//! `oauthProtectedResource` answers `GET` (and `HEAD`) of
//! `/.well-known/oauth-protected-resource` and of its path-suffixed form
//! (`/.well-known/oauth-protected-resource/mcp` for the resource
//! `https://gw.example.com/mcp`, RFC 9728 §3.1) at once with 200 and the
//! JSON document; another method on those paths gets 405; every other path
//! passes untouched, so the policy can head a route's chain before
//! `jwtValidation`, or sit alone on a route for the well-known prefix.
//!
//! Params: `resource` (required, the resource identifier clients use:
//! the gateway's URL), `authorization_servers` (required, issuer URLs),
//! `scopes_supported`, `bearer_methods_supported` (default `["header"]`),
//! `resource_name`, `resource_documentation`.

use serde_json::{json, Value};

use crate::param_cache::ParamCache;
use policy_agents::{describe, Deny, ParamError, Params, Policy, PolicyError, RequestContext, RequestOutcome};

const NAME: &str = "oauthProtectedResource";
const KEYS: &[&str] = &[
    "resource",
    "authorization_servers",
    "scopes_supported",
    "bearer_methods_supported",
    "resource_name",
    "resource_documentation",
];
/// The well-known path of RFC 9728.
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// A `WWW-Authenticate` value: `Bearer`, then `error`, `scope` and
/// `resource_metadata` when given (quotes and backslashes dropped: neither
/// may appear in a scope token or a serialized URL).
pub fn bearer_challenge(error: Option<&str>, scope: Option<&str>, resource_metadata: Option<&str>) -> String {
    let clean = |s: &str| {
        s.chars()
            .filter(|c| !matches!(c, '"' | '\\' | '\r' | '\n' | '\0'))
            .collect::<String>()
    };
    let mut parts = Vec::new();
    if let Some(e) = error {
        parts.push(format!("error=\"{}\"", clean(e)));
    }
    if let Some(s) = scope.filter(|s| !s.trim().is_empty()) {
        parts.push(format!("scope=\"{}\"", clean(s.trim())));
    }
    if let Some(rm) = resource_metadata {
        parts.push(format!("resource_metadata=\"{}\"", clean(rm)));
    }
    if parts.is_empty() {
        "Bearer".to_string()
    } else {
        format!("Bearer {}", parts.join(", "))
    }
}

/// The parsed params: the paths served and the document.
#[derive(Debug)]
struct Document {
    paths: [String; 2],
    body: Value,
}

fn url_list(p: &Params, name: &str) -> Result<Vec<String>, ParamError> {
    let items = p.list(name)?;
    for item in &items {
        let ok = url::Url::parse(item).is_ok_and(|u| matches!(u.scheme(), "https" | "http") && u.host().is_some());
        if !ok {
            return Err(ParamError::invalid(name, item, "not an absolute http(s) URL"));
        }
    }
    Ok(items)
}

impl Document {
    fn parse(p: &Params) -> Result<Self, ParamError> {
        let raw = p.required("resource")?.trim();
        let resource = url::Url::parse(raw).map_err(|e| ParamError::invalid("resource", raw, e.to_string()))?;
        if !matches!(resource.scheme(), "https" | "http") || resource.query().is_some() || resource.fragment().is_some()
        {
            return Err(ParamError::invalid(
                "resource",
                raw,
                "an http(s) URL without query or fragment (RFC 9728 §1.2)",
            ));
        }
        let servers = url_list(p, "authorization_servers")?;
        if servers.is_empty() {
            return Err(ParamError::Missing("authorization_servers".into()));
        }
        let mut body = json!({
            "resource": raw,
            "authorization_servers": servers,
        });
        let scopes = p.list("scopes_supported")?;
        if !scopes.is_empty() {
            body["scopes_supported"] = json!(scopes);
        }
        let methods = p.list("bearer_methods_supported")?;
        for m in &methods {
            if !matches!(m.as_str(), "header" | "body" | "query") {
                return Err(ParamError::invalid(
                    "bearer_methods_supported",
                    m,
                    "header, body or query",
                ));
            }
        }
        body["bearer_methods_supported"] = if methods.is_empty() {
            json!(["header"])
        } else {
            json!(methods)
        };
        if let Some(name) = p.get("resource_name").map(str::trim).filter(|s| !s.is_empty()) {
            body["resource_name"] = json!(name);
        }
        for u in url_list(p, "resource_documentation")? {
            body["resource_documentation"] = json!(u);
        }
        let suffix = resource.path().trim_end_matches('/');
        Ok(Document {
            paths: [WELL_KNOWN.to_string(), format!("{WELL_KNOWN}{suffix}")],
            body,
        })
    }
}

/// The `oauthProtectedResource` policy.
#[derive(Debug)]
pub struct OauthProtectedResource {
    cache: ParamCache<Document>,
}

impl Default for OauthProtectedResource {
    fn default() -> Self {
        OauthProtectedResource::new()
    }
}

impl OauthProtectedResource {
    /// A policy with an empty params cache.
    pub fn new() -> Self {
        OauthProtectedResource {
            cache: ParamCache::new(KEYS),
        }
    }
}

impl Policy for OauthProtectedResource {
    type Params = Params;
    describe! { name: NAME, params: KEYS }

    async fn on_request(&self, params: &Params, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let doc = self
            .cache
            .get(params, Document::parse)
            .map_err(|e| PolicyError::new(format!("{NAME}: {e}")))?;
        let path = ctx.request.path().split(['?', '#']).next().unwrap_or("");
        if !doc.paths.iter().any(|p| p == path) {
            return Ok(RequestOutcome::proceed());
        }
        let method = ctx.request.method();
        if !(method.eq_ignore_ascii_case("GET") || method.eq_ignore_ascii_case("HEAD")) {
            return Ok(RequestOutcome::denied_with(
                Deny::json(405, &json!({"error": "method_not_allowed"}))
                    .header("allow", "GET, HEAD")
                    .reason("method_not_allowed"),
            ));
        }
        Ok(RequestOutcome::denied_with(
            Deny::json(200, &doc.body)
                .header("cache-control", "public, max-age=300")
                .header("access-control-allow-origin", "*")
                .reason("protected_resource_metadata"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy_agents::testing::{TestCall, TestRequest};

    fn call() -> TestCall {
        TestCall::new().params(&[
            ("resource", "https://gw.example.com/mcp"),
            ("authorization_servers", r#"["https://idp.example.com/realms/a"]"#),
            ("scopes_supported", r#"["tools:read","tools:write"]"#),
        ])
    }

    #[tokio::test]
    async fn serves_the_document_on_both_well_known_paths_only() {
        let policy = OauthProtectedResource::new();
        for path in [WELL_KNOWN, "/.well-known/oauth-protected-resource/mcp?x=1"] {
            let out = call().request(&policy, &TestRequest::new("GET", path)).await.unwrap();
            let deny = out.denial().expect("an immediate answer");
            assert_eq!(deny.status, 200);
            let doc: Value = serde_json::from_slice(&deny.body).unwrap();
            assert_eq!(doc["resource"], "https://gw.example.com/mcp");
            assert_eq!(doc["authorization_servers"][0], "https://idp.example.com/realms/a");
            assert_eq!(doc["scopes_supported"], json!(["tools:read", "tools:write"]));
            assert_eq!(doc["bearer_methods_supported"], json!(["header"]));
        }
        for path in [
            "/mcp",
            "/.well-known/oauth-protected-resource/other",
            "/.well-known/openid-configuration",
        ] {
            let out = call().request(&policy, &TestRequest::new("GET", path)).await.unwrap();
            assert!(out.denial().is_none(), "{path}");
        }
        let out = call()
            .request(&policy, &TestRequest::new("POST", WELL_KNOWN))
            .await
            .unwrap();
        assert_eq!(out.denial().map(|d| d.status), Some(405));
    }

    #[tokio::test]
    async fn bad_params_are_errors() {
        let policy = OauthProtectedResource::new();
        let req = TestRequest::new("GET", WELL_KNOWN);
        for params in [
            vec![("authorization_servers", r#"["https://idp"]"#)],
            vec![("resource", "https://gw/mcp"), ("authorization_servers", "[]")],
            vec![
                ("resource", "https://gw/mcp"),
                ("authorization_servers", r#"["not a url"]"#),
            ],
            vec![
                ("resource", "https://gw/mcp?q=1"),
                ("authorization_servers", r#"["https://idp"]"#),
            ],
        ] {
            assert!(
                TestCall::new().params(&params).request(&policy, &req).await.is_err(),
                "{params:?}"
            );
        }
    }

    #[test]
    fn challenges() {
        assert_eq!(bearer_challenge(None, None, None), "Bearer");
        assert_eq!(
            bearer_challenge(
                Some("invalid_token"),
                None,
                Some("https://gw/.well-known/oauth-protected-resource/mcp")
            ),
            "Bearer error=\"invalid_token\", resource_metadata=\"https://gw/.well-known/oauth-protected-resource/mcp\""
        );
        assert_eq!(
            bearer_challenge(Some("insufficient_scope"), Some("tools:write \"x"), None),
            "Bearer error=\"insufficient_scope\", scope=\"tools:write x\""
        );
    }
}
