//! Bearer tokens of the management API.
//!
//! The tokens file holds one token per line: `NAME ROLE SHA256HEX`, where
//! ROLE is `read` or `write` and SHA256HEX the lower- or upper-case hex
//! SHA-256 of the token itself; blank lines and `#` comments are skipped.
//! The file never holds a token, only its hash. A presented token is hashed
//! and compared with every entry in constant time (`subtle`), so neither a
//! match's position nor a near miss shows in the timing.

use std::path::Path;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// GET endpoints and `POST /v1/validate`.
    Read,
    /// Everything.
    Write,
}

/// One accepted token.
#[derive(Debug, Clone)]
struct Entry {
    name: String,
    role: Role,
    hash: [u8; 32],
}

/// The accepted tokens.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    entries: Vec<Entry>,
}

/// Who is calling: the token's name and role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's name from the tokens file (logged with every change).
    pub name: String,
    /// Its role.
    pub role: Role,
}

/// The SHA-256 of `token`, in lower-case hex: what the tokens file holds.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

impl Tokens {
    /// Reads the tokens file; the error names the file and line.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses the tokens file's text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut entries = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let n = i + 1;
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [name, role, hash] = fields[..] else {
                return Err(format!("line {n}: expected NAME ROLE SHA256HEX"));
            };
            let role = match role {
                "read" => Role::Read,
                "write" => Role::Write,
                other => return Err(format!("line {n}: role {other:?} is not read or write")),
            };
            let mut bytes = [0u8; 32];
            hex::decode_to_slice(hash, &mut bytes)
                .map_err(|_| format!("line {n}: the hash is not 64 hex digits (SHA-256)"))?;
            if entries.iter().any(|e: &Entry| e.name == name) {
                return Err(format!("line {n}: duplicate token name {name:?}"));
            }
            entries.push(Entry {
                name: name.to_string(),
                role,
                hash: bytes,
            });
        }
        if entries.is_empty() {
            return Err("no token defined".into());
        }
        Ok(Self { entries })
    }

    /// The caller of an `Authorization` header value (`Bearer TOKEN`), or
    /// `None` when it is missing or matches no token.
    pub fn check(&self, authorization: Option<&[u8]>) -> Option<Caller> {
        let value = std::str::from_utf8(authorization?).ok()?;
        let (scheme, token) = value.trim().split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let digest: [u8; 32] = Sha256::digest(token.trim().as_bytes()).into();
        // Every entry is compared, whatever matched before.
        let mut found = None;
        for e in &self.entries {
            if bool::from(e.hash.ct_eq(&digest)) {
                found = Some(Caller {
                    name: e.name.clone(),
                    role: e.role,
                });
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> String {
        format!(
            "# operators\nci write {}\nviewer read {} # dashboards\n",
            token_hash("s3cret-w"),
            token_hash("s3cret-r").to_uppercase()
        )
    }

    #[test]
    fn tokens_are_matched_by_hash_with_their_role() {
        let t = Tokens::parse(&file()).unwrap();
        let w = t.check(Some(b"Bearer s3cret-w")).unwrap();
        assert_eq!((w.name.as_str(), w.role), ("ci", Role::Write));
        let r = t.check(Some(b"bearer s3cret-r")).unwrap();
        assert_eq!((r.name.as_str(), r.role), ("viewer", Role::Read));
        assert!(t.check(Some(b"Bearer s3cret-x")).is_none());
        assert!(t.check(Some(b"Basic s3cret-w")).is_none());
        assert!(t.check(Some(b"s3cret-w")).is_none());
        assert!(t.check(None).is_none());
    }

    #[test]
    fn bad_lines_are_refused_with_their_number() {
        let e = Tokens::parse("a write abc\n").unwrap_err();
        assert!(e.contains("line 1") && e.contains("64 hex"), "{e}");
        let e = Tokens::parse(&format!("\na admin {}", token_hash("x"))).unwrap_err();
        assert!(e.contains("line 2") && e.contains("admin"), "{e}");
        let h = token_hash("x");
        let e = Tokens::parse(&format!("a read {h}\na write {h}")).unwrap_err();
        assert!(e.contains("duplicate"), "{e}");
        assert!(Tokens::parse("# nothing\n").is_err());
    }
}
