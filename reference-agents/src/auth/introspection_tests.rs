//! Tests of `tokenIntrospection` against a local stub provider.

use super::*;
use crate::auth::stub_idp::{Answer, StubIdp};
use policy_agents::testing::{TestCall, TestRequest};
use serde_json::json;

const SECRET_ENV: &str = "POLICY_AGENTS_TEST_INTROSPECTION_SECRET";

fn call(idp: &StubIdp) -> TestCall {
    std::env::set_var(SECRET_ENV, "s3cret:&=");
    let endpoint = format!("{}/introspect", idp.base);
    TestCall::new().params(&[
        ("introspection_endpoint", endpoint.as_str()),
        ("client_id", "gateway"),
        ("client_secret_env", SECRET_ENV),
        ("audience", "https://gw.example.com/mcp"),
        (
            "resource_metadata",
            "https://gw.example.com/.well-known/oauth-protected-resource/mcp",
        ),
    ])
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
