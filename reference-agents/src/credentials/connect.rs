//! `upstreamConnect`: the connect page, on a route of its own with no auth
//! policy (a browser opening a link carries no token; the page signs the
//! person in itself).
//!
//! | request | answer |
//! |---|---|
//! | `GET {base}/{link}` | the link is taken (single use); a sign-in at the identity provider (authorization code, PKCE, nonce) starts, bound to this browser by an `HttpOnly` cookie |
//! | `GET {base}/callback?code&state` | the sign-in's end: the ID token is checked and its subject must be the caller who was asked, else 403; then the upstream's authorization code flow (PKCE) starts, or the API key form is shown; at its end the credential is stored |
//! | `POST {base}/key` | the pasted API key (form: `state`, `api_key`), stored |
//!
//! Every step is a one-time record (`state`) that lives [`FLOW_TTL`],
//! taken when used, and checked against the browser's cookie, so a step
//! cannot be replayed or finished in another browser (CSRF, login CSRF).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::oauth::{self, OauthError};
use super::page;
use super::policy::Link;
use super::spec::Source;
use super::{metrics, Credentials, Kind, Stored};
use policy_agents::{describe, Deny, Params, Policy, PolicyError, RequestContext, RequestOutcome};

const NAME: &str = "upstreamConnect";
const KEYS: &[&str] = &["base_path"];
/// How long each step of the flow waits for the next.
pub const FLOW_TTL: Duration = Duration::from_secs(600);
const COOKIE: &str = "pk_connect";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Stage {
    Login,
    Upstream,
    Key,
}

/// A step of the flow in progress.
#[derive(Debug, Serialize, Deserialize)]
struct Flow {
    stage: Stage,
    link: Link,
    verifier: String,
    nonce: String,
    /// SHA-256 (hex) of the browser's cookie.
    browser: String,
}

/// The policy.
#[derive(Debug)]
pub struct UpstreamConnect {
    creds: std::sync::Arc<Credentials>,
}

impl UpstreamConnect {
    /// The connect page over `creds`.
    pub fn new(creds: std::sync::Arc<Credentials>) -> Self {
        UpstreamConnect { creds }
    }
}

fn hashed(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

fn cookie<'a>(ctx: &RequestContext<'a>) -> Option<&'a str> {
    ctx.request.header("cookie").and_then(|c| {
        c.split(';')
            .filter_map(|kv| kv.trim().split_once('='))
            .find(|(k, _)| *k == COOKIE)
            .map(|(_, v)| v.trim())
    })
}

fn answer(d: Deny) -> Result<RequestOutcome, PolicyError> {
    Ok(RequestOutcome::denied_with(d))
}

fn refused(upstream: &str, status: u16, title: &str, text: &str) -> Result<RequestOutcome, PolicyError> {
    metrics::count(upstream, "refused");
    answer(page::message(status, title, text, "upstream_connect_refused"))
}

fn redirect(to: &str) -> Deny {
    Deny::new(302, "")
        .header("location", to)
        .header("cache-control", "no-store")
        .header("referrer-policy", "no-referrer")
        .reason("upstream_connect_redirect")
}

fn provider_failed(upstream: &str, e: &OauthError) -> Result<RequestOutcome, PolicyError> {
    tracing::warn!(policy = NAME, upstream, error = %e, "connect flow: a provider failed or refused");
    match e {
        OauthError::Refused(_) => refused(
            upstream,
            403,
            "Not connected",
            "The provider refused the sign-in or the authorization. Call again from your client for a new link.",
        ),
        OauthError::Unavailable(_) => answer(page::message(
            502,
            "Not connected",
            "A provider could not be reached. Call again from your client for a new link.",
            "upstream_connect_provider_unavailable",
        )),
    }
}

fn store_failed(e: &dyn std::fmt::Display) -> Result<RequestOutcome, PolicyError> {
    tracing::error!(policy = NAME, error = %e, "connect flow: the credentials store failed");
    answer(page::message(
        503,
        "Try again",
        "The gateway could not keep this step. Call again from your client for a new link.",
        "credentials_unavailable",
    ))
}

impl UpstreamConnect {
    async fn keep(&self, flow: &Flow) -> Result<String, String> {
        let state = oauth::random_token()?;
        let text = serde_json::to_string(flow).map_err(|e| e.to_string())?;
        self.creds
            .store()
            .put_once(&format!("flow:{state}"), &text, FLOW_TTL, true)
            .await
            .map_err(|e| e.to_string())?;
        Ok(state)
    }

    /// `GET {base}/{link}`: the sign-in at the identity provider starts.
    async fn open(&self, id: &str) -> Result<RequestOutcome, PolicyError> {
        let taken = match self.creds.store().take_once(&format!("link:{id}")).await {
            Ok(t) => t,
            Err(e) => return store_failed(&e),
        };
        let Some(link) = taken.and_then(|t| serde_json::from_str::<Link>(&t).ok()) else {
            return refused(
                "-",
                410,
                "Link not valid",
                "This link is unknown, was already used, or has expired. Call again from your client for a new link.",
            );
        };
        let upstream = link.spec.upstream.clone();
        let login = link.spec.login.clone();
        let issuer = login.issuer.clone().unwrap_or_default();
        let endpoint = match oauth::discover(self.creds.http(), &issuer, "authorization_endpoint").await {
            Ok(e) => e,
            Err(e) => return provider_failed(&upstream, &e),
        };
        let (Ok(browser), Ok(verifier), Ok(nonce)) =
            (oauth::random_token(), oauth::random_token(), oauth::random_token())
        else {
            return store_failed(&"no randomness");
        };
        let redirect_uri = format!("{}/callback", link.base);
        let secure = link.base.starts_with("https:");
        let path = url::Url::parse(&link.base).map_or("/".to_string(), |u| u.path().to_string());
        let flow = Flow {
            stage: Stage::Login,
            link,
            verifier,
            nonce,
            browser: hashed(&browser),
        };
        let state = match self.keep(&flow).await {
            Ok(s) => s,
            Err(e) => return store_failed(&e),
        };
        let to = oauth::authorize_url(
            &endpoint,
            &login.client_id,
            &redirect_uri,
            "openid",
            &state,
            &flow.verifier,
            Some(&flow.nonce),
            None,
        );
        let cookie = format!(
            "{COOKIE}={browser}; Path={path}; Max-Age={}; HttpOnly; SameSite=Lax{}",
            FLOW_TTL.as_secs(),
            if secure { "; Secure" } else { "" }
        );
        answer(redirect(&to).header("set-cookie", cookie))
    }

    /// Takes flow `state` if this browser started it.
    async fn take(&self, ctx: &RequestContext<'_>, state: &str) -> Result<Result<Flow, RequestOutcome>, PolicyError> {
        let taken = match self.creds.store().take_once(&format!("flow:{state}")).await {
            Ok(t) => t,
            Err(e) => return store_failed(&e).map(Err),
        };
        let Some(flow) = taken.and_then(|t| serde_json::from_str::<Flow>(&t).ok()) else {
            return refused(
                "-",
                400,
                "Link not valid",
                "This step is unknown, was already used, or has expired. Call again from your client for a new link.",
            )
            .map(Err);
        };
        if cookie(ctx).map(hashed).as_deref() != Some(flow.browser.as_str()) {
            return refused(
                &flow.link.spec.upstream,
                403,
                "Not connected",
                "This sign-in did not start in this browser.",
            )
            .map(Err);
        }
        Ok(Ok(flow))
    }

    /// `GET {base}/callback`: the end of a sign-in or of an authorization.
    async fn callback(&self, ctx: &RequestContext<'_>, query: &str) -> Result<RequestOutcome, PolicyError> {
        let q: std::collections::HashMap<String, String> =
            url::form_urlencoded::parse(query.as_bytes()).into_owned().collect();
        let Some(state) = q.get("state") else {
            return refused("-", 400, "Not connected", "The answer carries no state.");
        };
        let flow = match self.take(ctx, state).await? {
            Ok(f) => f,
            Err(out) => return Ok(out),
        };
        let spec = flow.link.spec.clone();
        let upstream = spec.upstream.as_str();
        if q.contains_key("error") {
            return refused(
                upstream,
                403,
                "Not connected",
                "The sign-in or the authorization was declined.",
            );
        }
        let Some(code) = q.get("code") else {
            return refused(upstream, 400, "Not connected", "The answer carries no code.");
        };
        let redirect_uri = format!("{}/callback", flow.link.base);
        let http = self.creds.http();
        let client = match flow.stage {
            Stage::Login => &spec.login,
            Stage::Upstream => match &spec.oauth {
                Some(c) => c,
                None => return refused(upstream, 400, "Not connected", "This upstream takes an API key."),
            },
            Stage::Key => return refused(upstream, 400, "Not connected", "This step takes a form."),
        };
        let token_endpoint = match (&client.token_endpoint, &client.issuer) {
            (Some(t), _) => url::Url::parse(t).map_err(|e| OauthError::Unavailable(e.to_string())),
            (None, Some(iss)) => oauth::discover(http, iss, "token_endpoint").await,
            (None, None) => Err(OauthError::Unavailable("no token endpoint".into())),
        };
        let secret = match client.secret.read() {
            Ok(s) => s,
            Err(why) => {
                tracing::error!(
                    policy = NAME,
                    upstream,
                    "connect flow: the gateway's client secret: {why}"
                );
                return provider_failed(upstream, &OauthError::Unavailable(why));
            }
        };
        let form = [
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("redirect_uri", redirect_uri.as_str()),
            ("code_verifier", flow.verifier.as_str()),
        ];
        let tokens = match token_endpoint {
            Ok(ep) => oauth::token(http, &ep, &client.client_id, &secret, &form).await,
            Err(e) => Err(e),
        };
        let tokens = match tokens {
            Ok(t) => t,
            Err(e) => return provider_failed(upstream, &e),
        };
        match flow.stage {
            Stage::Login => self.signed_in(flow, tokens).await,
            _ => {
                let st = Stored::from_tokens(tokens, crate::approvals::now_ms());
                self.connected(&flow, st).await
            }
        }
    }

    /// The sign-in ended: the person must be the caller who was asked.
    async fn signed_in(&self, flow: Flow, tokens: oauth::Tokens) -> Result<RequestOutcome, PolicyError> {
        let spec = &flow.link.spec;
        let upstream = spec.upstream.as_str();
        let Some(id_token) = tokens.id_token.as_deref() else {
            return refused(
                upstream,
                403,
                "Not connected",
                "The identity provider returned no ID token.",
            );
        };
        let issuer = spec.login.issuer.clone().unwrap_or_default();
        let sub =
            match oauth::id_token_subject(self.creds.http(), &issuer, &spec.login.client_id, &flow.nonce, id_token)
                .await
            {
                Ok(s) => s,
                Err(e) => return provider_failed(upstream, &e),
            };
        if sub != flow.link.user.sub {
            tracing::warn!(
                policy = NAME,
                upstream,
                "a connect link was opened by another user: refused"
            );
            return refused(
                upstream,
                403,
                "Not your link",
                "You signed in as someone other than the person this link was made for. Nothing was connected.",
            );
        }
        let mut next = Flow {
            stage: Stage::Upstream,
            link: flow.link.clone(),
            verifier: String::new(),
            nonce: String::new(),
            browser: flow.browser,
        };
        match spec.source {
            Source::ApiKey => {
                next.stage = Stage::Key;
                let state = match self.keep(&next).await {
                    Ok(s) => s,
                    Err(e) => return store_failed(&e),
                };
                answer(page::key_form(&format!("{}/key", flow.link.base), &state, upstream))
            }
            Source::Oauth => {
                let Some(client) = &spec.oauth else {
                    return refused(upstream, 400, "Not connected", "No authorization server is configured.");
                };
                let endpoint = match (&client.authorization_endpoint, &client.issuer) {
                    (Some(a), _) => url::Url::parse(a).map_err(|e| OauthError::Unavailable(e.to_string())),
                    (None, Some(iss)) => oauth::discover(self.creds.http(), iss, "authorization_endpoint").await,
                    (None, None) => Err(OauthError::Unavailable("no authorization endpoint".into())),
                };
                let endpoint = match endpoint {
                    Ok(e) => e,
                    Err(e) => return provider_failed(upstream, &e),
                };
                next.verifier = match oauth::random_token() {
                    Ok(v) => v,
                    Err(e) => return store_failed(&e),
                };
                let state = match self.keep(&next).await {
                    Ok(s) => s,
                    Err(e) => return store_failed(&e),
                };
                let to = oauth::authorize_url(
                    &endpoint,
                    &client.client_id,
                    &format!("{}/callback", flow.link.base),
                    spec.scope.as_deref().unwrap_or(""),
                    &state,
                    &next.verifier,
                    None,
                    spec.resource.as_deref(),
                );
                answer(redirect(&to))
            }
        }
    }

    async fn connected(&self, flow: &Flow, st: Stored) -> Result<RequestOutcome, PolicyError> {
        let upstream = flow.link.spec.upstream.as_str();
        if let Err(e) = self.creds.save(&flow.link.user, upstream, &st).await {
            return store_failed(&e);
        }
        metrics::count(upstream, "connected");
        tracing::info!(policy = NAME, upstream, "an account was connected");
        answer(page::message(
            200,
            &format!("Connected to {upstream}"),
            &format!("Your {upstream} account is connected. Return to your client: its call can go on now."),
            "upstream_connected",
        ))
    }

    /// `POST {base}/key`: the pasted API key.
    async fn key(&self, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let body = ctx.request.body().unwrap_or_default();
        let form: std::collections::HashMap<String, String> = url::form_urlencoded::parse(body).into_owned().collect();
        let Some(state) = form.get("state") else {
            return refused("-", 400, "Not connected", "The form carries no state.");
        };
        let flow = match self.take(ctx, state).await? {
            Ok(f) => f,
            Err(out) => return Ok(out),
        };
        let upstream = flow.link.spec.upstream.clone();
        if flow.stage != Stage::Key {
            return refused(&upstream, 400, "Not connected", "This step does not take a key.");
        }
        let key = form.get("api_key").map(|k| k.trim()).unwrap_or_default();
        if key.is_empty() || key.len() > 4096 || key.bytes().any(|b| b.is_ascii_control()) {
            return refused(&upstream, 400, "Not connected", "That is not an API key.");
        }
        let now = crate::approvals::now_ms();
        let st = Stored {
            kind: Kind::ApiKey,
            secret: key.to_string(),
            refresh: None,
            expires_ms: None,
            scope: None,
            connected_ms: now,
            refreshed_ms: None,
        };
        self.connected(&flow, st).await
    }
}

/// The base path of param `base_path`.
fn base(p: &Params) -> Result<String, PolicyError> {
    crate::pages::base_path(p, "/connect", NAME)
}

impl Policy for UpstreamConnect {
    type Params = Params;
    describe! { name: NAME, params: KEYS, body: true }

    async fn on_request(&self, params: &Params, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let base = base(params)?;
        let full = ctx.request.path();
        let (path, query) = full.split_once('?').unwrap_or((full, ""));
        let Some(rest) = path.strip_prefix(base.as_str()).map(|r| r.trim_start_matches('/')) else {
            return answer(page::message(404, "Not found", "Not a connect page.", "not_found"));
        };
        match (ctx.request.method(), rest) {
            ("GET", "callback") => self.callback(ctx, query).await,
            ("POST", "key") => self.key(ctx).await,
            ("GET", id) if !id.is_empty() && !id.contains('/') && id.len() <= 128 => self.open(id).await,
            _ => answer(page::message(404, "Not found", "Not a connect page.", "not_found")),
        }
    }
}
