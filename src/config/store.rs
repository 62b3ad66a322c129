//! `management.store:`: where the management API keeps its changes when
//! many kernels share them. Absent: the local `state_path` file, one kernel.

use std::path::PathBuf;

use serde::Deserialize;

use super::ConfigError;

/// `management.store:`. One backend is named.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// An etcd cluster (v3 API) shared by every kernel of the fleet.
    pub etcd: EtcdConfig,
}

/// `management.store.etcd:`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdConfig {
    /// Client URLs of the members, `http://host:port` or `https://host:port`
    /// (`https` needs `tls`). At least one.
    pub endpoints: Vec<String>,
    /// Key prefix of this fleet's configuration. Default `/policy-kernel/`.
    /// Kernels with the same prefix share routes and versions.
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// Client TLS: the CA that signed the members' certificates, and the
    /// client certificate and key when the cluster asks for one.
    #[serde(default)]
    pub tls: Option<EtcdTls>,
    /// User name, when the cluster has authentication on.
    #[serde(default)]
    pub username: Option<String>,
    /// Password of `username`, inline. Prefer `password_file`.
    #[serde(default)]
    pub password: Option<String>,
    /// File holding the password of `username` (a trailing newline is
    /// dropped), such as a mounted Kubernetes Secret.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// Time to connect to a member, in milliseconds. Default 2000.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Time a read or a write may take, in milliseconds. Default 3000. A
    /// write that takes longer gets 503 and may or may not be stored.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
}

/// `management.store.etcd.tls:`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdTls {
    /// PEM file of the CA that signed the members' certificates.
    pub ca: PathBuf,
    /// PEM file of the client certificate (with `key`).
    #[serde(default)]
    pub cert: Option<PathBuf>,
    /// PEM file of the client certificate's key (with `cert`).
    #[serde(default)]
    pub key: Option<PathBuf>,
}

fn default_prefix() -> String {
    "/policy-kernel/".into()
}

fn default_connect_timeout_ms() -> u64 {
    2000
}

fn default_request_timeout_ms() -> u64 {
    3000
}

fn invalid(field: &str, reason: impl Into<String>) -> ConfigError {
    super::invalid(format!("policy_kernel.management.store.etcd.{field}"), reason, None)
}

impl EtcdConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.endpoints.is_empty() {
            return Err(invalid("endpoints", "name at least one member"));
        }
        for e in &self.endpoints {
            let https = e.starts_with("https://");
            if !https && !e.starts_with("http://") {
                return Err(invalid(
                    "endpoints",
                    format!("{e:?} must start with http:// or https://"),
                ));
            }
            if https != self.tls.is_some() {
                return Err(invalid(
                    "endpoints",
                    format!("{e:?}: https:// endpoints need tls, and tls needs https:// endpoints"),
                ));
            }
        }
        if self.prefix.is_empty() || !self.prefix.ends_with('/') {
            return Err(invalid(
                "prefix",
                format!("{:?} must be non-empty and end with /", self.prefix),
            ));
        }
        if let Some(tls) = &self.tls {
            if tls.cert.is_some() != tls.key.is_some() {
                return Err(invalid("tls", "cert and key go together"));
            }
        }
        match (&self.username, &self.password, &self.password_file) {
            (Some(_), Some(_), Some(_)) => return Err(invalid("password", "set password or password_file, not both")),
            (Some(_), None, None) => return Err(invalid("password", "username needs password or password_file")),
            (None, Some(_), _) | (None, _, Some(_)) => return Err(invalid("username", "a password needs a username")),
            _ => {}
        }
        if self.connect_timeout_ms == 0 || self.request_timeout_ms == 0 {
            return Err(invalid("request_timeout_ms", "timeouts must be above 0"));
        }
        Ok(())
    }

    /// The password, read from `password_file` when set.
    pub fn password(&self) -> Result<Option<String>, String> {
        if let Some(p) = &self.password {
            return Ok(Some(p.clone()));
        }
        match &self.password_file {
            None => Ok(None),
            Some(path) => std::fs::read_to_string(path)
                .map(|s| Some(s.trim_end_matches(['\r', '\n']).to_string()))
                .map_err(|e| format!("management.store.etcd.password_file {}: {e}", path.display())),
        }
    }
}

#[cfg(test)]
mod tests {
    fn parse(store: &str) -> Result<crate::config::KernelConfig, crate::config::ConfigError> {
        crate::config::parse(&format!(
            "policy_kernel:\n  management:\n    listen: 127.0.0.1:0\n    tokens_file: /t\n    state_path: /s\n    store:\n      etcd:\n{store}"
        ))
    }

    #[test]
    fn etcd_fields_are_checked_and_named() {
        let ok = parse("        endpoints: [http://127.0.0.1:2379]\n").unwrap();
        let etcd = ok.management.unwrap().store.unwrap().etcd;
        assert_eq!(etcd.prefix, "/policy-kernel/");
        assert_eq!(etcd.request_timeout_ms, 3000);
        let cases = [
            ("        endpoints: []\n", "etcd.endpoints"),
            ("        endpoints: [127.0.0.1:2379]\n", "http://"),
            ("        endpoints: [https://e:2379]\n", "need tls"),
            (
                "        endpoints: [http://e:2379]\n        prefix: /x\n",
                "etcd.prefix",
            ),
            (
                "        endpoints: [https://e:2379]\n        tls: {ca: /ca, cert: /c}\n",
                "cert and key",
            ),
            (
                "        endpoints: [http://e:2379]\n        username: u\n",
                "etcd.password",
            ),
            (
                "        endpoints: [http://e:2379]\n        password: p\n",
                "etcd.username",
            ),
            ("        endpoints: [http://e:2379]\n        bogus: 1\n", "bogus"),
        ];
        for (yaml, want) in cases {
            let e = parse(yaml).unwrap_err().to_string();
            assert!(e.contains(want), "{yaml}: {e}");
        }
        let dir = tempfile::tempdir().unwrap();
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "s3cret\n").unwrap();
        let cfg = parse(&format!(
            "        endpoints: [http://e:2379]\n        username: u\n        password_file: {}\n",
            pw.display()
        ))
        .unwrap();
        let etcd = cfg.management.unwrap().store.unwrap().etcd;
        assert_eq!(etcd.password().unwrap().as_deref(), Some("s3cret"));
    }
}
