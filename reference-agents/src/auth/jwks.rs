//! Verification keys for `jwtValidation`, cached across calls: JWKS files
//! keyed by path (re-checked for changes at most every few seconds, re-read
//! only when modified) and HS256 secrets keyed by environment variable.
//! Keys fetched from an identity provider are in `remote_keys`; both read
//! JWK sets with [`parse_jwk_set`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};

/// Why verification keys could not be loaded.
#[derive(Debug, Clone, thiserror::Error)]
pub enum KeyError {
    /// The JWKS file could not be read.
    #[error("reading JWKS file {path}: {reason}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        reason: String,
    },
    /// The JWKS file is not a JWK set (or a single JWK).
    #[error("JWKS file {path} is invalid: {reason}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The secret's environment variable is not set.
    #[error("environment variable {0} (hs256_secret_env) is not set")]
    MissingSecret(String),
}

/// The key families `jwtValidation` accepts. A token's algorithm names its
/// family; only a key of that family can verify it, so an HMAC token is
/// never checked against a public key, whatever its header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    /// RS256, RS384, RS512, PS256, PS384, PS512.
    Rsa,
    /// ES256 (P-256).
    EcP256,
    /// ES384 (P-384).
    EcP384,
    /// EdDSA (Ed25519).
    Ed25519,
    /// HS256 (only with `hs256_secret_env`).
    Hmac,
}

impl Family {
    /// The family of an accepted algorithm, `None` for the others
    /// (HS384 and HS512). `none` is not an [`Algorithm`] at all: a token
    /// that names it fails to parse.
    pub(crate) fn of(alg: Algorithm) -> Option<Family> {
        match alg {
            Algorithm::RS256
            | Algorithm::RS384
            | Algorithm::RS512
            | Algorithm::PS256
            | Algorithm::PS384
            | Algorithm::PS512 => Some(Family::Rsa),
            Algorithm::ES256 => Some(Family::EcP256),
            Algorithm::ES384 => Some(Family::EcP384),
            Algorithm::EdDSA => Some(Family::Ed25519),
            Algorithm::HS256 => Some(Family::Hmac),
            _ => None,
        }
    }
}

/// One verification key.
pub(crate) struct VerifyKey {
    pub(crate) kid: Option<String>,
    pub(crate) family: Family,
    /// The JWK's `alg`, when it names one: then only that algorithm.
    pub(crate) alg: Option<Algorithm>,
    pub(crate) key: DecodingKey,
}

impl VerifyKey {
    /// True when this key may verify a token signed with `alg` (of `family`).
    pub(crate) fn fits(&self, family: Family, alg: Algorithm) -> bool {
        self.family == family && self.alg.is_none_or(|a| a == alg)
    }
}

/// The index of the key for a token: of the token's family and algorithm,
/// and with its `kid` (any key of the family when the token names none).
pub(crate) fn find_key(keys: &[VerifyKey], alg: Algorithm, kid: Option<&str>) -> Option<usize> {
    let family = Family::of(alg)?;
    keys.iter()
        .position(|k| k.fits(family, alg) && (kid.is_none() || k.kid.as_deref() == kid))
}

struct CachedFile {
    keys: Arc<Vec<VerifyKey>>,
    modified: Option<SystemTime>,
    checked: Instant,
}

/// The cache shared by all calls of one policy.
pub(crate) struct KeyCache {
    files: RwLock<HashMap<PathBuf, CachedFile>>,
    secrets: RwLock<HashMap<String, Arc<DecodingKey>>>,
    recheck: Duration,
}

fn family_of(jwk: &Jwk) -> Option<Family> {
    match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Some(Family::Rsa),
        AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => Some(Family::EcP256),
        AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P384 => Some(Family::EcP384),
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => Some(Family::Ed25519),
        AlgorithmParameters::OctetKey(_) => Some(Family::Hmac),
        _ => None,
    }
}

/// Where a JWK set comes from, which decides whether it may hold secrets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SetOrigin {
    /// A local file: `oct` keys are HMAC secrets, accepted.
    File,
    /// An identity provider's published set: public by definition, so an
    /// `oct` key in it is skipped (HMAC with a published key is a forgery).
    Published,
}

/// The signature keys of a JWK set (or of a single JWK): keys of other
/// types, encryption keys (`use: enc`) and keys this crate cannot read are
/// skipped; an error when the text is not a set or no key is left.
pub(crate) fn parse_jwk_set(bytes: &[u8], origin: SetOrigin) -> Result<Vec<VerifyKey>, String> {
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    jwk_set_keys(value, origin)
}

/// [`parse_jwk_set`] on parsed JSON.
pub(crate) fn jwk_set_keys(mut value: serde_json::Value, origin: SetOrigin) -> Result<Vec<VerifyKey>, String> {
    let items = if value.get("keys").is_some() {
        match value.get_mut("keys").map(std::mem::take) {
            Some(serde_json::Value::Array(items)) => items,
            _ => return Err("`keys` is not a list".to_string()),
        }
    } else if value.get("kty").is_some() {
        vec![value]
    } else {
        return Err("neither a JWK set (`keys`) nor a JWK (`kty`)".to_string());
    };
    let mut keys = Vec::new();
    for item in items {
        let Ok(jwk) = serde_json::from_value::<Jwk>(item) else {
            continue;
        };
        if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
            continue;
        }
        let Some(family) = family_of(&jwk) else {
            continue;
        };
        if family == Family::Hmac && origin == SetOrigin::Published {
            continue;
        }
        let alg = match jwk.common.key_algorithm {
            Some(a) => match Algorithm::try_from(a) {
                Ok(alg) if Family::of(alg) == Some(family) => Some(alg),
                // An encryption algorithm, or one of another family.
                _ => continue,
            },
            None => None,
        };
        let key = DecodingKey::from_jwk(&jwk).map_err(|e| e.to_string())?;
        keys.push(VerifyKey {
            kid: jwk.common.key_id.clone(),
            family,
            alg,
            key,
        });
    }
    if keys.is_empty() {
        return Err("no usable RSA, P-256, P-384, Ed25519 or (in files) oct signature key".to_string());
    }
    Ok(keys)
}

fn parse_jwks(path: &Path, bytes: &[u8]) -> Result<Vec<VerifyKey>, KeyError> {
    parse_jwk_set(bytes, SetOrigin::File).map_err(|reason| KeyError::Parse {
        path: path.to_path_buf(),
        reason,
    })
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

impl KeyCache {
    /// A cache that re-checks files for changes every `recheck`.
    pub(crate) fn new(recheck: Duration) -> Self {
        KeyCache {
            files: RwLock::new(HashMap::new()),
            secrets: RwLock::new(HashMap::new()),
            recheck,
        }
    }

    /// The keys of the JWKS file at `path`.
    pub(crate) fn jwks(&self, path: &Path) -> Result<Arc<Vec<VerifyKey>>, KeyError> {
        let mut stale = None;
        if let Ok(files) = self.files.read() {
            if let Some(entry) = files.get(path) {
                if entry.checked.elapsed() < self.recheck {
                    return Ok(Arc::clone(&entry.keys));
                }
                stale = Some((Arc::clone(&entry.keys), entry.modified));
            }
        }
        let now_modified = modified(path);
        let keys = match stale {
            Some((keys, was)) if was.is_some() && was == now_modified => keys,
            _ => {
                let bytes = std::fs::read(path).map_err(|e| KeyError::Read {
                    path: path.to_path_buf(),
                    reason: e.to_string(),
                })?;
                tracing::info!(path = %path.display(), "loaded JWKS file");
                Arc::new(parse_jwks(path, &bytes)?)
            }
        };
        if let Ok(mut files) = self.files.write() {
            let entry = CachedFile {
                keys: Arc::clone(&keys),
                modified: now_modified,
                checked: Instant::now(),
            };
            files.insert(path.to_path_buf(), entry);
        }
        Ok(keys)
    }

    /// The HS256 key held by environment variable `var`.
    pub(crate) fn secret(&self, var: &str) -> Result<Arc<DecodingKey>, KeyError> {
        if let Some(key) = self.secrets.read().ok().and_then(|s| s.get(var).cloned()) {
            return Ok(key);
        }
        let secret = std::env::var(var).map_err(|_| KeyError::MissingSecret(var.to_string()))?;
        if secret.is_empty() {
            return Err(KeyError::MissingSecret(var.to_string()));
        }
        let key = Arc::new(DecodingKey::from_secret(secret.as_bytes()));
        if let Ok(mut secrets) = self.secrets.write() {
            secrets.insert(var.to_string(), Arc::clone(&key));
        }
        Ok(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JWKS: &str = include_str!("../../testdata/jwks.json");

    #[test]
    fn jwks_files_are_cached_and_reloaded_when_changed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jwks.json");
        std::fs::write(&path, JWKS).unwrap();
        let cache = KeyCache::new(Duration::ZERO);
        let first = cache.jwks(&path).unwrap();
        assert_eq!(first.len(), 2);
        assert_eq!(first[0].family, Family::Rsa);
        assert_eq!(first[1].kid.as_deref(), Some("ec-1"));
        let again = cache.jwks(&path).unwrap();
        assert!(Arc::ptr_eq(&first, &again), "unchanged file is not re-read");

        let cache = KeyCache::new(Duration::from_secs(3600));
        let first = cache.jwks(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(
            Arc::ptr_eq(&first, &cache.jwks(&path).unwrap()),
            "hot path never touches the file"
        );
    }

    #[test]
    fn bad_files_and_missing_secrets_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.json");
        std::fs::write(&path, "{").unwrap();
        let cache = KeyCache::new(Duration::ZERO);
        assert!(matches!(cache.jwks(&path), Err(KeyError::Parse { .. })));
        assert!(matches!(
            cache.jwks(&dir.path().join("none")),
            Err(KeyError::Read { .. })
        ));
        assert!(matches!(
            cache.secret("POLICY_AGENTS_TEST_UNSET_SECRET"),
            Err(KeyError::MissingSecret(_))
        ));
    }
}
