//! Tests of `tokenIntrospection` against a local stub provider.

use super::*;
use crate::auth::stub_idp::{Answer, StubIdp};
use policy_agents::testing::{TestCall, TestRequest};
use serde_json::json;

const SECRET_ENV: &str = "POLICY_AGENTS_TEST_INTROSPECTION_SECRET";

fn call(idp: &StubIdp) -> TestCall {
    call_with(idp, &[])
}

/// The test's params, with `extra` ones.
fn call_with(idp: &StubIdp, extra: &[(&str, &str)]) -> TestCall {
    std::env::set_var(SECRET_ENV, "s3cret:&=");
    let endpoint = format!("{}/introspect", idp.base);
    let mut params = vec![
        ("introspection_endpoint", endpoint.as_str()),
        ("client_id", "gateway"),
        ("client_secret_env", SECRET_ENV),
        ("audience", "https://gw.example.com/mcp"),
        (
            "resource_metadata",
            "https://gw.example.com/.well-known/oauth-protected-resource/mcp",
        ),
    ];
    params.extend_from_slice(extra);
    TestCall::new().params(&params)
}

/// Sends `tokens` at once (each its own task); the (status, reason) of each.
async fn flood(policy: &Arc<TokenIntrospection>, calls: &[TestCall], tokens: usize) -> Vec<(u16, String)> {
    let tasks: Vec<_> = (0..tokens)
        .map(|i| {
            let (policy, call) = (Arc::clone(policy), calls[i % calls.len()].clone());
            tokio::spawn(async move { reason(&run(&policy, &call, Some(&format!("made-up-{i}"))).await) })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

async fn run(policy: &TokenIntrospection, call: &TestCall, token: Option<&str>) -> RequestOutcome {
    let mut req = TestRequest::new("POST", "/mcp");
    if let Some(t) = token {
        req = req.header("authorization", &format!("Bearer {t}"));
    }
    call.request(policy, &req).await.unwrap()
}

fn reason(out: &RequestOutcome) -> (u16, String) {
    let deny = out.denial().expect("a denial");
    let body: Value = serde_json::from_slice(&deny.body).unwrap();
    (deny.status, body["reason"].as_str().unwrap_or("-").to_string())
}

#[tokio::test]
async fn active_tokens_pass_with_metadata_and_are_cached() {
    let idp = StubIdp::start().await;
    let exp = unix_now() + 600;
    idp.set(
        "/introspect",
        Answer::json(
            json!({"active": true, "client_id": "agent-1", "scope": "tools:read tools:write",
                   "aud": ["https://gw.example.com/mcp"], "exp": exp, "roles": ["reader"]})
            .to_string(),
        ),
    );
    let policy = TokenIntrospection::new();
    let c = call(&idp);
    for _ in 0..3 {
        let out = run(&policy, &c, Some("opaque-1")).await;
        assert!(out.denial().is_none(), "{out:?}");
        assert_eq!(out.metadata_value("sub"), Some("agent-1"));
        assert_eq!(out.metadata_value("scope"), Some("tools:read tools:write"));
        assert_eq!(out.metadata_value("roles"), Some("reader"));
        assert_eq!(out.metadata_value("auth_method"), Some("introspection"));
    }
    assert_eq!(idp.hits("/introspect"), 1, "cached");
    let (path, auth, body) = idp.requests().remove(0);
    assert_eq!(path, "/introspect");
    // client_secret_basic: the form-encoded id and secret, in Basic.
    let expected = base64::engine::general_purpose::STANDARD.encode("gateway:s3cret%3A%26%3D");
    assert_eq!(auth, format!("Basic {expected}"));
    assert_eq!(body, "token=opaque-1&token_type_hint=access_token");
}

#[tokio::test]
async fn inactive_and_mismatched_tokens_are_refused() {
    let idp = StubIdp::start().await;
    let policy = TokenIntrospection::new();
    let c = call(&idp);
    idp.set("/introspect", Answer::json(r#"{"active": false}"#));
    let out = run(&policy, &c, Some("revoked")).await;
    assert_eq!(reason(&out), (401, "inactive_token".to_string()));
    let challenge = out
        .denial()
        .unwrap()
        .headers
        .iter()
        .find(|(k, _)| k == "www-authenticate")
        .unwrap()
        .1
        .clone();
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
    assert!(challenge.contains("resource_metadata=\"https://gw.example.com/.well-known/oauth-protected-resource/mcp\""));
    run(&policy, &c, Some("revoked")).await;
    assert_eq!(idp.hits("/introspect"), 1, "inactive answers are cached too");

    idp.set(
        "/introspect",
        Answer::json(json!({"active": true, "aud": "elsewhere", "sub": "x"}).to_string()),
    );
    assert_eq!(
        reason(&run(&policy, &c, Some("t2")).await),
        (401, "wrong_audience".to_string())
    );
    idp.set(
        "/introspect",
        Answer::json(json!({"active": true, "aud": "https://gw.example.com/mcp", "exp": unix_now() - 5}).to_string()),
    );
    assert_eq!(
        reason(&run(&policy, &c, Some("t3")).await),
        (401, "expired".to_string())
    );
    let out = run(&policy, &c, None).await;
    assert_eq!(reason(&out), (401, "missing_token".to_string()));
}

#[tokio::test]
async fn provider_failures_fail_closed_within_the_deadline() {
    let idp = StubIdp::start().await;
    let policy = TokenIntrospection::new();
    let c = call(&idp);
    idp.set("/introspect", Answer::status(500));
    assert_eq!(
        reason(&run(&policy, &c, Some("t")).await),
        (503, "introspection_unavailable".to_string())
    );
    idp.set("/introspect", Answer::json(r#"{"no": "active"}"#));
    assert_eq!(
        reason(&run(&policy, &c, Some("t")).await),
        (503, "introspection_unavailable".to_string())
    );
    idp.set(
        "/introspect",
        Answer::json(r#"{"active": true, "aud": "https://gw.example.com/mcp"}"#).delayed(Duration::from_millis(600)),
    );
    let t0 = Instant::now();
    let out = c
        .clone()
        .deadline_in(Duration::from_millis(200))
        .request(
            &policy,
            &TestRequest::new("GET", "/").header("authorization", "Bearer slow"),
        )
        .await
        .unwrap();
    assert_eq!(reason(&out), (503, "introspection_unavailable".to_string()));
    assert!(t0.elapsed() < Duration::from_millis(450), "{:?}", t0.elapsed());
    // The answer arrived later and was kept for the retry.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(run(&policy, &c, Some("slow")).await.denial().is_none());
}

#[tokio::test]
async fn bad_params_are_policy_errors() {
    let policy = TokenIntrospection::new();
    let req = TestRequest::new("GET", "/").header("authorization", "Bearer t");
    for params in [
        vec![("client_id", "a"), ("client_secret_env", "X")],
        vec![
            ("introspection_endpoint", "http://idp.example.com/i"),
            ("client_id", "a"),
            ("client_secret_env", "X"),
        ],
        vec![("introspection_endpoint", "https://idp/i"), ("client_secret_env", "X")],
        vec![
            ("introspection_endpoint", "https://idp/i"),
            ("client_id", "a"),
            ("client_secret_env", "POLICY_AGENTS_TEST_UNSET"),
        ],
    ] {
        assert!(
            TestCall::new().params(&params).request(&policy, &req).await.is_err(),
            "{params:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_made_up_tokens_reaches_the_provider_only_at_the_routes_rate() {
    let idp = StubIdp::start().await;
    idp.set("/introspect", Answer::json(r#"{"active": false}"#));
    let policy = Arc::new(TokenIntrospection::new());
    let c = call_with(&idp, &[("max_introspections_per_s", "10")]);
    let t0 = Instant::now();
    let got = flood(&policy, &[c], 300).await;
    let elapsed = t0.elapsed();
    let hits = idp.hits("/introspect");
    // GCRA: a burst of 10, then 10 a second.
    let bound = 10 + (elapsed.as_secs_f64() * 10.0).ceil() as usize;
    assert!(hits <= bound, "{hits} introspections in {elapsed:?} (bound {bound})");
    assert!(hits >= 1);
    let inactive = got
        .iter()
        .filter(|g| *g == &(401, "inactive_token".to_string()))
        .count();
    let limited = got
        .iter()
        .filter(|g| *g == &(503, "introspection_rate_limited".to_string()))
        .count();
    assert_eq!(inactive, hits, "each call answered one token");
    assert_eq!(inactive + limited, 300, "{got:?}");
    let text = policy_agents::metrics::render();
    let series = format!(
        "policy_agent_introspection_limited_total{{endpoint=\"{}/introspect\",limit=\"route\"}} {limited}",
        idp.base
    );
    assert!(text.contains(&series), "{series} missing from:\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_together_stay_within_the_agents_rate() {
    let idp = StubIdp::start().await;
    idp.set("/introspect", Answer::json(r#"{"active": false}"#));
    let policy = Arc::new(TokenIntrospection::with_total_per_s(8));
    // Two routes (distinct params), each allowed far more than the total.
    let calls = [
        call_with(&idp, &[("max_introspections_per_s", "1000")]),
        call_with(&idp, &[("max_introspections_per_s", "1000"), ("inactive_cache_s", "5")]),
    ];
    let t0 = Instant::now();
    let got = flood(&policy, &calls, 200).await;
    let elapsed = t0.elapsed();
    let hits = idp.hits("/introspect");
    let bound = 8 + (elapsed.as_secs_f64() * 8.0).ceil() as usize;
    assert!(hits <= bound, "{hits} introspections in {elapsed:?} (bound {bound})");
    assert!(got.iter().any(|g| g.1 == "introspection_rate_limited"));
    let text = policy_agents::metrics::render();
    assert!(
        text.contains(&format!(
            "policy_agent_introspection_limited_total{{endpoint=\"{}/introspect\",limit=\"total\"}}",
            idp.base
        )),
        "{text}"
    );
}

#[tokio::test]
async fn the_clients_mistakes_are_401_and_the_providers_503() {
    let idp = StubIdp::start().await;
    let policy = TokenIntrospection::new();
    let c = call(&idp);
    // Not a b64token, or too long: refused without a call.
    for bad in ["two words", "t\u{e9}st", "a,b", &"x".repeat(5000)] {
        let req = TestRequest::new("GET", "/").header("authorization", &format!("Bearer {bad}"));
        let out = c.request(&policy, &req).await.unwrap();
        assert_eq!(reason(&out), (401, "malformed".to_string()), "{bad:?}");
    }
    assert_eq!(idp.hits("/introspect"), 0);
    // oidc-provider's answer for a JWT access token.
    let jwt_refused = r#"{"error":"unsupported_token_type","error_description":"Structured JWT Tokens cannot be introspected via the introspection_endpoint"}"#;
    idp.set(
        "/introspect",
        Answer {
            status: 400,
            ..Answer::json(jwt_refused)
        },
    );
    let jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln";
    let out = run(&policy, &c, Some(jwt)).await;
    assert_eq!(reason(&out), (401, "unsupported_token_type".to_string()));
    assert_eq!(out.denial().unwrap().reason, "authentication_failed");
    run(&policy, &c, Some(jwt)).await;
    assert_eq!(idp.hits("/introspect"), 1, "refusals are cached like inactive answers");
    idp.set(
        "/introspect",
        Answer {
            status: 400,
            ..Answer::json(r#"{"error":"invalid_request"}"#)
        },
    );
    assert_eq!(
        reason(&run(&policy, &c, Some("garbled")).await),
        (401, "unknown_token".to_string())
    );
    // The gateway's own credentials refused: the provider is unusable, 503.
    idp.set(
        "/introspect",
        Answer {
            status: 400,
            ..Answer::json(r#"{"error":"invalid_client"}"#)
        },
    );
    let out = run(&policy, &c, Some("t-client")).await;
    assert_eq!(reason(&out), (503, "introspection_unavailable".to_string()));
    assert_eq!(out.denial().unwrap().reason, "idp_unavailable");
    // No provider at all.
    let gone = format!("{}/introspect", idp.base);
    drop(idp);
    let c = TestCall::new().params(&[
        ("introspection_endpoint", gone.as_str()),
        ("client_id", "gateway"),
        ("client_secret_env", SECRET_ENV),
    ]);
    assert_eq!(
        reason(&run(&policy, &c, Some("t-gone")).await),
        (503, "introspection_unavailable".to_string())
    );
}
