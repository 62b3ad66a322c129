//! What `tokenExchange` adds to the auth agent's call when the exchanged
//! token is cached (the common case: one exchange per caller, target and
//! token lifetime), beside a call that misses nothing but the cache's
//! lookup key: the policy's request hook through the SDK's hook path, the
//! token endpoint a loopback stand-in that answers the one exchange made
//! before the measurement.
//!
//! Run: `cargo bench -p reference-agents --bench token_exchange -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use policy_agents::testing::{TestCall, TestRequest};
use reference_agents::auth::TokenExchange;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A token endpoint that grants every exchange (one connection per request).
async fn token_endpoint() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let mut buf = vec![0u8; 16 * 1024];
            let _ = conn.read(&mut buf).await;
            let body = r#"{"access_token":"exchanged-bench","issued_token_type":"urn:ietf:params:oauth:token-type:access_token","token_type":"Bearer","expires_in":3600}"#;
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(reply.as_bytes()).await;
        }
    });
    format!("http://{addr}/token")
}

fn exchange(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let endpoint = rt.block_on(token_endpoint());
    std::env::set_var("POLICY_AGENTS_BENCH_EXCHANGE_SECRET", "bench-secret");
    let policy = TokenExchange::new();
    let call = TestCall::new()
        .params(&[
            ("token_endpoint", endpoint.as_str()),
            ("client_id", "gateway"),
            ("client_secret_env", "POLICY_AGENTS_BENCH_EXCHANGE_SECRET"),
            ("audience", "upstream-api"),
            ("resource", "https://api.example.com/"),
            ("scope", "read"),
        ])
        .metadata("auth_method", "jwt")
        .metadata("sub", "alice");
    // A caller's JWT-sized bearer token.
    let token = format!("eyJhbGciOiJSUzI1NiJ9.{}.{}", "a".repeat(400), "s".repeat(342));
    let req = TestRequest::new("POST", "/mcp").header("authorization", &format!("Bearer {token}"));
    let first = rt.block_on(call.request(&policy, &req)).expect("exchanged");
    assert_eq!(first.metadata_value("token_exchange"), Some("miss"), "{first:?}");

    let mut group = c.benchmark_group("token_exchange");
    group.bench_function("cached_hit", |b| {
        b.iter(|| {
            let out = rt.block_on(call.request(&policy, black_box(&req))).expect("ok");
            debug_assert_eq!(out.metadata_value("token_exchange"), Some("hit"));
            out
        })
    });
    group.finish();
}

criterion_group!(benches, exchange);
criterion_main!(benches);
