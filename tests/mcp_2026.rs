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

use std::process::Stdio;

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

    // Sampling: an admin may be asked; an injected prompt is blocked.
    let admin = jwt(SECRET, "ada", &["admin"]);
    let got = e.run(
        Sdk::Python,
        &admin,
        json!([
            call("summarise", json!({"text": "the cat sat on the mat"})),
            call("summarise", json!({"text": INJECTED}))
        ]),
        &["--no-progress"],
    );
    assert!(
        got[0]["text"].as_str().unwrap_or("").contains("sampled"),
        "{}\n{}",
        got[0],
        e.diag()
    );
    assert!(
        got[1].get("error").is_some(),
        "an injected sampling prompt reached the model: {}",
        got[1]
    );
    assert_eq!(got[1]["callbacks"], json!([]), "{}", got[1]);

    // A question for a capability the request did not declare: the SDK's
    // server checks it itself (-32021); the gateway refuses it from servers
    // that do not (`capability_not_declared`, tool::input_requests' tests).
    let got = e.run(
        Sdk::Python,
        &reader,
        json!([call("ask_url", json!({"url": "https://example.com/ok"}))]),
        &["--no-url-elicitation", "--no-progress"],
    );
    assert_eq!(got[0]["error"]["code"], -32021, "{}", got[0]);
    assert_eq!(got[0]["callbacks"], json!([]), "{}", got[0]);

    // Approvals: an input_required URL elicitation to the page, never -32042.
    let alice = jwt(SECRET, "alice", &["agent"]);
    let bob = jwt(SECRET, "bob", &["approver"]);
    let wait = e.dir.join("user");
    std::fs::create_dir_all(&wait).unwrap();
    let steps = json!([call("delete_file", json!({"path": "/srv/a"}))]);
    let mut child = e
        .client(
            Sdk::Python,
            &alice,
            &steps,
            &["--no-progress", "--url-wait", &wait.to_string_lossy()],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let url = next_url(&wait, 1, &mut child, &e.diag());
    let id = url
        .split("#id=")
        .nth(1)
        .unwrap_or_else(|| panic!("no approval id in {url}"))
        .to_string();
    assert!(url.contains("/approvals/page#id="), "{url}");
    assert!(!e.ran().iter().any(|(t, _)| t == "delete_file"), "a held call ran");
    let (status, body) = e
        .api(
            "POST",
            &format!("/approvals/{id}"),
            &bob,
            Some(json!({"grant": "allow_once"})),
        )
        .await;
    assert_eq!(status, 200, "{body}\n{}", e.diag());
    std::fs::write(wait.join("go"), b"").unwrap();
    let out = child.wait_with_output().unwrap();
    let got = parse(&out.stdout, &out.stderr, &steps, &e.diag());
    assert_eq!(
        got[0]["text"],
        "deleted /srv/a",
        "the SDK's own retry ran the approved call: {}\n{}",
        got[0],
        e.diag()
    );
    assert_eq!(got[0]["callbacks"].as_array().map(Vec::len), Some(1), "{}", got[0]);
    let deletes = e.ran().into_iter().filter(|(t, _)| t == "delete_file").count();
    assert_eq!(deletes, 1);

    // A second call is held again; denied, the retry is refused.
    let mut child = e
        .client(
            Sdk::Python,
            &alice,
            &steps,
            &["--no-progress", "--url-wait", &wait.to_string_lossy()],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let again = next_url(&wait, 2, &mut child, &e.diag());
    assert_ne!(again, url, "a new approval");
    let id2 = again.split("#id=").nth(1).unwrap().to_string();
    let (status, _) = e
        .api(
            "POST",
            &format!("/approvals/{id2}"),
            &bob,
            Some(json!({"grant": "deny", "reason": "no"})),
        )
        .await;
    assert_eq!(status, 200);
    std::fs::write(wait.join("go"), b"").unwrap();
    let out = child.wait_with_output().unwrap();
    let got = parse(&out.stdout, &out.stderr, &steps, &e.diag());
    assert_eq!(got[0]["error"]["data"]["reason"], "approval_denied", "{}", got[0]);
    assert_eq!(e.ran().into_iter().filter(|(t, _)| t == "delete_file").count(), 1);

    // Without URL elicitation declared: -32021 naming the capability.
    let other = json!([call("delete_file", json!({"path": "/srv/b"}))]);
    let got = e.run(Sdk::Python, &alice, other, &["--no-url-elicitation", "--no-progress"]);
    assert_eq!(got[0]["error"]["code"], -32021, "{}", got[0]);
    assert_eq!(
        got[0]["error"]["data"]["requiredCapabilities"],
        json!({"elicitation": {"url": {}}})
    );

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
    assert!(
        got[0]["progress"].as_u64().unwrap_or(0) >= 1,
        "an SSE reply: {}",
        got[0]
    );
    // The same questions asked the 2025-11-25 way.
    let got = e.run(Sdk::Python, &reader, steps, &["--legacy"]);
    check_governed(&got, &rules, "2025 control", &e.diag());
}
