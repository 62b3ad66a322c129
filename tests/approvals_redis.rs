//! End to end for approvals kept in Redis: a real Envoy, the kernel binary,
//! `auth-agent` (HS256 JWTs with roles) and two `tool-agent` processes,
//! `tool-a` and `tool-b`, each started with `--redis-url` on one real
//! `redis-server` (`support::redis`) and its own `--approvals-journal`,
//! in front of the Python MCP server that records the calls it runs.
//!
//! Route `mcp` pins `mcpToolAuthorization` (and `approvalOutcome`) to
//! `tool-a`; routes `approvals` and `approvals-page` pin the `approvals`
//! API to `tool-b`. A call is held by one agent and decided through the
//! other's API: only the shared store can make that work. MCP calls are
//! plain JSON-RPC POSTs (the Python server is stateless: no initialize).

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::redis::Redis;
use support::reference::verify_audit;
use support::stack::AgentSpec;
use support::*;

const SECRET: &str = "approvals-redis-e2e-secret";

fn jwt(sub: &str, roles: &[&str]) -> String {
    support::jwt::jwt(SECRET, sub, roles)
}

/// Deletes need an `approver`; reads pass.
const RULES: &str = r#"[{"name": "deletes", "effect": "approve", "tools": ["delete_file"], "approval": {"approvers": {"roles_any": ["approver"]}, "ttl_s": 600}}, {"name": "readers", "effect": "allow", "tools": ["read_file"]}]"#;

use support::jwt::JWT_PARAMS as JWT;

/// The routes, with `mcpToolAuthorization` on agent `a` and the API on `b`.
fn routes(a: &str, b: &str) -> String {
    format!(
        r#"  route_policies:
    - route_name: mcp
      request_policy_chain:
        - policy: jwtValidation
          params: {JWT}
        - policy: mcpToolAuthorization
          agent: {a}
          params: {{rules: {RULES}}}
      response_policy_chain:
        - policy: approvalOutcome
          agent: {a}
    - route_name: approvals-page
      request_policy_chain:
        - policy: approvals
          agent: {b}
    - route_name: approvals
      request_policy_chain:
        - policy: jwtValidation
          params: {JWT}
        - policy: approvals
          agent: {b}
"#
    )
}

struct Approvals {
    /// The Redis this gateway started (another may share it).
    redis: Option<Redis>,
    /// Its two tool agents' names.
    names: [&'static str; 2],
    /// The `host` its MCP calls name (default: Envoy's address).
    host: Option<&'static str>,
    s: Stack,
    dir: PathBuf,
    /// tool-a's and tool-b's journals.
    journal_a: PathBuf,
    journal_b: PathBuf,
    next_id: std::cell::Cell<u64>,
}

async fn start() -> Approvals {
    let redis = Redis::start();
    let mut a = start_on(&redis.url, ["tool-a", "tool-b"]).await;
    a.redis = Some(redis);
    a
}

/// A gateway on the Redis at `url`, its tool agents named `names`.
async fn start_on(url: &str, names: [&'static str; 2]) -> Approvals {
    let b = Stack::builder();
    let dir = b.dir().to_path_buf();
    let journal_a = dir.join("approvals-a.jsonl");
    let journal_b = dir.join("approvals-b.jsonl");
    let tool = |name: &str, journal: &Path| {
        let journal_arg = format!("--approvals-journal={}", journal.display());
        AgentSpec::bin(name, "tool-agent", &["--redis-url", url, &journal_arg])
    };
    let s = b
        .agent(AgentSpec::bin("auth-agent", "auth-agent", &[]).env("DEMO_JWT_SECRET", SECRET))
        .agent(tool(names[0], &journal_a))
        .agent(tool(names[1], &journal_b))
        .config(&routes(names[0], names[1]))
        .mcp_upstream()
        .envoy_config(|kernel, upstream| {
            support::approvals::envoy_config(kernel, upstream, &support::approvals::mcp_route(), Vec::new())
        })
        .start()
        .await;
    Approvals {
        redis: None,
        names,
        host: None,
        s,
        dir,
        journal_a,
        journal_b,
        next_id: std::cell::Cell::new(1),
    }
}

/// What a call through `/mcp` got: HTTP status, the JSON-RPC answer (or
/// the body as a string when it is not JSON), the raw body.
struct Mcp {
    status: u16,
    v: Value,
    body: String,
    retry_after: Option<String>,
}

impl Mcp {
    /// The JSON-RPC error code (`None`: no error).
    fn code(&self) -> Option<i64> {
        self.v["error"]["code"].as_i64()
    }
}

/// The JSON-RPC message of a body: JSON, or the last `data:` line of an
/// event stream.
fn jsonrpc(body: &str) -> Value {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        return v;
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .next_back()
        .unwrap_or_else(|| Value::String(body.to_string()))
}

impl Approvals {
    fn redis(&self) -> &Redis {
        self.redis.as_ref().expect("this gateway's own Redis")
    }

    fn redis_mut(&mut self) -> &mut Redis {
        self.redis.as_mut().expect("this gateway's own Redis")
    }

    fn diag(&self) -> String {
        format!(
            "{}\n--- {} ---\n{}\n--- {} ---\n{}",
            self.s.diag(),
            self.names[0],
            self.s.agent(self.names[0]).log(),
            self.names[1],
            self.s.agent(self.names[1]).log()
        )
    }

    /// The tool calls the MCP server ran: `(tool, path)`.
    fn ran(&self) -> Vec<(String, String)> {
        support::approvals::ran(&self.dir.join("mcp-calls.jsonl"))
    }

    /// How many times the server ran `tool` on `path`.
    fn ran_count(&self, tool: &str, path: &str) -> usize {
        self.ran().iter().filter(|(t, p)| t == tool && p == path).count()
    }

    /// Policy calls the kernel sent to `agent`.
    fn calls(&self, agent: &str) -> f64 {
        self.s
            .kernel
            .metric(&format!("policy_kernel_agent_stream_calls_total{{agent=\"{agent}\"}}"))
    }

    /// A plain JSON-RPC `tools/call` of `tool` on `path` through Envoy, as
    /// the caller with `token`.
    async fn call(&self, token: &str, tool: &str, path: &str) -> Mcp {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": {"path": path}}})
        .to_string();
        let auth = format!("Bearer {token}");
        let mut headers = vec![
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", "2025-11-25"),
        ];
        if let Some(h) = self.host {
            headers.push(("host", h));
        }
        let got = self.s.send("POST", "/mcp", &headers, Some(&body)).await;
        let v = jsonrpc(&got.body);
        if got.status == 200 && v.is_object() {
            assert_eq!(v["id"], id, "the answer to another request: {}", got.body);
        }
        Mcp {
            status: got.status,
            retry_after: got.header("retry-after").map(String::from),
            v,
            body: got.body,
        }
    }

    /// The approvals API through Envoy (served by tool-b): status and body.
    async fn api(&self, method: &str, path: &str, token: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self
            .s
            .client
            .request(method.parse().unwrap(), self.s.url(path))
            .header("authorization", format!("Bearer {token}"));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req.send().await.expect("approvals API");
        let status = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, v)
    }

    /// Polls `GET /approvals?state=pending` (as `token`) until `id` is
    /// listed, within 10 s; the listed item.
    async fn until_pending(&self, token: &str, id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (status, list) = self.api("GET", "/approvals?state=pending", token, None).await;
            let found = list["approvals"]
                .as_array()
                .and_then(|l| l.iter().find(|x| x["id"] == id))
                .cloned();
            if let (200, Some(item)) = (status, found) {
                return item;
            }
            assert!(
                Instant::now() < deadline,
                "{id} not listed as pending: {status} {list}\n{}",
                self.diag()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The journal's records about approval `id`, once `want` of them are
    /// there (polled, within 10 s).
    async fn journaled(&self, journal: &Path, id: &str, want: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let events: Vec<Value> = std::fs::read_to_string(journal)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .filter(|r: &Value| r["approval_id"] == id)
                .collect();
            if events.len() >= want || Instant::now() >= deadline {
                return events;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The approval id of a call answered `-32042` (waiting for approval).
fn waiting(got: &Mcp, diag: impl FnOnce() -> String) -> String {
    assert_eq!(
        (got.status, got.code()),
        (200, Some(-32042)),
        "not waiting for approval: {}\n{}",
        got.body,
        diag()
    );
    let data = &got.v["error"]["data"];
    assert_eq!(data["reason"], "approval_required", "{}", got.body);
    let id = data["approval_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no approval_id: {}", got.body))
        .to_string();
    assert_eq!(id.len(), 32, "{}", got.body);
    assert_eq!(data["elicitations"][0]["elicitationId"], id.as_str(), "{}", got.body);
    id
}

/// The tool's text result of a call that passed.
fn result_text(got: &Mcp) -> &str {
    got.v["result"]["content"][0]["text"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_held_by_one_tool_agent_is_decided_through_another_sharing_redis() {
    let mut a = start().await;
    let alice = jwt("alice", &["agent"]);
    let bob = jwt("bob", &["approver"]);
    let old = "/srv/data/old.csv";

    // a. Held by tool-a: -32042 with the approval's id; not run.
    let (calls_a, calls_b) = (a.calls("tool-a"), a.calls("tool-b"));
    let first = a.call(&alice, "delete_file", old).await;
    let id = waiting(&first, || a.diag());
    assert_eq!(a.ran_count("delete_file", old), 0, "a held call ran: {:?}", a.ran());
    assert_eq!(a.calls("tool-a") - calls_a, 1.0, "checked by tool-a\n{}", a.diag());
    assert_eq!(a.calls("tool-b") - calls_b, 0.0, "tool-b saw the call\n{}", a.diag());
    // The request is in Redis, not in tool-a's memory alone.
    let key = format!("policy-agents:{{approvals}}:approval:{id}");
    assert_eq!(a.redis().cli(&["EXISTS", &key]), "1", "{key} not in Redis");

    // b. Listed and decided through tool-b's API.
    let calls_a = a.calls("tool-a");
    let item = a.until_pending(&bob, &id).await;
    assert_eq!(
        (
            item["principal"].as_str(),
            item["target"].as_str(),
            item["route"].as_str()
        ),
        (Some("sub:alice"), Some("delete_file"), Some("mcp")),
        "{item}"
    );
    assert_eq!(item["args_preview"], json!({"path": old}), "{item}");
    let (status, decided) = a
        .api(
            "POST",
            &format!("/approvals/{id}"),
            &bob,
            Some(json!({"grant": "allow_once"})),
        )
        .await;
    assert_eq!(
        (status, decided["state"].as_str()),
        (200, Some("allowed")),
        "{decided}\n{}",
        a.diag()
    );
    assert_eq!(a.calls("tool-a") - calls_a, 0.0, "tool-a served the API\n{}", a.diag());

    // c. The retry through tool-a passes once; the next goes back to approval.
    let passed = a.call(&alice, "delete_file", old).await;
    assert_eq!(passed.status, 200, "{}\n{}", passed.body, a.diag());
    assert!(
        passed.v.get("error").is_none(),
        "refused: {}\n{}",
        passed.body,
        a.diag()
    );
    assert_eq!(result_text(&passed), format!("deleted {old}"), "{}", passed.body);
    assert_eq!(a.ran_count("delete_file", old), 1, "{:?}", a.ran());
    let third = a.call(&alice, "delete_file", old).await;
    let id3 = waiting(&third, || a.diag());
    assert_ne!(id3, id, "an allow_once grant served twice: {}", third.body);
    assert_eq!(a.ran_count("delete_file", old), 1, "ran again: {:?}", a.ran());

    // d. Denied through tool-b, refused by tool-a with the reason.
    let other = "/srv/data/other.csv";
    let held = a.call(&alice, "delete_file", other).await;
    let id2 = waiting(&held, || a.diag());
    assert!(id2 != id && id2 != id3, "{}", held.body);
    a.until_pending(&bob, &id2).await;
    let (status, denied) = a
        .api(
            "POST",
            &format!("/approvals/{id2}"),
            &bob,
            Some(json!({"grant": "deny", "reason": "not during the audit"})),
        )
        .await;
    assert_eq!(
        (status, denied["state"].as_str()),
        (200, Some("denied")),
        "{denied}\n{}",
        a.diag()
    );
    let refused = a.call(&alice, "delete_file", other).await;
    assert_eq!(
        (refused.status, refused.code()),
        (200, Some(-32001)),
        "{}\n{}",
        refused.body,
        a.diag()
    );
    let data = &refused.v["error"]["data"];
    assert_eq!(data["reason"], "approval_denied", "{}", refused.body);
    assert_eq!(data["approval_id"], id2.as_str(), "{}", refused.body);
    assert_eq!(data["denial_reason"], "not during the audit", "{}", refused.body);
    assert_eq!(a.ran_count("delete_file", other), 0, "a denied call ran: {:?}", a.ran());

    // A read needs no approval.
    let read = a.call(&alice, "read_file", "/srv/data/a").await;
    assert_eq!(result_text(&read), "read /srv/data/a", "{}\n{}", read.body, a.diag());

    // e. Redis away: a call that needs approval fails closed, the API
    // answers 503, a call that needs none still passes.
    a.redis_mut().stop();
    let before = a.ran().len();
    let closed = a.call(&alice, "delete_file", "/srv/data/during-outage.csv").await;
    assert_eq!(closed.status, 503, "{}\n{}", closed.body, a.diag());
    assert_eq!(
        closed.v["reason"],
        "session_store_unavailable",
        "{}\n{}",
        closed.body,
        a.diag()
    );
    assert_eq!(
        closed.v["error"], "approvals: the approvals store is unavailable",
        "{}",
        closed.body
    );
    assert_eq!(closed.retry_after.as_deref(), Some("1"), "{}", closed.body);
    assert!(closed.v.get("result").is_none(), "{}", closed.body);
    assert_eq!(a.ran().len(), before, "a call ran without its approval: {:?}", a.ran());
    let (status, down) = a.api("GET", "/approvals?state=pending", &bob, None).await;
    assert_eq!(
        (status, down["reason"].as_str()),
        (503, Some("approvals_store_unavailable")),
        "{down}\n{}",
        a.diag()
    );
    let read = a.call(&alice, "read_file", "/srv/data/b").await;
    assert_eq!(
        (read.status, result_text(&read)),
        (200, "read /srv/data/b"),
        "{}\n{}",
        read.body,
        a.diag()
    );
    assert_eq!(a.ran().len(), before + 1, "{:?}", a.ran());

    // f. Each journal holds what its agent did, and verifies.
    let kinds = |events: &[Value]| -> Vec<String> {
        events
            .iter()
            .filter_map(|r| r["event"].as_str().map(String::from))
            .collect()
    };
    let on_a = a.journaled(&a.journal_a, &id, 3).await;
    assert_eq!(kinds(&on_a), ["requested", "released", "executed"], "{on_a:?}");
    assert_eq!(on_a[2]["status"], 200, "{on_a:?}");
    let on_b = a.journaled(&a.journal_b, &id, 1).await;
    assert_eq!(kinds(&on_b), ["decided"], "{on_b:?}");
    assert_eq!(on_b[0]["by"], "sub:bob", "{on_b:?}");
    assert_eq!(on_b[0]["args_digest"], on_a[0]["args_digest"], "{on_a:?}\n{on_b:?}");
    // The denied call: held and then refused by tool-a, decided on tool-b.
    let denied_a = a.journaled(&a.journal_a, &id2, 2).await;
    assert_eq!(kinds(&denied_a), ["requested", "refused"], "{denied_a:?}");
    assert_eq!(denied_a[1]["grant"], "deny", "{denied_a:?}");
    let denied_b = a.journaled(&a.journal_b, &id2, 1).await;
    assert_eq!(kinds(&denied_b), ["decided"], "{denied_b:?}");
    assert_eq!(denied_b[0]["grant"], "deny", "{denied_b:?}");
    for journal in [&a.journal_a, &a.journal_b] {
        let out = verify_audit(journal);
        assert!(
            out.status.success(),
            "{}: {}{}",
            journal.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Two gateways whose tool agents are named differently (so their routes'
/// versions differ) carry the same approve rule on one Redis: a standing
/// grant given through one lets the caller's calls through the other,
/// unasked. Both are reached under one host name, as behind one load
/// balancer (a grant is bound to the endpoint).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateways_with_differently_named_agents_share_standing_grants() {
    let redis = Redis::start();
    let mut west = start_on(&redis.url, ["tool-a", "tool-b"]).await;
    let mut east = start_on(&redis.url, ["east-tools", "east-approvals"]).await;
    west.host = Some("mcp.example.com");
    east.host = Some("mcp.example.com");
    let alice = jwt("alice", &["agent"]);
    let bob = jwt("bob", &["approver"]);

    let first = west.call(&alice, "delete_file", "/srv/w/1").await;
    let id = waiting(&first, || west.diag());
    west.until_pending(&bob, &id).await;
    let (status, body) = west
        .api(
            "POST",
            &format!("/approvals/{id}"),
            &bob,
            Some(json!({"grant": "allow_always"})),
        )
        .await;
    assert_eq!(status, 200, "{body}\n{}", west.diag());

    // Through the other gateway: another path, the same grant.
    let other = east.call(&alice, "delete_file", "/srv/e/2").await;
    assert_eq!(
        result_text(&other),
        "deleted /srv/e/2",
        "{}\n{}",
        other.body,
        east.diag()
    );
    assert_eq!(east.ran_count("delete_file", "/srv/e/2"), 1);
    // Another caller is asked, through either.
    let carol = jwt("carol", &["agent"]);
    let asked = east.call(&carol, "delete_file", "/srv/e/3").await;
    waiting(&asked, || east.diag());
}
