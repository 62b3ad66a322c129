//! Integration: the kernel binary against `policy-test-agent` processes on
//! real Unix sockets, driven by a direct ext_proc client (no Envoy), for what
//! Envoy cannot easily show: stream cancellation, late discovery, retries,
//! route selection sources, and strict response-phase validation.

mod support;

use std::process::Command;
use std::time::Duration;

use envoy_types::pb::envoy::service::ext_proc::v3::{processing_response::Response, ProcessingResponse};
use support::extproc::{self, Stream};
use support::*;

fn immediate_status(r: &ProcessingResponse) -> Option<i32> {
    match &r.response {
        Some(Response::ImmediateResponse(i)) => i.status.as_ref().map(|s| s.code),
        _ => None,
    }
}

/// Header values set by a request_headers answer.
fn set_header(r: &ProcessingResponse, name: &str) -> Option<String> {
    let Some(Response::RequestHeaders(h)) = &r.response else {
        return None;
    };
    h.response
        .as_ref()?
        .header_mutation
        .as_ref()?
        .set_headers
        .iter()
        .filter_map(|o| o.header.as_ref())
        .find(|h| h.key == name)
        .map(|h| String::from_utf8_lossy(&h.raw_value).into_owned())
}

const TAG: &str = "policies:\n  - name: tag\n    request:\n      - set_header: {name: x-tag, value: \"${agent}\"}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_reset_cancels_the_agent_call() {
    let dir = workdir();
    let slow =
        "policies:\n  - name: slow\n    delay_ms: 3000\n    request:\n      - set_header: {name: x-a, value: b}\n";
    let agent = TestAgent::start(dir.path(), "slowagent", slow);
    let kernel = KernelProc::start(
        dir.path(),
        &format!(
            "  agents:\n{}  route_policies:\n    - route_name: r\n      request_policy_chain: [{{policy: slow}}]\n",
            agent_entry("slowagent", &agent, "      timeout_ms: 5000\n")
        ),
    );
    let mut client = extproc::connect(&kernel.socket).await;
    let stream = Stream::open(&mut client, None).await;
    stream
        .tx
        .send(extproc::request_headers(Some("r"), &[("x-request-id", "gone-1")]))
        .await
        .unwrap();
    until("the agent call to start", Duration::from_secs(5), || async {
        agent.events().iter().any(|e| e.starts_with("start"))
    })
    .await;
    // Envoy resets the stream: drop both halves.
    drop(stream);
    until(
        "the agent to see the call cancelled",
        Duration::from_secs(5),
        || async { agent.events().contains(&"cancel slow gone-1".to_string()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_down_at_startup_is_discovered_later() {
    let dir = workdir();
    // Write the script but do not start the agent yet.
    let mut agent = TestAgent::start(dir.path(), "late", TAG);
    agent.kill();
    let _ = std::fs::remove_file(&agent.socket);
    let kernel = KernelProc::start(
        dir.path(),
        &format!(
            "  agents:\n{}  route_policies:\n    - route_name: r\n      request_policy_chain: [{{policy: tag}}]\n",
            agent_entry("late", &agent, "")
        ),
    );
    let mut client = extproc::connect(&kernel.socket).await;
    let mut s = Stream::open(&mut client, None).await;
    let r = s.exchange(extproc::request_headers(Some("r"), &[])).await;
    assert_eq!(
        immediate_status(&r),
        Some(500),
        "an undiscovered policy is not supported yet"
    );

    agent.restart();
    until("the route to become servable", Duration::from_secs(10), || {
        let mut client = client.clone();
        async move {
            let mut s = Stream::open(&mut client, None).await;
            let r = s.exchange(extproc::request_headers(Some("r"), &[])).await;
            set_header(&r, "x-tag").as_deref() == Some("late")
        }
    })
    .await;
    assert!(kernel.log_has("agent discovered"), "{}", kernel.log());
}

/// An agent that failed a health check is checked again within about a
/// second, not after its whole interval: a route it serves answers 503 only
/// that long after a transient failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unhealthy_agent_is_checked_again_before_its_interval() {
    let dir = workdir();
    let down = dir.path().join("flaky.down");
    std::fs::write(&down, "").expect("write");
    let agent = TestAgent::start(
        dir.path(),
        "flaky",
        &format!("not_serving_file: {}\n{TAG}", down.display()),
    );
    // One minute between checks of a healthy agent.
    let kernel = KernelProc::start(
        dir.path(),
        &format!(
            "  agents:\n{}  route_policies:\n    - route_name: r\n      request_policy_chain: [{{policy: tag}}]\n",
            agent_entry("flaky", &agent, "      health_check_interval_ms: 60000\n")
        ),
    );
    let health = r#"policy_kernel_agent_health{agent="flaky"}"#;
    let k = &kernel;
    until("discovery", Duration::from_secs(10), || async move {
        k.log().contains("agent discovered")
    })
    .await;
    assert_eq!(kernel.metric(health), 0.0, "NOT_SERVING: unhealthy");
    let mut client = extproc::connect(&kernel.socket).await;
    let mut s = Stream::open(&mut client, None).await;
    let r = s.exchange(extproc::request_headers(Some("r"), &[])).await;
    assert_eq!(immediate_status(&r), Some(503));
    // Rediscovered every second while down, but logged (at info) once.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let rounds = |level: &str| {
        k.log()
            .lines()
            .filter(|l| l.contains(&format!("\"level\":\"{level}\"")) && l.contains("agent discovered"))
            .count()
    };
    assert!(rounds("debug") >= 2, "not checked again while down:\n{}", k.log());
    assert_eq!(rounds("info"), 1, "{}", k.log());

    std::fs::remove_file(&down).expect("remove");
    until(
        "the agent to be healthy again",
        Duration::from_secs(15),
        || async move { k.metric(health) == 1.0 },
    )
    .await;
    let mut s = Stream::open(&mut client, None).await;
    let r = s.exchange(extproc::request_headers(Some("r"), &[])).await;
    assert_eq!(set_header(&r, "x-tag").as_deref(), Some("flaky"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsent_calls_are_retried_once_delivered() {
    let dir = workdir();
    let mut agent = TestAgent::start(dir.path(), "retry", TAG);
    // A single-threaded kernel (server.worker_threads: 1) does the same.
    let kernel = KernelProc::start_with(
        dir.path(),
        "    worker_threads: 1\n",
        &format!(
            "  agents:\n{}  route_policies:\n    - route_name: r\n      request_policy_chain: [{{policy: tag}}]\n",
            agent_entry("retry", &agent, "      health_check_interval_ms: 60000\n      timeout_ms: 3000\n      retry: {max_attempts: 10, backoff_ms: 200}\n")
        ),
    );
    let mut client = extproc::connect(&kernel.socket).await;
    // Healthy and discovered at startup; then the agent goes away, unnoticed
    // by health checks (60 s interval).
    agent.kill();
    let events_before = agent.events().len();
    let mut s = Stream::open(&mut client, None).await;
    s.tx.send(extproc::request_headers(Some("r"), &[("x-request-id", "retry-1")]))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    agent.restart();
    let r = s.rx.message().await.unwrap().unwrap();
    assert_eq!(
        set_header(&r, "x-tag").as_deref(),
        Some("retry"),
        "{:?}\n{}",
        r,
        kernel.log()
    );
    // Delivered exactly once.
    let calls: Vec<String> = agent.events()[events_before..]
        .iter()
        .filter(|e| e.starts_with("start"))
        .cloned()
        .collect();
    assert_eq!(calls, vec!["start tag retry-1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_name_sources_in_order_of_trust() {
    let dir = workdir();
    let agent = TestAgent::start(dir.path(), "tagger", TAG);
    let body = format!(
        "  agents:\n{}  route_policies:\n    - route_name: r\n      request_policy_chain: [{{policy: tag}}]\n",
        agent_entry("tagger", &agent, "")
    );
    let kernel = KernelProc::start(dir.path(), &body);
    let mut client = extproc::connect(&kernel.socket).await;
    // gRPC metadata x-route-name, when Envoy sends no attribute.
    let mut s = Stream::open(&mut client, Some("r")).await;
    assert_eq!(
        set_header(&s.exchange(extproc::request_headers(None, &[])).await, "x-tag").as_deref(),
        Some("tagger")
    );
    // The attribute wins over metadata.
    let mut s = Stream::open(&mut client, Some("r")).await;
    assert_eq!(
        set_header(&s.exchange(extproc::request_headers(Some("other"), &[])).await, "x-tag"),
        None
    );
    // A client header is ignored unless the operator opts in.
    let mut s = Stream::open(&mut client, None).await;
    assert_eq!(
        set_header(
            &s.exchange(extproc::request_headers(None, &[("x-route", "r")])).await,
            "x-tag"
        ),
        None
    );
    drop(kernel);

    // Opted in: the (client-controlled) header selects the route.
    let dir2 = workdir();
    let kernel = KernelProc::start_with(dir2.path(), "    route_name_header: X-Route\n", &body);
    let mut client = extproc::connect(&kernel.socket).await;
    let mut s = Stream::open(&mut client, None).await;
    let r = s.exchange(extproc::request_headers(None, &[("x-route", "r")])).await;
    assert_eq!(set_header(&r, "x-tag").as_deref(), Some("tagger"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_mode_rechecks_health_before_the_response_phase() {
    let script = "policies:\n  - name: both\n    request:\n      - set_header: {name: x-a, value: b}\n    response:\n      - set_header: {name: x-b, value: c}\n";
    for (mode, want) in [("strict", 503), ("permissive", 500)] {
        let dir = workdir();
        let mut agent = TestAgent::start(dir.path(), "phases", script);
        let kernel = KernelProc::start(
            dir.path(),
            &format!(
                "  response_phase_validation: {mode}\n  agents:\n{}  route_policies:\n    - route_name: r\n      request_policy_chain: [{{policy: both}}]\n      response_policy_chain: [{{policy: both}}]\n",
                agent_entry("phases", &agent, "")
            ),
        );
        let mut client = extproc::connect(&kernel.socket).await;
        let mut s = Stream::open(&mut client, None).await;
        let r = s.exchange(extproc::request_headers(Some("r"), &[])).await;
        assert_eq!(set_header(&r, "x-a").as_deref(), Some("b"));
        // The agent dies between the phases, and health checks notice.
        agent.kill();
        until(
            "the kernel to mark the agent unhealthy",
            Duration::from_secs(5),
            || async { kernel.log().contains("agent unhealthy") },
        )
        .await;
        let r = s.exchange(extproc::response_headers(200)).await;
        // strict: agent_unavailable_response; permissive: the call is tried,
        // fails, and the fail-closed default gives policy_failure_response.
        assert_eq!(immediate_status(&r), Some(want), "{mode}: {r:?}");
    }
}

/// Under overload Envoy cancels ext_proc streams in bursts (its clients gave
/// up), some before the kernel has taken them from its connection's accept
/// queue; and the kernel then cancels the agent calls of those requests, some
/// before the agent has taken them. That is the normal life of a sidecar, not
/// a rapid-reset attack: the connection, and every other request or call on
/// it, must survive. (HTTP/2's default answers the 21st such stream with
/// GOAWAY ENHANCE_YOUR_CALM, which made Envoy fail every request in flight on
/// the connection.)
#[test]
fn a_burst_of_streams_cancelled_before_accept_keeps_the_connection() {
    let dir = workdir();
    let kernel = KernelProc::start(dir.path(), "  agents: []\n  route_policies: []\n");
    h2raw::cancel_burst(
        &kernel.socket,
        "/envoy.service.ext_proc.v3.ExternalProcessor/Process",
        200,
    )
    .unwrap_or_else(|e| panic!("kernel: {e}\n{}", kernel.log()));

    // An agent built on the SDK, and the test agent.
    let call = "/policy_kernel.agent.v1.PolicyAgent/ExecutePolicyRequest";
    let sock = dir.path().join("ratelimit.sock");
    let log = dir.path().join("ratelimit.log");
    let _sdk = Proc::spawn(
        "ratelimit-agent",
        Command::new(agent_bin("ratelimit-agent")).arg(format!("--socket={}", sock.display())),
        &log,
    );
    wait_socket(&sock, Duration::from_secs(10));
    h2raw::cancel_burst(&sock, call, 200).unwrap_or_else(|e| panic!("SDK agent: {e}"));
    let agent = TestAgent::start(dir.path(), "tagger", TAG);
    h2raw::cancel_burst(&agent.socket, call, 200).unwrap_or_else(|e| panic!("test agent: {e}"));
}
