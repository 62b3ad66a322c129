//! The gateway's own `requestState` (MCP 2026-07-28).
//!
//! When the gateway answers a call with an `input_required` result of its
//! own (an approval to wait for), the client echoes the state on its
//! retry. The state is the client's to carry, so it is sealed: the text
//! `pk1.<payload>.<mac>`, both base64url, the MAC HMAC-SHA256 over the
//! payload under a key the agent keeps (shared through Redis by a fleet).
//! The payload binds the approval, the exact call (a digest of the caller,
//! method, target and arguments) and an expiry, and wraps the server's
//! own state and the answers to its questions, when the retry that was
//! held carried them, to give back on release (the state byte for byte). Any state that does not start with `pk1.` is the server's.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// What marks the gateway's own state.
pub const PREFIX: &str = "pk1.";
/// The `inputRequests` key of the gateway's own question.
pub const APPROVAL_KEY: &str = "io.policy-kernel/approval";
/// The `inputRequests` key of the gateway's question to connect an upstream
/// account (`upstreamCredential`).
pub const CONNECT_KEY: &str = "io.policy-kernel/connect";

/// Whether `key` names one of the gateway's own questions (never the
/// server's: the gateway answers for them).
pub fn is_gateway_key(key: &str) -> bool {
    key == APPROVAL_KEY || key == CONNECT_KEY
}

/// What the gateway's state says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayState {
    /// The approval the call waits for.
    #[serde(rename = "a")]
    pub approval: String,
    /// The digest of the call it was issued for.
    #[serde(rename = "c")]
    pub call: String,
    /// When it stops being accepted (ms since the epoch).
    #[serde(rename = "e")]
    pub expires_ms: u64,
    /// The server's own state, given back on release.
    #[serde(rename = "s", default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The answers to the server's own questions the held request carried,
    /// given back on release.
    #[serde(rename = "r", default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Seals and opens the gateway's state.
#[derive(Clone)]
pub struct Sealer {
    key: [u8; 32],
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer")
    }
}

impl Sealer {
    /// A sealer with `key`.
    pub fn new(key: [u8; 32]) -> Self {
        Sealer { key }
    }

    /// A sealer with a key of its own (256 random bits).
    pub fn random() -> Result<Self, String> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(|e| format!("no randomness for the state key: {e}"))?;
        Ok(Sealer { key })
    }

    fn mac(&self, payload: &str) -> Hmac<Sha256> {
        // HMAC takes a key of any length: this cannot fail.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key).unwrap_or_else(|_| unreachable!());
        mac.update(payload.as_bytes());
        mac
    }

    /// The state's text.
    pub fn seal(&self, st: &GatewayState) -> String {
        let json = serde_json::to_vec(st).unwrap_or_default();
        let payload = URL_SAFE_NO_PAD.encode(json);
        let tag = URL_SAFE_NO_PAD.encode(self.mac(&payload).finalize().into_bytes());
        format!("{PREFIX}{payload}.{tag}")
    }

    /// Opens a state: `Ok(None)` when it is not the gateway's; an error
    /// naming why when it claims to be and is not sound (forged, altered,
    /// expired at `now_ms`).
    pub fn open(&self, text: &str, now_ms: u64) -> Result<Option<GatewayState>, &'static str> {
        let Some(rest) = text.strip_prefix(PREFIX) else {
            return Ok(None);
        };
        let (payload, tag) = rest.split_once('.').ok_or("malformed gateway state")?;
        let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| "malformed gateway state")?;
        self.mac(payload)
            .verify_slice(&tag)
            .map_err(|_| "gateway state does not verify")?;
        let json = URL_SAFE_NO_PAD.decode(payload).map_err(|_| "malformed gateway state")?;
        let st: GatewayState = serde_json::from_slice(&json).map_err(|_| "malformed gateway state")?;
        if st.expires_ms <= now_ms {
            return Err("gateway state expired");
        }
        Ok(Some(st))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st() -> GatewayState {
        GatewayState {
            approval: "a1".into(),
            call: "c1".into(),
            expires_ms: 2_000,
            server: Some("server-state==".into()),
            answers: None,
        }
    }

    #[test]
    fn sealed_state_opens_only_unaltered_under_its_key_before_expiry() {
        let s = Sealer::new([7; 32]);
        let text = s.seal(&st());
        assert!(text.starts_with(PREFIX));
        assert_eq!(s.open(&text, 1_000), Ok(Some(st())));
        assert_eq!(s.open(&text, 2_000), Err("gateway state expired"));
        assert_eq!(
            Sealer::new([8; 32]).open(&text, 1_000),
            Err("gateway state does not verify")
        );
        // One payload byte changed.
        let mut bytes = text.clone().into_bytes();
        bytes[PREFIX.len() + 2] ^= 1;
        let altered = String::from_utf8(bytes).unwrap();
        assert!(s.open(&altered, 1_000).is_err());
        assert!(s.open("pk1.nodot", 1_000).is_err());
        // The server's state is not the gateway's.
        assert_eq!(s.open("opaque-server-state", 1_000), Ok(None));
    }
}
