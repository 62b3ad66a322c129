//! Shared helpers for the SDK integration tests: a configurable test policy
//! and an agent served in-process on a socket in a temp dir.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use policy_agents::proto::{self, policy_agent_client::PolicyAgentClient};
use policy_agents::{
    client, Agent, AgentBuilder, AgentError, Deny, Params, Phases, Policy, PolicyError, RequestContext, RequestOutcome,
    ResponseContext, ResponseOutcome,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

pub mod redis_server;

/// A policy whose behaviour comes from its params:
/// `action` = ok | fail | fail_deny | deny | skip | bad_header | panic,
/// `header` = value of `x-<name>`, `read` = metadata key echoed in `x-read-<name>`,
/// `set` = `key=value` metadata to set, `sleep_ms`.
pub struct Probe(pub &'static str);

impl Policy for Probe {
    type Params = Params;
    fn name(&self) -> &str {
        self.0
    }
    fn version(&self) -> &str {
        "9.9.9"
    }
    fn param_schema(&self) -> &[&str] {
        &["action", "header", "read", "set", "sleep_ms"]
    }
    fn phases(&self) -> Phases {
        Phases::Both
    }
    fn requires_body(&self) -> bool {
        self.0 == "body"
    }
    async fn on_request(&self, p: &Params, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        if let Some(ms) = p.parse::<u64>("sleep_ms")? {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        let mut out = match p.get("action").unwrap_or("ok") {
            "fail" => return Err(PolicyError::new("boom")),
            "fail_deny" => return Err(PolicyError::new("boom").with_deny(Deny::new(418, "teapot"))),
            "deny" => {
                return Ok(RequestOutcome::deny(403, "denied")
                    .deny_header("x-why", self.0)
                    .deny_reason("test"))
            }
            "bad_header" => return Ok(RequestOutcome::proceed().set_header("x-bad", "a\r\nb")),
            "panic" => panic!("the probe policy panicked, as asked"),
            "skip" => RequestOutcome::proceed().skip_remaining("enough"),
            _ => RequestOutcome::proceed(),
        };
        let name = format!("x-{}", self.0);
        out = out.set_header(&name, p.get("header").unwrap_or(self.0));
        if let Some(key) = p.get("read") {
            let seen = ctx.metadata.get(key).unwrap_or("<none>");
            out = out.set_header(format!("x-read-{}", self.0), seen);
        }
        if let Some((k, v)) = p.get("set").and_then(|kv| kv.split_once('=')) {
            out = out.set_metadata(k, v);
        }
        if let Some(tp) = &ctx.call.traceparent {
            out = out.set_header("x-traceparent", tp);
        }
        Ok(out)
    }
    async fn on_response(&self, p: &Params, ctx: &ResponseContext<'_>) -> Result<ResponseOutcome, PolicyError> {
        match p.get("action").unwrap_or("ok") {
            "fail" => Err(PolicyError::new("boom")),
            "deny" => Ok(ResponseOutcome::deny(502, "replaced")),
            _ => Ok(ResponseOutcome::proceed().set_header(format!("x-{}", self.0), ctx.response.status().to_string())),
        }
    }
}

/// An agent served in-process until dropped or stopped.
pub struct TestAgent {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    handle: Option<JoinHandle<Result<(), AgentError>>>,
}

impl TestAgent {
    /// Serves `builder` on `<tempdir>/agent.sock`.
    pub async fn start(builder: AgentBuilder) -> TestAgent {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sock");
        Self::start_at(builder, dir, path).await
    }

    /// Serves `builder` on `path` (inside `dir`).
    pub async fn start_at(builder: AgentBuilder, dir: tempfile::TempDir, path: PathBuf) -> TestAgent {
        let (stop, stopped) = oneshot::channel::<()>();
        let agent = builder.build().unwrap();
        let p = path.clone();
        let handle = tokio::spawn(async move {
            agent
                .serve_unix_with_shutdown(&p, async {
                    let _ = stopped.await;
                })
                .await
        });
        wait_for_socket(&path).await;
        TestAgent {
            dir,
            path,
            stop: Some(stop),
            handle: Some(handle),
        }
    }

    /// A client connected to the agent.
    pub async fn client(&self) -> PolicyAgentClient<Channel> {
        client::connect_unix(&self.path).await.unwrap()
    }

    /// What the agent declares in discovery.
    pub async fn config(&self) -> proto::GetAgentConfigResponse {
        self.client()
            .await
            .get_agent_config(proto::GetAgentConfigRequest {})
            .await
            .unwrap()
            .into_inner()
    }

    /// Stops the agent (expecting success) and hands back the temp dir.
    pub async fn stop_keep_dir(mut self) -> tempfile::TempDir {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(h) = self.handle.take() {
            h.await.unwrap().unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        std::mem::replace(&mut self.dir, dir)
    }

    /// Stops the agent and returns what `serve_unix_with_shutdown` returned.
    pub async fn stop(mut self) -> Result<(), AgentError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.handle.take() {
            Some(h) => h.await.unwrap(),
            None => Ok(()),
        }
    }
}

/// Waits until something accepts connections on `path`.
pub async fn wait_for_socket(path: &Path) {
    for _ in 0..200 {
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("nothing listens on {}", path.display());
}

/// The test agent with policies `first`, `second`, `third` and `body`.
pub fn probe_agent() -> AgentBuilder {
    Agent::builder("probe-agent", "1.2.3")
        .policy(Probe("first"))
        .policy(Probe("second"))
        .policy(Probe("third"))
        .policy(Probe("body"))
}

/// A policy entry of a call.
pub fn policy(name: &str, params: &[(&str, &str)], on_failure: &str) -> proto::Policy {
    proto::Policy::new(name, params.iter().copied(), on_failure)
}

/// A request-phase call.
pub fn request_call(id: &str, policies: Vec<proto::Policy>) -> proto::PolicyRequestPhase {
    proto::PolicyRequestPhase {
        request_id: id.to_string(),
        policies,
        request_data: Some(proto::RequestData {
            method: "GET".into(),
            path: "/api".into(),
            ..Default::default()
        }),
        deadline_ms: 1000,
        policy_metadata: Default::default(),
    }
}

/// `(name, value)` of the SetHeader instructions, in order.
pub fn set_headers(reply: &proto::PolicyRequestResponse) -> Vec<(String, String)> {
    use proto::request_instruction::Instruction as I;
    reply
        .instructions
        .iter()
        .filter_map(|i| match &i.instruction {
            Some(I::SetHeader(h)) => Some((h.name.clone(), h.value.clone())),
            _ => None,
        })
        .collect()
}

/// The ImmediateResponse of a reply, if any.
pub fn immediate(reply: &proto::PolicyRequestResponse) -> Option<proto::ImmediateResponse> {
    use proto::request_instruction::Instruction as I;
    reply.instructions.iter().find_map(|i| match &i.instruction {
        Some(I::ImmediateResponse(r)) => Some(r.clone()),
        _ => None,
    })
}

/// True when the reply holds a SkipRemainingPolicies.
pub fn skipped(reply: &proto::PolicyRequestResponse) -> bool {
    use proto::request_instruction::Instruction as I;
    reply
        .instructions
        .iter()
        .any(|i| matches!(i.instruction, Some(I::SkipRemainingPolicies(_))))
}

/// A spawned agent binary, killed (by its pid) when dropped.
pub struct Spawned {
    pub child: std::process::Child,
    pub socket: PathBuf,
    pub dir: tempfile::TempDir,
}

impl Spawned {
    /// Spawns `bin --socket <tempdir>/agent.sock args...` and waits for the socket.
    pub async fn start(bin: &str, args: &[&str]) -> Spawned {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        let child = std::process::Command::new(bin)
            .arg("--socket")
            .arg(&socket)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn agent binary");
        let spawned = Spawned { child, socket, dir };
        wait_for_socket(&spawned.socket).await;
        spawned
    }

    /// A client connected to the agent.
    pub async fn client(&self) -> PolicyAgentClient<Channel> {
        client::connect_unix(&self.socket).await.unwrap()
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `bin args...` to completion: (success, stdout, stderr).
pub fn run(bin: &str, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(bin).args(args).output().expect("run binary");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Sends SIGTERM to a spawned agent.
pub fn sigterm(child: &std::process::Child) {
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) with a pid we spawned and own; no memory is involved.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
}

/// Waits for the child to exit; kills it (by pid) and fails after `limit`.
pub fn wait_exit(child: &mut std::process::Child, limit: Duration) -> std::process::ExitStatus {
    let start = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("agent did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
