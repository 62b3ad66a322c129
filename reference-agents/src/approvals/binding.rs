//! What an approval is bound to: the exact call.
//!
//! The caller's principal, the route and its version (set by the kernel as
//! metadata `route.name` and `route.version`), the endpoint (authority and
//! path), the method and target (tool, skill), a digest of the canonical
//! arguments, and the session where there is one. Two calls share an
//! approval only when all of these are equal.
//!
//! Standing grants (`allow_session`, `allow_always`, `allow_constrained`)
//! are keyed by the digest of the `approve` rule that asked instead of the
//! route's version: an edit of another policy or rule of the route, or of
//! the agents' names, keeps them; a change of that rule's matchers or
//! approval terms (or its removal) voids them.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::rules::Caller;
use policy_agents::{Metadata, RequestView};

/// The kernel's metadata key for the route's name.
pub const ROUTE_NAME: &str = "route.name";
/// The kernel's metadata key for the route's version (a digest of its
/// configuration: equal on every kernel serving the same route).
pub const ROUTE_VERSION: &str = "route.version";

/// The exact call an approval or grant is bound to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CallBinding {
    /// `sub:<sub>`, `consumer:<name>` or `anonymous`.
    pub principal: String,
    /// The route's name.
    pub route: String,
    /// The route's version.
    pub route_version: String,
    /// Authority and path, without the query.
    pub endpoint: String,
    /// The method (`tools/call`, `SendMessage`, ...).
    pub method: String,
    /// The tool, prompt, resource or skill.
    pub target: String,
    /// SHA-256 (hex) of the canonical arguments.
    pub args_digest: String,
    /// The session (`mcp-session-id`), where there is one.
    pub session: Option<String>,
    /// The digest of the `approve` rule that governs the call
    /// ([`ApprovalRule::digest`](super::rule::ApprovalRule::digest)): the
    /// standing grants' keys carry it instead of the route's version.
    #[serde(default)]
    pub rule: String,
}

impl CallBinding {
    /// A call by `caller` on `target` with `args`, through the request `req`
    /// whose metadata is `md`.
    pub fn new(
        caller: &Caller,
        md: &Metadata,
        req: &RequestView<'_>,
        method: &str,
        target: &str,
        args: &Value,
        session: Option<&str>,
    ) -> Self {
        let path = req.path();
        let path = path.split_once('?').map_or(path, |(p, _)| p);
        CallBinding {
            principal: principal(caller),
            route: md.get(ROUTE_NAME).unwrap_or("-").to_string(),
            route_version: md.get(ROUTE_VERSION).unwrap_or("-").to_string(),
            endpoint: format!("{}{}", req.authority(), path),
            method: method.to_string(),
            target: target.to_string(),
            args_digest: digest(args),
            session: session.filter(|s| !s.is_empty()).map(String::from),
            rule: String::new(),
        }
    }

    /// The key of the exact call: every field, the route's version too
    /// (`allow_once` and `deny` are for this very call).
    pub fn call_key(&self) -> String {
        self.hash(&self.route_version, true, true)
    }

    /// The key of this caller's use of this tool under this `approve` rule
    /// on this route and endpoint, any arguments, any session: what an
    /// `allow_always` or `allow_constrained` grant covers. It holds while
    /// the rule is unchanged, whatever else of the route is edited.
    pub fn tool_key(&self) -> String {
        self.hash(&self.rule, false, false)
    }

    /// The key of this caller's use of this tool in this session, under this
    /// `approve` rule.
    pub fn session_key(&self) -> Option<String> {
        self.session.as_ref().map(|_| self.hash(&self.rule, false, true))
    }

    fn hash(&self, version: &str, args: bool, session: bool) -> String {
        let mut h = Sha256::new();
        for part in [
            self.principal.as_str(),
            &self.route,
            version,
            &self.endpoint,
            &self.method,
            &self.target,
        ] {
            h.update(part.len().to_le_bytes());
            h.update(part.as_bytes());
        }
        if args {
            h.update(b"a");
            h.update(self.args_digest.as_bytes());
        }
        if session {
            let s = self.session.as_deref().unwrap_or("");
            h.update(b"s");
            h.update(s.len().to_le_bytes());
            h.update(s.as_bytes());
        }
        hex::encode(h.finalize())
    }
}

/// The principal of a caller: its JWT subject, else its API-key consumer,
/// else `anonymous`.
pub fn principal(c: &Caller) -> String {
    match (&c.sub, &c.consumer) {
        (Some(s), _) => format!("sub:{s}"),
        (None, Some(k)) => format!("consumer:{k}"),
        (None, None) => "anonymous".to_string(),
    }
}

/// `v` as canonical JSON: object members sorted by key, no whitespace,
/// strings and numbers as `serde_json` writes them. Key order and spacing
/// of the original do not matter.
pub fn canonical(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// SHA-256 (hex) of the canonical form of `v`.
pub fn digest(v: &Value) -> String {
    hex::encode(Sha256::digest(canonical(v).as_bytes()))
}
