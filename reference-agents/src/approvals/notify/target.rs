//! A notification target of an `approve` rule (`approval.notify[]`), as
//! written, checked when the rule is read. Secrets and secret URLs are
//! named (an environment variable or a file), never written in the rule:
//! the rule's terms travel with each request through a shared store, and
//! the agent that delivers reads them when it sends.

use serde::{Deserialize, Serialize};

/// The body a target receives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// The event as JSON, signed.
    #[default]
    Webhook,
    /// A Slack message (`text` and Block Kit `blocks`), as incoming
    /// webhooks and `chat.postMessage` take it.
    Slack,
    /// A Microsoft Teams message carrying an Adaptive Card, as Teams
    /// workflows' webhooks take it.
    Teams,
}

impl Format {
    /// Its name in the config and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Webhook => "webhook",
            Format::Slack => "slack",
            Format::Teams => "teams",
        }
    }
}

/// The events a target hears when it names none.
pub const DEFAULT_EVENTS: [&str; 4] = ["requested", "decided", "expired", "consumed"];
const EVENTS: [&str; 5] = ["requested", "decided", "expired", "consumed", "revoked"];

/// One target.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// Where to POST (`http` or `https`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The environment variable holding the URL (a chat webhook's URL is
    /// itself a secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url_env: Option<String>,
    /// The body's format.
    #[serde(default)]
    pub format: Format,
    /// The environment variable holding the signing secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_env: Option<String>,
    /// The file holding the signing secret (surrounding whitespace ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_file: Option<String>,
    /// Which events: `requested`, `decided`, `expired`, `consumed`,
    /// `revoked` (default: the first four).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<String>>,
    /// The approvals page approvers reach (the link names the request);
    /// default `http://{the call's authority}/approvals/page`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<String>,
}

fn web_url(s: &str) -> Result<url::Url, String> {
    let u = url::Url::parse(s).map_err(|e| format!("not a URL ({e})"))?;
    if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none() {
        return Err("not an http(s) URL with a host".into());
    }
    Ok(u)
}

fn env(name: &str) -> Result<String, String> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
        _ => Err(format!("environment variable {name} is unset or empty")),
    }
}

impl Target {
    /// Checks what the rule says, and that its URL and secret can be read
    /// now (the agent's environment and files).
    pub fn validate(&self) -> Result<(), String> {
        match (&self.url, &self.url_env) {
            (Some(_), Some(_)) => return Err("give url or url_env, not both".into()),
            (None, None) => return Err("url (or url_env) is required".into()),
            _ => {}
        }
        let url = self.url().map_err(|e| format!("url: {e}"))?;
        web_url(&url).map_err(|e| format!("url: {e}"))?;
        if self.secret_env.is_some() && self.secret_file.is_some() {
            return Err("give secret_env or secret_file, not both".into());
        }
        match self.secret()? {
            None if self.format == Format::Webhook => {
                return Err("a webhook is signed: give secret_env or secret_file".into())
            }
            Some(s) if s.len() < 16 => return Err("the signing secret is shorter than 16 bytes".into()),
            _ => {}
        }
        if let Some(ev) = &self.events {
            if ev.is_empty() {
                return Err("events is empty: the target would hear nothing".into());
            }
            if let Some(bad) = ev.iter().find(|e| !EVENTS.contains(&e.as_str())) {
                return Err(format!("events: unknown event {bad:?} (one of {})", EVENTS.join(", ")));
            }
        }
        if let Some(p) = &self.page {
            web_url(p).map_err(|e| format!("page: {e}"))?;
        }
        Ok(())
    }

    /// Whether it hears `event` (`requested`, ...).
    pub fn hears(&self, event: &str) -> bool {
        match &self.events {
            Some(ev) => ev.iter().any(|e| e == event),
            None => DEFAULT_EVENTS.contains(&event),
        }
    }

    /// The URL to POST to, read now.
    pub fn url(&self) -> Result<String, String> {
        match (&self.url, &self.url_env) {
            (Some(u), _) => Ok(u.clone()),
            (None, Some(name)) => env(name),
            (None, None) => Err("no url".into()),
        }
    }

    /// The signing secret, read now; `None` when the target has none.
    pub fn secret(&self) -> Result<Option<String>, String> {
        if let Some(name) = &self.secret_env {
            return env(name).map(Some).map_err(|e| format!("secret_env: {e}"));
        }
        if let Some(path) = &self.secret_file {
            let s = std::fs::read_to_string(path).map_err(|e| format!("secret_file {path}: {e}"))?;
            let s = s.trim();
            if s.is_empty() {
                return Err(format!("secret_file {path} is empty"));
            }
            return Ok(Some(s.to_string()));
        }
        Ok(None)
    }

    /// The host it posts to, for logs (a chat webhook's path is a secret).
    pub fn host(&self) -> String {
        self.url()
            .ok()
            .and_then(|u| url::Url::parse(&u).ok())
            .and_then(|u| u.host_str().map(String::from))
            .unwrap_or_else(|| "-".into())
    }
}
