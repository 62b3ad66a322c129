//! Benchmarks of the tool agent on a typical MCP `tools/call` (a
//! `read_file` with a path and a `fetch` with a URL, 2026-07-28 `_meta`
//! included): `mcpToolAuthorization` and `toolArgumentGuard` through the
//! hook path the SDK uses (params looked up in the policies' cache), one by
//! one and together.
//!
//! `approval/*`: what an `approve` rule costs a call that already holds a
//! grant (`allow_always`), beside the same rule as `allow`, in one run.
//!
//! Run: `cargo bench -p reference-agents --bench tool_call -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use policy_agents::testing::{TestCall, TestRequest};
use reference_agents::approvals::{Approvals, DecideBody, GrantKind, Limits};
use reference_agents::rules::Caller;
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
        .header("mcp-protocol-version", "2026-07-28")
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

const APPROVE: &str = r#"[{"name":"reads","effect":"approve","tools":["read_file"],"approval":{"approvers":{"roles_any":["approver"]}}},{"name":"listing","effect":"allow","methods":["tools/list"]}]"#;
const ALLOW: &str = r#"[{"name":"reads","effect":"allow","tools":["read_file"]},{"name":"listing","effect":"allow","methods":["tools/list"]}]"#;

fn approval(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let approvals = Approvals::memory(Limits::default());
    let approve = McpToolAuthorization::with_approvals(approvals.clone());
    let allow = McpToolAuthorization::new();
    let as_alice = |rules: &str| {
        TestCall::new()
            .params(&[("rules", rules)])
            .metadata("sub", "alice")
            .metadata("route.name", "mcp")
            .metadata("route.version", "0123456789abcdef")
    };
    let (approve_call, allow_call) = (as_alice(APPROVE), as_alice(ALLOW));
    let read = call(
        "read_file",
        serde_json::json!({"path": "/srv/data/reports/2026/q3.csv"}),
    );
    // The first call waits; an approver grants the tool for good.
    let first = rt.block_on(approve_call.request(&approve, &read)).expect("ok");
    let id = first.metadata_value("approval.id").expect("an approval id").to_string();
    let approver = Caller {
        sub: Some("bob".into()),
        roles: vec!["approver".into()],
        ..Caller::default()
    };
    let grant = DecideBody {
        grant: GrantKind::AllowAlways,
        reason: None,
        alternative: None,
        constraints: None,
        ttl_s: None,
    };
    rt.block_on(approvals.decide(&id, &approver, grant, None))
        .expect("granted");
    let granted = rt.block_on(approve_call.request(&approve, &read)).expect("ok");
    assert!(granted.denial().is_none(), "the grant must let the call through");

    let mut group = c.benchmark_group("approval");
    group.bench_function("allow_rule/read_file", |b| {
        b.iter(|| rt.block_on(allow_call.request(&allow, black_box(&read))).expect("ok"))
    });
    group.bench_function("approve_rule_granted/read_file", |b| {
        b.iter(|| {
            rt.block_on(approve_call.request(&approve, black_box(&read)))
                .expect("ok")
        })
    });
    group.finish();
}

criterion_group!(benches, tool_call, approval);
criterion_main!(benches);
