//! `upstreamCredential`: the upstream gets the caller's own credential for
//! it, never the caller's token.
//!
//! After `jwtValidation` (the caller's `sub`, from the identity provider
//! named by `login_issuer`), on each request:
//! * the caller's stored credential for `upstream`, refreshed when it
//!   expires within `refresh_margin_s`, goes in `header` (`authorization`,
//!   `Bearer`, by default); the caller's `authorization` is removed;
//! * without one, a request that needs it is answered with a connect link
//!   ([`super::ask`]); one that does not (the MCP handshake, lists) goes on
//!   without any credential;
//! * the store unavailable: 503, the upstream not called.
//!
//! `upstreamCredentialOutcome`, in the response chain (no body: a streamed
//! reply is not held), reads only the status: an upstream 401 evicts the
//! credential the request used and is answered 403
//! `upstream_credential_rejected`; the next call asks the caller to connect
//! again.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::spec::{Spec, KEYS};
use super::{metrics, oauth, CredError, Credentials, User};
use crate::param_cache::ParamCache;
use crate::rules::Caller;
use policy_agents::{
    describe, Deny, Params, Policy, PolicyError, RequestContext, RequestOutcome, ResponseContext, ResponseOutcome,
};

/// The policy's name.
pub const NAME: &str = "upstreamCredential";
/// The metadata key naming the upstream whose credential a request carried.
const USED: &str = "credential.upstream";

/// A connect link, as kept until it is opened (once).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Link {
    /// Who was asked.
    pub user: User,
    /// The route's params (secrets named, not held).
    pub spec: Spec,
    /// The connect page's base URL.
    pub base: String,
    /// When it was made (Unix ms).
    pub created_ms: u64,
}

/// The policy.
pub struct UpstreamCredential {
    creds: Arc<Credentials>,
    params: ParamCache<Spec>,
}

impl std::fmt::Debug for UpstreamCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamCredential").finish_non_exhaustive()
    }
}

impl UpstreamCredential {
    /// The policy over `creds`.
    pub fn new(creds: Arc<Credentials>) -> Self {
        UpstreamCredential {
            creds,
            params: ParamCache::new(KEYS),
        }
    }
}

fn unavailable(e: &CredError) -> RequestOutcome {
    tracing::error!(policy = NAME, error = %e, "upstream credentials unavailable: refused");
    RequestOutcome::denied_with(
        Deny::json(
            503,
            &json!({"error": "the upstream credentials store is unavailable", "reason": "credentials_unavailable"}),
        )
        .header("retry-after", "1")
        .reason("credentials_unavailable"),
    )
}

/// Makes a single-use connect link for `user`: its id and URL.
pub async fn make_link(
    creds: &Credentials,
    user: &User,
    spec: &Spec,
    base: &str,
) -> Result<(String, String), CredError> {
    let id = oauth::random_token().map_err(CredError::Vault)?;
    let link = Link {
        user: user.clone(),
        spec: spec.clone(),
        base: base.to_string(),
        created_ms: crate::approvals::now_ms(),
    };
    let text = serde_json::to_string(&link).map_err(|e| CredError::Vault(e.to_string()))?;
    creds
        .store()
        .put_once(&format!("link:{id}"), &text, spec.link_ttl(), true)
        .await?;
    Ok((id.clone(), format!("{base}/{id}")))
}

impl Policy for UpstreamCredential {
    type Params = Params;
    describe! { name: NAME, params: KEYS, required: &["upstream", "login_issuer", "login_client_id"], body: true }

    async fn on_request(&self, params: &Params, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let spec = self
            .params
            .get(params, Spec::parse)
            .map_err(|e| PolicyError::new(format!("{NAME}: {e}")))?;
        let caller = Caller::from_metadata(ctx.metadata);
        let (true, Some(sub)) = (
            matches!(ctx.metadata.get("auth_method"), Some("jwt" | "introspection")),
            caller.sub.clone(),
        ) else {
            tracing::warn!(
                policy = NAME,
                "no caller validated by jwtValidation or tokenIntrospection before"
            );
            return Ok(RequestOutcome::denied_with(
                Deny::json(
                    401,
                    &json!({"error": "upstreamCredential needs a caller validated before it", "reason": "caller_not_validated"}),
                )
                .reason("caller_not_validated"),
            ));
        };
        let user = User {
            iss: spec.login.issuer.clone().unwrap_or_default(),
            sub,
        };
        let env = ctx.request.body().and_then(|b| crate::jsonrpc::parse(b).ok());
        let modern = match super::ask::modern(ctx, env.as_ref(), self.creds.sealer(), &caller) {
            Ok(m) => m,
            Err(d) => return Ok(RequestOutcome::denied_with(d)),
        };
        let stored = match self.creds.usable(&user, &spec).await {
            Ok(s) => s,
            Err(e) => return Ok(unavailable(&e)),
        };
        if let Some(st) = stored {
            metrics::count(&spec.upstream, "injected");
            let mut out = RequestOutcome::proceed()
                .set_metadata(USED, &spec.upstream)
                .remove_header("authorization")
                .set_header(&spec.header, spec.header_value(&st.secret));
            if let Some(body) = modern.and_then(|m| m.stripped) {
                out = out.set_body(body);
            }
            return Ok(out);
        }
        if !super::ask::needs_credential(env.as_ref()) {
            return Ok(RequestOutcome::proceed().remove_header("authorization"));
        }
        let base = super::ask::connect_base(spec.connect_url.as_deref(), &ctx.request);
        let (id, url) = match make_link(&self.creds, &user, &spec, &base).await {
            Ok(l) => l,
            Err(e) => return Ok(unavailable(&e)),
        };
        metrics::count(&spec.upstream, "asked");
        tracing::info!(policy = NAME, upstream = %spec.upstream, "no credential: the caller is asked to connect");
        let expires = crate::approvals::now_ms().saturating_add(spec.link_ttl_s.saturating_mul(1000));
        let offer = super::ask::Offer {
            link: &id,
            url: &url,
            expires_ms: expires,
            upstream: &spec.upstream,
        };
        Ok(RequestOutcome::denied_with(super::ask::ask(
            env.as_ref(),
            modern.as_ref(),
            offer,
        )))
    }
}

/// The response-chain policy's name.
pub const OUTCOME: &str = "upstreamCredentialOutcome";
const OUTCOME_KEYS: &[&str] = &["upstream", "login_issuer"];

/// `upstreamCredentialOutcome`: an upstream 401 evicts the credential.
pub struct UpstreamCredentialOutcome {
    creds: Arc<Credentials>,
}

impl std::fmt::Debug for UpstreamCredentialOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamCredentialOutcome").finish_non_exhaustive()
    }
}

impl UpstreamCredentialOutcome {
    /// The policy over `creds`.
    pub fn new(creds: Arc<Credentials>) -> Self {
        UpstreamCredentialOutcome { creds }
    }
}

impl Policy for UpstreamCredentialOutcome {
    type Params = Params;
    describe! { name: OUTCOME, params: OUTCOME_KEYS, required: OUTCOME_KEYS, phases: Response }

    async fn on_response(&self, params: &Params, ctx: &ResponseContext<'_>) -> Result<ResponseOutcome, PolicyError> {
        if ctx.response.status() != 401 {
            return Ok(ResponseOutcome::proceed());
        }
        let (Some(upstream), Some(iss)) = (params.get("upstream"), params.get("login_issuer")) else {
            return Err(PolicyError::new(format!(
                "{OUTCOME}: upstream and login_issuer are required"
            )));
        };
        let iss = iss.trim().trim_end_matches('/');
        let (Some(used), Some(sub)) = (ctx.metadata.get(USED), ctx.metadata.get("sub")) else {
            return Ok(ResponseOutcome::proceed());
        };
        if used != upstream.trim() {
            return Ok(ResponseOutcome::proceed());
        }
        let upstream = upstream.trim();
        let user = User {
            iss: iss.to_string(),
            sub: sub.to_string(),
        };
        if let Err(e) = self.creds.forget(&user, upstream).await {
            tracing::error!(policy = OUTCOME, error = %e, "could not evict a credential the upstream refused");
        }
        metrics::count(upstream, "evicted");
        tracing::info!(
            policy = OUTCOME,
            upstream,
            "the upstream answered 401: the stored credential was evicted"
        );
        Ok(ResponseOutcome::deny_json(
            403,
            &json!({
                "error": format!("{upstream} refused the stored credential; it was removed: call again to connect your account"),
                "reason": "upstream_credential_rejected",
                "upstream": upstream,
            }),
        ))
    }
}
