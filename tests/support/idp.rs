//! A real OpenID provider (npm `oidc-provider`, `tests/idp/provider.mjs`)
//! and the MCP TypeScript SDK's server and client scripts beside it, run
//! with the system's `node` from the project-local `tests/idp/node_modules`
//! that `make test` installs (`npm ci`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{free_port, Proc};

/// `tests/idp`, checked to hold its installed packages.
pub fn idp_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/idp");
    assert!(
        dir.join("node_modules/oidc-provider").exists() && dir.join("node_modules/@modelcontextprotocol/sdk").exists(),
        "{}/node_modules missing: run `make test` (it runs `npm ci` there; needs node and npm)",
        dir.display()
    );
    dir
}

fn wait_file(path: &Path, what: &str, log: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(s) = std::fs::read_to_string(path).ok().filter(|s| !s.trim().is_empty()) {
            return s.trim().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not start:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The OpenID provider, on a port fixed for its life (restarts keep the
/// issuer URL and the signing keys).
pub struct NodeIdp {
    pub port: u16,
    dir: PathBuf,
    proc: Option<Proc>,
    starts: u32,
    /// Its files' prefix in `dir` (`idp`).
    name: String,
    /// More flags (`--interactive`, `--role upstream`, ...).
    args: Vec<String>,
}

impl NodeIdp {
    /// Starts the provider with its files in `dir`.
    pub fn start(dir: &Path) -> Self {
        Self::start_with(dir, "idp", &[])
    }

    /// Starts a provider named `name` (its files' prefix in `dir`) with
    /// more flags `args` (`--interactive`, `--role upstream`, ...).
    pub fn start_with(dir: &Path, name: &str, args: &[&str]) -> Self {
        let mut idp = NodeIdp {
            port: free_port(),
            dir: dir.to_path_buf(),
            proc: None,
            starts: 0,
            name: name.to_string(),
            args: args.iter().map(|a| a.to_string()).collect(),
        };
        idp.restart();
        idp
    }

    /// A user's JWT access token for `resource` (the provider's test-only
    /// `POST /test/token`: no login).
    pub async fn user_token(&self, sub: &str, resource: &str, scope: &str) -> String {
        let v: serde_json::Value = reqwest::Client::new()
            .post(format!("{}/test/token", self.issuer()))
            .json(&serde_json::json!({"sub": sub, "resource": resource, "scope": scope}))
            .send()
            .await
            .expect("test token")
            .json()
            .await
            .expect("test token answer");
        v["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no token: {v}"))
            .to_string()
    }

    /// The issuer URL.
    pub fn issuer(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Stops the provider (by its pid).
    pub fn stop(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
    }

    /// (Re)starts it on the same port with the same keys.
    pub fn restart(&mut self) {
        self.stop();
        self.starts += 1;
        let port_file = self.dir.join(format!("{}.port.{}", self.name, self.starts));
        let log = self.log_path();
        let mut cmd = Command::new("node");
        cmd.current_dir(idp_dir())
            .arg("provider.mjs")
            .args(["--port", &self.port.to_string()])
            .arg("--keys")
            .arg(self.dir.join(format!("{}-keys.json", self.name)))
            .arg("--port-file")
            .arg(&port_file)
            .args(&self.args);
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("provider log");
        let err = log_file.try_clone().expect("provider log");
        self.proc = Some(Proc::spawn_io(
            "oidc-provider",
            &mut cmd,
            std::process::Stdio::from(log_file),
            std::process::Stdio::from(err),
        ));
        wait_file(&port_file, "oidc-provider", &log);
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join(format!("{}.log", self.name))
    }

    /// Its log (one line per request).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Requests it served since its last start, for `path`.
    pub async fn hits(&self, path: &str) -> u64 {
        let body = reqwest::get(format!("{}/test/hits", self.issuer()))
            .await
            .expect("provider hits")
            .text()
            .await
            .unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        v[path].as_u64().unwrap_or(0)
    }

    /// Rotates its signing key (the old one stays published); the new `kid`.
    pub async fn rotate(&self) -> String {
        let v: serde_json::Value = reqwest::Client::new()
            .post(format!("{}/test/rotate", self.issuer()))
            .send()
            .await
            .expect("rotate")
            .json()
            .await
            .expect("rotate answer");
        v["kid"].as_str().expect("kid").to_string()
    }

    /// A client-credentials access token: a JWT for `resource`, opaque without.
    pub async fn token(&self, client: &str, secret: &str, scope: &str, resource: Option<&str>) -> String {
        let enc = |s: &str| percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string();
        let mut body = format!("grant_type=client_credentials&scope={}", enc(scope));
        if let Some(r) = resource {
            body += &format!("&resource={}", enc(r));
        }
        let resp = reqwest::Client::new()
            .post(format!("{}/token", self.issuer()))
            .basic_auth(client, Some(secret))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .expect("token request");
        let v: serde_json::Value = resp.json().await.expect("token answer");
        v["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no token: {v}\n{}", self.log()))
            .to_string()
    }
}

impl Drop for NodeIdp {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The SDK's MCP server (`tests/idp/mcp-server.mjs`) and its port.
pub fn mcp_server(dir: &Path) -> (Proc, u16) {
    let port_file = dir.join("mcp.port");
    let log = dir.join("mcp-server.log");
    let mut cmd = Command::new("node");
    cmd.current_dir(idp_dir())
        .arg("mcp-server.mjs")
        .arg("--port-file")
        .arg(&port_file);
    let proc = Proc::spawn("mcp-server", &mut cmd, &log);
    let port = wait_file(&port_file, "MCP server", &log).parse().expect("port");
    (proc, port)
}

/// Runs the SDK's client (`tests/idp/mcp-client.mjs`): its JSON lines.
pub fn mcp_client(url: &str, client: &str, secret: &str, scope: &str, tools: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new("node")
        .current_dir(idp_dir())
        .arg("mcp-client.mjs")
        .args([url, client, secret, scope])
        .args(tools)
        .output()
        .expect("run the MCP client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<serde_json::Value> = stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    assert!(
        !lines.is_empty(),
        "MCP client printed nothing ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    lines
}
