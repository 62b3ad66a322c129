//! The tool agent's response phase on MCP replies, the route's response
//! chain as `docs/agents/mcp-server-requests.md` sets it up:
//! `mcpToolFilter` then `mcpServerRequestGuard`, each through the hook path
//! the SDK uses.
//!
//! * `complete_json_4k`: a `tools/call` result of about 4 KiB
//!   (`resultType: "complete"`, as MCP 2026-07-28 servers send it), JSON;
//! * `complete_sse_4k`: the same as the last event of an SSE reply, after
//!   a progress event (the streaming hook);
//! * `input_required_json`: a result asking three questions (a form, a URL
//!   elicitation, roots), all allowed: read, decided and remembered for the
//!   retry;
//! * `retry_request`: the retry of that call (`inputResponses`,
//!   `requestState`), request phase of `mcpToolAuthorization` and
//!   `mcpServerRequestGuard` (with `check_input_responses: false`: the
//!   answers are taken once, so an iterated check would measure refusals).
//!
//! The file compiles against the agents before MCP 2026-07-28 was governed
//! too, so the same cases run before and after (benches/RESULTS.md).
//!
//! Run: `cargo bench -p reference-agents --bench mcp_response -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use policy_agents::stream::sse;
use policy_agents::testing::{TestCall, TestRequest, TestResponse};
use reference_agents::tool::{McpServerRequestGuard, McpToolAuthorization, McpToolFilter};
use serde_json::json;

const RULES: &str = r#"[{"name":"readers","effect":"allow","tools":["read_file","ask"],"when":{"roles_any":["reader"]}},{"name":"listing","effect":"allow","methods":["tools/list"]}]"#;
const SERVER_RULES: &str = r#"[{"name":"ask","effect":"allow","methods":["elicitation/create","roots/list"]}]"#;

fn meta() -> serde_json::Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}, "url": {}}, "roots": {}}})
}

fn request(tool: &str, extra: serde_json::Value) -> TestRequest {
    let mut params = json!({"name": tool, "arguments": {"path": "/srv/data/q3.csv"}, "_meta": meta()});
    if let Some(o) = extra.as_object() {
        for (k, v) in o {
            params[k] = v.clone();
        }
    }
    let body = json!({"jsonrpc": "2.0", "id": 17, "method": "tools/call", "params": params});
    TestRequest::new("POST", "/mcp")
        .header("content-type", "application/json")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .header("mcp-protocol-version", "2026-07-28")
        .body(body.to_string())
}

/// A 4 KiB `tools/call` result.
fn complete() -> String {
    let line = "quarter,region,revenue,units,notes: steady growth in the north, flat elsewhere\n";
    let text: String = line.repeat(4096 / line.len());
    json!({"jsonrpc": "2.0", "id": 17, "result": {"content": [{"type": "text", "text": text}],
        "isError": false, "resultType": "complete",
        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "bench", "version": "1"}}}})
    .to_string()
}

fn asks() -> String {
    json!({"jsonrpc": "2.0", "id": 17, "result": {"resultType": "input_required",
        "inputRequests": {
            "who": {"method": "elicitation/create", "params": {"mode": "form", "message": "Your name?",
                "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}},
            "docs": {"method": "elicitation/create", "params": {"mode": "url", "message": "Read the terms", "url": "https://example.com/terms"}},
            "where": {"method": "roots/list"}},
        "requestState": "v1.".to_string() + &"A".repeat(400)}})
    .to_string()
}

fn response(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let filter = McpToolFilter::new();
    let guard = McpServerRequestGuard::default();
    let authz = McpToolAuthorization::new();
    let filter_call = TestCall::new().params(&[("rules", RULES)]).metadata("roles", "reader");
    let guard_params = [
        ("rules", SERVER_RULES),
        ("allowed_hosts", "[\"example.com\"]"),
        ("check_input_responses", "false"),
    ];
    let guard_call = TestCall::new()
        .params(&guard_params)
        .metadata("roles", "reader")
        .metadata("sub", "rob")
        .metadata("mcp.request_id", "17")
        .metadata("mcp.client_capabilities", "form,url,roots")
        .metadata("mcp.input_call", "mcp-input bench");
    let authz_call = TestCall::new().params(&[("rules", RULES)]).metadata("roles", "reader");
    let req = request("read_file", json!({}));
    let json_reply = |body: String| {
        TestResponse::new(200)
            .header("content-type", "application/json")
            .body(body)
    };
    let (done, asked) = (json_reply(complete()), json_reply(asks()));
    let sse_reply = TestResponse::new(200).header("content-type", "text/event-stream");
    let events: Vec<Bytes> = vec![
        sse::event(
            "message",
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":17,"progress":1}}"#,
        ),
        sse::event("message", &complete()),
    ];
    let retry = request(
        "ask",
        json!({"inputResponses": {"who": {"action": "accept", "content": {"name": "Ada"}},
            "docs": {"action": "accept"}, "where": {"roots": [{"uri": "file:///srv"}]}},
            "requestState": "v1.".to_string() + &"A".repeat(400)}),
    );

    let mut group = c.benchmark_group("mcp_response");
    group.bench_function("complete_json_4k", |b| {
        b.iter(|| {
            rt.block_on(async {
                let f = filter_call.response(&filter, &req, black_box(&done)).await.expect("ok");
                let g = guard_call.response(&guard, &req, black_box(&done)).await.expect("ok");
                assert!(f.body_set().is_none() && g.body_set().is_none());
            })
        })
    });
    group.bench_function("complete_sse_4k", |b| {
        b.iter(|| {
            rt.block_on(async {
                let f = filter_call
                    .chunk(&filter, &req, &sse_reply, black_box(&events), 0, true, b"")
                    .await
                    .expect("ok");
                let g = guard_call
                    .chunk(&guard, &req, &sse_reply, black_box(&events), 0, true, b"")
                    .await
                    .expect("ok");
                black_box((f, g));
            })
        })
    });
    group.bench_function("input_required_json", |b| {
        b.iter(|| {
            rt.block_on(async {
                let f = filter_call
                    .response(&filter, &req, black_box(&asked))
                    .await
                    .expect("ok");
                let g = guard_call.response(&guard, &req, black_box(&asked)).await.expect("ok");
                black_box((f, g));
            })
        })
    });
    group.bench_function("retry_request", |b| {
        b.iter(|| {
            rt.block_on(async {
                let a = authz_call.request(&authz, black_box(&retry)).await.expect("ok");
                let g = guard_call.request(&guard, black_box(&retry)).await.expect("ok");
                assert!(a.denial().is_none() && g.denial().is_none());
            })
        })
    });
    group.finish();
}

/// The parts, for reading the figures above (not in the earlier agents).
fn parts(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let body = complete();
    let filter = McpToolFilter::new();
    let guard = McpServerRequestGuard::default();
    let filter_call = TestCall::new().params(&[("rules", RULES)]).metadata("roles", "reader");
    let guard_call = TestCall::new().params(&[("rules", SERVER_RULES)]);
    let req = request("read_file", json!({}));
    let done = TestResponse::new(200)
        .header("content-type", "application/json")
        .body(body.clone());
    let mut group = c.benchmark_group("mcp_response_parts");
    group.bench_function("surely_plain_4k", |b| {
        b.iter(|| reference_agents::mcp::shapes::surely_plain(black_box(body.as_bytes())))
    });
    group.bench_function("json_validate_4k", |b| {
        b.iter(|| serde_json::from_slice::<serde::de::IgnoredAny>(black_box(body.as_bytes())).is_ok())
    });
    group.bench_function("filter_only_complete_json_4k", |b| {
        b.iter(|| {
            rt.block_on(filter_call.response(&filter, &req, black_box(&done)))
                .expect("ok")
        })
    });
    group.bench_function("guard_only_complete_json_4k", |b| {
        b.iter(|| {
            rt.block_on(guard_call.response(&guard, &req, black_box(&done)))
                .expect("ok")
        })
    });
    group.finish();
}

criterion_group!(benches, response, parts);
criterion_main!(benches);
