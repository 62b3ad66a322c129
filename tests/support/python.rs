//! Python from the project's `.venv` (`make test` installs what the tests
//! need there): the Python example agent (`agents/examples/python`) and the
//! MCP server of the MCP tests (`tests/mcp/server.py`, the official SDK).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::agents::AgentCmd;
use super::{root, Proc};

/// The venv's Python (fails the test, saying how to make it, when missing).
pub fn python() -> PathBuf {
    let p = root().join(".venv/bin/python");
    assert!(
        p.exists(),
        "{} missing: run `make test` (installs tests/requirements.txt, with `mcp`, into .venv)",
        p.display()
    );
    p
}

/// The venv's Python, with grpcio and grpcio-tools (the example agent's).
pub fn grpc_python() -> PathBuf {
    let python = root().join(".venv/bin/python");
    let has_grpc = Command::new(&python)
        .args(["-c", "import grpc, grpc_tools"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(has_grpc, "grpcio and grpcio-tools missing from .venv: run `make test`, which installs agents/examples/python/requirements.txt there");
    python
}

/// The Python example agent serving on `socket`.
pub fn example_agent(socket: &Path) -> AgentCmd {
    AgentCmd {
        program: grpc_python(),
        args: vec![
            root().join("agents/examples/python/agent.py").display().to_string(),
            "--socket".into(),
            socket.display().to_string(),
        ],
        env: Vec::new(),
    }
}

/// The MCP server (`tests/mcp/server.py`, event-stream replies) on a port
/// it picks, killed when dropped.
pub struct McpServer {
    pub proc: Proc,
    pub port: u16,
}

impl McpServer {
    /// Starts it in `dir` (log `mcp-server.log`; the tool calls it runs,
    /// one JSON line each, in `mcp-calls.jsonl`) and waits for its port.
    pub fn start(dir: &Path) -> Self {
        Self::start_script(dir, "tests/mcp/server.py", &[])
    }

    /// Starts `script` (a path from the project's root: Python, or Node
    /// for `.mjs`) with `args` the same way.
    pub fn start_script(dir: &Path, script: &str, args: &[&str]) -> Self {
        let port_file = dir.join("mcp.port");
        let log = dir.join("mcp-server.log");
        let mut cmd = Command::new(if script.ends_with(".mjs") {
            "node".into()
        } else {
            python()
        });
        cmd.arg(root().join(script))
            .args(args)
            .arg("--port-file")
            .arg(&port_file)
            .arg("--record")
            .arg(dir.join("mcp-calls.jsonl"));
        let proc = Proc::spawn("mcp-server", &mut cmd, &log);
        let port = super::port_from_file(&port_file, Duration::from_secs(30), "MCP server", &log);
        Self { proc, port }
    }
}
