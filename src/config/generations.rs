//! `server.generations:`: how `policy-kernel supervise` runs kernel
//! generations (see [`crate::upgrade`]) and how a generation marks the
//! requests it serves.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::ConfigError;
use crate::http::valid_header_name;

/// `server.generations:`. Every field is optional; without `supervise` only
/// `header` has an effect.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GenerationsConfig {
    /// Unix socket where `policy-kernel supervise` takes `upgrade` commands
    /// (mode 0600). Default: `server.socket_path` with `.control` appended;
    /// required when there is no `socket_path`.
    pub control_socket: Option<PathBuf>,
    /// How long a new generation may take to be ready (listening, routes
    /// loaded) before the upgrade is abandoned and the running generation
    /// kept, in ms. Default 30000, 100-600000.
    pub ready_timeout_ms: u64,
    /// Request header that carries the number of the generation that served
    /// the request: set on the request Envoy sends upstream, on the kernel's
    /// immediate answers and on response headers the kernel processes
    /// (overwriting any value the client sent). Unset (the default): no
    /// header. Read at start.
    pub header: Option<String>,
}

impl Default for GenerationsConfig {
    fn default() -> Self {
        Self {
            control_socket: None,
            ready_timeout_ms: 30_000,
            header: None,
        }
    }
}

impl GenerationsConfig {
    /// The control socket: `control_socket`, else `socket_path` + `.control`.
    pub fn control_socket(&self, socket_path: Option<&Path>) -> Option<PathBuf> {
        self.control_socket.clone().or_else(|| {
            socket_path.map(|p| {
                let mut s = p.as_os_str().to_owned();
                s.push(".control");
                PathBuf::from(s)
            })
        })
    }

    pub(super) fn validate(&self, f: &str) -> Result<(), ConfigError> {
        let invalid = |field: &str, reason: &str| super::invalid(format!("{f}.{field}"), reason, None);
        if !(100..=600_000).contains(&self.ready_timeout_ms) {
            return Err(invalid("ready_timeout_ms", "must be 100-600000"));
        }
        if let Some(h) = &self.header {
            if !valid_header_name(h.as_bytes()) || h.starts_with(':') || h.bytes().any(|b| b.is_ascii_uppercase()) {
                return Err(invalid("header", "not a lower-case header name"));
            }
        }
        if self.control_socket.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
            return Err(invalid("control_socket", "must not be empty"));
        }
        Ok(())
    }
}
