//! `management:`: the management API's listeners, tokens, state file and
//! (for a fleet) the shared store.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use super::ConfigError;

/// `management:`. Absent: no management API.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManagementConfig {
    /// Loopback `address:port` of the HTTP listener (port 0 picks a free
    /// one). Only loopback addresses are accepted.
    #[serde(default)]
    pub listen: Option<String>,
    /// Unix socket path of the HTTP listener, created with mode 0600.
    #[serde(default)]
    pub socket: Option<PathBuf>,
    /// Group id given to `socket`, which then gets mode 0660, so that
    /// `allowed_uids` not running as the kernel's user can connect.
    #[serde(default)]
    pub socket_gid: Option<u32>,
    /// Uids allowed on `socket` (checked with SO_PEERCRED). Empty: only
    /// the kernel's own uid.
    #[serde(default)]
    pub allowed_uids: Vec<u32>,
    /// File of bearer tokens: one `NAME ROLE SHA256HEX` line per token,
    /// ROLE `read` or `write`; `#` starts a comment.
    pub tokens_file: PathBuf,
    /// File where API changes and the version history are kept (written
    /// atomically, fsynced).
    pub state_path: PathBuf,
    /// Versions kept in the history (and available to rollback). Default 20.
    #[serde(default = "default_history")]
    pub history: usize,
    /// A store shared by many kernels (etcd). Absent: the changes live in
    /// `state_path`, on this kernel only. With a store, `state_path` is
    /// this kernel's cache of the store's routes, served while the store
    /// cannot be reached.
    #[serde(default)]
    pub store: Option<super::StoreConfig>,
}

fn default_history() -> usize {
    20
}

fn invalid(field: &str, reason: impl Into<String>) -> ConfigError {
    super::invalid(format!("policy_kernel.management.{field}"), reason, None)
}

impl ManagementConfig {
    /// The parsed `listen` address, when set.
    pub fn listen_addr(&self) -> Result<Option<SocketAddr>, ConfigError> {
        let Some(listen) = &self.listen else { return Ok(None) };
        let addr: SocketAddr = listen
            .parse()
            .map_err(|_| invalid("listen", format!("{listen:?} is not an address:port")))?;
        if !addr.ip().is_loopback() {
            return Err(invalid(
                "listen",
                format!("{listen:?} is not a loopback address (use 127.0.0.1 or ::1, or a socket)"),
            ));
        }
        Ok(Some(addr))
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.listen.is_none() && self.socket.is_none() {
            return Err(invalid("listen", "set listen, socket or both"));
        }
        self.listen_addr()?;
        if self.socket.as_ref().is_some_and(|s| s.as_os_str().is_empty()) {
            return Err(invalid("socket", "must not be empty"));
        }
        if self.tokens_file.as_os_str().is_empty() {
            return Err(invalid("tokens_file", "must not be empty"));
        }
        if self.state_path.as_os_str().is_empty() {
            return Err(invalid("state_path", "must not be empty"));
        }
        if !(1..=1000).contains(&self.history) {
            return Err(invalid("history", "must be 1-1000"));
        }
        if let Some(store) = &self.store {
            store.etcd.validate()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    fn parse(section: &str) -> Result<crate::config::KernelConfig, crate::config::ConfigError> {
        crate::config::parse(&format!("policy_kernel:\n  management:\n{section}"))
    }

    #[test]
    fn listeners_and_files_are_checked() {
        let files = "    tokens_file: /t\n    state_path: /s\n";
        let ok = parse(&format!("    listen: 127.0.0.1:0\n{files}")).unwrap();
        let m = ok.management.unwrap();
        assert_eq!(m.history, 20);
        assert!(m.listen_addr().unwrap().is_some());
        assert!(parse(&format!("    socket: /run/m.sock\n    allowed_uids: [1]\n{files}")).is_ok());
        let e = parse(&format!("    listen: 0.0.0.0:9\n{files}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("management.listen") && e.contains("loopback"), "{e}");
        let e = parse(files).unwrap_err().to_string();
        assert!(e.contains("set listen, socket or both"), "{e}");
        let e = parse(&format!("    listen: nope\n{files}")).unwrap_err().to_string();
        assert!(e.contains("address:port"), "{e}");
        let e = parse(&format!("    listen: 127.0.0.1:0\n    history: 0\n{files}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("management.history"), "{e}");
        let e = parse("    listen: 127.0.0.1:0\n    state_path: /s\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("tokens_file"), "{e}");
        assert!(crate::config::parse("policy_kernel: {}\n")
            .unwrap()
            .management
            .is_none());
    }
}
