//! The planner's session store in Redis, against a real `redis-server`
//! (`common::redis_server`): two stores (two agents) share sessions, the
//! Redis backend behaves as the in-memory one, every key is bounded, and an
//! outage is a named failure that ends when Redis is back.

/// The agents' test helpers, shared with the SDK's tests.
#[path = "../../agents/tests/common/mod.rs"]
mod common;

use std::time::Duration;

use common::redis_server::Redis;
use policy_agents::testing::{TestCall, TestRequest, TestResponse};
use reference_agents::planner::{ContextBudget, FutilityGuard, SessionStore};
use reference_agents::sessions::MAX_SEEN;
use serde_json::json;

const TTL: Duration = Duration::from_secs(60);

async fn store(redis: &Redis) -> SessionStore {
    SessionStore::redis(&redis.url).await.expect("connect to redis")
}

/// The steps of the policies, run on one store: what each answers.
async fn script(a: &SessionStore, b: &SessionStore) -> Vec<u64> {
    let mut out = Vec::new();
    for (store, results) in [
        (a, vec![1, 2]),
        (b, vec![1, 2]),
        (a, vec![2, 1, 2]),
        (b, vec![3]),
        (a, vec![3]),
    ] {
        out.push(u64::from(store.record_results("s", &results, TTL).await.unwrap()));
    }
    out.push(a.charge("s", 300, TTL).await.unwrap());
    out.push(b.charge("s", -50, TTL).await.unwrap());
    out.push(a.used("s", TTL).await.unwrap());
    out.push(b.charge("s", -1000, TTL).await.unwrap());
    out.push(b.used("other", TTL).await.unwrap());
    for (store, cost) in [(a, 700), (b, 301), (a, 300), (b, 1)] {
        let c = store.try_charge("t", cost, 1000, TTL).await.unwrap();
        out.extend([u64::from(c.charged), c.used]);
    }
    out
}

#[tokio::test]
async fn two_stores_share_sessions_and_match_the_memory_backend() {
    let redis = Redis::start();
    let (a, b) = (store(&redis).await, store(&redis).await);
    let shared = script(&a, &b).await;
    assert_eq!(
        shared,
        [0, 1, 2, 0, 1, 300, 250, 250, 0, 0, 1, 700, 0, 700, 1, 1000, 0, 1000]
    );
    let memory = SessionStore::memory();
    assert_eq!(script(&memory, &memory.clone()).await, shared, "same answers in memory");
}

#[tokio::test]
async fn every_key_expires_and_result_sets_are_bounded() {
    let redis = Redis::start();
    let s = store(&redis).await;
    let ttl = Duration::from_secs(30);
    let many: Vec<u64> = (0..MAX_SEEN as u64).collect();
    s.record_results("bounded", &many, ttl).await.unwrap();
    assert_eq!(s.record_results("bounded", &many, ttl).await.unwrap(), 1);
    s.charge("bounded", 10, ttl).await.unwrap();
    let keys = redis.cli(&["--scan", "--pattern", "policy-agents:planner:*"]);
    let keys: Vec<&str> = keys.lines().collect();
    assert_eq!(keys.len(), 3, "seen, stagnant, tokens: {keys:?}");
    for k in &keys {
        assert!(!k.contains("bounded"), "session names are hashed: {k}");
        let pttl: i64 = redis.cli(&["PTTL", k]).parse().unwrap();
        assert!(pttl > 0 && pttl <= 30_000, "{k}: {pttl}");
    }
    let seen = keys.iter().find(|k| k.contains(":seen:")).unwrap();
    assert_eq!(redis.cli(&["SCARD", seen]), MAX_SEEN.to_string());
    // One more result: the full set is emptied rather than grown.
    assert_eq!(s.record_results("bounded", &[u64::MAX], ttl).await.unwrap(), 0);
    assert_eq!(redis.cli(&["SCARD", seen]), "1");
    // A session past its TTL starts over.
    let short = Duration::from_millis(50);
    s.charge("brief", 99, short).await.unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(s.used("brief", short).await.unwrap(), 0);
}

#[tokio::test]
async fn policies_on_two_agents_see_one_session() {
    let redis = Redis::start();
    let (one, two) = (
        FutilityGuard::with_store(store(&redis).await),
        FutilityGuard::with_store(store(&redis).await),
    );
    let body = json!({"messages": [
        {"role": "assistant", "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "search", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c0", "content": "no results"}
    ]})
    .to_string();
    let req = TestRequest::new("POST", "/v1/chat/completions")
        .header("x-session-id", "split")
        .body(body);
    let call = TestCall::new().params(&[("stagnation_turns", "2"), ("action", "deny")]);
    let mut statuses = Vec::new();
    for p in [&one, &two, &one] {
        let out = call.request(p, &req).await.unwrap();
        statuses.push(out.denial().map_or(200, |d| d.status));
    }
    assert_eq!(statuses, [200, 200, 409], "stagnation counted across both");

    let (a, b) = (
        ContextBudget::with_store(store(&redis).await),
        ContextBudget::with_store(store(&redis).await),
    );
    let call = TestCall::new().params(&[("budget", "1000")]);
    let req = TestRequest::new("POST", "/")
        .header("x-session-id", "budget")
        .body("{}");
    let first = call.request(&a, &req).await.unwrap();
    let usage = TestResponse::new(200).body(r#"{"usage": {"total_tokens": 900}}"#);
    let charged = call
        .clone()
        .metadata("context.estimate", first.metadata_value("context.estimate").unwrap())
        .response(&a, &req, &usage)
        .await
        .unwrap();
    assert_eq!(charged.metadata_value("context.used"), Some("900"));
    let seen = call.request(&b, &req).await.unwrap();
    assert_eq!(
        seen.metadata_value("context.verdict"),
        Some("summarize"),
        "the other agent sees 900"
    );
}

#[tokio::test]
async fn an_outage_fails_named_and_ends_when_redis_is_back() {
    let mut redis = Redis::start();
    let policy = ContextBudget::with_store(store(&redis).await);
    let call = TestCall::new().params(&[("budget", "1000")]);
    let req = TestRequest::new("POST", "/").header("x-session-id", "s").body("{}");
    assert!(call.request(&policy, &req).await.is_ok());
    redis.stop();
    for _ in 0..3 {
        let err = call.request(&policy, &req).await.unwrap_err();
        assert!(
            err.message().starts_with("contextBudget: session store (redis)"),
            "{}",
            err.message()
        );
        let deny = err.denial().expect("a denial for on_failure: deny");
        assert_eq!(deny.status, 503);
        assert_eq!(deny.reason, "session_store_unavailable");
    }
    redis.restart();
    // The first call after the outage is answered: the refused connection
    // is re-established and the call tried once more.
    let out = call.request(&policy, &req).await.expect("answered once Redis is back");
    assert_eq!(out.metadata_value("context.verdict"), Some("ok"));
}

#[test]
fn planner_agent_refuses_to_start_without_its_redis() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("planner.sock");
    let url = format!("redis+unix://{}", dir.path().join("absent.sock").display());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_planner-agent"))
        .arg("--socket")
        .arg(&socket)
        .args(["--redis-url", &url])
        .output()
        .expect("run planner-agent");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--redis-url"), "{stderr}");
}

/// The server requests an MCP session awaits an answer to
/// (`mcpServerRequestGuard`): shared by two stores, answered once, the same
/// in memory.
async fn asked(a: &SessionStore, b: &SessionStore) -> Vec<bool> {
    a.remember_request("mcp s1", "4", TTL).await.unwrap();
    a.remember_request("mcp s1", "\"x\"", TTL).await.unwrap();
    vec![
        b.take_request("mcp s2", "4", TTL).await.unwrap(),
        b.take_request("mcp s1", "4", TTL).await.unwrap(),
        a.take_request("mcp s1", "4", TTL).await.unwrap(),
        a.take_request("mcp s1", "\"x\"", TTL).await.unwrap(),
        b.take_request("mcp s1", "5", TTL).await.unwrap(),
    ]
}

#[tokio::test]
async fn server_requests_are_answered_once_across_agents() {
    let redis = Redis::start();
    let (a, b) = (store(&redis).await, store(&redis).await);
    let shared = asked(&a, &b).await;
    assert_eq!(shared, [false, true, false, true, false]);
    let memory = SessionStore::memory();
    assert_eq!(asked(&memory, &memory.clone()).await, shared, "same answers in memory");
}

/// The owners of A2A tasks (`a2aTaskOwnership`): the first claim wins on
/// every store, and the same in memory.
async fn owners(a: &SessionStore, b: &SessionStore) -> Vec<Option<String>> {
    vec![
        a.owner("a2a-task h t1", TTL).await.unwrap(),
        Some(a.claim_owner("a2a-task h t1", "sub:alice", TTL).await.unwrap()),
        Some(b.claim_owner("a2a-task h t1", "sub:mallory", TTL).await.unwrap()),
        b.owner("a2a-task h t1", TTL).await.unwrap(),
        b.owner("a2a-task other t1", TTL).await.unwrap(),
    ]
}

#[tokio::test]
async fn a2a_task_owners_are_shared_and_never_overwritten() {
    let redis = Redis::start();
    let (a, b) = (store(&redis).await, store(&redis).await);
    let shared = owners(&a, &b).await;
    let alice = Some("sub:alice".to_string());
    assert_eq!(shared, [None, alice.clone(), alice.clone(), alice, None]);
    let memory = SessionStore::memory();
    assert_eq!(owners(&memory, &memory.clone()).await, shared, "same answers in memory");
    let ttl = redis.cli(&[
        "PTTL",
        &format!("policy-agents:a2a:owner:{{{}}}", sha256_hex("a2a-task h t1")),
    ]);
    let ms: i64 = ttl.trim().parse().unwrap_or(-1);
    assert!(ms > 0 && ms <= 60_000, "owner keys expire: PTTL {ttl}");
}

fn sha256_hex(s: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(s.as_bytes()))
}
