//! End to end for the planner's session state in Redis: a real Envoy 1.40,
//! the kernel binary, two real `planner-agent` processes started with
//! `--redis-url` on one real `redis-server` (`support::redis`), and a
//! scripted model API.
//!
//! Each route pins its policy to one agent (`agent: one` / `agent: two`),
//! so a session alternating between two routes alternates between the two
//! agents: `flaky` (one) and `body` (two) run `futilityGuard`, `conflict`
//! (one) and `chain` (two) `contextBudget`; `resp` (one) runs
//! `futilityGuard` with `on_failure: continue`.

mod support;

use serde_json::json;
use support::redis::Redis;
use support::reference::budget_verdict;
use support::sse_upstream::Script;
use support::stack::AgentSpec;
use support::*;

fn routes() -> String {
    let futility = "{policy: futilityGuard, params: {action: deny, stagnation_turns: 3}";
    let budget = "{policy: contextBudget, params: {budget: 1000}";
    let mut out = String::from("  route_policies:\n");
    for (route, agent) in [("flaky", "one"), ("body", "two")] {
        out += &format!("    - route_name: {route}\n      request_policy_chain: [{futility}, agent: {agent}}}]\n");
    }
    for (route, agent) in [("conflict", "one"), ("chain", "two")] {
        let entry = format!("{budget}, agent: {agent}}}");
        out += &format!(
            "    - route_name: {route}\n      request_policy_chain: [{entry}]\n      response_policy_chain: [{entry}]\n"
        );
    }
    out += &format!(
        "    - route_name: resp\n      request_policy_chain: [{futility}, agent: one, on_failure: continue}}]\n"
    );
    out
}

/// Redis, and a stack whose two planner agents keep their sessions there;
/// the upstream answers with usage 250.
async fn stack() -> (Redis, Stack) {
    let redis = Redis::start();
    let agent = |name: &str| AgentSpec::bin(name, "planner-agent", &["--redis-url", &redis.url]);
    let s = Stack::builder()
        .agent(agent("one"))
        .agent(agent("two"))
        .config(&routes())
        .sse_upstream()
        .start()
        .await;
    s.sse().script(
        "answer",
        Script::json(br#"{"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}], "usage": {"prompt_tokens": 200, "completion_tokens": 50, "total_tokens": 250}}"#),
    );
    (redis, s)
}

/// Posts `body` on `route` for `session`; the upstream answers with usage 250.
async fn post(s: &Stack, route: &str, session: &str, body: &str) -> Got {
    s.send(
        "POST",
        &format!("/{route}/v1/chat/completions"),
        &[
            ("content-type", "application/json"),
            ("x-script", "answer"),
            ("x-session-id", session),
        ],
        Some(body),
    )
    .await
}

/// Policy calls the kernel sent to `agent`.
fn calls(s: &Stack, agent: &str) -> f64 {
    s.kernel
        .metric(&format!("policy_kernel_agent_stream_calls_total{{agent=\"{agent}\"}}"))
}

/// A chat request whose history is one search that found nothing: a turn
/// that brings no new tool result once the session has seen it.
fn stuck() -> String {
    json!({"model": "m", "messages": [
        {"role": "user", "content": "find the notes"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": "search", "arguments": "{\"q\": \"notes\"}"}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": "no results"}
    ]})
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_planner_agents_share_one_session_through_redis() {
    let (redis, s) = stack().await;

    // A stagnant session alternating between the agents: each agent alone
    // sees two turns, too few for stagnation_turns: 3; together they see
    // four, and the fourth is denied.
    let (one, two) = (calls(&s, "one"), calls(&s, "two"));
    let mut statuses = Vec::new();
    for route in ["flaky", "body", "flaky", "body"] {
        let got = post(&s, route, "split-loop", &stuck()).await;
        statuses.push(got.status);
        if got.status == 409 {
            let b = got.json();
            assert_eq!(b["reason"], "futility_detected", "{b}");
            assert_eq!(b["pattern"], "stagnation", "{b}");
        }
    }
    assert_eq!(statuses, [200, 200, 200, 409], "{}", s.diag());
    assert_eq!(calls(&s, "one") - one, 2.0, "two turns on agent one");
    assert_eq!(calls(&s, "two") - two, 2.0, "two turns on agent two");
    // Another session is not affected.
    assert_eq!(post(&s, "body", "other", &stuck()).await.status, 200);

    // A budget charged on one agent is seen by the other: 250 tokens a
    // turn (the usage the upstream reports) against a budget of 1000.
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "next step"}]}).to_string();
    let mut verdicts = Vec::new();
    for route in ["conflict", "chain", "conflict", "chain", "conflict"] {
        let got = post(&s, route, "split-budget", &body).await;
        verdicts.push(budget_verdict(&got, || s.diag()));
    }
    assert_eq!(verdicts, ["ok", "delegate", "checkpoint", "summarize", "429"]);

    // The state is in Redis, bounded: every planner key has a TTL.
    let keys = redis.cli(&["--scan", "--pattern", "policy-agents:planner:*"]);
    assert!(keys.lines().count() >= 3, "{keys}");
    for k in keys.lines() {
        let pttl: i64 = redis.cli(&["PTTL", k]).parse().unwrap_or(-9);
        assert!(pttl > 0, "{k} has no TTL ({pttl})");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_mid_run_fails_closed_with_a_named_error() {
    let (mut redis, s) = stack().await;
    assert_eq!(post(&s, "flaky", "outage", &stuck()).await.status, 200, "{}", s.diag());
    assert_eq!(post(&s, "body", "outage", &stuck()).await.status, 200);

    redis.stop();
    // The default on_failure (deny): the agent's 503, naming the cause.
    for route in ["flaky", "body"] {
        let got = post(&s, route, "outage", &stuck()).await;
        assert_eq!(got.status, 503, "{route}: {}\n{}", got.body, s.diag());
        let b = got.json();
        assert_eq!(b["reason"], "session_store_unavailable", "{b}");
        assert_eq!(b["error"], "futilityGuard: the session store is unavailable", "{b}");
        assert_eq!(got.header("retry-after"), Some("1"));
    }
    // on_failure: continue lets the request through, unchecked.
    let got = post(&s, "resp", "outage", &stuck()).await;
    assert_eq!(got.status, 200, "{}", got.body);
    assert!(got.body.contains("usage"), "the upstream answered: {}", got.body);

    // Redis back (empty: the test server keeps nothing): the next requests
    // are answered, the sessions start over, shared again.
    redis.restart();
    let mut statuses = Vec::new();
    for route in ["flaky", "body", "flaky", "body"] {
        statuses.push(post(&s, route, "after", &stuck()).await.status);
    }
    assert_eq!(statuses, [200, 200, 200, 409], "{}", s.diag());
}
