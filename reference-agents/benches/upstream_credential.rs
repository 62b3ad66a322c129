//! What `upstreamCredential` adds to the tool agent's call when the user's
//! credential is stored (the common case): the policy's request hook
//! through the SDK's hook path on an MCP `tools/call` (the body read, the
//! sealed credential loaded from memory and opened, the header set), beside
//! the same hook on a `tools/list` of a user with no credential (the body
//! read, one store miss, nothing opened).
//!
//! Run: `cargo bench -p reference-agents --bench upstream_credential -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use policy_agents::testing::{TestCall, TestRequest};
use reference_agents::credentials::policy::UpstreamCredential;
use reference_agents::credentials::{store::Store, vault::Vault, Credentials, Kind, Stored, User};
use reference_agents::mcp::state::Sealer;

fn stored(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let creds =
        Credentials::new(Store::memory(), Vault::new([7; 32], true), Sealer::new([1; 32])).expect("credentials");
    let alice = User {
        iss: "https://idp.example".into(),
        sub: "alice".into(),
    };
    let now = reference_agents::approvals::now_ms();
    let credential = Stored {
        kind: Kind::Oauth,
        secret: format!("gho_{}", "x".repeat(36)),
        refresh: Some("r".repeat(40)),
        expires_ms: Some(now + 24 * 3_600_000),
        scope: Some("repo:read".into()),
        connected_ms: now,
        refreshed_ms: None,
    };
    rt.block_on(creds.save(&alice, "github", &credential)).expect("saved");
    let policy = UpstreamCredential::new(creds);
    let params = [
        ("upstream", "github"),
        ("login_issuer", "https://idp.example"),
        ("login_client_id", "gateway-connect"),
        ("login_client_secret_env", "BENCH_CONNECT_SECRET"),
        ("issuer", "https://as.example"),
        ("client_id", "gateway"),
        ("client_secret_env", "BENCH_UPSTREAM_SECRET"),
    ];
    let as_user = |sub: &str| {
        TestCall::new()
            .params(&params)
            .metadata("auth_method", "jwt")
            .metadata("sub", sub)
    };
    let token = format!("eyJhbGciOiJSUzI1NiJ9.{}.{}", "a".repeat(400), "s".repeat(342));
    let mcp = |body: &str| {
        TestRequest::new("POST", "/mcp")
            .header("authorization", &format!("Bearer {token}"))
            .header("content-type", "application/json")
            .body(body.to_string())
    };
    let call = mcp(
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search_issues","arguments":{"repo":"acme/api","query":"is:open label:bug"}}}"#,
    );
    let list = mcp(r#"{"jsonrpc":"2.0","id":8,"method":"tools/list","params":{}}"#);
    let (alice_call, bob_call) = (as_user("alice"), as_user("bob"));
    let out = rt.block_on(alice_call.request(&policy, &call)).expect("ok");
    assert!(
        out.header_set("authorization")
            .is_some_and(|v| v.starts_with("Bearer gho_")),
        "{out:?}"
    );

    let mut group = c.benchmark_group("upstream_credential");
    group.bench_function("stored_credential_tools_call", |b| {
        b.iter(|| rt.block_on(alice_call.request(&policy, black_box(&call))).expect("ok"))
    });
    group.bench_function("no_credential_tools_list", |b| {
        b.iter(|| rt.block_on(bob_call.request(&policy, black_box(&list))).expect("ok"))
    });
    group.finish();
}

criterion_group!(benches, stored);
criterion_main!(benches);
