//! The setup the end-to-end tests of the reference agents repeat: a
//! reference agent binary started on `<dir>/<name>.sock` (its kernel config
//! entry ready), the wait until the kernel finds every agent healthy, and the
//! kernel and Envoy logs for a failure message.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::{agent_bin, until, wait_socket, Envoy, KernelProc, Proc};

/// A reference agent process, killed (by pid) when dropped.
pub struct RefAgent {
    /// The name in the kernel config.
    pub name: String,
    pub socket: PathBuf,
    pub proc: Proc,
}

impl RefAgent {
    /// Starts `bin --socket=<dir>/<name>.sock ARGS` (log `<dir>/<name>.log`)
    /// and waits until it listens.
    pub fn start(dir: &Path, name: &str, bin: &str, args: &[&str]) -> Self {
        let socket = dir.join(format!("{name}.sock"));
        let mut cmd = Command::new(agent_bin(bin));
        cmd.arg(format!("--socket={}", socket.display())).args(args);
        let proc = Proc::spawn(bin, &mut cmd, &dir.join(format!("{name}.log")));
        wait_socket(&socket, Duration::from_secs(20));
        RefAgent {
            name: name.to_string(),
            socket,
            proc,
        }
    }

    /// Its entry under `agents:` (health checked every 100 ms).
    pub fn entry(&self) -> String {
        format!(
            "    - name: {}\n      socket_path: {}\n      health_check_interval_ms: 100\n",
            self.name,
            self.socket.display()
        )
    }
}

/// The `agents:` section for `agents`.
pub fn agents_section(agents: &[&RefAgent]) -> String {
    let mut out = String::from("  agents:\n");
    for a in agents {
        out += &a.entry();
    }
    out
}

/// Waits until the kernel has discovered `count` agents, all healthy.
pub async fn until_agents_healthy(kernel: &KernelProc, count: usize) {
    until("agents healthy", Duration::from_secs(20), || async {
        let (_, cfg) = kernel.admin_get("/config");
        serde_json::from_str::<serde_json::Value>(&cfg)
            .ok()
            .and_then(|c| {
                c["agents"]
                    .as_array()
                    .map(|a| a.len() == count && a.iter().all(|x| x["healthy"] == true))
            })
            .unwrap_or(false)
    })
    .await;
}

/// The kernel's and Envoy's logs, for a failure message.
pub fn logs(kernel: &KernelProc, envoy: &Envoy) -> String {
    format!("--- kernel ---\n{}\n--- envoy ---\n{}", kernel.log(), envoy.log())
}

/// `contextBudget`'s verdict on one answer: its `x-context-budget` header
/// on a 200, `"429"` on the hard limit (whose reason it checks); any other
/// status fails the test with `diag`.
pub fn budget_verdict(got: &super::Got, diag: impl FnOnce() -> String) -> String {
    match got.status {
        200 => got.header("x-context-budget").unwrap_or("-").to_string(),
        429 => {
            assert_eq!(got.json()["reason"], "context_budget_exceeded", "{}", got.body);
            "429".to_string()
        }
        other => panic!("{other}: {}\n{}", got.body, diag()),
    }
}
