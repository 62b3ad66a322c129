//! Per-user upstream credentials: the caller's token never reaches the
//! upstream; the upstream gets the user's own credential for it, given once
//! with consent on a connect page.
//!
//! * [`policy`]: `upstreamCredential` (request and response chains): puts
//!   the caller's stored credential in the header the upstream reads
//!   (refreshed before expiry, one refresh at a time), or asks the caller
//!   to connect: MCP 2025-11-25 clients get `-32042` with a URL
//!   elicitation, 2026-07-28 clients an `input_required` result carrying
//!   one, other requests 403 with the connect URL. An upstream 401 evicts
//!   the credential and asks again.
//! * [`connect`]: `upstreamConnect`: the connect page. A link is single-use
//!   and short-lived; the person who opens it signs in at the identity
//!   provider and must be the caller who was asked (same subject); then
//!   the authorization code flow with PKCE runs at the upstream's server
//!   (or the person pastes an API key), bound to that browser by a cookie.
//! * [`connections`]: `upstreamConnections`: the user's connections listed
//!   and revoked, in an API and on a page.
//! * [`store`], [`vault`]: credentials sealed (XChaCha20-Poly1305, the
//!   owner as associated data) in memory or Redis; [`oauth`]: the OAuth
//!   parts; [`spec`]: the params.

pub mod ask;
pub mod connect;
pub mod connections;
pub mod metrics;
pub mod oauth;
mod page;
pub mod policy;
pub mod spec;
pub mod store;
pub mod vault;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::mcp::state::Sealer;
use spec::Spec;
use store::{Store, StoreError};
use vault::Vault;

/// A user: the identity provider's issuer and the subject there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// The issuer.
    pub iss: String,
    /// The subject.
    pub sub: String,
}

impl User {
    /// The store's key of the user: SHA-256 of issuer and subject (hex).
    pub fn key(&self) -> String {
        let mut h = Sha256::new();
        for part in [&self.iss, &self.sub] {
            h.update(part.len().to_le_bytes());
            h.update(part.as_bytes());
        }
        hex::encode(h.finalize())
    }

    /// The associated data of the user's credential for `upstream`.
    fn owner(&self, upstream: &str) -> Vec<u8> {
        format!("policy-kernel credential v1\0{}\0{}\0{upstream}", self.iss, self.sub).into_bytes()
    }
}

/// What kind of credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// An OAuth access token (maybe with a refresh token).
    Oauth,
    /// A pasted API key.
    ApiKey,
}

/// A stored credential (sealed at rest).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stored {
    /// Its kind.
    pub kind: Kind,
    /// The token or key.
    pub secret: String,
    /// The refresh token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh: Option<String>,
    /// When the token expires (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<u64>,
    /// The scope granted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// When the user connected (Unix ms).
    pub connected_ms: u64,
    /// When it was last refreshed (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refreshed_ms: Option<u64>,
}

impl std::fmt::Debug for Stored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stored")
            .field("kind", &self.kind)
            .field("expires_ms", &self.expires_ms)
            .field("connected_ms", &self.connected_ms)
            .finish_non_exhaustive()
    }
}

impl Stored {
    /// From a token endpoint's answer at `now` (Unix ms).
    pub fn from_tokens(t: oauth::Tokens, now: u64) -> Stored {
        Stored {
            kind: Kind::Oauth,
            secret: t.access_token,
            refresh: t.refresh_token,
            expires_ms: t.expires_in.map(|s| now.saturating_add(s.saturating_mul(1000))),
            scope: t.scope,
            connected_ms: now,
            refreshed_ms: None,
        }
    }

    /// Whether it is good beyond `margin_ms` after `now` (Unix ms): not
    /// due for a refresh.
    fn fresh(&self, now: u64, margin_ms: u64) -> bool {
        self.expires_ms.is_none_or(|e| e > now.saturating_add(margin_ms))
    }

    /// What the API shows: never the secret.
    pub fn summary(&self, upstream: &str) -> serde_json::Value {
        serde_json::json!({
            "upstream": upstream,
            "kind": self.kind,
            "connected_ms": self.connected_ms,
            "expires_ms": self.expires_ms,
            "refreshed_ms": self.refreshed_ms,
            "refreshable": self.refresh.is_some(),
            "scope": self.scope,
        })
    }
}

/// Why a credential could not be read or kept.
#[derive(Debug, thiserror::Error)]
pub enum CredError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A stored value did not open, or could not be sealed.
    #[error("credentials: {0}")]
    Vault(String),
    /// Shared storage without a durable key.
    #[error("credentials: a shared store (--redis-url) needs --credentials-key-file or POLICY_AGENT_CREDENTIALS_KEY")]
    NoKey,
    /// The upstream's authorization server failed.
    #[error("credentials: refreshing at the upstream's authorization server: {0}")]
    Provider(String),
}

/// How long the refresh lock is held at most (across agents, in Redis).
const REFRESH_LOCK: Duration = Duration::from_secs(10);

/// The credentials of one agent: the store, the key, the HTTP client.
pub struct Credentials {
    store: Store,
    vault: Vault,
    sealer: Sealer,
    http: reqwest::Client,
    refreshing: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// Credentials in `store`, sealed by `vault`; MCP 2026 states sealed by
    /// `sealer` (the approvals', shared through the same Redis).
    pub fn new(store: Store, vault: Vault, sealer: Sealer) -> Result<Arc<Credentials>, String> {
        let http = crate::auth::fetch::client(None)?;
        Ok(Arc::new(Credentials {
            store,
            vault,
            sealer,
            http,
            refreshing: Mutex::new(HashMap::new()),
        }))
    }

    /// The HTTP client for providers.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The sealer of the gateway's MCP `requestState`.
    pub fn sealer(&self) -> &Sealer {
        &self.sealer
    }

    /// The one-time records' store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    fn usable_key(&self) -> Result<(), CredError> {
        if self.store.shared() && !self.vault.durable {
            return Err(CredError::NoKey);
        }
        Ok(())
    }

    /// `user`'s credential for `upstream`, as stored.
    pub async fn load(&self, user: &User, upstream: &str) -> Result<Option<Stored>, CredError> {
        self.usable_key()?;
        let Some(sealed) = self.store.get(&user.key(), upstream).await? else {
            return Ok(None);
        };
        let plain = self
            .vault
            .open(&user.owner(upstream), &sealed)
            .map_err(|e| CredError::Vault(e.to_string()))?;
        serde_json::from_slice(&plain)
            .map(Some)
            .map_err(|e| CredError::Vault(format!("a stored credential: {e}")))
    }

    /// Keeps `st` as `user`'s credential for `upstream`, sealed.
    pub async fn save(&self, user: &User, upstream: &str, st: &Stored) -> Result<(), CredError> {
        self.usable_key()?;
        let plain = serde_json::to_vec(st).map_err(|e| CredError::Vault(e.to_string()))?;
        let sealed = self
            .vault
            .seal(&user.owner(upstream), &plain)
            .map_err(CredError::Vault)?;
        self.store.put(&user.key(), upstream, &sealed).await?;
        Ok(())
    }

    /// Forgets `user`'s credential for `upstream`: whether there was one.
    pub async fn forget(&self, user: &User, upstream: &str) -> Result<bool, CredError> {
        Ok(self.store.remove(&user.key(), upstream).await?)
    }

    /// `user`'s credentials, by upstream (a value that does not open is
    /// listed as such).
    pub async fn list(&self, user: &User) -> Result<Vec<serde_json::Value>, CredError> {
        self.usable_key()?;
        let mut out = Vec::new();
        for (upstream, sealed) in self.store.list(&user.key()).await? {
            match self
                .vault
                .open(&user.owner(&upstream), &sealed)
                .ok()
                .and_then(|p| serde_json::from_slice::<Stored>(&p).ok())
            {
                Some(st) => out.push(st.summary(&upstream)),
                None => out.push(serde_json::json!({"upstream": upstream, "unreadable": true})),
            }
        }
        Ok(out)
    }

    /// `user`'s credential for `spec`'s upstream, refreshed when it expires
    /// within the margin; `None` when there is none or it can no longer be
    /// used (then it is forgotten, and the user is asked again).
    pub async fn usable(&self, user: &User, spec: &Spec) -> Result<Option<Stored>, CredError> {
        let Some(st) = self.load(user, &spec.upstream).await? else {
            return Ok(None);
        };
        let now = crate::approvals::now_ms();
        if st.fresh(now, spec.refresh_margin_s.saturating_mul(1000)) {
            return Ok(Some(st));
        }
        if st.refresh.is_none() || spec.oauth.is_none() {
            if st.expires_ms.is_some_and(|e| e <= now) {
                self.forget(user, &spec.upstream).await?;
                metrics::count(&spec.upstream, "expired");
                return Ok(None);
            }
            return Ok(Some(st));
        }
        self.refresh(user, spec).await
    }

    async fn refresh(&self, user: &User, spec: &Spec) -> Result<Option<Stored>, CredError> {
        let name = format!("refresh:{}:{}", user.key(), spec.upstream);
        let lock = {
            let mut m = self.refreshing.lock().unwrap_or_else(|e| e.into_inner());
            m.retain(|_, w| w.strong_count() > 0);
            match m.get(&name).and_then(Weak::upgrade) {
                Some(l) => l,
                None => {
                    let l = Arc::new(tokio::sync::Mutex::new(()));
                    m.insert(name.clone(), Arc::downgrade(&l));
                    l
                }
            }
        };
        let _one = lock.lock().await;
        let now = crate::approvals::now_ms();
        let margin = spec.refresh_margin_s.saturating_mul(1000);
        // Refreshed by the call this one waited for (or another agent)?
        let current = match self.load(user, &spec.upstream).await? {
            None => return Ok(None),
            Some(c) if c.fresh(now, margin) => return Ok(Some(c)),
            Some(c) => c,
        };
        // Across agents sharing Redis, one refresh at a time.
        if self.store.shared() && !self.store.put_once(&name, "1", REFRESH_LOCK, true).await? {
            for _ in 0..50 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                match self.load(user, &spec.upstream).await? {
                    Some(c) if c.fresh(now, margin) => return Ok(Some(c)),
                    None => return Ok(None),
                    _ => {}
                }
            }
            return Ok(current.expires_ms.is_some_and(|e| e > now).then_some(current));
        }
        let out = self.refresh_at_provider(user, spec, current).await;
        if self.store.shared() {
            let _ = self.store.drop_once(&name).await;
        }
        out
    }

    async fn refresh_at_provider(
        &self,
        user: &User,
        spec: &Spec,
        current: Stored,
    ) -> Result<Option<Stored>, CredError> {
        let now = crate::approvals::now_ms();
        let (Some(client), Some(rt)) = (&spec.oauth, current.refresh.as_deref()) else {
            return Ok(Some(current));
        };
        let endpoint = match (&client.token_endpoint, &client.issuer) {
            (Some(t), _) => url::Url::parse(t).map_err(|e| CredError::Provider(e.to_string()))?,
            (None, Some(iss)) => oauth::discover(&self.http, iss, "token_endpoint")
                .await
                .map_err(|e| CredError::Provider(e.to_string()))?,
            (None, None) => return Err(CredError::Provider("no token endpoint".into())),
        };
        let secret = client.secret.read().map_err(CredError::Provider)?;
        let mut form = vec![("grant_type", "refresh_token"), ("refresh_token", rt)];
        if let Some(r) = &spec.resource {
            form.push(("resource", r));
        }
        match oauth::token(&self.http, &endpoint, &client.client_id, &secret, &form).await {
            Ok(t) => {
                let mut st = Stored::from_tokens(t, now);
                st.refresh = st.refresh.or(current.refresh.clone());
                st.scope = st.scope.or(current.scope.clone());
                st.connected_ms = current.connected_ms;
                st.refreshed_ms = Some(now);
                self.save(user, &spec.upstream, &st).await?;
                metrics::count(&spec.upstream, "refreshed");
                Ok(Some(st))
            }
            Err(oauth::OauthError::Refused(why)) => {
                // The grant is gone (revoked, expired, rotated away): ask again.
                tracing::info!(upstream = %spec.upstream, error = %why, "refresh refused: the user is asked to connect again");
                self.forget(user, &spec.upstream).await?;
                metrics::count(&spec.upstream, "refresh_refused");
                Ok(None)
            }
            Err(oauth::OauthError::Unavailable(why)) => {
                metrics::count(&spec.upstream, "refresh_failed");
                if current.expires_ms.is_some_and(|e| e > now) {
                    tracing::warn!(upstream = %spec.upstream, error = %why, "refresh failed: the token is used until it expires");
                    return Ok(Some(current));
                }
                Err(CredError::Provider(why))
            }
        }
    }
}
