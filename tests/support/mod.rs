//! Test harness: real processes (kernel binary, test agents, Envoy) on
//! sockets and ports picked at run time, and an in-process echo upstream.
//! Every process is killed when its handle drops.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

pub mod chaos;
pub mod envoy;
pub mod extproc;
pub mod h2raw;
pub mod idp;
pub mod load;
pub mod management;
pub mod procs;
/// The agents' redis-server helper, shared (one file for both packages).
#[path = "../../agents/tests/common/redis_server.rs"]
pub mod redis;
pub mod reference;
pub mod sse_upstream;
pub mod supervise;
#[allow(unused_imports)]
pub use envoy::Envoy;

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

/// A `policy-kernel` process serving ext_proc on a Unix socket.
pub struct KernelProc {
    pub proc: Proc,
    pub socket: PathBuf,
    pub config: PathBuf,
    pub log: PathBuf,
    pub metrics_port: u16,
    server: String,
}

impl KernelProc {
    /// Writes `config` (the YAML under `policy_kernel:`, without `server`) and
    /// starts the kernel with its socket in `dir`.
    pub fn start(dir: &Path, body: &str) -> Self {
        Self::start_with(dir, "", body)
    }

    /// Like `start`, with extra lines under `server:` (4-space indented).
    pub fn start_with(dir: &Path, server: &str, body: &str) -> Self {
        Self::start_env(dir, server, body, &[])
    }

    /// Like `start_with`, with extra environment variables for the process.
    pub fn start_env(dir: &Path, server: &str, body: &str, env: &[(&str, &str)]) -> Self {
        Self::launch(dir, server, body, env, None, &[])
    }

    /// Like `start_with`, the kernel run by `policy-kernel supervise` (the
    /// process is the parent; the generations are its children).
    pub fn start_supervised(dir: &Path, server: &str, body: &str) -> Self {
        Self::launch(dir, server, body, &[], None, &["supervise"])
    }

    /// Like `start`, with the process's standard output going to `stdout`
    /// instead of the log file (standard error still goes there).
    pub fn start_with_stdout(dir: &Path, body: &str, stdout: Stdio) -> Self {
        Self::launch(dir, "", body, &[], Some(stdout), &[])
    }

    fn launch(
        dir: &Path,
        server: &str,
        body: &str,
        env: &[(&str, &str)],
        stdout: Option<Stdio>,
        args: &[&str],
    ) -> Self {
        let socket = dir.join("kernel.sock");
        let config = dir.join("kernel.yaml");
        let metrics_port = free_port();
        let log = dir.join("kernel.log");
        let mut k = Self {
            proc: Proc::spawn(
                "kernel-placeholder",
                Command::new("true").arg(""),
                &dir.join("placeholder.log"),
            ),
            socket,
            config,
            log,
            metrics_port,
            server: server.to_string(),
        };
        k.write_config(body);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_policy-kernel"));
        cmd.args(args)
            .arg(format!("--config={}", k.config.display()))
            .envs(env.iter().copied());
        k.proc = match stdout {
            Some(out) => {
                let err = std::fs::File::create(&k.log).expect("log file");
                Proc::spawn_io("kernel", &mut cmd, out, Stdio::from(err))
            }
            None => Proc::spawn("kernel", &mut cmd, &k.log),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(&k.socket).is_err() {
            assert!(Instant::now() < deadline, "kernel did not start:\n{}", k.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        // The ext_proc socket is bound before the admin endpoints: wait for
        // those too, so that a test may read metrics at once.
        while k.admin_get("/healthz").0 != 200 {
            assert!(
                Instant::now() < deadline,
                "kernel admin endpoints did not start:\n{}",
                k.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        k
    }

    /// (Re)writes the config file with the same server section and `body`.
    pub fn write_config(&self, body: &str) {
        let text = format!(
            "policy_kernel:\n  server:\n    port: 0\n    socket_path: {}\n{}  observability:\n    metrics_port: {}\n    log_level: debug\n{body}",
            self.socket.display(),
            self.server,
            self.metrics_port
        );
        std::fs::write(&self.config, text).expect("write config");
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The port of the ext_proc TCP listener, as the kernel logged it at start.
    pub fn tcp_port(&self) -> u16 {
        self.log()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|l| l["message"] == "policy kernel serving ext_proc")
            .and_then(|l| l["address"].as_str()?.parse::<SocketAddr>().ok())
            .map(|a| a.port())
            .unwrap_or_else(|| panic!("no ext_proc address in the log:\n{}", self.log()))
    }

    /// GET on the metrics port.
    pub fn admin_get(&self, path: &str) -> (u16, String) {
        http_get(self.metrics_port, path)
    }

    /// The value of one sample, e.g. `policy_kernel_config_version` or
    /// `policy_kernel_requests_total{agent="a",route="r",status="ok"}`
    /// (labels in alphabetical order, as Prometheus renders them); 0 if absent.
    pub fn metric(&self, sample: &str) -> f64 {
        let (_, text) = self.admin_get("/metrics");
        text.lines()
            .find_map(|l| l.strip_prefix(sample).and_then(|rest| rest.strip_prefix(' ')))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    }
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

/// Agent entry for a kernel config, with fast health checks for tests.
pub fn agent_entry(name: &str, agent: &TestAgent, extra: &str) -> String {
    // A 100 ms health-check interval unless the extra lines set their own.
    let health = if extra.contains("health_check_interval_ms:") {
        ""
    } else {
        "      health_check_interval_ms: 100\n"
    };
    format!(
        "    - name: {name}\n      socket_path: {}\n{health}{extra}",
        agent.socket.display()
    )
}

/// An HTTP upstream that answers with a JSON echo of what it received:
/// `{"method", "path", "headers": {name: value}, "body"}`. A request header
/// `x-echo-status` sets the response status; `x-echo-body` replaces the body.
pub struct Upstream {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn echo(req: hyper::Request<hyper::body::Incoming>) -> Result<hyper::Response<Full<Bytes>>, hyper::Error> {
    let method = req.method().to_string();
    let path = req.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
    let mut headers = serde_json::Map::new();
    for k in req.headers().keys() {
        let values: Vec<String> = req
            .headers()
            .get_all(k)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        headers.insert(k.to_string(), serde_json::Value::String(values.join(",")));
    }
    let status = req
        .headers()
        .get("x-echo-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(200u16);
    let fixed = req
        .headers()
        .get("x-echo-body")
        .map(|v| Bytes::copy_from_slice(v.as_bytes()));
    let body = req.into_body().collect().await?.to_bytes();
    let out = match fixed {
        Some(b) => b,
        None => Bytes::from(
            serde_json::json!({"method": method, "path": path, "headers": headers, "body": String::from_utf8_lossy(&body)}).to_string(),
        ),
    };
    Ok(hyper::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .header("x-upstream", "echo")
        .body(Full::new(out))
        .unwrap_or_default())
}

impl Upstream {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind upstream");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service_fn(echo))
                        .await;
                });
            }
        });
        Self { addr, task }
    }
}

/// A response as the client got it.
#[derive(Debug)]
pub struct Got {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Got {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    /// The echo upstream's JSON (panics when the upstream did not answer).
    pub fn echo(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not an echo ({e}): {} {}", self.status, self.body))
    }
    /// The body as JSON (panics when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }
    pub fn echoed_header(&self, name: &str) -> Option<String> {
        self.echo()["headers"][name].as_str().map(String::from)
    }
}

/// Sends one request.
pub async fn send(
    client: &reqwest::Client,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Got {
    let mut req = client.request(reqwest::Method::from_bytes(method.as_bytes()).expect("method"), url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(b) = body {
        req = req.body(b.to_string());
    }
    let resp = req.send().await.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.text().await.unwrap_or_default();
    Got { status, headers, body }
}
