//! End to end for the MCP tasks extension (`io.modelcontextprotocol/tasks`,
//! protocol 2026-07-28) through a real Envoy, the kernel binary and the real
//! agents, with the official Python SDK 2.3 as server and client
//! (`tests/mcp/mrtr_server.py`'s `job` tool and tasks methods, built on the
//! SDK's extension API; `tests/mcp/mrtr_client.py`'s task steps):
//!
//! * a task is its creator's: another caller's `tasks/get`, `tasks/update`
//!   and `tasks/cancel` are refused as an unknown task, and do not reach
//!   the server;
//! * the questions of a task's status are decided like `input_required`
//!   results: a password is refused, a name passes; `tasks/update` may
//!   answer only what this caller was asked for this task.

mod support;

use serde_json::{json, Value};
use support::jwt::jwt;
use support::mcp_2026::*;

fn step(op: &str, extra: Value) -> Value {
    let mut s = json!({"op": op});
    if let Some(o) = extra.as_object() {
        for (k, v) in o {
            s[k] = v.clone();
        }
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_their_creators_and_their_questions_are_governed() {
    let e = start(Sdk::Python, &["--json"]).await;
    let ann = jwt(SECRET, "ann", &["reader"]);
    let bob = jwt(SECRET, "bob", &["reader"]);

    // Ann's task asks her name: she answers, it completes.
    let got = e.run(
        Sdk::Python,
        &ann,
        json!([
            step("task_call", json!({"name": "job", "args": {"kind": "plain"}})),
            step("task_get", json!({"task_id": "$last"})),
            step("task_update", json!({"task_id": "$last", "responses": "$asked"})),
            step("task_get", json!({"task_id": "$last"})),
        ]),
        &["--no-progress"],
    );
    let task = got[0]["task_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{got:?}\n{}", e.diag()))
        .to_string();
    assert_eq!(got[1]["result"]["status"], "input_required", "{got:?}\n{}", e.diag());
    assert!(got[2].get("error").is_none(), "{}\n{}", got[2], e.diag());
    assert_eq!(got[3]["result"]["status"], "completed", "{}", got[3]);

    // Bob holds Ann's task id: every task method is refused, as an unknown task.
    let steps: Vec<Value> = ["task_get", "task_cancel"]
        .iter()
        .map(|op| step(op, json!({"task_id": task})))
        .chain(std::iter::once(step(
            "task_update",
            json!({"task_id": task, "responses": {"name": {"action": "accept", "content": {"name": "Bob"}}}}),
        )))
        .collect();
    let got = e.run(Sdk::Python, &bob, Value::Array(steps), &["--no-progress"]);
    for v in &got {
        assert_eq!(v["error"]["code"], -32602, "{v}\n{}", e.diag());
        assert_eq!(v["status"], 400, "{v}");
    }
    // Ann still may.
    let got = e.run(
        Sdk::Python,
        &ann,
        json!([step("task_get", json!({"task_id": task}))]),
        &["--no-progress"],
    );
    assert_eq!(got[0]["result"]["status"], "completed", "{}", got[0]);

    // A task that asks a password: its status is refused, nothing asked
    // reaches the client, and an answer nobody was allowed to ask is refused.
    let got = e.run(
        Sdk::Python,
        &ann,
        json!([
            step("task_call", json!({"name": "job", "args": {"kind": "secret"}})),
            step("task_get", json!({"task_id": "$last"})),
            step("task_update", json!({"task_id": "$last", "responses": {"password": {"action": "accept", "content": {"password": "hunter2"}}}})),
        ]),
        &["--no-progress"],
    );
    assert!(got[0]["task_id"].is_string(), "{got:?}");
    assert_eq!(
        got[1]["error"]["data"]["rule"],
        "secret_field",
        "{}\n{}",
        got[1],
        e.diag()
    );
    assert_eq!(got[1]["callbacks"], json!([]));
    assert_eq!(
        got[2]["error"]["data"]["rule"], "unsolicited_input_response",
        "{}",
        got[2]
    );
    let answered: Vec<Value> = e.records().into_iter().filter(|r| r["kind"] == "task").collect();
    assert_eq!(answered.len(), 1, "only the plain task completed: {answered:?}");
}

/// With `tool-agent --redis-url`, a task's owner and the questions a caller
/// was asked live in Redis: they hold across a restart of the agent (as
/// across the agents of a fleet), and Redis holds no token or answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_owners_and_asked_questions_live_in_redis() {
    let redis = support::redis::Redis::start();
    let url = format!("--redis-url={}", redis.url);
    let mut e = start_with(Sdk::Python, &["--json"], &[&url]).await;
    let ann = jwt(SECRET, "ann", &["reader"]);
    let bob = jwt(SECRET, "bob", &["reader"]);
    let got = e.run(
        Sdk::Python,
        &ann,
        json!([
            step("task_call", json!({"name": "job", "args": {"kind": "plain"}})),
            step("task_get", json!({"task_id": "$last"})),
        ]),
        &["--no-progress"],
    );
    let task = got[0]["task_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{got:?}\n{}", e.diag()))
        .to_string();
    assert_eq!(got[1]["result"]["status"], "input_required", "{got:?}");
    // The session store's owner and asked-question keys (hashed names).
    let keys = redis.cli(&["KEYS", "*"]);
    assert!(keys.contains(":owner:") && keys.contains(":asked:"), "{keys}");

    e.s.agent_mut("tool-agent").restart();
    // Bob is still refused, and Ann's answer to what she was asked passes.
    let refused = e.run(
        Sdk::Python,
        &bob,
        json!([step("task_get", json!({"task_id": task}))]),
        &["--no-progress"],
    );
    assert_eq!(refused[0]["error"]["code"], -32602, "{}\n{}", refused[0], e.diag());
    let got = e.run(
        Sdk::Python,
        &ann,
        json!([
            step(
                "task_update",
                json!({"task_id": task, "responses": {"name": {"action": "accept", "content": {"name": "Ada"}}}})
            ),
            step("task_get", json!({"task_id": task})),
        ]),
        &["--no-progress"],
    );
    assert!(got[0].get("error").is_none(), "{}\n{}", got[0], e.diag());
    assert_eq!(got[1]["result"]["status"], "completed", "{}", got[1]);
    let dump = redis.cli(&["KEYS", "*"]);
    assert!(!dump.contains("Ada") && !dump.contains(&ann), "{dump}");
}
