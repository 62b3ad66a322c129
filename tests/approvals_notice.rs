//! End to end for the completion notice and session grants: the official
//! MCP TypeScript SDK as client (`tests/mcp/ts/approval_client.mjs`,
//! protocol 2025-11-25, URL elicitation declared) and as server
//! (`tests/mcp/ts/server.mjs`: sessions, a GET stream per session), through
//! a real Envoy, the kernel binary, `auth-agent` and `tool-agent` with its
//! MCP stream relay (`--mcp-stream-relay`): Envoy routes the session's GET
//! to the relay, which opens it on the server and adds
//! `notifications/elicitation/complete` when the session's approval is
//! decided. The client hears it on the stream its SDK opened by itself.

mod support;

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use support::approval_client::{waiting, Client};
use support::jwt::JWT_PARAMS as JWT;
use support::mcp_ts::TsServer;
use support::stack::AgentSpec;
use support::*;

const SECRET: &str = "approvals-notice-secret";

fn jwt(sub: &str, roles: &[&str]) -> String {
    support::jwt::jwt(SECRET, sub, roles)
}

/// Deletes need an approver; reads and listing pass.
fn routes() -> String {
    let rules = r#"[{"name": "deletes", "effect": "approve", "tools": ["delete_file"], "approval": {"approvers": {"roles_any": ["approver"]}, "ttl_s": 600}}, {"name": "readers", "effect": "allow", "tools": ["read_file"]}, {"name": "listing", "effect": "allow", "methods": ["tools/list"]}]"#;
    format!(
        r#"  route_policies:
    - route_name: mcp
      request_policy_chain:
        - policy: jwtValidation
          params: {JWT}
        - policy: mcpToolAuthorization
          params: {{rules: {rules}}}
    - route_name: approvals
      request_policy_chain:
        - policy: jwtValidation
          params: {JWT}
        - policy: approvals
"#
    )
}

/// `GET /mcp` (after the route's policies) to the relay, no timeout: it
/// is a stream; the rest of `/mcp` to the TypeScript server.
fn envoy_config(kernel: &Path, server: u16, relay: u16) -> String {
    let stream = "              - name: mcp\n                match: {prefix: \"/mcp\", headers: [{name: \":method\", string_match: {exact: GET}}]}\n                route: {cluster: relay, timeout: 0s}\n";
    let service = format!("{stream}{}", support::approvals::mcp_route());
    support::approvals::envoy_config(kernel, server, &service, vec![("relay", relay)])
}

struct Notice {
    s: Stack,
    dir: PathBuf,
    _server: TsServer,
}

impl Notice {
    async fn start() -> Notice {
        let b = Stack::builder();
        let dir = b.dir().to_path_buf();
        let server = TsServer::start_with(&dir, Some(&dir.join("ran.jsonl")));
        let relay = free_port();
        let relay_arg = format!("--mcp-stream-relay=127.0.0.1:{relay}=http://127.0.0.1:{}", server.port);
        let server_port = server.port;
        let s = b
            .agent(AgentSpec::bin("auth-agent", "auth-agent", &[]).env("DEMO_JWT_SECRET", SECRET))
            .agent(AgentSpec::bin("tool-agent", "tool-agent", &[&relay_arg]))
            .config(&routes())
            .envoy_config(move |kernel, _| envoy_config(kernel, server_port, relay))
            .start()
            .await;
        Notice {
            s,
            dir,
            _server: server,
        }
    }

    fn diag(&self) -> String {
        format!("{}\ntool-agent:\n{}", self.s.diag(), self.s.agent("tool-agent").log())
    }

    /// The paths the server deleted.
    fn ran(&self) -> Vec<String> {
        support::approvals::ran(&self.dir.join("ran.jsonl"))
            .into_iter()
            .filter(|(tool, _)| tool == "delete_file")
            .map(|(_, path)| path)
            .collect()
    }

    async fn decide(&self, id: &str, token: &str, decision: Value) {
        let r = reqwest::Client::new()
            .post(self.s.url(&format!("/approvals/{id}")))
            .header("authorization", format!("Bearer {token}"))
            .json(&decision)
            .send()
            .await
            .expect("approvals API");
        let status = r.status().as_u16();
        let body = r.text().await.unwrap_or_default();
        assert_eq!(status, 200, "deciding {id}: {body}\n{}", self.diag());
    }

    fn client(&self, token: &str, path: &str) -> Client {
        Client::start(
            "ts",
            &self.s.url("/mcp"),
            token,
            json!({"url_elicitation": true, "tool": "delete_file", "arguments": {"path": path}}),
            &self.dir,
        )
    }
}

/// The elicitation id of a completion notice.
fn completed(n: &Value) -> String {
    assert_eq!(n["notification"], "notifications/elicitation/complete", "{n}");
    n["params"]["elicitationId"]
        .as_str()
        .unwrap_or_else(|| panic!("no elicitationId: {n}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_is_announced_on_the_sessions_stream_and_a_session_grant_keeps_to_its_session() {
    let n = Notice::start().await;
    let alice = jwt("alice", &["agent"]);
    let bob = jwt("bob", &["approver"]);

    // Session A waits for a person.
    let mut a = n.client(&alice, "/srv/a");
    let first = a.next();
    let (id_a, _) = waiting(&first);
    assert!(n.ran().is_empty(), "ran before approval: {:?}", n.ran());

    // Session B (same caller, another session) waits too.
    let mut b = n.client(&alice, "/srv/b");
    let (id_b, _) = waiting(&b.next());
    assert_ne!(id_a, id_b);

    // The approver grants session A's call for the session: A's SDK hears
    // of it on its GET stream, B's does not.
    n.decide(&id_a, &bob, json!({"grant": "allow_session"})).await;
    let heard = a.notification();
    assert_eq!(completed(&heard), id_a, "{heard}\n{}", n.diag());

    // The retry passes, and so does another delete in the same session.
    let ran = a.send("retry");
    assert_eq!(ran["result"], "deleted /srv/a", "{ran}\n{}", n.diag());
    let other = a.send(r#"call {"tool": "delete_file", "arguments": {"path": "/srv/a2"}}"#);
    assert_eq!(other["result"], "deleted /srv/a2", "{other}");

    // Session B is not covered by A's session grant; its own denial is
    // announced on its own stream, and only that one.
    let again = b.send("retry");
    assert_eq!(waiting(&again).0, id_b, "a session grant crossed sessions: {again}");
    n.decide(&id_b, &bob, json!({"grant": "deny", "reason": "not this one"}))
        .await;
    let heard_b = b.notification();
    assert_eq!(completed(&heard_b), id_b, "{heard_b}");
    assert!(
        b.notes().is_empty(),
        "session B heard another session's notice: {:?}",
        b.notes()
    );
    let refused = b.send("retry");
    assert_eq!(refused["error"]["code"], -32001, "{refused}");
    assert_eq!(refused["error"]["data"]["reason"], "approval_denied", "{refused}");
    assert!(
        a.notes().is_empty(),
        "session A heard session B's notice: {:?}",
        a.notes()
    );

    assert_eq!(
        n.ran(),
        ["/srv/a", "/srv/a2"],
        "only granted calls may run\n{}",
        n.diag()
    );
    // The streams went through the relay (Envoy logs a stream once it ends).
    drop((a, b));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !n.s.envoy.log().contains("ACCESS GET /mcp 200 relay") {
        assert!(
            std::time::Instant::now() < deadline,
            "no GET stream through the relay:\n{}",
            n.s.envoy.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_hears_the_decision_on_its_sessions_stream_too() {
    let n = Notice::start().await;
    let alice = jwt("alice", &["agent"]);
    let bob = jwt("bob", &["approver"]);

    // The official Python SDK with the initialize handshake (protocol
    // 2025-11-25): a session, and the GET stream its SDK opens.
    let mut py = Client::start(
        "python",
        &n.s.url("/mcp"),
        &alice,
        json!({"url_elicitation": true, "mode": "legacy", "tool": "delete_file", "arguments": {"path": "/srv/py"}}),
        &n.dir,
    );
    let (id, _) = waiting(&py.next());
    n.decide(&id, &bob, json!({"grant": "allow_once"})).await;
    let heard = py.notification();
    assert_eq!(completed(&heard), id, "{heard}\n{}", n.diag());
    let ran = py.send("retry");
    assert_eq!(ran["result"], "deleted /srv/py", "{ran}\n{}", n.diag());
    assert_eq!(n.ran(), ["/srv/py"]);
}
