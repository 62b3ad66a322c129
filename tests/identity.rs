//! End to end for identity from a real identity provider: npm
//! `oidc-provider` (tests/idp/provider.mjs) issues client-credentials tokens
//! (JWT access tokens through its resource indicators, opaque ones without)
//! and rotates its keys; requests go through a real Envoy, the kernel
//! binary and the real `auth-agent` (and `tool-agent` for MCP). The last
//! case is the official MCP TypeScript SDK client with its
//! `ClientCredentialsProvider`, finding the provider by itself (RFC 9728).

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::envoy::{EnvoyConfig, KernelAt};
use support::idp::{mcp_client, mcp_server, NodeIdp};
use support::stack::AgentSpec;
use support::*;

/// The audience of the `/api` and `/stale` routes' tokens.
const API: &str = "https://api.test/api";
const GATEWAY_SECRET_ENV: &str = "IDP_GATEWAY_SECRET";
/// The `/opaque` route's `max_introspections_per_s`.
const OPAQUE_PER_S: u32 = 10;

/// Envoy: one listener; prefixes to kernel routes of the same name, to the
/// echo upstream or the MCP server.
fn envoy_config(kernel: &std::path::Path, echo: u16, mcp: u16) -> String {
    let routes = [
        ("prm", "/.well-known/oauth-protected-resource", "upstream"),
        ("mcp", "/mcp", "mcp"),
        ("api", "/api", "upstream"),
        ("stale", "/stale", "upstream"),
        ("opaque", "/opaque", "upstream"),
    ]
    .iter()
    .map(|(name, prefix, cluster)| {
        format!("              - name: {name}\n                match: {{prefix: \"{prefix}\"}}\n                route: {{cluster: {cluster}, timeout: 30s}}\n")
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
        extra_clusters: vec![("mcp", mcp)],
    }
    .render()
}

/// The kernel's routes; `gw` is Envoy's origin (what MCP clients call).
fn routes(iss: &str, gw: &str) -> String {
    let rules = r#"[{"name": "readers", "effect": "allow", "tools": ["read_data"], "when": {"scopes": ["tools:read"]}}, {"name": "writers", "effect": "allow", "tools": ["write_data"], "when": {"scopes": ["tools:write"]}}, {"name": "listing", "effect": "allow", "methods": ["tools/list"]}]"#;
    let rm = format!("{gw}/.well-known/oauth-protected-resource");
    format!(
        r#"  route_policies:
    - route_name: prm
      request_policy_chain:
        - policy: oauthProtectedResource
          params: {{resource: "{gw}/mcp", authorization_servers: ["{iss}"], scopes_supported: ["tools:read", "tools:write"]}}
    - route_name: mcp
      request_policy_chain:
        - policy: jwtValidation
          params: {{issuer: "{iss}", oidc_discovery: true, audience: "{gw}/mcp", resource_metadata: "{rm}/mcp"}}
        - policy: mcpToolAuthorization
          params: {{rules: {rules}, resource_metadata: "{rm}/mcp"}}
    - route_name: api
      request_policy_chain:
        - policy: jwtValidation
          params: {{issuer: "{iss}", oidc_discovery: true, audience: "{API}", jwks_cache_min_s: 300, jwks_refresh_interval_s: 60, jwks_refresh_min_ms: 1000, resource_metadata: "{rm}/api", forward_claims: ["sub", "scope"]}}
    - route_name: stale
      request_policy_chain:
        - policy: jwtValidation
          params: {{issuer: "{iss}", oidc_discovery: true, audience: "{API}", jwks_cache_min_s: 1, jwks_cache_max_s: 2, jwks_stale_s: 4}}
    - route_name: opaque
      request_policy_chain:
        - policy: tokenIntrospection
          params: {{introspection_endpoint: "{iss}/token/introspection", client_id: gateway, client_secret_env: {GATEWAY_SECRET_ENV}, issuer: "{iss}", forward_claims: ["client_id", "scope"], max_introspections_per_s: {OPAQUE_PER_S}}}
"#
    )
}

/// Provider, echo upstream, MCP server, Envoy, agents and kernel: the
/// test stack, with the provider and the MCP server beside it.
struct IdpStack {
    idp: NodeIdp,
    stack: Stack,
    _mcp: Proc,
    /// The auth agent's `--metrics-addr` port.
    agent_metrics: u16,
}

impl std::ops::Deref for IdpStack {
    type Target = Stack;
    fn deref(&self) -> &Stack {
        &self.stack
    }
}

impl IdpStack {
    async fn start() -> Self {
        let builder = Stack::builder();
        let d = builder.dir().to_path_buf();
        let idp = NodeIdp::start(&d);
        let (mcp, mcp_port) = mcp_server(&d);
        let agent_metrics = free_port();
        let metrics_flag = format!("--metrics-addr=127.0.0.1:{agent_metrics}");
        // The kernel's routes name Envoy's origin (the MCP resource), known
        // once Envoy has bound its port: the stack starts without routes,
        // and they come by a reload.
        let stack = builder
            .agent(
                AgentSpec::bin("auth", "auth-agent", &[&metrics_flag])
                    .env(GATEWAY_SECRET_ENV, "gateway-secret")
                    .entry("      timeout_ms: 3000\n"),
            )
            .agent(AgentSpec::bin("tool", "tool-agent", &[]))
            .config("  route_policies: []\n")
            .envoy_config(move |kernel, echo| envoy_config(kernel, echo, mcp_port))
            .start()
            .await;
        let gw = stack.envoy.url("").trim_end_matches('/').to_string();
        stack.reload(&stack.kernel_body(&routes(&idp.issuer(), &gw))).await;
        IdpStack {
            idp,
            stack,
            _mcp: mcp,
            agent_metrics,
        }
    }

    /// One sample of the auth agent's metrics (0 if absent).
    fn agent_metric(&self, series: &str) -> f64 {
        sample(&http_get(self.agent_metrics, "/metrics").1, series)
    }

    async fn get(&self, path: &str, token: &str) -> Got {
        let auth = format!("Bearer {token}");
        send(
            &self.client,
            "GET",
            &self.envoy.url(path),
            &[("authorization", &auth)],
            None,
        )
        .await
    }

    /// True once the auth agent's log has `text`, polled for 5 s: the agent
    /// writes a request's lines when it next waits for work, just after its
    /// answer, so the line may come a moment after the answer.
    fn auth_log_has(&self, text: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.auth_log().contains(text) {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    fn auth_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("auth.log")).unwrap_or_default()
    }

    fn diag(&self) -> String {
        format!(
            "--- kernel ---\n{}\n--- envoy ---\n{}\n--- auth-agent ---\n{}\n--- provider ---\n{}",
            self.kernel.log(),
            self.envoy.log(),
            self.auth_log(),
            self.idp.log()
        )
    }
}

/// A JWT's header with its `kid` replaced (the signature no longer matches,
/// but the key lookup comes first).
fn forge_kid(token: &str, kid: &str) -> String {
    use base64_url as b64;
    let mut parts = token.splitn(3, '.');
    let (_, claims, sig) = (parts.next(), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let header = json!({"alg": "RS256", "typ": "at+jwt", "kid": kid});
    format!("{}.{claims}.{sig}", b64::encode(header.to_string().as_bytes()))
}

/// The `kid` in a JWT's header.
fn kid_of(token: &str) -> String {
    let header = base64_url::decode(token.split('.').next().unwrap_or(""));
    let v: Value = serde_json::from_slice(&header).unwrap_or_default();
    v["kid"].as_str().unwrap_or("").to_string()
}

/// Base64url without padding (the tests' own, to stay off the agents' crates).
mod base64_url {
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

    pub fn decode(text: &str) -> Vec<u8> {
        let mut bits = 0u32;
        let mut n = 0;
        let mut out = Vec::new();
        for c in text.bytes() {
            let Some(v) = T.iter().position(|t| *t == c) else { break };
            bits = (bits << 6) | v as u32;
            n += 6;
            if n >= 8 {
                n -= 8;
                out.push((bits >> n) as u8);
                bits &= (1 << n) - 1;
            }
        }
        out
    }

    pub fn encode(data: &[u8]) -> String {
        let mut out = String::new();
        for chunk in data.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
            for i in 0..=chunk.len() {
                out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            }
        }
        out
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_tokens_are_accepted_rotated_keys_picked_up_and_forged_kids_rate_limited() {
    let s = IdpStack::start().await;
    let token = s.idp.token("mcp-client", "mcp-secret", "tools:read", Some(API)).await;
    let got = s.get("/api/x", &token).await;
    assert_eq!(got.status, 200, "{}\n{}", got.body, s.diag());
    assert_eq!(got.echoed_header("x-jwt-sub").as_deref(), Some("mcp-client"));
    assert_eq!(got.echoed_header("x-jwt-scope").as_deref(), Some("tools:read"));
    assert_eq!(s.idp.hits("/.well-known/openid-configuration").await, 1);
    assert_eq!(s.idp.hits("/jwks").await, 1);

    // A token for another audience, and none at all: 401 with the challenge.
    let other = s
        .idp
        .token("mcp-client", "mcp-secret", "tools:read", Some("https://other.test/"))
        .await;
    let got = s.get("/api/x", &other).await;
    assert_eq!(
        (got.status, got.json()["reason"].clone()),
        (401, json!("wrong_audience"))
    );
    let got = send(&s.client, "GET", &s.envoy.url("/api/x"), &[], None).await;
    assert_eq!(got.status, 401);
    assert_eq!(
        got.header("www-authenticate"),
        Some(
            format!(
                "Bearer resource_metadata=\"{}\"",
                s.envoy.url("/.well-known/oauth-protected-resource/api")
            )
            .as_str()
        )
    );

    // Rotation: the provider signs with a new key; the first token with its
    // kid makes the agent refetch once; old tokens keep working (the old
    // key is still published).
    let kid = s.idp.rotate().await;
    let rotated = s.idp.token("mcp-client", "mcp-secret", "tools:read", Some(API)).await;
    assert_eq!(kid_of(&rotated), kid, "the provider signs with the new key");
    assert_ne!(kid_of(&token), kid);
    let got = s.get("/api/x", &rotated).await;
    assert_eq!(got.status, 200, "rotated key: {}\n{}", got.body, s.diag());
    assert_eq!(s.idp.hits("/jwks").await, 2, "one refetch for the new kid");
    assert_eq!(s.get("/api/x", &token).await.status, 200);

    // A flood of forged kids, all distinct, for 6 s: the provider sees at
    // most one JWK set request per jwks_refresh_min_ms (1 s), however many
    // tokens. Halfway, the provider rotates its key again: the new key's
    // tokens pass within a turn of the limiter (polled, 5 s at most).
    let before = s.idp.hits("/jwks").await;
    let t0 = Instant::now();
    let flood = {
        let (http, url, token) = (s.client.clone(), s.envoy.url("/api/x"), token.clone());
        tokio::spawn(async move {
            let mut sent = 0u32;
            while t0.elapsed() < Duration::from_secs(6) {
                let batch: Vec<_> = (0..20)
                    .map(|i| {
                        let forged = forge_kid(&token, &format!("forged-{sent}-{i}"));
                        let (http, url) = (http.clone(), url.clone());
                        tokio::spawn(async move {
                            let auth = format!("Bearer {forged}");
                            send(&http, "GET", &url, &[("authorization", &auth)], None).await
                        })
                    })
                    .collect();
                for b in batch {
                    let got = b.await.expect("forged request");
                    assert_eq!(
                        (got.status, got.json()["reason"].clone()),
                        (401, json!("unknown_key")),
                        "{}",
                        got.body
                    );
                }
                sent += 20;
            }
            sent
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.agent_metric(&format!(
        "policy_agent_jwks_unknown_kid_total{{result=\"rate_limited\",source=\"{}\"}}",
        s.idp.issuer()
    )) < 20.0
    {
        assert!(
            Instant::now() < deadline,
            "the flood is not reaching the agent\n{}",
            s.diag()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let kid2 = s.idp.rotate().await;
    let rotated_at = Instant::now();
    let second = s.idp.token("mcp-client", "mcp-secret", "tools:read", Some(API)).await;
    assert_eq!(kid_of(&second), kid2);
    let mut refused = 0;
    loop {
        let got = s.get("/api/x", &second).await;
        if got.status == 200 {
            break;
        }
        refused += 1;
        assert_eq!(got.json()["reason"], "unknown_key", "{}", got.body);
        assert!(
            rotated_at.elapsed() < Duration::from_secs(5),
            "the rotated key is still refused ({refused} tries) while forged kids flood\n{}",
            s.diag()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "rotation under a forged-kid flood: the new key passed after {:.2} s ({refused} refusals)",
        rotated_at.elapsed().as_secs_f64()
    );
    let sent = flood.await.expect("flood");
    let elapsed = t0.elapsed().as_secs_f64();
    let fetched = s.idp.hits("/jwks").await - before;
    // One turn per second (a burst of one), and one that may have started
    // as the flood's last tokens landed.
    let allowed = elapsed.floor() as u64 + 2;
    eprintln!("forged kids: {sent} requests in {elapsed:.1} s, {fetched} JWK set fetches (at most {allowed})");
    assert!(sent >= 100, "flood too small: {sent}");
    assert!(
        fetched <= allowed,
        "{fetched} fetches for {sent} forged kids in {elapsed:.1} s"
    );
    assert!(s.auth_log_has("unknown key id: refreshing the keys"));

    // The same story in the auth agent's metrics.
    let iss = s.idp.issuer();
    let series = |name: &str, result: &str| format!("{name}{{result=\"{result}\",source=\"{iss}\"}}");
    let fetches = s.agent_metric(&series("policy_agent_jwks_fetches_total", "ok"));
    let refreshed = s.agent_metric(&series("policy_agent_jwks_unknown_kid_total", "refreshed"));
    let limited = s.agent_metric(&series("policy_agent_jwks_unknown_kid_total", "rate_limited"));
    let metrics = || http_get(s.agent_metrics, "/metrics").1;
    // (a refetch started by the flood's last tokens may still be landing)
    let hits = s.idp.hits("/jwks").await;
    assert!(
        fetches as u64 <= hits && fetches as u64 + 1 >= hits,
        "{hits} hits\n{}",
        metrics()
    );
    assert!(refreshed >= 2.0 && refreshed <= 1.0 + allowed as f64, "{}", metrics());
    // Forged kids are refused without a fetch (rate_limited), or join the
    // one fetch in flight.
    assert!(
        limited >= f64::from(sent) / 2.0 && limited <= f64::from(sent) + f64::from(refused),
        "{limited} of {sent}\n{}",
        metrics()
    );
    assert!(
        s.agent_metric(&format!("policy_agent_jwks_keys{{source=\"{iss}\"}}")) >= 3.0,
        "{}",
        metrics()
    );
    assert!(
        s.agent_metric(&format!(
            "policy_agent_jwks_last_fetch_timestamp_seconds{{source=\"{iss}\"}}"
        )) > 1.7e9
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_provider_down_cached_keys_serve_for_their_bound_then_fail_closed() {
    let mut s = IdpStack::start().await;
    let token = s.idp.token("mcp-client", "mcp-secret", "tools:read", Some(API)).await;
    let got = s.get("/stale/x", &token).await;
    assert_eq!(got.status, 200, "{}\n{}", got.body, s.diag());
    let fetched = Instant::now();
    s.idp.stop();

    // Lifetime 2 s (jwks_cache_max_s), then 4 s of stale keys.
    tokio::time::sleep(Duration::from_millis(3000).saturating_sub(fetched.elapsed())).await;
    let got = s.get("/stale/x", &token).await;
    assert_eq!(
        got.status,
        200,
        "stale keys within their bound: {}\n{}",
        got.body,
        s.diag()
    );
    assert!(s.auth_log_has("verifying with stale keys"), "{}", s.auth_log());

    tokio::time::sleep(Duration::from_millis(7000).saturating_sub(fetched.elapsed())).await;
    let got = s.get("/stale/x", &token).await;
    assert_eq!(got.status, 503, "past the bound: {}\n{}", got.body, s.diag());
    assert_eq!(got.json()["reason"], "keys_unavailable");
    assert_eq!(got.header("retry-after"), Some("5"));
    assert!(s.auth_log_has("no usable keys from the identity provider"));
    let iss = s.idp.issuer();
    for series in [
        format!("policy_agent_jwks_stale_verifications_total{{source=\"{iss}\"}}"),
        format!("policy_agent_jwks_unavailable_total{{source=\"{iss}\"}}"),
        format!("policy_agent_jwks_fetches_total{{result=\"error\",source=\"{iss}\"}}"),
    ] {
        assert!(
            s.agent_metric(&series) >= 1.0,
            "{series}\n{}",
            http_get(s.agent_metrics, "/metrics").1
        );
    }
    assert!(
        s.kernel.metric(
            "policy_kernel_immediate_responses_total{reason=\"idp_unavailable\",route=\"stale\",status=\"503\"}"
        ) >= 1.0,
        "{}",
        s.kernel.admin_get("/metrics").1
    );

    // The provider is back: keys again once the agent's backoff allows.
    s.idp.restart();
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let got = s.get("/stale/x", &token).await;
        if got.status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no recovery: {} {}\n{}",
            got.status,
            got.body,
            s.diag()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opaque_tokens_are_introspected_and_cached() {
    let mut s = IdpStack::start().await;
    let token = s
        .idp
        .token("mcp-client", "mcp-secret", "tools:read tools:write", None)
        .await;
    assert_eq!(token.split('.').count(), 1, "an opaque token: {token}");
    for _ in 0..3 {
        let got = s.get("/opaque/x", &token).await;
        assert_eq!(got.status, 200, "{}\n{}", got.body, s.diag());
        assert_eq!(got.echoed_header("x-jwt-client-id").as_deref(), Some("mcp-client"));
        assert_eq!(
            got.echoed_header("x-jwt-scope").as_deref(),
            Some("tools:read tools:write")
        );
    }
    assert_eq!(
        s.idp.hits("/token/introspection").await,
        1,
        "cached after the first answer"
    );
    let got = s.get("/opaque/x", "made-up-token").await;
    assert_eq!(
        (got.status, got.json()["reason"].clone()),
        (401, json!("inactive_token"))
    );
    assert_eq!(got.header("www-authenticate"), Some("Bearer error=\"invalid_token\""));
    assert_eq!(s.idp.hits("/token/introspection").await, 2);
    let endpoint = format!("{}/token/introspection", s.idp.issuer());
    for result in ["active", "inactive"] {
        let series = format!("policy_agent_introspection_total{{endpoint=\"{endpoint}\",result=\"{result}\"}}");
        assert_eq!(
            s.agent_metric(&series),
            1.0,
            "{series}\n{}",
            http_get(s.agent_metrics, "/metrics").1
        );
    }

    // A JWT sent to the introspection route: the provider does not
    // introspect JWTs (400 unsupported_token_type); the client's mistake, 401.
    let jwt = s.idp.token("mcp-client", "mcp-secret", "tools:read", Some(API)).await;
    assert_eq!(jwt.split('.').count(), 3, "a JWT: {jwt}");
    let got = s.get("/opaque/x", &jwt).await;
    assert_eq!(
        (got.status, got.json()["reason"].clone()),
        (401, json!("unsupported_token_type")),
        "{}\n{}",
        got.body,
        s.diag()
    );
    assert_eq!(got.header("www-authenticate"), Some("Bearer error=\"invalid_token\""));
    // Not a token at all: 401 without asking the provider.
    let hits = s.idp.hits("/token/introspection").await;
    let got = s.get("/opaque/x", "not,a;token").await;
    assert_eq!((got.status, got.json()["reason"].clone()), (401, json!("malformed")));
    assert_eq!(s.idp.hits("/token/introspection").await, hits);

    // The provider down: a token it never saw is the server's problem, 503.
    s.idp.stop();
    let got = s.get("/opaque/x", "never-seen-token").await;
    assert_eq!(
        (got.status, got.json()["reason"].clone()),
        (503, json!("introspection_unavailable")),
        "{}",
        got.body
    );
    assert_eq!(got.header("retry-after"), Some("5"));
    // Cached answers still serve.
    assert_eq!(s.get("/opaque/x", &token).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_made_up_opaque_tokens_reaches_the_provider_at_a_bounded_rate() {
    let s = IdpStack::start().await;
    let before = s.idp.hits("/token/introspection").await;
    let total = 400usize;
    let t0 = Instant::now();
    let mut answers = Vec::new();
    for batch in 0..total / 50 {
        let tasks: Vec<_> = (0..50)
            .map(|i| {
                let (http, url) = (s.client.clone(), s.envoy.url("/opaque/x"));
                tokio::spawn(async move {
                    let auth = format!("Bearer made-up-{batch}-{i}");
                    send(&http, "GET", &url, &[("authorization", &auth)], None).await
                })
            })
            .collect();
        for t in tasks {
            let got = t.await.expect("request");
            answers.push((
                got.status,
                got.json()["reason"].as_str().unwrap_or("").to_string(),
                got.header("retry-after").map(str::to_string),
            ));
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let asked = s.idp.hits("/token/introspection").await - before;
    // A burst of OPAQUE_PER_S, then OPAQUE_PER_S a second.
    let bound = u64::from(OPAQUE_PER_S) + (elapsed * f64::from(OPAQUE_PER_S)).ceil() as u64;
    let inactive = answers
        .iter()
        .filter(|a| (a.0, a.1.as_str()) == (401, "inactive_token"))
        .count();
    let limited = answers
        .iter()
        .filter(|a| (a.0, a.1.as_str(), a.2.as_deref()) == (503, "introspection_rate_limited", Some("1")))
        .count();
    eprintln!("introspection flood: {total} made-up tokens in {elapsed:.2} s, {asked} introspections (at most {bound}), {inactive} inactive, {limited} refused without a call");
    assert!(
        asked <= bound,
        "{asked} introspections for {total} tokens in {elapsed:.2} s\n{}",
        s.diag()
    );
    assert_eq!(inactive + limited, total, "{answers:?}");
    assert_eq!(inactive as u64, asked);
    assert!(limited > 0);
    let endpoint = format!("{}/token/introspection", s.idp.issuer());
    let series = format!("policy_agent_introspection_limited_total{{endpoint=\"{endpoint}\",limit=\"route\"}}");
    assert_eq!(
        s.agent_metric(&series),
        limited as f64,
        "{}",
        http_get(s.agent_metrics, "/metrics").1
    );
    let kernel_series =
        "policy_kernel_immediate_responses_total{reason=\"introspection_limited\",route=\"opaque\",status=\"503\"}";
    assert_eq!(
        s.kernel.metric(kernel_series),
        limited as f64,
        "{}",
        s.kernel.admin_get("/metrics").1
    );
    assert!(s.auth_log_has("introspection bound reached"), "{}", s.auth_log());
}

fn fetches<'a>(lines: &'a [Value], prefix: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|l| l["fetch"].as_str().is_some_and(|f| f.starts_with(prefix)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_sdk_client_finds_the_provider_and_is_authorized_by_scope() {
    let s = IdpStack::start().await;
    let url = s.envoy.url("/mcp");
    let lines = mcp_client(
        &url,
        "mcp-client",
        "mcp-secret",
        "tools:read",
        &["read_data", "write_data", "admin_data"],
    );
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    let diag = || format!("{}\n{}", text.join("\n"), s.diag());

    // 1. Without a token: 401 naming the resource metadata.
    let first = &lines[0];
    assert_eq!(first["fetch"], format!("POST {url}"), "{}", diag());
    assert_eq!(first["status"], 401, "{}", diag());
    let prm = s.envoy.url("/.well-known/oauth-protected-resource/mcp");
    assert_eq!(
        first["www"],
        format!("Bearer resource_metadata=\"{prm}\""),
        "{}",
        diag()
    );
    // 2. The metadata, from the kernel; 3. the provider's metadata.
    let got = fetches(&lines, &format!("GET {prm}"));
    assert_eq!(got.first().map(|l| l["status"].clone()), Some(json!(200)), "{}", diag());
    let iss = s.idp.issuer();
    assert!(
        lines.iter().any(|l| l["fetch"]
            .as_str()
            .is_some_and(|f| f.starts_with(&format!("GET {iss}/.well-known/")))
            && l["status"] == 200),
        "{}",
        diag()
    );
    // 4. A token by client credentials, for this resource and scope.
    let tokens = fetches(&lines, &format!("POST {iss}/token"));
    assert!(!tokens.is_empty(), "{}", diag());
    let body = tokens[0]["body"].as_str().unwrap_or("");
    assert!(
        body.contains("grant_type=client_credentials") && body.contains("scope=tools%3Aread"),
        "{body}"
    );
    let resource = url.replace(':', "%3A").replace('/', "%2F");
    assert!(body.contains(&format!("resource={resource}")), "{body}");
    assert!(lines.iter().any(|l| l["connected"] == true), "{}", diag());

    // read_data: tools:read is enough.
    let result = |lines: &[Value], tool: &str| lines.iter().find(|l| l["tool"] == tool).cloned().unwrap_or(Value::Null);
    assert_eq!(
        result(&lines, "read_data")["text"],
        "read_data ok (bearer)",
        "{}",
        diag()
    );
    // write_data: 403 insufficient_scope naming tools:write. SDK 1.32.2
    // reads the challenge and tries once more, but ClientCredentialsProvider
    // asks the provider for the scope it was built with (its
    // clientMetadata.scope), not the challenge's; so the call ends in 403.
    let denied = lines
        .iter()
        .find(|l| l["status"] == 403 && l["www"].as_str().is_some_and(|w| w.contains("scope=\"tools:write\"")));
    let denied = denied.unwrap_or_else(|| panic!("no scope challenge: {}", diag()));
    assert_eq!(
        denied["www"],
        format!("Bearer error=\"insufficient_scope\", scope=\"tools:write\", resource_metadata=\"{prm}\"")
    );
    let write = result(&lines, "write_data");
    assert!(
        write["error"].as_str().is_some_and(|e| e.contains("403")),
        "{write}\n{}",
        diag()
    );

    // A client built with both scopes: write_data passes; admin_data has no
    // rule, so no scope would help: 403 without a `scope`.
    let lines = mcp_client(
        &url,
        "mcp-client",
        "mcp-secret",
        "tools:read tools:write",
        &["write_data", "admin_data"],
    );
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    let diag = || format!("{}\n{}", text.join("\n"), s.diag());
    assert_eq!(
        result(&lines, "write_data")["text"],
        "write_data ok (bearer)",
        "{}",
        diag()
    );
    let admin = result(&lines, "admin_data");
    assert!(
        admin["error"].as_str().is_some_and(|e| e.contains("403")),
        "{admin}\n{}",
        diag()
    );
    assert!(
        lines.iter().any(|l| l["status"] == 403
            && l["www"] == format!("Bearer error=\"insufficient_scope\", resource_metadata=\"{prm}\"")),
        "{}",
        diag()
    );
}
