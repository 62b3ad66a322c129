//! The contract beyond Rust: the Python example agent
//! (agents/examples/python, grpcio, stubs generated from proto/) behind the
//! real kernel and a real Envoy, and its own checks (check.py).

mod support;

use std::process::Command;
use std::time::Duration;

use support::python::grpc_python as python;
use support::stack::{AgentSpec, StackBuilder};
use support::*;

/// The Python example agent (`python-agent`, health checked every 200 ms)
/// behind the kernel on `config` and Envoy.
fn python_stack(config: &str) -> StackBuilder {
    Stack::builder()
        .agent(AgentSpec::python("python-agent").entry("      health_check_interval_ms: 200\n"))
        .config(config)
}

/// `check.py`: the agent's calls, socket mode and SIGTERM exit, and that
/// calls are answered while nobody reads its stderr (each logs a warning).
#[test]
fn python_agent_passes_its_checks() {
    let stubs = workdir();
    let out = Command::new(python())
        .arg(root().join("agents/examples/python/check.py"))
        .env("POLICY_AGENT_STUBS", stubs.path())
        .output()
        .expect("run check.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(" passed, 0 failed"),
        "check.py: {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_agent_serves_a_route_through_envoy() {
    let s = python_stack("  route_policies:\n    - route_name: users\n      request_policy_chain:\n        - policy: blockUserAgents\n          params: {blocked: [\"evil\", \"scraper\"]}\n")
        .start()
        .await;

    let r = s.get("/users/1", &[("user-agent", "friendly-browser")]).await;
    assert_eq!(r.status, 200, "{}\n{}", r.body, s.kernel.log());
    assert_eq!(r.echoed_header("x-checked-by").as_deref(), Some("python-agent"));
    let r = s.get("/users/1", &[("user-agent", "evil-bot/1.0")]).await;
    assert_eq!(r.status, 403, "{}", r.body);
}

/// `tagEvents`, the example's streaming policy, on a streamed response: the
/// kernel streams it (the policy declares `streams_response_body`), each
/// event reaches the client tagged with the stream's count, and a summary
/// event closes the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_agent_streams_a_response_through_envoy() {
    use support::sse_upstream::Script;

    let s = python_stack("  route_policies:\n    - route_name: resp\n      response_policy_chain:\n        - policy: tagEvents\n          params: {tag: py, upper: true}\n")
        .sse_upstream()
        .start()
        .await;
    s.sse().script(
        "three",
        Script::events(&["data: one\n\nda", "ta: two\n\n", "data: three\n\n"], 30),
    );
    let (envoy, kernel) = (&s.envoy, &s.kernel);
    let r = reqwest::Client::new()
        .get(envoy.url("/resp/stream"))
        .header("x-script", "three")
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 200, "{}", kernel.log());
    let body = tokio::time::timeout(Duration::from_secs(20), r.text())
        .await
        .expect("the stream ends")
        .expect("body");
    assert_eq!(
        body,
        ": py 1\ndata: ONE\n\n: py 2\ndata: TWO\n\n: py 3\ndata: THREE\n\nevent: py\ndata: {\"events\": 3}\n\n",
        "{}",
        kernel.log()
    );
    assert!(kernel.metric("policy_kernel_stream_chunks_total{route=\"resp\"}") > 0.0);
}

/// Standard gRPC clients on a Unix socket (grpc-core, here Python's
/// grpcio) send the socket path as `:authority`, which the h2 crate under
/// every Rust agent refuses (RST_STREAM PROTOCOL_ERROR) before the agent's
/// code runs. The way agents/README.md documents, an authority of
/// `localhost`, works: this runs exactly that against `example-agent`.
#[test]
fn grpcio_clients_reach_a_rust_agent_with_the_documented_authority() {
    let root = root();
    let dir = workdir();
    let agent = RefAgent::start(dir.path(), "example", "example-agent", &[]);
    let socket = &agent.socket;
    let script = r#"
import sys, grpc, stubs
pb, pb_grpc = stubs.load()
def config(options):
    channel = grpc.insecure_channel("unix:" + sys.argv[1], options=options)
    try:
        reply = pb_grpc.PolicyAgentStub(channel).GetAgentConfig(pb.GetAgentConfigRequest(), timeout=5)
        return "ok " + reply.agent_name
    except grpc.RpcError as e:
        return "error " + e.code().name
print("default:", config([]))
print("localhost:", config([("grpc.default_authority", "localhost")]))
"#;
    let out = Command::new(python())
        .current_dir(root.join("agents/examples/python"))
        .args(["-c", script])
        .arg(socket)
        .output()
        .expect("python");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("localhost: ok example-agent"), "{text}");
    // Still refused without it: if h2 ever accepts a path as authority, the
    // README's note can go.
    assert!(text.contains("default: error INTERNAL"), "{text}");
}
