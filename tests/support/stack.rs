//! One stack for the end-to-end tests: the agents a test needs, the kernel
//! with them in its config, an upstream and a real Envoy in front, in one
//! temp dir; started by [`StackBuilder::start`], which returns once every
//! part answers and the kernel finds every agent healthy. Dropping the
//! [`Stack`] stops Envoy, then the kernel, then the agents, then removes the
//! directory.
//!
//! ```ignore
//! let s = Stack::builder()
//!     .test_agent("gate", GATE)
//!     .agent(AgentSpec::bin("planner", "planner-agent", &[]).entry("      timeout_ms: 500\n"))
//!     .config("  route_policies:\n    - route_name: users\n ...")
//!     .sse_upstream()
//!     .start()
//!     .await;
//! let got = s.get("/users/1", &[]).await;
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::agents::{agent_entry_at, AgentCmd, RefAgent, TestAgent};
use super::envoy::{Envoy, EnvoyConfig, EnvoyOpts, KernelAt};
use super::http::{send, Got, Upstream};
use super::kernel::{KernelOpts, KernelProc};
use super::python::{self, McpServer};
use super::sse_upstream::SseUpstream;
use super::{until, workdir};

/// What an agent of the stack runs.
enum Launch {
    /// `policy-test-agent` on this script.
    Test(String),
    /// A binary of the agents' package, with these arguments after `--socket=`.
    Bin(String, Vec<String>),
    /// The Python example agent.
    Python,
}

/// One agent of a stack: its name in the kernel config, what runs, and the
/// extra lines of its config entry.
pub struct AgentSpec {
    name: String,
    launch: Launch,
    entry: String,
    env: Vec<(String, String)>,
}

impl AgentSpec {
    /// `policy-test-agent` on `script` (see [`TestAgent::start`]).
    pub fn test(name: &str, script: &str) -> Self {
        Self::new(name, Launch::Test(script.to_string()))
    }

    /// The agents' binary `bin --socket=... ARGS` (see [`RefAgent::start`]).
    pub fn bin(name: &str, bin: &str, args: &[&str]) -> Self {
        Self::new(
            name,
            Launch::Bin(bin.to_string(), args.iter().map(|a| a.to_string()).collect()),
        )
    }

    /// The Python example agent (`agents/examples/python/agent.py`).
    pub fn python(name: &str) -> Self {
        Self::new(name, Launch::Python)
    }

    fn new(name: &str, launch: Launch) -> Self {
        Self {
            name: name.to_string(),
            launch,
            entry: String::new(),
            env: Vec::new(),
        }
    }

    /// More lines of its kernel config entry (6-space indented); health
    /// checks are 100 ms apart unless they set `health_check_interval_ms`.
    pub fn entry(mut self, extra: &str) -> Self {
        self.entry.push_str(extra);
        self
    }

    /// An environment variable for the process (not for a test agent).
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }
}

/// The upstream Envoy routes to.
pub enum Up {
    /// [`Upstream`]: a JSON echo of the request.
    Echo(Upstream),
    /// [`SseUpstream`]: scripted, streamed bodies.
    Sse(SseUpstream),
    /// The Python MCP server.
    Mcp(McpServer),
}

impl Up {
    pub fn port(&self) -> u16 {
        match self {
            Up::Echo(u) => u.addr.port(),
            Up::Sse(u) => u.addr.port(),
            Up::Mcp(m) => m.port,
        }
    }
}

/// Where the harness' Envoy reaches the kernel.
enum Reach {
    Socket,
    Tcp,
    TcpTls {
        ca: PathBuf,
        client: Option<(PathBuf, PathBuf)>,
    },
}

/// Agents by name.
type Named<T> = Vec<(String, T)>;

/// Writes an Envoy config from the kernel's socket and the upstream's port.
type MakeConfig = Box<dyn FnOnce(&Path, u16) -> String>;

/// Envoy's config.
enum EnvoySpec {
    /// [`EnvoyConfig::harness`].
    Harness(Reach),
    /// [`EnvoyConfig::deployed`], in front of each kernel.
    Deployed(EnvoyOpts),
    /// The test's own: from the kernel's socket and the upstream's port.
    Custom(MakeConfig),
}

enum UpstreamKind {
    Echo,
    Sse,
    Mcp,
}

/// Builds a [`Stack`]; see the module documentation.
pub struct StackBuilder {
    tmp: tempfile::TempDir,
    agents: Vec<AgentSpec>,
    config: String,
    body: Option<String>,
    kernel: KernelOpts,
    kernel_dir: Option<PathBuf>,
    kernel_file: Option<(String, PathBuf, u16)>,
    two_kernels: bool,
    socket_dir: Option<PathBuf>,
    upstream: UpstreamKind,
    envoy: EnvoySpec,
    wait_healthy: bool,
    client: Option<reqwest::Client>,
}

impl StackBuilder {
    /// The stack's directory (for files a test writes before the start:
    /// certificates, tokens, ...).
    pub fn dir(&self) -> &Path {
        self.tmp.path()
    }

    /// An agent, started first; its entry goes under `agents:`.
    pub fn agent(mut self, spec: AgentSpec) -> Self {
        self.agents.push(spec);
        self
    }

    /// `policy-test-agent` `name` on `script`.
    pub fn test_agent(self, name: &str, script: &str) -> Self {
        self.agent(AgentSpec::test(name, script))
    }

    /// `policy-test-agent` `name` on `script`, with more lines in its entry.
    pub fn test_agent_with(self, name: &str, script: &str, entry: &str) -> Self {
        self.agent(AgentSpec::test(name, script).entry(entry))
    }

    /// The agents' binary `bin` as agent `name`.
    pub fn ref_agent(self, name: &str, bin: &str, args: &[&str]) -> Self {
        self.agent(AgentSpec::bin(name, bin, args))
    }

    /// The governing agents of the protocol tests (MCP, A2A): `auth-agent`
    /// (HS256 JWTs signed with `jwt_secret`, read from `DEMO_JWT_SECRET`),
    /// `tool-agent`, and `guardrail-agent` journaling to `audit`.
    pub fn governing_agents(self, jwt_secret: &str, audit: &Path) -> Self {
        self.governing_agents_with(jwt_secret, audit, &[])
    }

    /// [`StackBuilder::governing_agents`], `tool-agent` started with
    /// `tool_args` (`--redis-url=...`).
    pub fn governing_agents_with(self, jwt_secret: &str, audit: &Path, tool_args: &[&str]) -> Self {
        let audit_arg = format!("--audit-path={}", audit.display());
        self.agent(AgentSpec::bin("auth-agent", "auth-agent", &[]).env("DEMO_JWT_SECRET", jwt_secret))
            .agent(AgentSpec::bin("tool-agent", "tool-agent", tool_args))
            .agent(AgentSpec::bin(
                "guardrail-agent",
                "guardrail-agent",
                &[&audit_arg, "--audit-fsync-ms=5"],
            ))
    }

    /// The agents' sockets (and test agents' files) in this subdirectory.
    pub fn socket_dir(mut self, sub: &str) -> Self {
        self.socket_dir = Some(self.dir().join(sub));
        self
    }

    /// What follows the `agents:` section in the kernel config
    /// (`route_policies:`, `management:`, ...).
    pub fn config(mut self, config: &str) -> Self {
        self.config = config.to_string();
        self
    }

    /// The whole kernel config under `policy_kernel:` but the server section,
    /// agents included (those the test runs itself too): no `agents:`
    /// section is written for it.
    pub fn kernel_body(mut self, body: &str) -> Self {
        self.body = Some(body.to_string());
        self
    }

    /// Extra lines under `server:` (4-space indented).
    pub fn server(mut self, lines: &str) -> Self {
        self.kernel.server = lines.to_string();
        self
    }

    /// The kernel run by `policy-kernel supervise`.
    pub fn supervised(mut self) -> Self {
        self.kernel.args = vec!["supervise".into()];
        self
    }

    /// The kernel run under `prefix` (a program and its arguments).
    pub fn kernel_prefix(mut self, prefix: &[&str]) -> Self {
        self.kernel.prefix = prefix.iter().map(|a| a.to_string()).collect();
        self
    }

    /// The kernel's socket, config and log in this subdirectory.
    pub fn kernel_dir(mut self, sub: &str) -> Self {
        self.kernel_dir = Some(self.dir().join(sub));
        self
    }

    /// The kernel on a whole config file `text`, which has it serve on
    /// `socket` and its metrics on `metrics_port`.
    pub fn kernel_file(mut self, text: &str, socket: &Path, metrics_port: u16) -> Self {
        self.kernel_file = Some((text.to_string(), socket.to_path_buf(), metrics_port));
        self
    }

    /// Two kernels on the same config (in `a/` and `b/`), both endpoints of
    /// the reliability suite's Envoy ([`Self::deployed_envoy`]), with gRPC
    /// retries (`EnvoyConfig`).
    pub fn two_kernels(mut self) -> Self {
        self.two_kernels = true;
        self
    }

    /// [`SseUpstream`] instead of the echo upstream.
    pub fn sse_upstream(mut self) -> Self {
        self.upstream = UpstreamKind::Sse;
        self
    }

    /// The Python MCP server instead of the echo upstream.
    pub fn mcp_upstream(mut self) -> Self {
        self.upstream = UpstreamKind::Mcp;
        self
    }

    /// The harness' Envoy, reaching the kernel on its TCP listener.
    pub fn envoy_tcp(mut self) -> Self {
        self.envoy = EnvoySpec::Harness(Reach::Tcp);
        self
    }

    /// The harness' Envoy, reaching the kernel on its TCP listener over TLS
    /// (trusting `ca`, showing `client`'s certificate and key).
    pub fn envoy_tls(mut self, ca: &Path, client: Option<(&Path, &Path)>) -> Self {
        self.envoy = EnvoySpec::Harness(Reach::TcpTls {
            ca: ca.to_path_buf(),
            client: client.map(|(c, k)| (c.to_path_buf(), k.to_path_buf())),
        });
        self
    }

    /// The reliability suite's Envoy (as `deploy/envoy.yaml`) with `opts`.
    pub fn deployed_envoy(mut self, opts: EnvoyOpts) -> Self {
        self.envoy = EnvoySpec::Deployed(opts);
        self
    }

    /// Envoy on the config `make` writes from the kernel's socket and the
    /// upstream's port.
    pub fn envoy_config(mut self, make: impl FnOnce(&Path, u16) -> String + 'static) -> Self {
        self.envoy = EnvoySpec::Custom(Box::new(make));
        self
    }

    /// Start without waiting for the agents to be healthy (a test of
    /// unhealthy agents).
    pub fn unhealthy_agents(mut self) -> Self {
        self.wait_healthy = false;
        self
    }

    /// The stack's client (default: `reqwest::Client::new()`).
    pub fn client(mut self, client: reqwest::Client) -> Self {
        self.client = Some(client);
        self
    }

    /// Where agent `name` will listen.
    pub fn socket(&self, name: &str) -> PathBuf {
        self.sockets().join(format!("{name}.sock"))
    }

    /// The agents' directory.
    fn sockets(&self) -> &Path {
        self.socket_dir.as_deref().unwrap_or(self.dir())
    }

    /// Starts the agents, the kernel, the upstream and Envoy; returns once
    /// the kernel finds every agent of its config healthy.
    pub async fn start(mut self) -> Stack {
        let dir = self.tmp.path().to_path_buf();
        let (test_agents, programs, section) = self.start_agents();
        let agents_section = if section.is_empty() {
            String::new()
        } else {
            format!("  agents:\n{section}")
        };
        let body = self
            .body
            .take()
            .unwrap_or_else(|| format!("{agents_section}{}", self.config));
        let agent_count = entries_in(self.kernel_file.as_ref().map_or(&body, |f| &f.0));
        let (kernel, kernel_b) = self.start_kernels(&body);
        let upstream = match self.upstream {
            UpstreamKind::Echo => Up::Echo(Upstream::start().await),
            UpstreamKind::Sse => Up::Sse(SseUpstream::start().await),
            UpstreamKind::Mcp => Up::Mcp(McpServer::start(&dir)),
        };
        let envoy = start_envoy(&dir, self.envoy, &kernel, kernel_b.as_ref(), upstream.port());
        if self.wait_healthy && agent_count > 0 {
            for k in std::iter::once(&kernel).chain(kernel_b.as_ref()) {
                k.until_agents_healthy(agent_count).await;
            }
        }
        Stack {
            base: format!("http://127.0.0.1:{}", envoy.port),
            envoy,
            kernel,
            kernel_b,
            test_agents,
            programs,
            upstream,
            client: self.client.unwrap_or_default(),
            agents_section,
            agent_count,
            dir,
            tmp: self.tmp,
        }
    }

    /// Starts every agent; their entries under `agents:`.
    fn start_agents(&mut self) -> (Named<TestAgent>, Named<RefAgent>, String) {
        let sockets = self.sockets().to_path_buf();
        std::fs::create_dir_all(&sockets).expect("socket dir");
        let (mut test_agents, mut programs, mut section) = (Vec::new(), Vec::new(), String::new());
        for spec in std::mem::take(&mut self.agents) {
            let socket = self.socket(&spec.name);
            section += &agent_entry_at(&spec.name, &socket, &spec.entry);
            let (cmd, wait) = match spec.launch {
                Launch::Test(script) => {
                    test_agents.push((spec.name.clone(), TestAgent::start(&sockets, &spec.name, &script)));
                    continue;
                }
                Launch::Bin(bin, args) => {
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    (AgentCmd::bin(&bin, &socket, &args), 20)
                }
                Launch::Python => (python::example_agent(&socket), 30),
            };
            let cmd = AgentCmd { env: spec.env, ..cmd };
            let log = self.dir().join(format!("{}.log", spec.name));
            let agent = RefAgent::launch(&spec.name, socket, log, cmd, Duration::from_secs(wait));
            programs.push((spec.name, agent));
        }
        (test_agents, programs, section)
    }

    /// Starts the kernel (two, in `a/` and `b/`, for [`Self::two_kernels`])
    /// on `body`, or on the whole config file.
    fn start_kernels(&mut self, body: &str) -> (KernelProc, Option<KernelProc>) {
        let kdir = self.kernel_dir.clone().unwrap_or_else(|| self.dir().to_path_buf());
        std::fs::create_dir_all(&kdir).expect("kernel dir");
        let opts = std::mem::take(&mut self.kernel);
        if let Some((text, socket, port)) = self.kernel_file.take() {
            return (KernelProc::from_file(&kdir, &text, socket, port), None);
        }
        if !self.two_kernels {
            return (KernelProc::launch(&kdir, body, opts), None);
        }
        assert!(
            matches!(self.envoy, EnvoySpec::Deployed(_)),
            "two kernels are behind the reliability suite's Envoy (deployed_envoy)"
        );
        let (a, b) = (kdir.join("a"), kdir.join("b"));
        std::fs::create_dir_all(&a).expect("dir a");
        std::fs::create_dir_all(&b).expect("dir b");
        let opts_b = KernelOpts {
            server: opts.server.clone(),
            env: opts.env.clone(),
            args: opts.args.clone(),
            prefix: opts.prefix.clone(),
            stdout: None,
        };
        let first = KernelProc::launch(&a, body, opts);
        (first, Some(KernelProc::launch(&b, body, opts_b)))
    }
}

/// Starts Envoy in `dir` as `spec` says, in front of the kernel(s) and the
/// upstream on `port`.
fn start_envoy(dir: &Path, spec: EnvoySpec, kernel: &KernelProc, kernel_b: Option<&KernelProc>, port: u16) -> Envoy {
    let config = match spec {
        EnvoySpec::Harness(Reach::Socket) => EnvoyConfig::harness(KernelAt::Socket(&kernel.socket), port).render(),
        EnvoySpec::Harness(Reach::Tcp) => EnvoyConfig::harness(KernelAt::Tcp(kernel.tcp_port()), port).render(),
        EnvoySpec::Harness(Reach::TcpTls { ca, client }) => {
            let at = KernelAt::TcpTls {
                port: kernel.tcp_port(),
                ca: &ca,
                client: client.as_ref().map(|(c, k)| (c.as_path(), k.as_path())),
            };
            EnvoyConfig::harness(at, port).render()
        }
        EnvoySpec::Deployed(opts) => {
            let mut sockets = vec![kernel.socket.as_path()];
            sockets.extend(kernel_b.map(|k| k.socket.as_path()));
            EnvoyConfig::deployed(&sockets, port, &opts).render()
        }
        EnvoySpec::Custom(make) => make(&kernel.socket, port),
    };
    Envoy::launch(dir, &config, &["-l", "warning"])
}

/// Envoy, the kernel, the agents and the upstream of one end-to-end test.
/// Fields drop in this order: Envoy first, the directory last.
pub struct Stack {
    pub envoy: Envoy,
    pub kernel: KernelProc,
    /// The second kernel ([`StackBuilder::two_kernels`]).
    pub kernel_b: Option<KernelProc>,
    /// The `policy-test-agent`s, by name.
    pub test_agents: Named<TestAgent>,
    /// The other agent programs, by name.
    pub programs: Named<RefAgent>,
    pub upstream: Up,
    pub client: reqwest::Client,
    /// `http://127.0.0.1:PORT` of Envoy's listener.
    pub base: String,
    agents_section: String,
    agent_count: usize,
    pub dir: PathBuf,
    pub tmp: tempfile::TempDir,
}

impl Stack {
    /// A builder in a new temp dir: the harness' Envoy on the kernel's
    /// socket, the echo upstream, no agents.
    pub fn builder() -> StackBuilder {
        StackBuilder {
            tmp: workdir(),
            agents: Vec::new(),
            config: String::new(),
            body: None,
            kernel: KernelOpts::default(),
            kernel_dir: None,
            kernel_file: None,
            two_kernels: false,
            socket_dir: None,
            upstream: UpstreamKind::Echo,
            envoy: EnvoySpec::Harness(Reach::Socket),
            wait_healthy: true,
            client: None,
        }
    }

    /// URL on Envoy's listener.
    pub fn url(&self, path: &str) -> String {
        self.envoy.url(path)
    }

    /// One request through Envoy.
    pub async fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&str>) -> Got {
        send(&self.client, method, &self.url(path), headers, body).await
    }

    /// A GET through Envoy.
    pub async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Got {
        self.send("GET", path, headers, None).await
    }

    /// The kernel's and Envoy's logs, for a failure message.
    pub fn diag(&self) -> String {
        format!(
            "--- kernel ---\n{}\n--- envoy ---\n{}",
            self.kernel.log(),
            self.envoy.log()
        )
    }

    /// The last `n` lines of the kernel's and Envoy's logs.
    pub fn diag_tail(&self, n: usize) -> String {
        format!(
            "--- kernel ---\n{}\n--- envoy ---\n{}",
            tail(&self.kernel.log(), n),
            tail(&self.envoy.log(), n)
        )
    }

    /// The kernel config body for `config` with this stack's `agents:`
    /// section (for a reload).
    pub fn kernel_body(&self, config: &str) -> String {
        format!("{}{config}", self.agents_section)
    }

    /// Reloads the kernel with `body` (same server section); waits for the
    /// new version.
    pub async fn reload(&self, body: &str) {
        let before = self.kernel.metric("policy_kernel_config_version");
        self.kernel.write_config(body);
        self.kernel.proc.signal("HUP");
        let k = &self.kernel;
        until("reload", Duration::from_secs(10), || async {
            k.metric("policy_kernel_config_version") > before
        })
        .await;
    }

    /// Waits until the kernel finds every agent of its config healthy again.
    pub async fn until_agents_healthy(&self) {
        self.kernel.until_agents_healthy(self.agent_count).await;
    }

    /// The test agent `name`.
    pub fn test_agent(&self, name: &str) -> &TestAgent {
        &self.test_agents[position(&self.test_agents, name)].1
    }

    /// The test agent `name`, to kill or restart.
    pub fn test_agent_mut(&mut self, name: &str) -> &mut TestAgent {
        let i = position(&self.test_agents, name);
        &mut self.test_agents[i].1
    }

    /// Takes the test agent `name` out of the stack (e.g. into a thread
    /// that kills and restarts it).
    pub fn take_test_agent(&mut self, name: &str) -> TestAgent {
        self.test_agents.remove(position(&self.test_agents, name)).1
    }

    /// The agent program `name` (not a test agent).
    pub fn agent(&self, name: &str) -> &RefAgent {
        &self.programs[position(&self.programs, name)].1
    }

    /// The agent program `name` (not a test agent), to kill or restart.
    pub fn agent_mut(&mut self, name: &str) -> &mut RefAgent {
        let i = position(&self.programs, name);
        &mut self.programs[i].1
    }

    /// The socket of agent `name`.
    pub fn socket(&self, name: &str) -> PathBuf {
        match self.test_agents.iter().find(|(n, _)| n == name) {
            Some((_, a)) => a.socket.clone(),
            None => self.agent(name).socket.clone(),
        }
    }

    /// The scripted upstream ([`StackBuilder::sse_upstream`]).
    pub fn sse(&self) -> &SseUpstream {
        match &self.upstream {
            Up::Sse(u) => u,
            _ => panic!("the stack has no SSE upstream"),
        }
    }

    /// Another harness Envoy, in `dir/name`, in front of this stack's
    /// upstream, reaching the kernel at `at`.
    pub fn envoy_at(&self, name: &str, at: KernelAt<'_>) -> Envoy {
        let dir = self.dir.join(name);
        std::fs::create_dir_all(&dir).expect("envoy dir");
        Envoy::start(&dir, &EnvoyConfig::harness(at, self.upstream.port()))
    }
}

/// Where agent `name` is in `agents`.
fn position<T>(agents: &[(String, T)], name: &str) -> usize {
    agents
        .iter()
        .position(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no agent {name} of this kind in the stack"))
}

/// How many agent entries a kernel config has.
fn entries_in(section: &str) -> usize {
    section.lines().filter(|l| l.starts_with("    - name: ")).count()
}

/// The last `n` lines of `s`.
pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
