//! Agent processes on Unix sockets: the scripted `policy-test-agent`, and
//! any other agent program (the reference agent binaries, the SDK's
//! `example-agent`, the Python example agent); and their entries in a
//! kernel config.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{agent_bin, wait_socket, Proc};

/// A `policy-test-agent` process.
pub struct TestAgent {
    pub proc: Option<Proc>,
    pub socket: PathBuf,
    pub script: PathBuf,
    pub events: PathBuf,
    log: PathBuf,
}

impl TestAgent {
    /// Starts an agent named `name` from `script` (YAML without `name` and
    /// `events_file`, which are added), and waits for its socket.
    pub fn start(dir: &Path, name: &str, script: &str) -> Self {
        let socket = dir.join(format!("{name}.sock"));
        let events = dir.join(format!("{name}.events"));
        let path = dir.join(format!("{name}.agent.yaml"));
        std::fs::write(
            &path,
            format!("name: {name}\nevents_file: {}\n{script}", events.display()),
        )
        .expect("write script");
        let mut agent = Self {
            proc: None,
            socket,
            script: path,
            events,
            log: dir.join(format!("{name}.agent.log")),
        };
        agent.restart();
        agent
    }

    /// (Re)starts the process.
    pub fn restart(&mut self) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_policy-test-agent"));
        cmd.arg("--socket").arg(&self.socket).arg("--script").arg(&self.script);
        self.proc = Some(Proc::spawn("agent", &mut cmd, &self.log));
        wait_socket(&self.socket, Duration::from_secs(10));
    }

    /// SIGKILLs the process (its socket file stays behind, as after a crash).
    pub fn kill(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
    }

    /// Lines of the events file.
    pub fn events(&self) -> Vec<String> {
        std::fs::read_to_string(&self.events)
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }
}

/// How an agent program is run: the program, its arguments (the socket
/// among them) and extra environment variables.
#[derive(Debug, Clone)]
pub struct AgentCmd {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl AgentCmd {
    /// A binary of the agents' package: `bin --socket=SOCKET ARGS`.
    pub fn bin(bin: &str, socket: &Path, args: &[&str]) -> Self {
        let mut all = vec![format!("--socket={}", socket.display())];
        all.extend(args.iter().map(|a| a.to_string()));
        Self {
            program: agent_bin(bin),
            args: all,
            env: Vec::new(),
        }
    }
}

/// An agent program on a Unix socket (a reference agent binary, the SDK's
/// example agent, the Python example agent), killed when dropped; it can be
/// killed and started again on the same socket.
pub struct RefAgent {
    /// The name in the kernel config.
    pub name: String,
    pub socket: PathBuf,
    pub proc: Option<Proc>,
    pub log: PathBuf,
    cmd: AgentCmd,
    wait: Duration,
}

impl RefAgent {
    /// Starts `bin --socket=<dir>/<name>.sock ARGS` (log `<dir>/<name>.log`)
    /// and waits until it listens.
    pub fn start(dir: &Path, name: &str, bin: &str, args: &[&str]) -> Self {
        let socket = dir.join(format!("{name}.sock"));
        let cmd = AgentCmd::bin(bin, &socket, args);
        Self::launch(
            name,
            socket,
            dir.join(format!("{name}.log")),
            cmd,
            Duration::from_secs(20),
        )
    }

    /// Starts `cmd` (which serves on `socket`, logging to `log`) and waits
    /// up to `wait` until it listens.
    pub fn launch(name: &str, socket: PathBuf, log: PathBuf, cmd: AgentCmd, wait: Duration) -> Self {
        let mut agent = RefAgent {
            name: name.to_string(),
            socket,
            proc: None,
            log,
            cmd,
            wait,
        };
        agent.restart();
        agent
    }

    /// (Re)starts the process and waits until it listens.
    pub fn restart(&mut self) {
        let mut cmd = Command::new(&self.cmd.program);
        cmd.args(&self.cmd.args).envs(self.cmd.env.iter().map(|(k, v)| (k, v)));
        self.proc = Some(Proc::spawn(&self.name, &mut cmd, &self.log));
        let deadline = Instant::now() + self.wait;
        while std::os::unix::net::UnixStream::connect(&self.socket).is_err() {
            assert!(
                Instant::now() < deadline,
                "{} did not listen on {} within {:?}:\n{}",
                self.name,
                self.socket.display(),
                self.wait,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILLs the process (its socket file stays behind, as after a crash).
    pub fn kill(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
    }

    /// What it logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its entry under `agents:` (health checked every 100 ms).
    pub fn entry(&self) -> String {
        agent_entry_at(&self.name, &self.socket, "")
    }
}

/// An agent's entry in a kernel config (`extra`: more 6-space indented
/// lines), health checked every 100 ms unless `extra` says otherwise.
pub fn agent_entry_at(name: &str, socket: &Path, extra: &str) -> String {
    let mut health = String::new();
    if !extra.contains("health_check_interval_ms:") {
        health.push_str("      health_check_interval_ms: 100\n");
    }
    // A check may wait up to a second: on a busy 2-core machine the default
    // 100 ms is missed now and then, and one missed check takes the agent
    // out (the kernel's 503) for a moment. Tests of health set their own.
    if !extra.contains("health_check_timeout_ms:") {
        health.push_str("      health_check_timeout_ms: 1000\n");
    }
    format!(
        "    - name: {name}\n      socket_path: {}\n{health}{extra}",
        socket.display()
    )
}

/// Agent entry for a kernel config, with fast health checks for tests.
pub fn agent_entry(name: &str, agent: &TestAgent, extra: &str) -> String {
    agent_entry_at(name, &agent.socket, extra)
}

/// An agent entry for a kernel config (`extra`: more 6-space indented lines).
pub fn agent_yaml(name: &str, socket: &Path, health_ms: u64, extra: &str) -> String {
    agent_entry_at(
        name,
        socket,
        &format!("      health_check_interval_ms: {health_ms}\n{extra}"),
    )
}
