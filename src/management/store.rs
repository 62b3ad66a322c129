//! The management API's state file (`management.state_path`): the route
//! changes made through the API and the version history.
//!
//! The file is JSON, written atomically: a temporary file in the same
//! directory (mode 0600) is written and fsynced, renamed over the old one,
//! and the directory is fsynced, so a crash leaves either the old state or
//! the new one.
//!
//! **What wins.** The configuration in force is the file's, with the API's
//! changes applied on top: a route put through the API replaces the file's
//! route of the same name (or is added), a route deleted through the API is
//! removed even when the file has it. So when both the file and the API
//! changed a route, the API's version wins; every such route is logged at
//! each startup and SIGHUP.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::RoutePolicy;

/// Where a version came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The configuration file (startup or SIGHUP).
    File,
    /// The management API.
    Api,
}

impl Source {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::File => "file",
            Source::Api => "api",
        }
    }
}

/// One version of the routes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Version {
    /// Its number; +1 per change, kept across restarts.
    pub version: u64,
    /// File or API.
    pub source: Source,
    /// The token's name (API changes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// When, RFC 3339 (UTC).
    pub time: String,
    /// What changed, in a line.
    pub summary: String,
    /// SHA-256 (hex) of the routes' JSON.
    pub hash: String,
    /// The routes in force from this version on.
    pub routes: Vec<RoutePolicy>,
}

/// The state file's content.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    /// The current version (0: none yet).
    pub version: u64,
    /// Routes changed through the API: a route, or `null` for a deleted one.
    pub overrides: BTreeMap<String, Option<RoutePolicy>>,
    /// The last versions, oldest first.
    pub history: Vec<Version>,
}

/// SHA-256 (hex) of `routes` as JSON.
pub fn routes_hash(routes: &[RoutePolicy]) -> String {
    let json = serde_json::to_vec(routes).unwrap_or_default();
    hex::encode(Sha256::digest(&json))
}

/// Now, RFC 3339 with seconds.
pub fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// Writes `bytes` to `path` atomically and durably: a temporary file in
/// the same directory (mode 0600), fsynced, renamed over `path`, and the
/// directory fsynced.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("state");
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The file's `routes` with the API's changes on top. Returns the result
/// and the names of the file's routes that an API change replaces or
/// deletes (the API's version wins).
pub fn overlay(
    overrides: &BTreeMap<String, Option<RoutePolicy>>,
    routes: &[RoutePolicy],
) -> (Vec<RoutePolicy>, Vec<String>) {
    let mut out = Vec::with_capacity(routes.len() + overrides.len());
    let mut overridden = Vec::new();
    for r in routes {
        match overrides.get(&r.route_name) {
            None => out.push(r.clone()),
            Some(change) => {
                if change.as_ref() != Some(r) {
                    overridden.push(r.route_name.clone());
                }
                if let Some(c) = change {
                    out.push(c.clone());
                }
            }
        }
    }
    let in_file: std::collections::HashSet<&str> = routes.iter().map(|r| r.route_name.as_str()).collect();
    for (name, change) in overrides {
        if let Some(c) = change {
            if !in_file.contains(name.as_str()) {
                out.push(c.clone());
            }
        }
    }
    (out, overridden)
}

impl State {
    /// Reads the state file; a missing file is an empty state.
    pub fn load(path: &Path) -> Result<Self, String> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| format!("state file {}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(format!("cannot read state file {}: {e}", path.display())),
        }
    }

    /// Writes the state atomically and durably.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        write_atomic(path, &json)
    }

    /// The file's `routes` with the API's changes on top (see [`overlay`]).
    pub fn overlay(&self, routes: &[RoutePolicy]) -> (Vec<RoutePolicy>, Vec<String>) {
        overlay(&self.overrides, routes)
    }

    /// Appends a version, keeping the last `keep`.
    pub fn record(&mut self, entry: Version, keep: usize) {
        self.version = entry.version;
        self.history.push(entry);
        if self.history.len() > keep {
            let extra = self.history.len() - keep;
            self.history.drain(..extra);
        }
    }

    /// The stored version `n`.
    pub fn find(&self, n: u64) -> Option<&Version> {
        self.history.iter().find(|v| v.version == n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(name: &str, policy: &str) -> RoutePolicy {
        serde_json::from_value(serde_json::json!({
            "route_name": name,
            "request_policy_chain": [{"policy": policy}],
        }))
        .unwrap()
    }

    #[test]
    fn api_changes_win_over_the_file_and_are_reported() {
        let mut s = State::default();
        s.overrides.insert("a".into(), Some(route("a", "api")));
        s.overrides.insert("b".into(), None);
        s.overrides.insert("c".into(), Some(route("c", "new")));
        s.overrides.insert("d".into(), Some(route("d", "same")));
        let file = [
            route("a", "file"),
            route("b", "file"),
            route("d", "same"),
            route("e", "file"),
        ];
        let (routes, overridden) = s.overlay(&file);
        let names: Vec<(&str, &str)> = routes
            .iter()
            .map(|r| (r.route_name.as_str(), r.request_policy_chain[0].policy.as_str()))
            .collect();
        assert_eq!(names, [("a", "api"), ("d", "same"), ("e", "file"), ("c", "new")]);
        assert_eq!(overridden, ["a", "b"]);
    }

    #[test]
    fn save_is_atomic_and_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        assert_eq!(State::load(&path).unwrap(), State::default());
        let mut s = State::default();
        s.overrides.insert("a".into(), Some(route("a", "p")));
        for v in 1..=5 {
            let routes = vec![route("a", "p")];
            s.record(
                Version {
                    version: v,
                    source: Source::Api,
                    token: Some("ci".into()),
                    time: now(),
                    summary: "put".into(),
                    hash: routes_hash(&routes),
                    routes,
                },
                3,
            );
        }
        s.save(&path).unwrap();
        let back = State::load(&path).unwrap();
        assert_eq!(back, s);
        assert_eq!(back.history.iter().map(|v| v.version).collect::<Vec<_>>(), [3, 4, 5]);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary file left"
        );
        std::fs::write(&path, "{").unwrap();
        assert!(State::load(&path).unwrap_err().contains("state.json"));
    }
}
