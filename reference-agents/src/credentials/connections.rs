//! `upstreamConnections`: a user's connections, listed and revoked, behind
//! the route's auth policy (`jwtValidation` of the same identity provider:
//! `login_issuer`).
//!
//! | request | answer |
//! |---|---|
//! | `GET {base}/page` | the page (anyone: it holds no data; it asks for the user's token) |
//! | `GET {base}` | `{"connections": [{upstream, kind, connected_ms, expires_ms, refreshed_ms, refreshable, scope}]}`: never a token |
//! | `DELETE {base}/{upstream}` | forgets that connection: 200 `{"revoked": upstream}`, 404 when there is none |
//!
//! Errors are JSON `{"error", "reason"}`: 401 without a validated caller,
//! 503 when the store is unavailable.

use std::sync::Arc;

use serde_json::json;

use super::{metrics, page, Credentials, User};
use policy_agents::{describe, Deny, Params, Policy, PolicyError, RequestContext, RequestOutcome};

const NAME: &str = "upstreamConnections";
const KEYS: &[&str] = &["login_issuer", "base_path"];

/// The policy.
#[derive(Debug)]
pub struct UpstreamConnections {
    creds: Arc<Credentials>,
}

impl UpstreamConnections {
    /// The API over `creds`.
    pub fn new(creds: Arc<Credentials>) -> Self {
        UpstreamConnections { creds }
    }
}

fn json_answer(status: u16, body: serde_json::Value) -> Result<RequestOutcome, PolicyError> {
    Ok(RequestOutcome::denied_with(
        Deny::json(status, &body)
            .header("cache-control", "no-store")
            .reason(if status < 300 {
                "upstream_connections_api"
            } else {
                "upstream_connections_error"
            }),
    ))
}

impl Policy for UpstreamConnections {
    type Params = Params;
    describe! { name: NAME, params: KEYS, required: &["login_issuer"] }

    async fn on_request(&self, params: &Params, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let base = crate::pages::base_path(params, "/connections", NAME)?;
        let base = base.as_str();
        let iss = params
            .get("login_issuer")
            .map(|s| s.trim().trim_end_matches('/').to_string())
            .unwrap_or_default();
        let full = ctx.request.path();
        let path = full.split_once('?').map_or(full, |(p, _)| p);
        let Some(rest) = path.strip_prefix(base).map(|r| r.trim_start_matches('/')) else {
            return json_answer(404, json!({"error": "not a connections path", "reason": "not_found"}));
        };
        let method = ctx.request.method();
        if rest == "page" {
            return Ok(RequestOutcome::denied_with(page::connections()));
        }
        let sub = ctx
            .metadata
            .get("sub")
            .filter(|_| matches!(ctx.metadata.get("auth_method"), Some("jwt" | "introspection")));
        let Some(sub) = sub else {
            return json_answer(
                401,
                json!({"error": "no validated caller", "reason": "unauthenticated"}),
            );
        };
        let user = User {
            iss,
            sub: sub.to_string(),
        };
        let unavailable = |e: &dyn std::fmt::Display| {
            tracing::error!(policy = NAME, error = %e, "the credentials store is unavailable");
            json_answer(
                503,
                json!({"error": "the credentials store is unavailable", "reason": "credentials_unavailable"}),
            )
        };
        match (method, rest) {
            ("GET", "") => match self.creds.list(&user).await {
                Ok(list) => json_answer(200, json!({"connections": list})),
                Err(e) => unavailable(&e),
            },
            ("DELETE", upstream) if !upstream.is_empty() && !upstream.contains('/') => {
                let upstream = percent_encoding::percent_decode_str(upstream)
                    .decode_utf8_lossy()
                    .to_string();
                match self.creds.forget(&user, &upstream).await {
                    Ok(true) => {
                        metrics::count(&upstream, "revoked");
                        tracing::info!(policy = NAME, upstream = %upstream, "a connection was revoked by its user");
                        json_answer(200, json!({"revoked": upstream}))
                    }
                    Ok(false) => json_answer(
                        404,
                        json!({"error": format!("no connection to {upstream}"), "reason": "not_connected"}),
                    ),
                    Err(e) => unavailable(&e),
                }
            }
            _ => json_answer(
                405,
                json!({"error": "not a connections API request", "reason": "method_not_allowed"}),
            ),
        }
    }
}
