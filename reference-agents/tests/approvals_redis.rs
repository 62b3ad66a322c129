//! Approvals in Redis, through the tool agent's policies, against a real
//! `redis-server` (`common::redis_server`; the test is skipped, saying so,
//! when `redis-server` is not installed): a call waits on one agent, an
//! approver decides it through the approvals API of another, the call
//! passes once on either; when Redis is down the call fails closed (503
//! `session_store_unavailable`) and the API answers 503
//! `approvals_store_unavailable`.

/// The agents' test helpers, shared with the SDK's tests.
#[path = "../../agents/tests/common/mod.rs"]
mod common;

use std::sync::Arc;

use common::redis_server::Redis;
use policy_agents::testing::{TestCall, TestRequest};
use policy_agents::RequestOutcome;
use reference_agents::approvals::api::ApprovalsApi;
use reference_agents::approvals::{Approvals, Limits};
use reference_agents::tool::McpToolAuthorization;
use serde_json::{json, Value};

const RULES: &str = r#"[{"name":"deletes","effect":"approve","tools":["delete_file"],"approval":{"approvers":{"roles_any":["approver"]}}}]"#;

/// One tool agent's policies over the shared store.
struct Agent {
    authz: McpToolAuthorization,
    api: ApprovalsApi,
}

async fn agent(redis: &Redis) -> Agent {
    let approvals: Arc<Approvals> = Approvals::redis(&redis.url, Limits::default())
        .await
        .expect("connect to redis");
    Agent {
        authz: McpToolAuthorization::with_approvals(approvals.clone()),
        api: ApprovalsApi::new(approvals),
    }
}

fn delete(path: &str) -> TestRequest {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "delete_file", "arguments": {"path": path}}});
    TestRequest::new("POST", "/mcp")
        .header("content-type", "application/json")
        .header("mcp-session-id", "s1")
        .body(body.to_string())
}

fn as_alice() -> TestCall {
    TestCall::new()
        .params(&[("rules", RULES)])
        .metadata("sub", "alice")
        .metadata("route.name", "mcp")
        .metadata("route.version", "v1")
}

fn as_bob() -> TestCall {
    TestCall::new().metadata("sub", "bob").metadata("roles", "approver")
}

/// The JSON-RPC error code of a refused call (`None`: it passed).
fn error_code(out: &RequestOutcome) -> Option<i64> {
    let d = out.denial()?;
    let body: Value = serde_json::from_slice(&d.body).expect("a JSON-RPC answer");
    body["error"]["code"].as_i64()
}

/// The API's answer: status, JSON body, headers.
async fn api(a: &Agent, req: TestRequest) -> (u16, Value, Vec<(String, String)>) {
    let out = as_bob().request(&a.api, &req).await.expect("the API answers");
    let d = out.denial().expect("the API answers itself");
    (d.status, serde_json::from_slice(&d.body).unwrap(), d.headers.clone())
}

fn redis() -> Option<Redis> {
    if std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIPPED: redis-server is not installed (apt-get install redis-server; `make test` installs it)");
        return None;
    }
    Some(Redis::start())
}

#[tokio::test]
async fn a_call_waits_on_one_agent_and_is_decided_on_another() {
    let Some(mut redis) = redis() else { return };
    let (one, two) = (agent(&redis).await, agent(&redis).await);
    let first = as_alice().request(&one.authz, &delete("/srv/a")).await.unwrap();
    assert_eq!(error_code(&first), Some(-32042), "waits for approval");
    let id = first.metadata_value("approval.id").expect("an approval id").to_string();
    // The same call on the other agent waits on the same request.
    let again = as_alice().request(&two.authz, &delete("/srv/a")).await.unwrap();
    assert_eq!(again.metadata_value("approval.id"), Some(id.as_str()));

    let (status, list, _) = api(&two, TestRequest::new("GET", "/approvals?state=pending")).await;
    assert_eq!(status, 200);
    assert_eq!(list["approvals"][0]["id"], json!(id));
    assert_eq!(list["approvals"][0]["attempts"], 2);
    let (status, _, headers) = api(&two, TestRequest::new("GET", &format!("/approvals/{id}"))).await;
    assert_eq!(status, 200);
    let etag = headers.iter().find(|(k, _)| k == "etag").expect("an ETag").1.clone();
    let decide = |tag: &str| {
        TestRequest::new("POST", &format!("/approvals/{id}"))
            .header("if-match", tag)
            .body(r#"{"grant": "allow_once"}"#)
    };
    let (status, decided, _) = api(&two, decide(&etag)).await;
    assert_eq!((status, decided["state"].as_str()), (200, Some("allowed")), "{decided}");
    // Decided once: the other agent's API refuses it again.
    let (status, twice, _) = api(&one, decide("*")).await;
    assert_eq!((status, twice["reason"].as_str()), (409, Some("already_decided")));

    // The call passes once, on the agent that did not decide it...
    let passed = as_alice().request(&one.authz, &delete("/srv/a")).await.unwrap();
    assert_eq!(error_code(&passed), None, "granted once");
    assert_eq!(passed.metadata_value("approval.grant"), Some("allow_once"));
    // ...and not twice.
    let after = as_alice().request(&two.authz, &delete("/srv/a")).await.unwrap();
    assert_eq!(error_code(&after), Some(-32042));

    // Redis down: the call fails closed, the API answers 503.
    redis.stop();
    let err = as_alice()
        .request(&one.authz, &delete("/srv/a"))
        .await
        .expect_err("no decision without the store");
    let deny = err.denial().expect("a denial for on_failure: deny");
    assert_eq!((deny.status, deny.reason.as_str()), (503, "session_store_unavailable"));
    let (status, body, _) = api(&two, TestRequest::new("GET", "/approvals")).await;
    assert_eq!(
        (status, body["reason"].as_str()),
        (503, Some("approvals_store_unavailable"))
    );
    // Calls no rule asks approval for never touch the store.
    let listing = TestRequest::new("POST", "/mcp")
        .header("content-type", "application/json")
        .body(
            r#"{"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "read_file", "arguments": {}}}"#,
        );
    let other = as_alice().request(&one.authz, &listing).await;
    assert!(other.is_ok(), "{:?}", other.err().map(|e| e.message().to_string()));
}

#[test]
fn tool_agent_refuses_to_start_without_its_redis() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("tool.sock");
    let url = format!("redis+unix://{}", dir.path().join("absent.sock").display());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tool-agent"))
        .arg("--socket")
        .arg(&socket)
        .args(["--redis-url", &url])
        .output()
        .expect("run tool-agent");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--redis-url"), "{stderr}");
}
