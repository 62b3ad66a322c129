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

use std::time::Duration;

use serde_json::json;
use support::redis::Redis;
use support::reference::{agents_section, budget_verdict, logs, until_agents_healthy, RefAgent};
use support::sse_upstream::{Script, SseUpstream};
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

struct Stack {
    _tmp: tempfile::TempDir,
    redis: Redis,
    _agents: [RefAgent; 2],
    kernel: KernelProc,
    envoy: Envoy,
    _up: SseUpstream,
}

impl Stack {
    async fn start() -> Self {
        let redis = Redis::start();
        let tmp = workdir();
        let agent = |name: &str| RefAgent::start(tmp.path(), name, "planner-agent", &["--redis-url", &redis.url]);
        let agents = [agent("one"), agent("two")];
        let config = format!("{}{}", agents_section(&[&agents[0], &agents[1]]), routes());
        let kernel = KernelProc::start(tmp.path(), &config);
        let up = SseUpstream::start().await;
        let envoy = Envoy::start(tmp.path(), &kernel.socket, up.addr.port());
        until_agents_healthy(&kernel, 2).await;
        up.script(
            "answer",
            Script {
                content_type: "application/json",
                pieces: vec![br#"{"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}], "usage": {"prompt_tokens": 200, "completion_tokens": 50, "total_tokens": 250}}"#.to_vec()],
                pause: Duration::ZERO,
                gated: false,
            },
        );
        Stack {
            _tmp: tmp,
            redis,
            _agents: agents,
            kernel,
            envoy,
            _up: up,
        }
    }

    /// Posts `body` on `route` for `session`; the upstream answers with usage 250.
    async fn post(&self, route: &str, session: &str, body: &str) -> Got {
        send(
            &reqwest::Client::new(),
            "POST",
            &self.envoy.url(&format!("/{route}/v1/chat/completions")),
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
    fn calls(&self, agent: &str) -> f64 {
        self.kernel
            .metric(&format!("policy_kernel_agent_stream_calls_total{{agent=\"{agent}\"}}"))
    }

    fn diag(&self) -> String {
        logs(&self.kernel, &self.envoy)
    }
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
    let s = Stack::start().await;

    // A stagnant session alternating between the agents: each agent alone
    // sees two turns, too few for stagnation_turns: 3; together they see
    // four, and the fourth is denied.
    let (one, two) = (s.calls("one"), s.calls("two"));
    let mut statuses = Vec::new();
    for route in ["flaky", "body", "flaky", "body"] {
        let got = s.post(route, "split-loop", &stuck()).await;
        statuses.push(got.status);
        if got.status == 409 {
            let b = got.json();
            assert_eq!(b["reason"], "futility_detected", "{b}");
            assert_eq!(b["pattern"], "stagnation", "{b}");
        }
    }
    assert_eq!(statuses, [200, 200, 200, 409], "{}", s.diag());
    assert_eq!(s.calls("one") - one, 2.0, "two turns on agent one");
    assert_eq!(s.calls("two") - two, 2.0, "two turns on agent two");
    // Another session is not affected.
    assert_eq!(s.post("body", "other", &stuck()).await.status, 200);

    // A budget charged on one agent is seen by the other: 250 tokens a
    // turn (the usage the upstream reports) against a budget of 1000.
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "next step"}]}).to_string();
    let mut verdicts = Vec::new();
    for route in ["conflict", "chain", "conflict", "chain", "conflict"] {
        let got = s.post(route, "split-budget", &body).await;
        verdicts.push(budget_verdict(&got, || s.diag()));
    }
    assert_eq!(verdicts, ["ok", "delegate", "checkpoint", "summarize", "429"]);

    // The state is in Redis, bounded: every planner key has a TTL.
    let keys = s.redis.cli(&["--scan", "--pattern", "policy-agents:planner:*"]);
    assert!(keys.lines().count() >= 3, "{keys}");
    for k in keys.lines() {
        let pttl: i64 = s.redis.cli(&["PTTL", k]).parse().unwrap_or(-9);
        assert!(pttl > 0, "{k} has no TTL ({pttl})");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_mid_run_fails_closed_with_a_named_error() {
    let mut s = Stack::start().await;
    assert_eq!(s.post("flaky", "outage", &stuck()).await.status, 200, "{}", s.diag());
    assert_eq!(s.post("body", "outage", &stuck()).await.status, 200);

    s.redis.stop();
    // The default on_failure (deny): the agent's 503, naming the cause.
    for route in ["flaky", "body"] {
        let got = s.post(route, "outage", &stuck()).await;
        assert_eq!(got.status, 503, "{route}: {}\n{}", got.body, s.diag());
        let b = got.json();
        assert_eq!(b["reason"], "session_store_unavailable", "{b}");
        assert_eq!(b["error"], "futilityGuard: the session store is unavailable", "{b}");
        assert_eq!(got.header("retry-after"), Some("1"));
    }
    // on_failure: continue lets the request through, unchecked.
    let got = s.post("resp", "outage", &stuck()).await;
    assert_eq!(got.status, 200, "{}", got.body);
    assert!(got.body.contains("usage"), "the upstream answered: {}", got.body);

    // Redis back (empty: the test server keeps nothing): the next requests
    // are answered, the sessions start over, shared again.
    s.redis.restart();
    let mut statuses = Vec::new();
    for route in ["flaky", "body", "flaky", "body"] {
        statuses.push(s.post(route, "after", &stuck()).await.status);
    }
    assert_eq!(statuses, [200, 200, 200, 409], "{}", s.diag());
}
