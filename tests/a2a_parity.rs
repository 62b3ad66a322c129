//! Parser parity for A2A through a real Envoy and the kernel: whatever the
//! official SDK servers (Python and JavaScript) act on was seen and decided
//! by the policies (`tests/a2a/parity.py`, its report printed).

mod support;

use support::a2a::parity;
use support::a2a_stack::{A2aStack, Agent, SECRET};

/// Parser parity: variants of every governed message (both versions, both
/// bindings, both spellings, duplicates, the other version's names,
/// unknown members, escapes, envelopes, paths, headers) through Envoy and
/// the kernel to the official Python SDK server, which records what its
/// agent acted on as it parsed it (`tests/a2a/parity.py`). Whatever it acted
/// on was allowed; no reply carries another's task or unmasked mail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_python_sdk_agent_acts_on_is_what_the_policies_decided_on() {
    parity_through(Agent::PythonRecording).await;
}

/// The same variants to the official JavaScript SDK's server (Express,
/// `legacyCompat`: 1.0 and 0.3 on the same URLs, `tests/a2a/js/server.mjs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_javascript_sdk_agent_acts_on_is_what_the_policies_decided_on() {
    parity_through(Agent::JsRecording).await;
}

/// The harness against one SDK's server behind the gateway.
async fn parity_through(agent: Agent) {
    let s = A2aStack::start_on(agent).await;
    let token = |sub: &str| support::jwt::jwt(SECRET, sub, &["user"]);
    let (ok, report) = parity(
        &s.card_base,
        &s.stack.dir.join("acted.jsonl"),
        &token("alice"),
        &token("bob"),
        if agent == Agent::JsRecording { "js" } else { "python" },
    );
    println!("{agent:?}: {report}");
    assert!(ok, "{agent:?}: {}", s.diag(&report));
    assert!(report.contains("\"violations\": []"), "{report}");
}
