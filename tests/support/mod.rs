//! Test harness: real processes (kernel binary, agents, Envoy) on sockets
//! and ports picked at run time, and in-process upstreams. Every process is
//! killed when its handle drops. An end-to-end test starts its whole stack
//! (Envoy, kernel, agents, upstream) with [`stack::Stack::builder`].
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod a2a;
pub mod a2a_stack;
pub mod agents;
pub mod approval_client;
pub mod approvals;
pub mod certs;
pub mod chaos;
pub mod envoy;
pub mod etcd;
pub mod extproc;
pub mod fleet;
pub mod h2raw;
pub mod http;
pub mod idp;
pub mod jwt;
pub mod kernel;
pub mod load;
pub mod management;
pub mod mcp_2026;
pub mod mcp_ts;
pub mod procs;
pub mod python;
/// The agents' redis-server helper, shared (one file for both packages).
#[path = "../../agents/tests/common/redis_server.rs"]
pub mod redis;
pub mod reference;
pub mod sse_upstream;
pub mod stack;
pub mod supervise;
#[allow(unused_imports)]
pub use agents::{agent_entry, RefAgent, TestAgent};
#[allow(unused_imports)]
pub use envoy::Envoy;
#[allow(unused_imports)]
pub use http::{send, Got, Upstream};
#[allow(unused_imports)]
pub use kernel::KernelProc;
#[allow(unused_imports)]
pub use stack::Stack;

/// The project root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A binary of the policy-agents package (reference agents), next to this
/// test's executable.
pub fn agent_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let bin = dir.join(name);
    assert!(
        bin.exists(),
        "{} missing: run the workspace tests (`make test` or `cargo test --workspace`)",
        bin.display()
    );
    bin
}

/// A temp directory for one test's sockets, configs and logs.
pub fn workdir() -> tempfile::TempDir {
    // Short paths: Unix socket paths are limited to ~100 bytes.
    tempfile::Builder::new()
        .prefix("pk")
        .tempdir_in("/tmp")
        .expect("tempdir")
}

/// A TCP port on loopback that is free now, for a server the test starts
/// next and that cannot bind port 0 itself (the kernel's metrics endpoint,
/// where 0 means off). Envoy binds port 0 and reports its ports instead
/// (`Envoy::launch`).
///
/// Taken from below the system's ephemeral range: a port from there (what
/// binding port 0 hands out) can be taken, between this call and the server's
/// bind, by any outgoing connection or other test binding port 0, which made
/// Envoy fail with "Address already in use" under parallel tests. Below the
/// range only explicit binds land, and the counter keeps this test binary's
/// picks apart; the start is spread by process id so that binaries run one
/// after another do not reuse the ports the previous one left in TIME_WAIT.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    let (base, span) = if low > 12_000 {
        (10_000, low - 10_000)
    } else {
        (61_000, 4_000)
    };
    let start = std::process::id().wrapping_mul(7919) % span;
    for _ in 0..span {
        let port = base + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % span;
        if let Ok(port) = u16::try_from(port) {
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    panic!("no free loopback port in {base}..{}", base + span)
}

/// Polls `f` every 20 ms until it holds; fails the test after `timeout`.
pub async fn until<F: std::future::Future<Output = bool>>(what: &str, timeout: Duration, mut f: impl FnMut() -> F) {
    let deadline = Instant::now() + timeout;
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until something accepts on the Unix socket `path`.
pub fn wait_socket(path: &Path, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("nothing listening on {} after {timeout:?}", path.display());
}

/// A child process killed on drop.
pub struct Proc {
    pub child: Child,
    pub name: String,
}

impl Proc {
    pub fn spawn(name: &str, cmd: &mut Command, log: &Path) -> Self {
        let out = std::fs::File::create(log).expect("log file");
        let err = out.try_clone().expect("log file");
        Self::spawn_io(name, cmd, Stdio::from(out), Stdio::from(err))
    }

    /// Spawns with the given standard output and error.
    pub fn spawn_io(name: &str, cmd: &mut Command, stdout: Stdio, stderr: Stdio) -> Self {
        let child = cmd
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        Self {
            child,
            name: name.to_string(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([&format!("-{sig}"), &self.pid().to_string()])
            .status();
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits (without blocking the runtime) for the process to exit; fails
    /// the test after `timeout`, with `log` in the message.
    pub async fn exit_status(&mut self, timeout: Duration, log: impl Fn() -> String) -> std::process::ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not exit within {timeout:?}:\n{}",
                self.name,
                log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits up to `timeout` for a process to write its port to `file`; fails
/// the test with the process's `log` when it does not.
pub fn port_from_file(file: &Path, timeout: Duration, what: &str, log: &Path) -> u16 {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(p) = std::fs::read_to_string(file).ok().and_then(|s| s.trim().parse().ok()) {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not start:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The value of one sample in Prometheus text (`name{label="v",...}`, labels
/// in alphabetical order, as rendered); 0 if absent.
pub fn sample(text: &str, sample: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(sample).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// A blocking HTTP/1.1 GET on loopback: (status, body).
pub fn http_get(port: u16, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}
