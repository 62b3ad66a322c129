//! The official MCP TypeScript SDK (npm `@modelcontextprotocol/sdk`,
//! protocol 2025-11-25) as a real server and a real client:
//! `tests/mcp/ts/server.mjs` and `tests/mcp/ts/client.mjs`, run with
//! `node`, their packages in `tests/mcp/ts/node_modules` (`make test` runs
//! `npm ci` there).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::Proc;

/// The folder of the scripts, checked to have its packages installed.
pub fn ts_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/ts");
    assert!(
        dir.join("node_modules/@modelcontextprotocol/sdk").exists(),
        "{}/node_modules missing: run `make test` (it runs `npm ci` there)",
        dir.display()
    );
    dir
}

/// The TypeScript MCP server, killed (by pid) when dropped.
pub struct TsServer {
    pub proc: Proc,
    pub port: u16,
    pub log: PathBuf,
}

impl TsServer {
    /// Starts `server.mjs` on a port it picks; its log is `<dir>/ts-server.log`.
    pub fn start(dir: &Path) -> Self {
        TsServer::start_with(dir, None)
    }

    /// Starts `server.mjs`, recording the tool calls it runs into `record`
    /// (`--record`) when given.
    pub fn start_with(dir: &Path, record: Option<&Path>) -> Self {
        let ts = ts_dir();
        let port_file = dir.join("ts-server.port");
        let log = dir.join("ts-server.log");
        let mut cmd = Command::new("node");
        cmd.current_dir(&ts)
            .arg(ts.join("server.mjs"))
            .arg("--port-file")
            .arg(&port_file);
        if let Some(r) = record {
            cmd.arg("--record").arg(r);
        }
        let proc = Proc::spawn("ts-mcp-server", &mut cmd, &log);
        let port = super::port_from_file(&port_file, Duration::from_secs(20), "TypeScript MCP server", &log);
        TsServer { proc, port, log }
    }

    /// The server's JSON log lines.
    pub fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

/// Runs one TypeScript client session on `url` with `headers`: one JSON
/// value per step of `steps` (see `client.mjs`), and its stderr.
pub fn ts_session(url: &str, headers: &Value, steps: &Value) -> (Vec<Value>, String) {
    let ts = ts_dir();
    let out = Command::new("node")
        .current_dir(&ts)
        .arg(ts.join("client.mjs"))
        .args([url, &headers.to_string(), &steps.to_string()])
        .output()
        .expect("run node client.mjs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let lines: Vec<Value> = stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    assert_eq!(
        lines.len(),
        steps.as_array().map_or(0, Vec::len),
        "TypeScript client session failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    (lines, stderr)
}
