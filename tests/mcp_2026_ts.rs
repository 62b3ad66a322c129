//! End to end for MCP 2026-07-28 through a real Envoy and the kernel binary,
//! with the real `auth-agent`, `tool-agent` and `guardrail-agent`, and the
//! official TypeScript SDK v2 (npm `@modelcontextprotocol/server` and
//! `@modelcontextprotocol/client` 2.4.0) on both sides:
//! `tests/mcp/ts2/server.mjs` (an `McpServer` whose handlers return
//! `inputRequired(...)`; the SDK's legacy shim asks 2025-11-25 clients the
//! same questions as requests on the call's stream) and
//! `tests/mcp/ts2/client.mjs` (the SDK's `Client` with
//! `versionNegotiation: {mode: 'auto'}`, `--legacy` for the 2025-11-25
//! handshake, as the control). The same differential checks as
//! `tests/mcp_2026.rs` (the Python SDK), and each SDK's client against the
//! other's server.

mod support;

use serde_json::Value;
use support::jwt::jwt;
use support::mcp_2026::*;

/// The protocol revision of each record the server wrote after the first `from`.
fn protocols(e: &Env, from: usize) -> Vec<String> {
    e.records()[from..]
        .iter()
        .map(|v| v["protocol"].as_str().unwrap_or("").to_string())
        .collect()
}

/// `steps` through `client`: every question decided as [`governed_steps`]
/// says, only the allowed ones completed at the server, each in `protocol`.
fn governed(e: &Env, client: Sdk, flags: &[&str], protocol: &str, what: &str) -> Vec<Value> {
    let reader = jwt(SECRET, "rob", &["reader"]);
    let (steps, rules) = governed_steps();
    let from = e.records().len();
    let got = e.run(client, &reader, steps, flags);
    check_governed(&got, &rules, what, &e.diag());
    assert!(
        got[0]["text"].as_str().unwrap_or("").contains("Ada"),
        "{what}: {}",
        got[0]
    );
    let ran: Vec<String> = e.ran()[from..].iter().map(|(t, _)| t.clone()).collect();
    assert_eq!(
        ran,
        ["ask_form", "ask_url", "greet"],
        "{what}: only the allowed calls completed"
    );
    assert_eq!(protocols(e, from), [protocol; 3], "{what}: the revision spoken");
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ts_sdk_input_requests_are_governed_in_json_replies_and_a_held_call_is_asked_by_url() {
    let e = start(Sdk::Ts, &["--json"]).await;
    governed(&e, Sdk::Ts, &["--no-progress"], "2026-07-28", "TS 2026 JSON");
    check_sampling(&e, Sdk::Ts);
    check_undeclared_url_elicitation(&e, Sdk::Ts);
    let from = e.records().len();
    check_approvals(&e, Sdk::Ts).await;
    assert_eq!(protocols(&e, from), ["2026-07-28"], "the approved call's revision");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ts_sdk_input_requests_in_sse_replies_and_the_2025_control_are_governed_alike() {
    let e = start(Sdk::Ts, &[]).await;
    // 2026-07-28 with progress: SSE replies, the result last.
    let got = governed(&e, Sdk::Ts, &[], "2026-07-28", "TS 2026 SSE");
    assert!(
        got[0]["progress"].as_u64().unwrap_or(0) >= 1,
        "an SSE reply: {}",
        got[0]
    );
    // The same questions asked the 2025-11-25 way (the SDK's legacy shim).
    governed(&e, Sdk::Ts, &["--legacy"], "2025-11-25", "TS 2025 control");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_sdks_client_against_the_other_sdks_server_is_governed_alike() {
    for (server, client) in [(Sdk::Ts, Sdk::Python), (Sdk::Python, Sdk::Ts)] {
        let what = format!("{client:?} client, {server:?} server, 2026 SSE");
        let e = start(server, &[]).await;
        let got = governed(&e, client, &[], "2026-07-28", &what);
        assert!(
            got[0]["progress"].as_u64().unwrap_or(0) >= 1,
            "{what}: an SSE reply: {}",
            got[0]
        );
    }
}
