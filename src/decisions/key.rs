//! Decision cache keys: what a policy declared it depends on, resolved
//! against a route's params at compile time ([`CacheSpec`]), and the key of
//! one call, hashed from the request as the agent would see it ([`key`]).

use std::collections::BTreeMap;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::aggregate::{Metadata, RequestCtx};
use crate::http::valid_header_name;
use crate::proto;

/// A decision cache key: SHA-256 of everything an outcome depends on.
pub type Key = [u8; 32];

/// One policy's declaration, resolved for one route entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSpec {
    /// The declared lifetime.
    pub max_age: Duration,
    /// Headers (lower-case; `:method`, `:path`, `:authority`), declared or
    /// named by a param.
    pub headers: Vec<String>,
    /// Metadata keys.
    pub metadata: Vec<String>,
    /// The body's SHA-256.
    pub body: bool,
    /// JSON Pointers into a JSON body.
    pub body_fields: Vec<String>,
}

impl CacheSpec {
    /// Resolves `decl` for a route entry with `params`. `Err` names what is
    /// wrong with a declaration the kernel cannot key on (the policy is then
    /// called every time); `Ok(None)` when the policy is not cacheable.
    pub fn resolve(
        decl: Option<&proto::DecisionCache>,
        params: &BTreeMap<String, String>,
    ) -> Result<Option<Self>, String> {
        let Some(d) = decl.filter(|d| d.max_age_ms > 0) else {
            return Ok(None);
        };
        let mut headers = Vec::with_capacity(d.headers.len() + d.header_params.len());
        for h in &d.headers {
            headers.push(header(h)?);
        }
        for (param, default) in &d.header_params {
            let name = params.get(param).map(|v| v.trim()).unwrap_or(default);
            headers.push(header(&name.to_ascii_lowercase())?);
        }
        // Sorted, so that the order of a map does not change keys.
        headers[d.headers.len()..].sort();
        for p in &d.body_fields {
            if !(p.is_empty() || p.starts_with('/')) {
                return Err(format!("body field {p:?} is not a JSON Pointer"));
            }
        }
        Ok(Some(CacheSpec {
            max_age: Duration::from_millis(u64::from(d.max_age_ms)),
            headers,
            metadata: d.metadata.clone(),
            body: d.body,
            body_fields: d.body_fields.clone(),
        }))
    }
}

fn header(h: &str) -> Result<String, String> {
    let pseudo = matches!(h, ":method" | ":path" | ":authority");
    if pseudo || (valid_header_name(h.as_bytes()) && !h.starts_with(':') && !h.bytes().any(|b| b.is_ascii_uppercase()))
    {
        Ok(h.to_string())
    } else {
        Err(format!("cache key header {h:?} is not a lower-case header name"))
    }
}

/// Feeds length-prefixed fields to a SHA-256, so that no two different
/// sequences of fields hash the same bytes.
struct Fields(Sha256);

impl Fields {
    fn bytes(&mut self, tag: u8, b: &[u8]) {
        self.0.update([tag]);
        self.0.update((b.len() as u64).to_le_bytes());
        self.0.update(b);
    }

    fn absent(&mut self, tag: u8) {
        self.0.update([tag | 0x80]);
    }
}

/// What a key covers besides the request: the configuration version, the
/// route, the agent and its connection epoch.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    /// The snapshot's configuration version.
    pub version: u64,
    /// The route name.
    pub route: &'a str,
    /// The agent's index in the snapshot.
    pub agent: usize,
    /// The agent's connection epoch.
    pub epoch: u64,
}

/// The key of one call: `policies` are each policy as sent (encoded name,
/// params, `on_failure`) with its spec. `None` when a declared JSON body
/// field cannot be read (the body is not JSON): such a call is not cached.
pub fn key<'p>(
    scope: Scope<'_>,
    policies: impl Iterator<Item = (&'p [u8], &'p CacheSpec)>,
    request: &RequestCtx,
    meta: &Metadata,
) -> Option<Key> {
    let mut f = Fields(Sha256::new());
    f.bytes(0, b"policy-kernel decision v1");
    f.bytes(1, &scope.version.to_le_bytes());
    f.bytes(2, scope.route.as_bytes());
    f.bytes(3, &(scope.agent as u64).to_le_bytes());
    f.bytes(4, &scope.epoch.to_le_bytes());
    let mut json: Option<Option<serde_json::Value>> = None;
    for (wire, spec) in policies {
        f.bytes(5, wire);
        for h in &spec.headers {
            f.bytes(6, h.as_bytes());
            match h.as_str() {
                ":method" => f.bytes(7, request.method.as_bytes()),
                ":path" => f.bytes(7, request.path.as_bytes()),
                ":authority" => f.bytes(7, request.authority.as_bytes()),
                name => {
                    let mut seen = false;
                    for (_, v) in request.headers.iter().filter(|(n, _)| n == name) {
                        f.bytes(7, v);
                        seen = true;
                    }
                    if !seen {
                        f.absent(7);
                    }
                }
            }
        }
        for k in &spec.metadata {
            f.bytes(8, k.as_bytes());
            match meta.get(k) {
                Some(v) => f.bytes(9, v.as_bytes()),
                None => f.absent(9),
            }
        }
        if spec.body {
            match &request.body {
                Some(b) => f.bytes(10, &Sha256::digest(b)),
                None => f.absent(10),
            }
        }
        if !spec.body_fields.is_empty() {
            let doc = json.get_or_insert_with(|| {
                request
                    .body
                    .as_ref()
                    .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
            });
            let doc = doc.as_ref()?;
            for p in &spec.body_fields {
                f.bytes(11, p.as_bytes());
                match doc.pointer(p) {
                    // Written back as serde_json prints it: equal values
                    // written in another key order may miss, never match
                    // a different value.
                    Some(v) => f.bytes(12, v.to_string().as_bytes()),
                    None => f.absent(12),
                }
            }
        }
    }
    Some(f.0.finalize().into())
}
