//! Sealing users' credentials at rest: XChaCha20-Poly1305 with a random
//! 192-bit nonce per value, the owner (issuer, subject, upstream) as
//! associated data, so a sealed value moved to another user's or
//! upstream's entry does not open.
//!
//! The key (256 bits) comes from `--credentials-key-file` or the
//! environment variable [`KEY_ENV`], as 64 hex digits or standard base64.
//! Without either, the agent makes a random key: its credentials then live
//! only as long as the agent (right for the memory store; with Redis the
//! agent refuses to store, since another agent or a restart could not read
//! them).

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

/// The environment variable that may hold the key.
pub const KEY_ENV: &str = "POLICY_AGENT_CREDENTIALS_KEY";
/// The prefix of a sealed value (the format's version).
const PREFIX: &str = "v1.";

/// Seals and opens.
pub struct Vault {
    cipher: XChaCha20Poly1305,
    /// Whether the key was given (not made up by this agent).
    pub durable: bool,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vault")
            .field("durable", &self.durable)
            .finish_non_exhaustive()
    }
}

/// A 256-bit key from its text: 64 hex digits or base64.
pub fn parse_key(text: &str) -> Result<[u8; 32], String> {
    let t = text.trim();
    let bytes = if t.len() == 64 && t.bytes().all(|b| b.is_ascii_hexdigit()) {
        hex::decode(t).map_err(|e| e.to_string())?
    } else {
        STANDARD
            .decode(t)
            .map_err(|_| "not 64 hex digits nor base64".to_string())?
    };
    bytes
        .try_into()
        .map_err(|b: Vec<u8>| format!("the key is {} bytes, not 32", b.len()))
}

impl Vault {
    /// A vault with `key`.
    pub fn new(key: [u8; 32], durable: bool) -> Vault {
        Vault {
            cipher: XChaCha20Poly1305::new(&key.into()),
            durable,
        }
    }

    /// The key from `file`, else from [`KEY_ENV`], else a random one
    /// (not durable).
    pub fn open_key(file: Option<&std::path::Path>) -> Result<Vault, String> {
        if let Some(f) = file {
            let text =
                std::fs::read_to_string(f).map_err(|e| format!("--credentials-key-file {}: {e}", f.display()))?;
            let key = parse_key(&text).map_err(|e| format!("--credentials-key-file {}: {e}", f.display()))?;
            return Ok(Vault::new(key, true));
        }
        if let Ok(text) = std::env::var(KEY_ENV) {
            let key = parse_key(&text).map_err(|e| format!("{KEY_ENV}: {e}"))?;
            return Ok(Vault::new(key, true));
        }
        let key = crate::approvals::random_key().ok_or("no randomness for a credentials key")?;
        Ok(Vault::new(key, false))
    }

    /// `plain` sealed for `owner`.
    pub fn seal(&self, owner: &[u8], plain: &[u8]) -> Result<String, String> {
        let mut nonce = [0u8; 24];
        getrandom::fill(&mut nonce).map_err(|e| format!("no randomness for a nonce: {e}"))?;
        let sealed = self
            .cipher
            .encrypt(&XNonce::from(nonce), Payload { msg: plain, aad: owner })
            .map_err(|_| "sealing failed".to_string())?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        Ok(format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(out)))
    }

    /// The value sealed for `owner`; an error when it is not one, or was
    /// sealed with another key or for another owner.
    pub fn open(&self, owner: &[u8], text: &str) -> Result<Vec<u8>, &'static str> {
        let raw = text
            .strip_prefix(PREFIX)
            .and_then(|b| URL_SAFE_NO_PAD.decode(b).ok())
            .ok_or("not a sealed credential")?;
        if raw.len() < 24 + 16 {
            return Err("not a sealed credential");
        }
        let (nonce, sealed) = raw.split_at(24);
        let nonce: [u8; 24] = nonce.try_into().map_err(|_| "not a sealed credential")?;
        self.cipher
            .decrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: sealed,
                    aad: owner,
                },
            )
            .map_err(|_| "the sealed credential does not open with this key for this owner")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_value_opens_only_for_its_owner_and_key() {
        let v = Vault::new([7; 32], true);
        let s = v.seal(b"alice|github", b"gho_secret").unwrap();
        assert!(!s.contains("gho_secret"));
        assert_eq!(v.open(b"alice|github", &s).unwrap(), b"gho_secret");
        assert!(v.open(b"bob|github", &s).is_err(), "moved to another owner");
        assert!(
            Vault::new([8; 32], true).open(b"alice|github", &s).is_err(),
            "another key"
        );
        let mut tampered = s.clone();
        tampered.pop();
        tampered.push(if s.ends_with('A') { 'B' } else { 'A' });
        assert!(v.open(b"alice|github", &tampered).is_err());
        assert_ne!(
            v.seal(b"alice|github", b"gho_secret").unwrap(),
            s,
            "a fresh nonce each time"
        );
    }

    #[test]
    fn keys_are_read_as_hex_or_base64() {
        assert_eq!(parse_key(&"ab".repeat(32)).unwrap(), [0xab; 32]);
        assert_eq!(parse_key(&STANDARD.encode([3u8; 32])).unwrap(), [3; 32]);
        assert!(parse_key("short").unwrap_err().contains("not 64 hex"));
        assert!(parse_key(&STANDARD.encode([3u8; 16])).unwrap_err().contains("16 bytes"));
    }
}
