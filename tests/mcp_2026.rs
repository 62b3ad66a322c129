//! End to end for MCP 2026-07-28 through a real Envoy and the kernel binary,
//! with the real `auth-agent`, `tool-agent` and `guardrail-agent` on Unix
//! sockets, and the official Python SDK (PyPI `mcp` 2.3.0) on both sides:
//! `tests/mcp/mrtr_server.py` (an `MCPServer` whose tools and prompts ask
//! the client through `input_required` results, or, to a 2025-11-25
//! client, through requests on the call's stream) and
//! `tests/mcp/mrtr_client.py` (the SDK's `Client`, 2026-07-28 by default,
//! `--legacy` for the 2025-11-25 handshake, as the control).
//!
//! * the questions a server asks inside results are decided like the
//!   requests they replace, in JSON and SSE replies, and the same questions
//!   asked the 2025 way are refused alike;
//! * a held call is asked by an `input_required` URL elicitation (never
//!   -32042): the SDK's callback gets the approval page, an approver allows
//!   it once, the SDK's own retry runs it, a second call is held again;
//! * routing headers that disagree with the body get -32020; a filtered
//!   list is `cacheScope: "private"`.

mod support;

use serde_json::{json, Value};
use support::jwt::jwt;
use support::mcp_2026::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_requests_are_governed_in_json_replies_and_a_held_call_is_asked_by_url() {
    let e = start(Sdk::Python, &["--json"]).await;
    let reader = jwt(SECRET, "rob", &["reader"]);
    let (steps, rules) = governed_steps();
    let got = e.run(Sdk::Python, &reader, steps, &["--no-progress"]);
    check_governed(&got, &rules, "2026 JSON", &e.diag());
    assert!(got[0]["text"].as_str().unwrap_or("").contains("Ada"), "{}", got[0]);
    let ran: Vec<String> = e.ran().into_iter().map(|(t, _)| t).collect();
    assert_eq!(
        ran,
        ["ask_form", "ask_url", "greet"],
        "only the allowed calls completed"
    );

    // Recorded as a 2025 refusal is: Envoy's metadata and the journal.
    let audit = e.dir.join("audit.jsonl");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let log = e.s.envoy.log();
        let journal = std::fs::read_to_string(&audit).unwrap_or_default();
        let found = [
            log.contains("\"mcp.server_rule\":\"secret_field\""),
            journal.contains("\"mcp.server_decision\":\"deny\""),
            journal.contains("\"mcp.server_requests\":\"elicitation/create:deny:secret_field\""),
        ];
        if found.iter().all(|f| *f) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "refusals not recorded {found:?}:\n{log}\n--- journal ---\n{journal}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    check_sampling(&e, Sdk::Python);
    check_undeclared_url_elicitation(&e, Sdk::Python);
    check_approvals(&e, Sdk::Python).await;

    headers_and_caching(&e, &reader).await;
}

async fn headers_and_caching(e: &Env, token: &str) {
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}});
    let post = |body: Value, headers: &[(&str, &str)]| {
        let mut req = reqwest::Client::new()
            .post(e.s.url("/mcp"))
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.send()
    };
    let call = json!({"jsonrpc": "2.0", "id": 41, "method": "tools/call",
        "params": {"name": "read_file", "arguments": {"path": "/a"}, "_meta": meta}});
    let good = [
        ("mcp-method", "tools/call"),
        ("mcp-name", "read_file"),
        ("mcp-protocol-version", "2026-07-28"),
    ];
    let r = post(call.clone(), &good).await.unwrap();
    assert_eq!(r.status(), 200);
    for (i, bad) in [
        [
            ("mcp-method", "tools/call"),
            ("mcp-name", "delete_file"),
            ("mcp-protocol-version", "2026-07-28"),
        ],
        [
            ("mcp-method", "tools/list"),
            ("mcp-name", "read_file"),
            ("mcp-protocol-version", "2026-07-28"),
        ],
        [
            ("mcp-method", "tools/call"),
            ("mcp-name", "=?base64?ZGVsZXRlX2ZpbGU=?="),
            ("mcp-protocol-version", "2026-07-28"),
        ],
        [
            ("mcp-method", "tools/call"),
            ("mcp-name", "read_file"),
            ("mcp-protocol-version", "2025-11-25"),
        ],
    ]
    .iter()
    .enumerate()
    {
        let r = post(call.clone(), bad).await.unwrap();
        assert_eq!(r.status(), 400, "case {i}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(
            (v["id"].clone(), v["error"]["code"].clone()),
            (json!(41), json!(-32020)),
            "case {i}: {v}"
        );
    }
    let r = post(call.clone(), &good[..2]).await.unwrap();
    assert_eq!(r.status(), 400, "a missing MCP-Protocol-Version");

    let list = json!({"jsonrpc": "2.0", "id": 42, "method": "tools/list", "params": {"_meta": meta}});
    let r = post(
        list,
        &[("mcp-method", "tools/list"), ("mcp-protocol-version", "2026-07-28")],
    )
    .await
    .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["result"]["cacheScope"], "private", "{v}");
    let names: Vec<&str> = v["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"read_file") && names.contains(&"delete_file"),
        "{names:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_requests_in_sse_replies_and_the_2025_control_are_governed_alike() {
    let e = start(Sdk::Python, &[]).await;
    let reader = jwt(SECRET, "rob", &["reader"]);
    let (steps, rules) = governed_steps();
    // 2026-07-28 with progress: SSE replies, the result last.
    let got = e.run(Sdk::Python, &reader, steps.clone(), &[]);
    check_governed(&got, &rules, "2026 SSE", &e.diag());
    // Each refusal in an SSE reply ends its stream, counted by the kernel
    // as for 2025: the six refused steps.
    let series = "policy_kernel_stream_terminations_total{reason=\"mcp_server_request_refused\",route=\"mcp\"}";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while e.s.kernel.metric(series) < 6.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            e.s.kernel.admin_get("/metrics").1
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        got[0]["progress"].as_u64().unwrap_or(0) >= 1,
        "an SSE reply: {}",
        got[0]
    );
    // The same questions asked the 2025-11-25 way.
    let got = e.run(Sdk::Python, &reader, steps, &["--legacy"]);
    check_governed(&got, &rules, "2025 control", &e.diag());
}
