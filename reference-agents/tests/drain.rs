//! Draining on SIGTERM, with the real `example-agent` binary.

/// The agents' test helpers, shared with the SDK's tests.
#[path = "../../agents/tests/common/mod.rs"]
mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use policy_agents::client;
use policy_agents::proto::{self, health_check_response::Status as Health};

fn spawn_agent(socket: &std::path::Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_example-agent"))
        .arg("--socket")
        .arg(socket)
        .args(["--drain-timeout-s", "10"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn example-agent")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_in_flight_calls_then_exits() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("example.sock");
    let mut child = spawn_agent(&socket);
    wait_for_socket(&socket).await;
    let mut agent = client::connect_unix(&socket).await.unwrap();

    let mut slow_client = agent.clone();
    let slow = tokio::spawn(async move {
        let call = request_call("slow-1", vec![policy("delay", &[("ms", "1500")], "")]);
        slow_client.execute_policy_request(call).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    sigterm(&child);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let health = agent
        .health_check(proto::HealthCheckRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        health.status,
        Health::NotServing as i32,
        "draining agents are not serving"
    );
    assert!(child.try_wait().unwrap().is_none(), "still draining");

    let reply = slow.await.unwrap().expect("in-flight call completes").into_inner();
    assert_eq!(reply.request_id, "slow-1");
    assert!(immediate(&reply).is_none());

    let status = tokio::task::spawn_blocking(move || wait_exit(&mut child, Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(status.success(), "clean exit after drain: {status}");
    assert!(!socket.exists(), "socket removed");
}

#[tokio::test]
async fn sigterm_when_idle_exits_quickly() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("idle.sock");
    let mut child = spawn_agent(&socket);
    wait_for_socket(&socket).await;
    let started = Instant::now();
    sigterm(&child);
    let status = wait_exit(&mut child, Duration::from_secs(5));
    assert!(status.success());
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[test]
fn bad_flags_exit_non_zero_with_a_message() {
    let out = Command::new(env!("CARGO_BIN_EXE_example-agent"))
        .args(["--socket-mode", "999"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("socket-mode"));
}
