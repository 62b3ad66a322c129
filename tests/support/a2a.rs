//! The official A2A SDKs as a real agent server and real clients
//! (`tests/a2a/`): the Python SDK (PyPI `a2a-sdk`, in the project's `.venv`)
//! as server (`server.py`) and client (`client.py`), and the JavaScript SDK
//! (npm `@a2a-js/sdk`, in `tests/a2a/js/node_modules`) as a second client
//! (`js/client.mjs`). `make test` installs both.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::python::python;
use super::{root, Proc};

fn a2a_dir() -> PathBuf {
    root().join("tests/a2a")
}

/// The A2A agent server, killed (by pid) when dropped.
pub struct A2aServer {
    pub proc: Proc,
    pub port: u16,
    pub log: PathBuf,
}

impl A2aServer {
    /// Starts `server.py` on a port it picks; its log is `<dir>/a2a-server.log`.
    pub fn start(dir: &Path) -> Self {
        A2aServer::start_with(dir, None)
    }

    /// Starts `server.py`, recording what its agent acts on into `record`
    /// (`--record`) when given.
    pub fn start_with(dir: &Path, record: Option<&Path>) -> Self {
        let port_file = dir.join("a2a-server.port");
        let log = dir.join("a2a-server.log");
        let mut cmd = Command::new(python());
        cmd.current_dir(a2a_dir())
            .arg(a2a_dir().join("server.py"))
            .arg("--port-file")
            .arg(&port_file);
        if let Some(r) = record {
            cmd.arg("--record").arg(r);
        }
        let proc = Proc::spawn("a2a-server", &mut cmd, &log);
        let port = super::port_from_file(&port_file, Duration::from_secs(30), "the A2A server", &log);
        A2aServer { proc, port, log }
    }

    /// Starts the JavaScript SDK's agent (`js/server.mjs`), recording what
    /// its agent acts on into `record`; its log is `<dir>/a2a-js-server.log`.
    pub fn start_js(dir: &Path, record: &Path) -> Self {
        let js = a2a_dir().join("js");
        let port_file = dir.join("a2a-js-server.port");
        let log = dir.join("a2a-js-server.log");
        let mut cmd = Command::new("node");
        cmd.current_dir(&js)
            .arg(js.join("server.mjs"))
            .arg("--port-file")
            .arg(&port_file)
            .arg("--record")
            .arg(record);
        let proc = Proc::spawn("a2a-js-server", &mut cmd, &log);
        let port = super::port_from_file(&port_file, Duration::from_secs(30), "the A2A JS server", &log);
        A2aServer { proc, port, log }
    }

    /// The server's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Runs the parser-parity harness (`parity.py`) against the gateway's
/// `base` URL of the agent, reading the server's `record` (`server`:
/// `python` or `js`, the SDK behind): its exit status
/// and its report (stdout and stderr).
pub fn parity(base: &str, record: &Path, alice: &str, bob: &str, server: &str) -> (bool, String) {
    let out = Command::new(python())
        .current_dir(a2a_dir())
        .arg(a2a_dir().join("parity.py"))
        .arg(base)
        .arg(record)
        .args([alice, bob, "--server", server])
        .output()
        .expect("run parity.py");
    (
        out.status.success(),
        format!(
            "{}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The JSON lines a client printed, and its stderr.
fn lines(out: std::process::Output) -> (Vec<Value>, String) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let lines = stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    (lines, format!("{}\n{stdout}\n{stderr}", out.status))
}

/// One Python SDK client run: the card from `card_base`, then `steps` over
/// `binding` (`jsonrpc` or `rest`), with `headers` on every request.
pub fn py_client(card_base: &str, headers: &Value, steps: &Value, binding: &str) -> (Vec<Value>, String) {
    py_client_v(card_base, headers, steps, binding, false)
}

/// [`py_client`], with the SDK's protocol 0.3 transports when `v03`.
pub fn py_client_v(card_base: &str, headers: &Value, steps: &Value, binding: &str, v03: bool) -> (Vec<Value>, String) {
    let mut cmd = Command::new(python());
    cmd.current_dir(a2a_dir()).arg(a2a_dir().join("client.py"));
    run_client(cmd, card_base, headers, steps, binding, v03)
}

/// Runs a client command with the clients' arguments; its lines.
fn run_client(
    mut cmd: Command,
    card_base: &str,
    headers: &Value,
    steps: &Value,
    binding: &str,
    v03: bool,
) -> (Vec<Value>, String) {
    cmd.args([
        card_base,
        &headers.to_string(),
        &steps.to_string(),
        "--binding",
        binding,
    ]);
    if v03 {
        cmd.arg("--v03");
    }
    lines(cmd.output().expect("run an A2A client"))
}

/// One JavaScript SDK client run (`js/client.mjs`), as [`py_client`].
pub fn js_client(card_base: &str, headers: &Value, steps: &Value) -> (Vec<Value>, String) {
    js_client_v(card_base, headers, steps, "jsonrpc", false)
}

/// [`js_client`] over `binding`, with the SDK's 0.3 transports when `v03`.
pub fn js_client_v(card_base: &str, headers: &Value, steps: &Value, binding: &str, v03: bool) -> (Vec<Value>, String) {
    let js = a2a_dir().join("js");
    assert!(
        js.join("node_modules/@a2a-js/sdk").exists(),
        "{}/node_modules missing: run `make test` (it runs `npm ci` there)",
        js.display()
    );
    let mut cmd = Command::new("node");
    cmd.current_dir(&js).arg(js.join("client.mjs"));
    run_client(cmd, card_base, headers, steps, binding, v03)
}

/// The line of `step` (the first one).
pub fn step<'a>(lines: &'a [Value], step: &str) -> &'a Value {
    static NULL: Value = Value::Null;
    lines.iter().find(|l| l["step"] == step).unwrap_or(&NULL)
}
