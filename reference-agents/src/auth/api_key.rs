//! `apiKeyAuth`: API keys checked against SHA-256 hashes, in constant time.
//!
//! The key file has one key per line: the hex SHA-256 of the key, then
//! optionally whitespace and the consumer's name. Blank lines and lines
//! starting with `#` are ignored. Plaintext keys are never stored.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::{Choice, ConditionallySelectable, ConstantTimeEq};

use super::unauthorized;
use policy_agents::{
    describe, Cacheable, FromParams, ParamError, Params, Policy, PolicyError, RequestContext, RequestOutcome,
};

/// How long the kernel may answer for a key without asking again.
pub const CACHE_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(60);

/// Why the key file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ApiKeyError {
    /// The file could not be read.
    #[error("reading API key file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A line is not `<64 hex digits> [consumer]`.
    #[error("API key file {path}, line {line}: {reason}")]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
}

/// One known key: its hash and its consumer.
#[derive(Debug, Clone)]
struct KeyEntry {
    hash: [u8; 32],
    consumer: Option<String>,
}

/// The known API keys (hashes only).
#[derive(Debug, Clone, Default)]
pub struct ApiKeyStore {
    keys: Vec<KeyEntry>,
}

impl ApiKeyStore {
    /// Reads a key file.
    pub fn load(path: &Path) -> Result<Self, ApiKeyError> {
        let text = std::fs::read_to_string(path).map_err(|source| ApiKeyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses key-file text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &Path) -> Result<Self, ApiKeyError> {
        let mut keys = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let err = |reason: &str| ApiKeyError::Line {
                path: origin.to_path_buf(),
                line: i + 1,
                reason: reason.to_string(),
            };
            let (hex_hash, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            let mut hash = [0u8; 32];
            hex::decode_to_slice(hex_hash, &mut hash).map_err(|_| err("expected a hex SHA-256 (64 hex digits)"))?;
            let consumer = Some(rest.trim().to_string()).filter(|c| !c.is_empty());
            keys.push(KeyEntry { hash, consumer });
        }
        Ok(ApiKeyStore { keys })
    }

    /// The number of keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True when no key is known.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Checks a presented key. `Some(consumer)` when it is known. Every stored
    /// hash is compared, in constant time, whatever matches.
    pub fn verify(&self, presented: &str) -> Option<Option<&str>> {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found = Choice::from(0);
        let mut index = 0u64;
        for (i, key) in self.keys.iter().enumerate() {
            let eq = key.hash.ct_eq(&digest);
            index.conditional_assign(&(i as u64), eq);
            found |= eq;
        }
        if bool::from(found) {
            let entry = usize::try_from(index).ok().and_then(|i| self.keys.get(i))?;
            Some(entry.consumer.as_deref())
        } else {
            None
        }
    }
}

/// Parameters of `apiKeyAuth`.
#[derive(Debug, Clone)]
pub struct ApiKeyParams {
    header_name: String,
    required: bool,
}

impl FromParams for ApiKeyParams {
    fn from_params(p: &Params) -> Result<Self, ParamError> {
        Ok(ApiKeyParams {
            header_name: p.get("header_name").unwrap_or("x-api-key").trim().to_string(),
            required: p.bool_or("required", true)?,
        })
    }
}

/// The `apiKeyAuth` policy.
#[derive(Debug, Clone)]
pub struct ApiKeyAuth {
    store: Arc<ApiKeyStore>,
}

impl ApiKeyAuth {
    /// A policy checking keys against `store`.
    pub fn new(store: ApiKeyStore) -> Self {
        ApiKeyAuth { store: Arc::new(store) }
    }
}

impl Policy for ApiKeyAuth {
    type Params = ApiKeyParams;
    describe! { name: "apiKeyAuth", params: &["header_name", "required"] }

    /// The outcome depends on the presented key and the key file, which is
    /// read at start: the kernel may keep it a minute, keyed on the key
    /// (hashed, as every key part is), and drops it when the agent restarts.
    fn cache(&self) -> Option<Cacheable> {
        Some(Cacheable::for_at_most(CACHE_MAX_AGE).header_param("header_name", "x-api-key"))
    }

    async fn on_request(&self, params: &ApiKeyParams, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let challenge = format!("ApiKey header=\"{}\"", params.header_name.to_ascii_lowercase());
        let presented = ctx.request.header(&params.header_name).map(str::trim);
        match presented {
            None | Some("") if !params.required => Ok(RequestOutcome::proceed()),
            None | Some("") => Ok(unauthorized("missing_api_key", &challenge)),
            Some(key) => match self.store.verify(key) {
                None => Ok(unauthorized("invalid_api_key", &challenge)),
                Some(consumer) => {
                    let out = RequestOutcome::proceed().set_metadata("auth_method", "api_key");
                    Ok(match consumer {
                        Some(c) => out.set_metadata("consumer", c),
                        None => out,
                    })
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy_agents::testing::{TestCall, TestRequest};

    fn hash(key: &str) -> String {
        hex::encode(Sha256::digest(key.as_bytes()))
    }

    fn policy() -> ApiKeyAuth {
        let text = format!(
            "# keys\n{}  alice\n\n{}\n",
            hash("key-alice"),
            hash("key-anon").to_uppercase()
        );
        ApiKeyAuth::new(ApiKeyStore::parse(&text, Path::new("keys")).unwrap())
    }

    #[tokio::test]
    async fn valid_key_passes_with_consumer() {
        let req = TestRequest::new("GET", "/").header("x-api-key", "key-alice");
        let out = TestCall::new()
            .params(&[("header_name", "X-API-Key")])
            .request(&policy(), &req)
            .await
            .unwrap();
        assert!(out.denial().is_none());
        assert_eq!(out.metadata_value("consumer"), Some("alice"));
        let req = TestRequest::new("GET", "/").header("x-api-key", "key-anon");
        let out = TestCall::new().request(&policy(), &req).await.unwrap();
        assert!(out.denial().is_none());
        assert_eq!(out.metadata_value("consumer"), None);
    }

    #[tokio::test]
    async fn missing_or_wrong_key_is_401_json() {
        let call = TestCall::new();
        let out = call.request(&policy(), &TestRequest::new("GET", "/")).await.unwrap();
        let deny = out.denial().unwrap();
        assert_eq!(deny.status, 401);
        assert!(String::from_utf8_lossy(&deny.body).contains("missing_api_key"));
        assert!(deny
            .headers
            .contains(&("content-type".into(), "application/json".into())));
        let req = TestRequest::new("GET", "/").header("x-api-key", "key-alicE");
        let out = call.request(&policy(), &req).await.unwrap();
        assert!(String::from_utf8_lossy(&out.denial().unwrap().body).contains("invalid_api_key"));
    }

    #[tokio::test]
    async fn optional_key_lets_anonymous_through_but_not_wrong_keys() {
        let call = TestCall::new().params(&[("required", "false")]);
        let out = call.request(&policy(), &TestRequest::new("GET", "/")).await.unwrap();
        assert!(out.denial().is_none());
        let req = TestRequest::new("GET", "/").header("x-api-key", "bad");
        assert!(call.request(&policy(), &req).await.unwrap().denial().is_some());
    }

    #[test]
    fn bad_lines_are_reported_with_their_number() {
        let err = ApiKeyStore::parse("# c\nnot-a-hash bob\n", Path::new("k")).unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
        assert!(ApiKeyStore::parse(&"ab".repeat(31), Path::new("k")).is_err());
    }
}
