//! The kernel binary as the tests run it: its config file (the harness'
//! server section, or a whole file), its process, its admin endpoints, and a
//! restart on the same configuration.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, http_get, until, Proc};

/// How the kernel process is started, beyond its configuration.
#[derive(Default)]
pub struct KernelOpts {
    /// Extra lines under `server:` (4-space indented).
    pub server: String,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Arguments before `--config` (`supervise`).
    pub args: Vec<String>,
    /// A command the kernel runs under (e.g. `setpriv --reuid=...`): its
    /// program and arguments, the kernel binary after them.
    pub prefix: Vec<String>,
    /// Standard output instead of the log file (standard error still goes there).
    pub stdout: Option<Stdio>,
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

/// The harness' configuration file: the socket in the test's directory, a
/// TCP listener on a port of the kernel's choosing, metrics on
/// `metrics_port`, debug logs; `server` and `body` added.
fn harness_config(socket: &Path, server: &str, metrics_port: u16, body: &str) -> String {
    format!(
        "policy_kernel:\n  server:\n    port: 0\n    socket_path: {}\n{server}  observability:\n    metrics_port: {metrics_port}\n    log_level: debug\n{body}",
        socket.display()
    )
}

impl KernelProc {
    /// Writes `config` (the YAML under `policy_kernel:`, without `server`) and
    /// starts the kernel with its socket in `dir`.
    pub fn start(dir: &Path, body: &str) -> Self {
        Self::launch(dir, body, KernelOpts::default())
    }

    /// Like `start`, with extra lines under `server:` (4-space indented).
    pub fn start_with(dir: &Path, server: &str, body: &str) -> Self {
        Self::launch(
            dir,
            body,
            KernelOpts {
                server: server.to_string(),
                ..KernelOpts::default()
            },
        )
    }

    /// Like `start_with`, with extra environment variables for the process.
    pub fn start_env(dir: &Path, server: &str, body: &str, env: &[(&str, &str)]) -> Self {
        Self::launch(
            dir,
            body,
            KernelOpts {
                server: server.to_string(),
                env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
                ..KernelOpts::default()
            },
        )
    }

    /// Like `start_with`, the kernel run by `policy-kernel supervise` (the
    /// process is the parent; the generations are its children).
    pub fn start_supervised(dir: &Path, server: &str, body: &str) -> Self {
        Self::launch(
            dir,
            body,
            KernelOpts {
                server: server.to_string(),
                args: vec!["supervise".into()],
                ..KernelOpts::default()
            },
        )
    }

    /// Like `start`, with the process's standard output going to `stdout`
    /// instead of the log file (standard error still goes there).
    pub fn start_with_stdout(dir: &Path, body: &str, stdout: Stdio) -> Self {
        Self::launch(
            dir,
            body,
            KernelOpts {
                stdout: Some(stdout),
                ..KernelOpts::default()
            },
        )
    }

    /// Writes the harness' configuration with `body` to `dir/kernel.yaml`
    /// and starts the kernel on it, as `opts` say; returns once its socket
    /// and admin endpoints answer.
    pub fn launch(dir: &Path, body: &str, opts: KernelOpts) -> Self {
        let socket = dir.join("kernel.sock");
        let metrics_port = free_port();
        let text = harness_config(&socket, &opts.server, metrics_port, body);
        Self::spawn(dir, &text, socket, metrics_port, opts)
    }

    /// Starts the kernel on a whole configuration file `text` (written to
    /// `dir/kernel.yaml`), which serves on `socket` and its metrics on
    /// `metrics_port`.
    pub fn from_file(dir: &Path, text: &str, socket: PathBuf, metrics_port: u16) -> Self {
        Self::spawn(dir, text, socket, metrics_port, KernelOpts::default())
    }

    fn spawn(dir: &Path, text: &str, socket: PathBuf, metrics_port: u16, opts: KernelOpts) -> Self {
        let config = dir.join("kernel.yaml");
        std::fs::write(&config, text).expect("write config");
        let log = dir.join("kernel.log");
        let bin = env!("CARGO_BIN_EXE_policy-kernel");
        let mut cmd = match opts.prefix.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        cmd.args(&opts.args)
            .arg(format!("--config={}", config.display()))
            .envs(opts.env.iter().map(|(k, v)| (k, v)));
        let proc = match opts.stdout {
            Some(out) => {
                let err = std::fs::File::create(&log).expect("log file");
                Proc::spawn_io("kernel", &mut cmd, out, Stdio::from(err))
            }
            None => Proc::spawn("kernel", &mut cmd, &log),
        };
        let k = Self {
            proc,
            socket,
            config,
            log,
            metrics_port,
            server: opts.server,
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
        let text = harness_config(&self.socket, &self.server, self.metrics_port, body);
        std::fs::write(&self.config, text).expect("write config");
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether `text` is in the log within 5 s. A kernel thread writes the
    /// lines of the requests it serves when it next waits for work, just
    /// after their answers (docs/operating.md, Logs): a test that has its
    /// answer may read the log a moment before they are there.
    pub fn log_has(&self, text: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.log().contains(text) {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
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
        super::sample(&text, sample)
    }

    /// Whether each agent the kernel has discovered is healthy, in the order
    /// of `/config` (empty when it cannot be read).
    pub fn agents_health(&self) -> Vec<bool> {
        let (_, cfg) = self.admin_get("/config");
        serde_json::from_str::<serde_json::Value>(&cfg)
            .ok()
            .and_then(|c| {
                c["agents"]
                    .as_array()
                    .map(|a| a.iter().map(|x| x["healthy"] == true).collect())
            })
            .unwrap_or_default()
    }

    /// Waits until the kernel has discovered `count` agents, all healthy.
    pub async fn until_agents_healthy(&self, count: usize) {
        until("agents healthy", Duration::from_secs(20), || async {
            let health = self.agents_health();
            health.len() == count && health.iter().all(|&h| h)
        })
        .await;
    }

    /// Moves the kernel out (e.g. into a thread that kills and restarts
    /// it), leaving an inert stand-in with the same paths and port.
    pub fn take(&mut self) -> KernelProc {
        let stand_in = KernelProc {
            proc: Proc::spawn(
                "stand-in",
                Command::new("true").arg(""),
                &self.log.with_extension("stand-in"),
            ),
            socket: self.socket.clone(),
            config: self.config.clone(),
            log: self.log.clone(),
            metrics_port: self.metrics_port,
            server: self.server.clone(),
        };
        std::mem::replace(self, stand_in)
    }
}

/// Starts the kernel binary again on the same configuration (as supervisord
/// would after a crash), appending to its log; returns once its socket
/// accepts, with the time that took.
pub fn restart_kernel(k: &mut KernelProc) -> Duration {
    let started = Instant::now();
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&k.log)
        .expect("kernel log");
    let err = out.try_clone().expect("kernel log");
    let child = Command::new(env!("CARGO_BIN_EXE_policy-kernel"))
        .arg(format!("--config={}", k.config.display()))
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("spawn kernel");
    k.proc = Proc {
        child,
        name: "kernel".into(),
    };
    let deadline = started + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&k.socket).is_err() {
        if let Ok(Some(status)) = k.proc.child.try_wait() {
            panic!("kernel exited at restart ({status}):\n{}", k.log());
        }
        assert!(Instant::now() < deadline, "kernel did not restart:\n{}", k.log());
        std::thread::sleep(Duration::from_millis(2));
    }
    started.elapsed()
}
