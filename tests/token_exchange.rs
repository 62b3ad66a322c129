//! End to end for `tokenExchange` (RFC 8693): npm `oidc-provider`
//! (tests/idp/provider.mjs, with the token-exchange grant registered) issues
//! the caller's token and exchanges it; requests go through a real Envoy,
//! the kernel binary and the real `auth-agent` to the echo upstream, which
//! shows the headers it got.

mod support;

use serde_json::{json, Value};
use support::envoy::{EnvoyConfig, KernelAt};
use support::idp::NodeIdp;
use support::stack::AgentSpec;
use support::*;

/// The audience of the callers' tokens (the gateway's `/api`).
const API: &str = "https://api.test/api";
/// The upstream's resource: the exchanged token's audience.
const UPSTREAM: &str = "https://upstream.test/";
const GATEWAY_SECRET_ENV: &str = "IDP_GATEWAY_SECRET";

fn envoy_config(kernel: &std::path::Path, echo: u16) -> String {
    let routes = [("api", "/api"), ("forbidden", "/forbidden"), ("short", "/short")]
        .iter()
        .map(|(name, prefix)| {
            format!("              - name: {name}\n                match: {{prefix: \"{prefix}\"}}\n                route: {{cluster: upstream, timeout: 30s}}\n")
        })
        .collect::<String>();
    EnvoyConfig {
        kernels: vec![KernelAt::Socket(kernel)],
        upstream: echo,
        access_log: "ACCESS %REQ(:METHOD)% %REQ(:PATH)% %RESPONSE_CODE% %DYNAMIC_METADATA(policy_kernel)%",
        routes,
        message_timeout: "5s".into(),
        buffer_limit: None,
        upstream_limits: false,
        no_idle_timeout: false,
        extra_clusters: vec![],
    }
    .render()
}

fn routes(iss: &str) -> String {
    // tokenExchange also in the response chain: an upstream 401 evicts.
    let chain = |resource: &str, extra: &str| {
        let exchange = format!(
            r#"        - policy: tokenExchange
          params: {{issuer: "{iss}", client_id: gateway, client_secret_env: {GATEWAY_SECRET_ENV}, resource: ["{resource}"], scope: "tools:read"{extra}}}
"#
        );
        format!(
            r#"      request_policy_chain:
        - policy: jwtValidation
          params: {{issuer: "{iss}", oidc_discovery: true, audience: "{API}"}}
{exchange}      response_policy_chain:
{exchange}"#
        )
    };
    format!(
        "  route_policies:\n    - route_name: api\n{}    - route_name: forbidden\n{}    - route_name: short\n{}",
        chain(UPSTREAM, ""),
        chain("https://forbidden.test/", ""),
        // Exchanged tokens kept one second at most.
        chain("https://short.upstream.test/", ", cache_max_s: \"1\", margin_s: \"0\"")
    )
}

/// The claims of a JWT (not verified: the test reads what the upstream got).
fn claims(token: &str) -> Value {
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let (mut bits, mut n, mut out) = (0u32, 0, Vec::new());
    for c in token.split('.').nth(1).unwrap_or("").bytes() {
        let Some(v) = T.iter().position(|t| *t == c) else { break };
        bits = (bits << 6) | v as u32;
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
            bits &= (1 << n) - 1;
        }
    }
    serde_json::from_slice(&out).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_sees_only_its_own_token() {
    let builder = Stack::builder();
    let d = builder.dir().to_path_buf();
    let mut idp = NodeIdp::start(&d);
    let stack = builder
        .agent(
            AgentSpec::bin("auth", "auth-agent", &[])
                .env(GATEWAY_SECRET_ENV, "gateway-secret")
                .entry("      timeout_ms: 3000\n"),
        )
        .config("  route_policies: []\n")
        .envoy_config(envoy_config)
        .start()
        .await;
    stack.reload(&stack.kernel_body(&routes(&idp.issuer()))).await;
    let diag = |idp: &NodeIdp| {
        format!(
            "--- kernel ---\n{}\n--- envoy ---\n{}\n--- auth-agent ---\n{}\n--- provider ---\n{}",
            stack.kernel.log(),
            stack.envoy.log(),
            std::fs::read_to_string(stack.dir.join("auth.log")).unwrap_or_default(),
            idp.log()
        )
    };
    let get = |path: &str, token: &str| {
        let auth = format!("Bearer {token}");
        let (client, url) = (stack.client.clone(), stack.envoy.url(path));
        async move { send(&client, "GET", &url, &[("authorization", &auth)], None).await }
    };

    let caller = idp.token("mcp-client", "mcp-secret", "tools:read", Some(API)).await;
    let exchanges_before = idp.hits("/token").await;
    let got = get("/api/x", &caller).await;
    assert_eq!(got.status, 200, "{}\n{}", got.body, diag(&idp));
    let seen = got
        .echoed_header("authorization")
        .expect("an authorization header upstream");
    let upstream_token = seen.strip_prefix("Bearer ").expect("a bearer token");
    assert_ne!(upstream_token, caller);
    assert!(!got.body.contains(&caller), "the caller's token reached the upstream");
    let c = claims(upstream_token);
    assert_eq!(c["aud"], json!(UPSTREAM), "{c}");
    assert_eq!(c["sub"], json!("mcp-client"));
    assert_eq!(c["client_id"], json!("gateway"));

    // Cached: 50 more requests (concurrent) make no new exchange.
    let tasks: Vec<_> = (0..50).map(|_| tokio::spawn(get("/api/y", &caller))).collect();
    for t in tasks {
        let got = t.await.unwrap();
        assert_eq!(got.status, 200);
        assert_eq!(got.echoed_header("authorization").as_deref(), Some(seen.as_str()));
    }
    assert_eq!(idp.hits("/token").await, exchanges_before + 1);

    // The upstream answers 401: the entry is evicted, the next request
    // exchanges again.
    let auth = format!("Bearer {caller}");
    let headers = [("authorization", auth.as_str()), ("x-echo-status", "401")];
    let got = send(&stack.client, "GET", &stack.envoy.url("/api/x"), &headers, None).await;
    assert_eq!(got.status, 401, "{}", got.body);
    assert_eq!(idp.hits("/token").await, exchanges_before + 1);
    let got = get("/api/x", &caller).await;
    assert_eq!(got.status, 200);
    assert_eq!(idp.hits("/token").await, exchanges_before + 2);

    // A new caller token, 50 concurrent requests: one exchange.
    let second = idp.token("mcp-client", "mcp-secret", "tools:read", Some(API)).await;
    let before = idp.hits("/token").await;
    let tasks: Vec<_> = (0..50).map(|_| tokio::spawn(get("/api/z", &second))).collect();
    for t in tasks {
        let got = t.await.unwrap();
        assert_eq!(got.status, 200, "{}", got.body);
        assert!(!got.body.contains(&second));
    }
    assert_eq!(idp.hits("/token").await, before + 1);

    // What the journal and access logs get of an exchange: the audience,
    // the outcome and a short hash of the subject token, never a token.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !stack
        .envoy
        .log()
        .contains("\"token_exchange.audience\":\"https://upstream.test/\"")
    {
        assert!(std::time::Instant::now() < deadline, "{}", diag(&idp));
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let log = stack.envoy.log();
    assert!(log.contains("\"token_exchange.subject_token\":\""), "{log}");
    assert!(
        !log.contains(&caller) && !log.contains(&second),
        "a token in the access log"
    );

    // The provider refuses the subject's grant: 401 with a challenge, the
    // upstream not called.
    let revoked = idp.user_token("revoked-user", API, "tools:read").await;
    let got = get("/api/x", &revoked).await;
    assert_eq!(got.status, 401, "{}\n{}", got.body, diag(&idp));
    assert_eq!(got.json()["reason"], json!("invalid_grant"), "{}", got.body);
    assert!(
        got.header("www-authenticate")
            .is_some_and(|w| w.contains("invalid_token")),
        "{:?}",
        got.header("www-authenticate")
    );
    assert!(!got.body.contains(&revoked) && got.echoed_header("authorization").is_none());

    // An expired entry (kept one second on /short) makes a new exchange.
    let before = idp.hits("/token").await;
    assert_eq!(get("/short/a", &caller).await.status, 200);
    assert_eq!(idp.hits("/token").await, before + 1);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        assert_eq!(get("/short/b", &caller).await.status, 200);
        if idp.hits("/token").await == before + 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the entry never expired\n{}",
            diag(&idp)
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }

    // The provider refuses the target: 403, the upstream not called.
    let got = get("/forbidden/x", &caller).await;
    assert_eq!(
        (got.status, got.json()["reason"].clone()),
        (403, json!("invalid_target"))
    );
    assert!(!got.body.contains(&caller));

    // The provider down: a caller not cached gets 503 with Retry-After.
    let third = idp.token("mcp-client", "mcp-secret", "tools:read", Some(API)).await;
    // (jwtValidation has the keys; the exchange is what fails.)
    idp.stop();
    let got = get("/api/x", &third).await;
    assert_eq!(got.status, 503, "{}\n{}", got.body, diag(&idp));
    assert_eq!(got.json()["reason"], json!("token_exchange_unavailable"));
    assert!(got.header("retry-after").is_some());
    assert!(!got.body.contains(&third));
}
