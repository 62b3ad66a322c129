//! The call stream (`rpc Calls`) with real processes: the kernel binary, the
//! SDK's `example-agent` (which serves it), the spec-only test agent (unary
//! calls only) and a real Envoy.

mod support;

use std::time::{Duration, Instant};

use support::stack::AgentSpec;
use support::*;

/// `example-agent`, logging at debug (its cancellations), health checked
/// `health_ms` apart, with `extra` lines in its entry. On one thread, as on
/// one CPU: there it answers a call that ends at once in its stream's read
/// loop and hands a call that waits to a task of its own, and these tests
/// hold that a waiting call still holds back no other and is cancelled.
/// (The other tests' agents run on every CPU: a task per call.)
fn example_agent(health_ms: u64, extra: &str) -> AgentSpec {
    AgentSpec::bin("example", "example-agent", &["--worker-threads", "1"])
        .env("RUST_LOG", "policy_agents=debug")
        .entry(&format!("      health_check_interval_ms: {health_ms}\n{extra}"))
}

fn stream_calls(kernel: &KernelProc, agent: &str) -> f64 {
    kernel.metric(&format!("policy_kernel_agent_stream_calls_total{{agent=\"{agent}\"}}"))
}

/// The slow route (`delay` of `ms`) and the fast one (`addHeader`).
fn routes(delay_ms: u32) -> String {
    format!(
        "  route_policies:\n    - route_name: slow\n      request_policy_chain:\n        - policy: delay\n          params: {{ms: \"{delay_ms}\"}}\n    - route_name: users\n      request_policy_chain:\n        - policy: addHeader\n          params: {{name: x-example, value: \"1\"}}\n"
    )
}

/// `example-agent` (health checks `health_ms` apart, `agent_extra` lines
/// in its entry), the kernel on `routes`, an upstream and Envoy, ready to
/// serve.
async fn stack(routes: &str, health_ms: u64, agent_extra: &str) -> Stack {
    Stack::builder()
        .agent(example_agent(health_ms, agent_extra))
        .config(routes)
        .start()
        .await
}

/// A request sent in the background.
fn spawn_get(st: &Stack, path: &str) -> tokio::task::JoinHandle<Got> {
    let (client, url) = (st.client.clone(), st.url(path));
    tokio::spawn(async move { send(&client, "GET", &url, &[], None).await })
}

/// Calls on `example`'s stream.
fn calls(st: &Stack) -> f64 {
    stream_calls(&st.kernel, "example")
}

/// An SDK agent gets its calls on the call stream, a spec-only agent gets
/// unary calls, and both answer through a real Envoy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_agents_get_the_call_stream_and_spec_only_agents_unary_calls() {
    let st = Stack::builder()
        .agent(example_agent(200, ""))
        .test_agent_with(
            "plain",
            "policies:\n  - name: tag\n    request:\n      - set_header: {name: x-plain, value: \"1\"}\n",
            "      health_check_interval_ms: 200\n",
        )
        .config("  route_policies:\n    - route_name: users\n      request_policy_chain:\n        - policy: addHeader\n          params: {name: x-example, value: \"1\"}\n        - policy: tag\n      response_policy_chain:\n        - policy: addHeader\n          params: {name: x-example-response, value: \"2\"}\n")
        .start()
        .await;
    let (kernel, test_agent) = (&st.kernel, st.test_agent("plain"));
    for _ in 0..5 {
        let r = st.get("/users/1", &[]).await;
        assert_eq!(r.status, 200, "{}\n{}", r.body, kernel.log());
        assert_eq!(r.echoed_header("x-example").as_deref(), Some("1"));
        assert_eq!(r.echoed_header("x-plain").as_deref(), Some("1"));
        assert_eq!(r.header("x-example-response"), Some("2"));
    }
    // Five requests, a request and a response call each, on the stream.
    assert_eq!(
        stream_calls(kernel, "example"),
        10.0,
        "{}",
        kernel.admin_get("/metrics").1
    );
    assert_eq!(stream_calls(kernel, "plain"), 0.0);
    let ends = test_agent.events().iter().filter(|e| e.starts_with("end")).count();
    assert_eq!(
        ends,
        5,
        "the spec-only agent got its unary calls: {:?}",
        test_agent.events()
    );
}

/// One slow call on the stream holds back no other: requests to a fast
/// route complete while a call of the slow route is still running (it runs
/// until its 5 s deadline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_call_holds_back_no_other_call() {
    let st = stack(&routes(30_000), 200, "      timeout_ms: 5000\n").await;
    let slow = spawn_get(&st, "/slow/1");
    until("the slow call is on the stream", Duration::from_secs(10), || async {
        calls(&st) >= 1.0
    })
    .await;
    let fast: Vec<_> = (0..20).map(|_| spawn_get(&st, "/users/1")).collect();
    for f in fast {
        let r = f.await.expect("fast request");
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.echoed_header("x-example").as_deref(), Some("1"));
    }
    assert!(!slow.is_finished(), "the slow call ended early: {}", st.kernel.log());
    assert_eq!(calls(&st), 21.0);
    slow.abort();
}

/// A client that goes away mid-call makes the kernel cancel the call on the
/// stream, and the agent stops its work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_cancels_the_agents_work() {
    let st = stack(&routes(30_000), 200, "      timeout_ms: 5000\n").await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(1500))
        .build()
        .expect("client");
    // The client gives up after 1.5 s; Envoy resets the ext_proc stream.
    let gave_up = client.get(st.envoy.url("/slow/1")).send().await;
    assert!(gave_up.is_err(), "the delayed request answered: {gave_up:?}");
    let log = || st.agent("example").log();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !log().contains("call cancelled by the kernel") {
        assert!(
            Instant::now() < deadline,
            "no cancellation:\n{}\n{}",
            log(),
            st.kernel.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The stream still serves: cancellation ended one call, not the stream.
    assert_eq!(st.get("/users/1", &[]).await.status, 200);
}

/// An agent restarting mid-stream fails the call in flight by `on_failure`
/// (not retried: it was sent), and the calls after it reconnect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_restart_fails_calls_in_flight_and_the_next_calls_reconnect() {
    let mut st = stack(&routes(30_000), 200, "      timeout_ms: 5000\n").await;
    assert_eq!(st.get("/users/1", &[]).await.status, 200);
    let slow = spawn_get(&st, "/slow/1");
    until("the slow call is on the stream", Duration::from_secs(10), || async {
        calls(&st) >= 2.0
    })
    .await;
    st.agent_mut("example").kill();
    let r = slow.await.expect("slow request");
    // on_failure unset, fail_open false: policy_failure_response (500).
    assert_eq!(r.status, 500, "{}\n{}", r.body, st.kernel.log());
    assert!(r.body.contains("POLICY_EXECUTION_FAILED"), "{}", r.body);
    assert!(
        st.kernel.log_has("call stream closed"),
        "not failed by the restart:\n{}",
        st.kernel.log()
    );

    st.agent_mut("example").restart();
    st.until_agents_healthy().await;
    let r = st.get("/users/1", &[]).await;
    assert_eq!(r.status, 200, "{}\n{}", r.body, st.kernel.log());
    assert_eq!(r.echoed_header("x-example").as_deref(), Some("1"));
    assert_eq!(calls(&st), 3.0);
}

/// `max_concurrent_calls` and the circuit breaker sit above the transport
/// and hold on the call stream as on unary calls: a call beyond the limit
/// fails at once without reaching the agent, and calls that time out on the
/// stream open the circuit, after which the agent gets no calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_limits_and_the_circuit_breaker_hold_on_the_stream() {
    // Health checks 60 s apart: a passing check ends an open circuit's
    // cool-down (the next call is the probe), which would race the checks
    // below that the open circuit refuses calls.
    let st = stack(
        &routes(2000),
        60_000,
        "      timeout_ms: 300\n      max_concurrent_calls: 1\n      circuit_breaker: {failure_threshold: 2, cooldown_ms: 60000}\n",
    )
    .await;
    assert_eq!(st.get("/users/1", &[]).await.status, 200);

    // One slow call holds the only permit: a second call is shed unsent.
    let slow = spawn_get(&st, "/slow/1");
    until("the slow call is on the stream", Duration::from_secs(10), || async {
        calls(&st) >= 2.0
    })
    .await;
    let r = st.get("/users/1", &[]).await;
    assert_eq!(r.status, 500, "{}", r.body);
    assert_eq!(calls(&st), 2.0, "the shed call reached the stream");
    // The slow call times out (300 ms): the first failure.
    assert_eq!(slow.await.expect("slow").status, 500);
    // A second timeout opens the circuit.
    assert_eq!(st.get("/slow/1", &[]).await.status, 500);
    assert_eq!(calls(&st), 3.0);
    until("the circuit is open", Duration::from_secs(5), || async {
        st.kernel.metric("policy_kernel_agent_circuit_state{agent=\"example\"}") == 1.0
    })
    .await;
    // Open: the agent is unavailable and gets nothing.
    let r = st.get("/users/1", &[]).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(calls(&st), 3.0);
    assert_eq!(
        st.kernel
            .metric("policy_kernel_agent_timeouts_total{agent=\"example\"}"),
        2.0
    );
}

/// A call whose frame never left the kernel (the agent's connection was
/// gone, unnoticed by health checks) is retried, and delivered once when the
/// agent is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsent_calls_are_retried_on_the_stream_and_delivered_once() {
    let mut st = stack(
        &routes(0),
        60_000,
        "      timeout_ms: 3000\n      retry: {max_attempts: 10, backoff_ms: 200}\n",
    )
    .await;
    assert_eq!(st.get("/users/1", &[]).await.status, 200);
    assert_eq!(calls(&st), 1.0);
    // Gone, unnoticed by health checks (60 s apart).
    st.agent_mut("example").kill();
    let request = spawn_get(&st, "/users/2");
    tokio::time::sleep(Duration::from_millis(300)).await;
    st.agent_mut("example").restart();
    let r = request.await.expect("request");
    assert_eq!(r.status, 200, "{}\n{}", r.body, st.kernel.log());
    assert_eq!(r.echoed_header("x-example").as_deref(), Some("1"));
    // Sent once: the attempts before the agent came back sent nothing.
    assert_eq!(calls(&st), 2.0);
}
