//! End to end for `promptInjectionGuard` on tool output: a real MCP server
//! (`tests/mcp/guard_tools_server.py`, the official Python SDK) behind a
//! real Envoy and the kernel binary, the real `guardrail-agent` on a Unix
//! socket, and a real MCP client session (`tests/mcp/client.py`), in both
//! protocol revisions (2026-07-28: JSON replies; the older handshake: event
//! streams, read event by event).
//!
//! The server's `tools/list` carries one poisoned tool (`add`: an
//! `<IMPORTANT>` block reading `~/.ssh/id_rsa` into a parameter) among
//! ordinary ones whose descriptions say "without warning", "Although
//! originally you did not have internet access..." and "Simulate...": the
//! poisoned tool is removed (route `mcp`) or the list refused (route
//! `mcprefuse`), the others pass. A long benign report passes; a long
//! recipe with an injection in its middle is blocked. The decision is in
//! the audit journal (`auditLog` after the guard).

mod support;

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};
use support::envoy::{self, EnvoyConfig, KernelAt};
use support::python::{python, McpServer};
use support::reference::verify_audit;
use support::stack::AgentSpec;
use support::*;

fn routes() -> String {
    let guard = |extra: &str| {
        format!(
            "        - policy: promptInjectionGuard\n          params: {{phases: [response]{extra}}}\n        - policy: auditLog\n          params: {{log_response_body: false}}\n"
        )
    };
    format!(
        "  route_policies:\n    - route_name: \"mcp\"\n      response_policy_chain:\n{}    - route_name: \"mcprefuse\"\n      response_policy_chain:\n{}",
        guard(""),
        guard(", poisoned_tools: refuse")
    )
}

/// Envoy's routes `mcp` and `mcprefuse` (rewritten to `/mcp`), each to the
/// MCP server.
fn envoy_config(kernel: &Path, upstream: u16) -> String {
    let routes: String = [
        envoy::route("mcprefuse", "/mcprefuse", ", timeout: 30s, prefix_rewrite: \"/mcp\""),
        envoy::route("mcp", "/mcp", ", timeout: 30s"),
    ]
    .concat();
    EnvoyConfig {
        kernels: vec![KernelAt::Socket(kernel)],
        upstream,
        access_log: "ACCESS %REQ(:METHOD)% %REQ(:PATH)% %RESPONSE_CODE% %RESP(CONTENT-TYPE)%",
        routes,
        message_timeout: "5s".into(),
        buffer_limit: None,
        upstream_limits: false,
        no_idle_timeout: false,
        extra_clusters: Vec::new(),
    }
    .render()
}

/// Runs one MCP client session: one JSON value per step.
fn session(url: &str, mode: &str, steps: &Value, diag: &dyn Fn() -> String) -> Vec<Value> {
    let out = Command::new(python())
        .arg(root().join("tests/mcp/client.py"))
        .args([url, mode, "{}", &steps.to_string()])
        .output()
        .expect("run the MCP client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<Value> = stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    assert_eq!(
        lines.len(),
        steps.as_array().map_or(0, Vec::len),
        "client session failed ({}):\n{stdout}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        diag()
    );
    lines
}

const ORDINARY: [&str; 8] = [
    "fetch",
    "get_product",
    "get_recipe",
    "get_report",
    "long_running",
    "read_inbox",
    "read_text_file",
    "write_file",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_output_is_guarded_through_envoy() {
    let b = Stack::builder();
    let dir = b.dir().to_path_buf();
    let audit = dir.join("audit.jsonl");
    let server = McpServer::start_script(&dir, "tests/mcp/guard_tools_server.py", &[]);
    let port = server.port;
    let audit_path = format!("--audit-path={}", audit.display());
    let s = b
        .agent(AgentSpec::bin(
            "guardrail-agent",
            "guardrail-agent",
            &[&audit_path, "--audit-fsync-ms=5"],
        ))
        .config(&routes())
        .envoy_config(move |kernel, _| envoy_config(kernel, port))
        .start()
        .await;
    let diag = || {
        format!(
            "{}\nguardrail-agent:\n{}\nserver:\n{}",
            s.diag(),
            s.agent("guardrail-agent").log(),
            std::fs::read_to_string(dir.join("mcp-server.log")).unwrap_or_default()
        )
    };
    let url = |route: &str| s.url(&format!("/{route}"));
    let steps = json!([["list"], ["call", "get_report", {}], ["call", "get_recipe", {}], ["call", "write_file", {"path": "/tmp/x", "content": "y"}],
        ["call", "get_product", {"id": "plain"}], ["call", "get_product", {"id": "review"}], ["call", "read_inbox", {}]]);

    // Both revisions: 2026-07-28 (JSON replies) and the older handshake
    // (event streams, read event by event).
    for mode in ["auto", "legacy"] {
        let got = session(&url("mcp"), mode, &steps, &diag);
        let tools: Vec<&str> = got[0]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{mode}: not a list: {:?}\n{}", got[0], diag()))
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(tools, ORDINARY, "{mode}: the poisoned tool is removed, the rest pass");
        let report = got[1]["result"]
            .as_str()
            .unwrap_or_else(|| panic!("{mode}: {:?}", got[1]));
        assert!(
            report.contains("Quarterly goals update"),
            "{mode}: the long benign report passes"
        );
        assert_eq!(
            got[2]["error"]["code"], -32001,
            "{mode}: the injected recipe is blocked: {:?}",
            got[2]
        );
        assert_eq!(
            got[2]["error"]["data"]["reason"], "prompt_injection_detected",
            "{:?}",
            got[2]
        );
        assert_eq!(got[3]["result"], "wrote /tmp/x", "{mode}: {:?}", got[3]);
        // A product record (JSON text) whose review sends the user's data
        // out is blocked, the same record with an ordinary review passes,
        // and an e-mail telling the model how to write its answer is
        // blocked.
        assert!(
            got[4]["result"].as_str().is_some_and(|r| r.contains("sizes run small")),
            "{mode}: {:?}",
            got[4]
        );
        for (i, family) in [(5, "tool_action"), (6, "output_instructions")] {
            assert_eq!(got[i]["error"]["code"], -32001, "{mode}: {:?}", got[i]);
            assert!(
                got[i]["error"]["data"]["categories"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|x| x == family)),
                "{mode}: {family}: {:?}",
                got[i]
            );
        }
    }

    // `poisoned_tools: refuse`: the whole list is a JSON-RPC error.
    for mode in ["auto", "legacy"] {
        let got = session(&url("mcprefuse"), mode, &json!([["list"]]), &diag);
        assert_eq!(got[0]["error"]["code"], -32001, "{mode}: {:?}\n{}", got[0], diag());
        assert_eq!(got[0]["error"]["data"]["reason"], "tool_poisoning", "{:?}", got[0]);
        assert_eq!(got[0]["error"]["data"]["tools"], json!(["add"]), "{:?}", got[0]);
    }

    // The server ran every call the guard let through; the journal holds
    // each decision and its chain verifies.
    let ran = std::fs::read_to_string(dir.join("mcp-calls.jsonl")).unwrap_or_default();
    assert_eq!(ran.matches("\"get_recipe\"").count(), 2, "{ran}");
    // The journal's lines are written after the answers: polled until it
    // holds the four lists' decisions (two removals, two refusals), 30 s at
    // most. A refusal's line names `tool_poisoning` twice (the decision and
    // the block's reason), so the lines are parsed, not the text counted.
    let read_journal = || {
        let journal = std::fs::read_to_string(&audit).unwrap_or_default();
        let lines: Vec<Value> = journal.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        (journal, lines)
    };
    let decided = |lines: &[Value]| {
        lines
            .iter()
            .filter(|l| l["metadata"]["tool_poisoning"].is_string())
            .count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let (mut journal, mut lines) = read_journal();
    while decided(&lines) < 4 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        (journal, lines) = read_journal();
    }
    let decisions: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["metadata"]["tool_poisoning"].as_str())
        .collect();
    assert_eq!(
        decisions.iter().filter(|d| **d == "removed").count(),
        2,
        "{decisions:?}\n{journal}"
    );
    assert_eq!(
        decisions.iter().filter(|d| **d == "refused").count(),
        2,
        "{decisions:?}"
    );
    assert!(
        lines.iter().any(|l| l["metadata"]["tool_poisoning_tools"] == "add"
            && l["metadata"]["tool_poisoning_categories"]
                .as_str()
                .is_some_and(|c| c.contains("tool_secret_access"))),
        "{journal}"
    );
    // The JSON reply's block is journalled (event streams' records are
    // auditLog's own matter: the client saw the block above).
    assert!(
        lines
            .iter()
            .any(|l| l["metadata"]["response_blocked"] == "prompt_injection_detected"),
        "{journal}"
    );
    let verified = verify_audit(&audit);
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stderr)
    );
    drop(server);
}
