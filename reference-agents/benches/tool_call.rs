//! Benchmarks of the tool agent on a typical MCP `tools/call` (a
//! `read_file` with a path and a `fetch` with a URL, 2026-07-28 `_meta`
//! included): `mcpToolAuthorization` and `toolArgumentGuard` through the
//! hook path the SDK uses (params looked up in the policies' cache), one by
//! one and together.
//!
//! Run: `cargo bench -p reference-agents --bench tool_call -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use policy_agents::testing::{TestCall, TestRequest};
use reference_agents::tool::{McpToolAuthorization, ToolArgumentGuard};

const RULES: &str = r#"[{"name":"no-delete","effect":"deny","tools":["delete_*"]},{"name":"admins","effect":"allow","tools":["*"],"when":{"roles_any":["admin"]}},{"name":"readers","effect":"allow","tools":["read_file","fetch","search"],"when":{"roles_any":["reader"],"scopes":["files:read"]}},{"name":"listing","effect":"allow","methods":["tools/list"]}]"#;
const CONSTRAINTS: &str = r#"[{"tools":["read_file","write_file"],"path_args":["path"],"allowed_paths":["/srv/data","/tmp/work"]},{"tools":["fetch"],"url_args":["url"],"allowed_hosts":["*.example.com"]},{"tools":["run"],"command_args":["command"],"allowed_commands":["git","ls"]}]"#;

fn call(tool: &str, args: serde_json::Value) -> TestRequest {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 17, "method": "tools/call", "params": {
        "name": tool, "arguments": args,
        "_meta": {"progressToken": 17, "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "clientInfo": {"name": "bench", "version": "1.0"}}}});
    TestRequest::new("POST", "/mcp")
        .header("content-type", "application/json")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .body(body.to_string())
}

fn tool_call(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let authz = McpToolAuthorization::new();
    let guard = ToolArgumentGuard::new();
    let authz_call = TestCall::new()
        .params(&[("rules", RULES)])
        .metadata("roles", "reader")
        .metadata("scope", "files:read files:write");
    let guard_call = TestCall::new().params(&[("constraints", CONSTRAINTS), ("max_arg_bytes", "65536")]);
    let read = call(
        "read_file",
        serde_json::json!({"path": "/srv/data/reports/2026/q3.csv"}),
    );
    let fetch = call(
        "fetch",
        serde_json::json!({"url": "https://api.example.com/v1/items?page=2"}),
    );
    let mut group = c.benchmark_group("tool_call");
    group.bench_function("mcpToolAuthorization/read_file", |b| {
        b.iter(|| rt.block_on(authz_call.request(&authz, black_box(&read))).expect("ok"))
    });
    group.bench_function("toolArgumentGuard/read_file", |b| {
        b.iter(|| rt.block_on(guard_call.request(&guard, black_box(&read))).expect("ok"))
    });
    group.bench_function("toolArgumentGuard/fetch", |b| {
        b.iter(|| rt.block_on(guard_call.request(&guard, black_box(&fetch))).expect("ok"))
    });
    group.bench_function("authorization+guard/read_file", |b| {
        b.iter(|| {
            rt.block_on(async {
                let a = authz_call.request(&authz, black_box(&read)).await.expect("ok");
                let g = guard_call.request(&guard, black_box(&read)).await.expect("ok");
                assert!(a.denial().is_none() && g.denial().is_none());
            })
        })
    });
    group.finish();
}

criterion_group!(benches, tool_call);
criterion_main!(benches);
