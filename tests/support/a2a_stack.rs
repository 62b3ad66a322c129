//! The A2A stack of the A2A end-to-end tests: the official Python SDK's
//! agent server (`tests/a2a/server.py`) behind a real Envoy and the kernel,
//! with the governing agents and the documented A2A policies on route
//! `a2a` (`/a2a/` to the agent's `/`).

use std::path::Path;

use serde_json::{json, Value};

use super::a2a::A2aServer;
use super::envoy::{self, EnvoyConfig, KernelAt};
use super::stack::Stack;

pub const SECRET: &str = "a2a-secret";

const RULES: &str = r#"[{"name": "users", "effect": "allow", "skills": ["echo", "summarize"], "when": {"roles_any": ["user"]}}, {"name": "admins", "effect": "allow", "skills": ["*"], "when": {"roles_any": ["admin"]}}, {"name": "tasks", "effect": "allow", "methods": ["GetTask", "ListTasks", "CancelTask", "SubscribeToTask", "*TaskPushNotificationConfig*", "GetExtendedAgentCard"]}]"#;

/// The kernel's routes; `public` is the gateway's address of the agent.
pub fn routes(public: &str) -> String {
    format!(
        r#"  route_policies:
    - route_name: "a2a"
      request_policy_chain:
        - policy: jwtValidation
          params: {{issuer: "https://auth.example.com", audience: "mcp", hs256_secret_env: "DEMO_JWT_SECRET"}}
        - policy: a2aAuthorization
          params: {{rules: {RULES}}}
        - policy: a2aTaskOwnership
        - policy: a2aUrlGuard
        - policy: promptInjectionGuard
          params: {{action: block}}
        - policy: auditLog
      response_policy_chain:
        - policy: a2aCardFilter
          params: {{rules: {RULES}, public_url: "{public}"}}
        - policy: a2aTaskOwnership
        - policy: promptInjectionGuard
          params: {{phases: [response], action: block}}
        - policy: piiRedaction
          params: {{phases: [response], types: [email]}}
        - policy: auditLog
          params: {{log_response_body: false}}
"#
    )
}

/// Envoy: `/a2a/` to the agent's `/` (route `a2a`), no timeout on its streams.
fn envoy_config(kernel: &Path, agent: u16) -> String {
    EnvoyConfig {
        kernels: vec![KernelAt::Socket(kernel)],
        upstream: agent,
        access_log: "ACCESS %REQ(:METHOD)% %REQ(:PATH)% %RESPONSE_CODE% %DYNAMIC_METADATA(policy_kernel)%",
        routes: envoy::route("a2a", "/a2a/", ", timeout: 0s, prefix_rewrite: \"/\""),
        message_timeout: "5s".into(),
        buffer_limit: None,
        upstream_limits: false,
        no_idle_timeout: true,
        extra_clusters: Vec::new(),
    }
    .render()
}

pub fn bearer(sub: &str, roles: &[&str]) -> Value {
    json!({"authorization": format!("Bearer {}", super::jwt::jwt(SECRET, sub, roles))})
}

pub fn strs(v: &Value) -> Vec<&str> {
    v.as_array()
        .map_or(vec![], |a| a.iter().filter_map(Value::as_str).collect())
}

/// Which official SDK's agent server stands behind the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agent {
    /// The Python SDK's (`server.py`).
    Python,
    /// The Python SDK's, recording what its agent acts on.
    PythonRecording,
    /// The JavaScript SDK's (`js/server.mjs`), recording.
    JsRecording,
}

pub struct A2aStack {
    pub stack: Stack,
    pub server: A2aServer,
    pub audit: std::path::PathBuf,
    pub card_base: String,
}

impl A2aStack {
    pub async fn start() -> Self {
        A2aStack::start_with(false).await
    }

    /// With `record`, the server records what its agent acts on in
    /// `<dir>/acted.jsonl`.
    pub async fn start_with(record: bool) -> Self {
        A2aStack::start_on(if record { Agent::PythonRecording } else { Agent::Python }).await
    }

    /// The stack in front of `agent`; a recording agent records into
    /// `<dir>/acted.jsonl`.
    pub async fn start_on(agent: Agent) -> Self {
        let builder = Stack::builder();
        let dir = builder.dir().to_path_buf();
        let acted = dir.join("acted.jsonl");
        let server = match agent {
            Agent::Python => A2aServer::start(&dir),
            Agent::PythonRecording => A2aServer::start_with(&dir, Some(&acted)),
            Agent::JsRecording => A2aServer::start_js(&dir, &acted),
        };
        let audit = dir.join("audit.jsonl");
        let port = server.port;
        let stack = builder
            .governing_agents(SECRET, &audit)
            .config("  route_policies: []\n")
            .envoy_config(move |kernel, _| envoy_config(kernel, port))
            .start()
            .await;
        // The card names the gateway, known once Envoy has bound its port.
        let card_base = stack.envoy.url("/a2a");
        stack.reload(&stack.kernel_body(&routes(&card_base))).await;
        A2aStack {
            stack,
            server,
            audit,
            card_base,
        }
    }

    pub fn diag(&self, out: &str) -> String {
        format!(
            "{out}\n--- kernel ---\n{}\n--- envoy ---\n{}\n--- tool-agent ---\n{}\n--- a2a server ---\n{}",
            self.stack.kernel.log(),
            self.stack.envoy.log(),
            std::fs::read_to_string(self.stack.dir.join("tool-agent.log")).unwrap_or_default(),
            self.server.log()
        )
    }
}
