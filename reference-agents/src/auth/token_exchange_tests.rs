//! Tests of `tokenExchange` against a local stub token endpoint.

use super::*;
use crate::auth::stub_idp::{Answer, StubIdp};
use policy_agents::testing::{TestCall, TestRequest, TestResponse};
use policy_agents::{HeaderOp, RequestAction};
use serde_json::json;

const SECRET_ENV: &str = "POLICY_AGENTS_TEST_EXCHANGE_SECRET";
const CALLER: &str = "caller-token-abc";

/// The test's params (the endpoint at `idp`), with `extra` ones, and the
/// metadata `jwtValidation` leaves.
fn call_with(idp: &StubIdp, extra: &[(&str, &str)]) -> TestCall {
    std::env::set_var(SECRET_ENV, "s3cret:&=");
    let endpoint = format!("{}/token", idp.base);
    let mut params = vec![
        ("token_endpoint", endpoint.as_str()),
        ("client_id", "gateway"),
        ("client_secret_env", SECRET_ENV),
        ("audience", "upstream-api"),
        ("resource", "https://api.example.com/"),
        ("scope", "read"),
    ];
    params.extend_from_slice(extra);
    TestCall::new()
        .params(&params)
        .metadata("auth_method", "jwt")
        .metadata("sub", "alice")
}

fn granted(token: &str, expires_in: u64) -> Answer {
    Answer::json(
        json!({"access_token": token, "issued_token_type": ACCESS_TOKEN,
               "token_type": "Bearer", "expires_in": expires_in})
        .to_string(),
    )
}

fn refused(status: u16, code: &str) -> Answer {
    Answer {
        status,
        body: json!({"error": code}).to_string(),
        cache_control: None,
        delay: Duration::ZERO,
    }
}

async fn run(policy: &TokenExchange, call: &TestCall, token: &str) -> RequestOutcome {
    let req = TestRequest::new("POST", "/mcp").header("authorization", &format!("Bearer {token}"));
    call.request(policy, &req).await.unwrap()
}

/// Every header value the outcome sets.
fn values_set(out: &RequestOutcome) -> Vec<String> {
    out.actions()
        .iter()
        .filter_map(|a| match a {
            RequestAction::Header(HeaderOp::Set { value, .. } | HeaderOp::Append { value, .. }) => Some(value.clone()),
            _ => None,
        })
        .collect()
}

fn denial(out: &RequestOutcome) -> (u16, String) {
    let deny = out.denial().expect("a denial");
    let body: Value = serde_json::from_slice(&deny.body).unwrap();
    (deny.status, body["reason"].as_str().unwrap_or("-").to_string())
}

#[tokio::test]
async fn exchange_replaces_the_callers_token() {
    let idp = StubIdp::start().await;
    idp.set("/token", granted("exchanged-1", 600));
    let policy = TokenExchange::new();
    let out = run(&policy, &call_with(&idp, &[]), CALLER).await;
    assert!(out.denial().is_none(), "{out:?}");
    assert_eq!(out.header_set("authorization"), Some("Bearer exchanged-1"));
    assert!(values_set(&out).iter().all(|v| !v.contains(CALLER)));
    assert!(out.metadata().iter().all(|(_, v)| !v.contains(CALLER)));
    assert_eq!(out.metadata_value("token_exchange"), Some("miss"));
    // The form (RFC 8693) and client_secret_basic.
    let reqs = idp.requests();
    assert_eq!(reqs.len(), 1);
    let (path, auth, body) = &reqs[0];
    assert_eq!(path, "/token");
    let basic = base64::engine::general_purpose::STANDARD.encode("gateway:s3cret%3A%26%3D");
    assert_eq!(auth, &format!("Basic {basic}"));
    let form: Vec<(String, String)> = url::form_urlencoded::parse(body.as_bytes()).into_owned().collect();
    let has = |k: &str, v: &str| form.iter().any(|(a, b)| a == k && b == v);
    assert!(has("grant_type", GRANT));
    assert!(has("subject_token", CALLER));
    assert!(has("subject_token_type", ACCESS_TOKEN));
    assert!(has("audience", "upstream-api"));
    assert!(has("resource", "https://api.example.com/"));
    assert!(has("scope", "read"));
    assert!(!form.iter().any(|(k, _)| k == "client_secret" || k == "actor_token"));
}

#[tokio::test]
async fn named_header_removes_authorization_and_post_auth_and_actor() {
    let idp = StubIdp::start().await;
    idp.set("/token", granted("exchanged-2", 600));
    let dir = tempfile::tempdir().unwrap();
    let actor = dir.path().join("actor");
    std::fs::write(&actor, "actor-token-xyz\n").unwrap();
    let actor = actor.to_str().unwrap();
    let c = call_with(
        &idp,
        &[
            ("header", "X-Upstream-Token"),
            ("client_auth", "client_secret_post"),
            ("actor_token_file", actor),
        ],
    );
    let out = run(&TokenExchange::new(), &c, CALLER).await;
    assert_eq!(out.header_set("x-upstream-token"), Some("exchanged-2"));
    assert!(out
        .actions()
        .iter()
        .any(|a| matches!(a, RequestAction::Header(HeaderOp::Remove { name }) if name == "authorization")));
    assert_eq!(out.header_set("authorization"), None);
    let (_, auth, body) = idp.requests().remove(0);
    assert!(auth.is_empty());
    let form: Vec<(String, String)> = url::form_urlencoded::parse(body.as_bytes()).into_owned().collect();
    let has = |k: &str, v: &str| form.iter().any(|(a, b)| a == k && b == v);
    assert!(has("client_id", "gateway") && has("client_secret", "s3cret:&="));
    assert!(has("actor_token", "actor-token-xyz") && has("actor_token_type", ACCESS_TOKEN));
}

#[tokio::test]
async fn cached_tokens_make_one_call_and_expire() {
    let idp = StubIdp::start().await;
    idp.set("/token", granted("exchanged-3", 1));
    let policy = TokenExchange::new();
    let c = call_with(&idp, &[("margin_s", "0")]);
    let label = format!("{}/token", idp.base);
    let first = run(&policy, &c, CALLER).await;
    let second = run(&policy, &c, CALLER).await;
    assert_eq!(second.header_set("authorization"), Some("Bearer exchanged-3"));
    assert_eq!(first.metadata_value("token_exchange"), Some("miss"));
    assert_eq!(second.metadata_value("token_exchange"), Some("hit"));
    assert_eq!(idp.hits("/token"), 1);
    assert_eq!(metrics::exchanges(&label, "hit"), 1);
    // Another caller: another exchange.
    run(&policy, &c, "another-caller").await;
    assert_eq!(idp.hits("/token"), 2);
    // expires_in = 1 s, no margin: gone after a second.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    run(&policy, &c, CALLER).await;
    assert_eq!(idp.hits("/token"), 3);
}

#[tokio::test]
async fn fifty_concurrent_requests_make_one_call() {
    let idp = StubIdp::start().await;
    idp.set(
        "/token",
        granted("exchanged-4", 600).delayed(Duration::from_millis(300)),
    );
    let policy = Arc::new(TokenExchange::new());
    let c = call_with(&idp, &[]);
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (policy, c) = (Arc::clone(&policy), c.clone());
            tokio::spawn(async move { run(&policy, &c, CALLER).await })
        })
        .collect();
    let mut outcomes = Vec::new();
    for t in tasks {
        let out = t.await.unwrap();
        assert_eq!(out.header_set("authorization"), Some("Bearer exchanged-4"));
        outcomes.push(out.metadata_value("token_exchange").unwrap().to_string());
    }
    assert_eq!(idp.hits("/token"), 1);
    assert_eq!(outcomes.iter().filter(|o| *o == "miss").count(), 1);
    assert_eq!(outcomes.iter().filter(|o| *o == "shared").count(), 49);
}

#[tokio::test]
async fn errors_deny_without_the_callers_token() {
    let cases: &[(Answer, u16, &str)] = &[
        (refused(400, "invalid_grant"), 401, "invalid_grant"),
        (refused(400, "invalid_request"), 401, "invalid_request"),
        (refused(400, "invalid_target"), 403, "invalid_target"),
        (refused(400, "invalid_scope"), 403, "invalid_scope"),
        (refused(400, "unauthorized_client"), 403, "unauthorized_client"),
        (refused(401, "invalid_client"), 502, "invalid_client"),
        (Answer::status(503), 503, "token_exchange_unavailable"),
        (Answer::status(500), 503, "token_exchange_unavailable"),
        (Answer::json(r#"{"token_type":"Bearer"}"#), 502, "invalid_response"),
        (
            Answer::json(r#"{"access_token":"a\nb","token_type":"Bearer"}"#),
            502,
            "invalid_response",
        ),
        (Answer::json("not json"), 502, "invalid_response"),
        (Answer::status(404), 502, "invalid_response"),
    ];
    for (answer, status, reason) in cases {
        let idp = StubIdp::start().await;
        idp.set("/token", answer.clone());
        let out = run(&TokenExchange::new(), &call_with(&idp, &[]), CALLER).await;
        assert_eq!(denial(&out), (*status, reason.to_string()), "{answer:?}");
        let deny = out.denial().unwrap();
        assert!(!String::from_utf8_lossy(&deny.body).contains(CALLER));
        let header = |n: &str| deny.headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(n));
        assert_eq!(header("www-authenticate"), *status == 401, "{reason}");
        assert_eq!(header("retry-after"), *status == 503, "{reason}");
    }
}

#[tokio::test]
async fn an_unreachable_provider_is_503() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let endpoint = format!("http://127.0.0.1:{port}/token");
    std::env::set_var(SECRET_ENV, "s");
    let c = TestCall::new()
        .params(&[
            ("token_endpoint", endpoint.as_str()),
            ("client_id", "gateway"),
            ("client_secret_env", SECRET_ENV),
        ])
        .metadata("auth_method", "introspection")
        .metadata("sub", "alice");
    let out = run(&TokenExchange::new(), &c, CALLER).await;
    assert_eq!(denial(&out), (503, "token_exchange_unavailable".into()));
}

#[tokio::test]
async fn refusals_are_cached_briefly_outages_are_not() {
    let idp = StubIdp::start().await;
    idp.set("/token", refused(400, "invalid_grant"));
    let policy = TokenExchange::new();
    let c = call_with(&idp, &[("negative_cache_s", "1")]);
    for _ in 0..3 {
        assert_eq!(denial(&run(&policy, &c, CALLER).await).0, 401);
    }
    assert_eq!(idp.hits("/token"), 1);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    idp.set("/token", Answer::status(502));
    for _ in 0..2 {
        assert_eq!(denial(&run(&policy, &c, CALLER).await).0, 503);
    }
    assert_eq!(idp.hits("/token"), 3);
}

#[tokio::test]
async fn without_a_validated_caller_nothing_is_exchanged() {
    let idp = StubIdp::start().await;
    idp.set("/token", granted("exchanged-5", 600));
    let endpoint = format!("{}/token", idp.base);
    std::env::set_var(SECRET_ENV, "s");
    let params = [
        ("token_endpoint", endpoint.as_str()),
        ("client_id", "gateway"),
        ("client_secret_env", SECRET_ENV),
    ];
    for c in [
        TestCall::new().params(&params),
        TestCall::new()
            .params(&params)
            .metadata("auth_method", "api_key")
            .metadata("sub", "k"),
    ] {
        let out = run(&TokenExchange::new(), &c, CALLER).await;
        assert_eq!(denial(&out), (401, "caller_not_validated".into()));
    }
    let req = TestRequest::new("POST", "/mcp");
    let out = call_with(&idp, &[]).request(&TokenExchange::new(), &req).await.unwrap();
    assert_eq!(denial(&out).0, 401);
    assert_eq!(idp.hits("/token"), 0);
}

#[tokio::test]
async fn the_endpoint_is_discovered_from_the_issuer() {
    let idp = StubIdp::start().await;
    idp.set(
        "/.well-known/openid-configuration",
        Answer::json(json!({"issuer": idp.base, "token_endpoint": format!("{}/token", idp.base)}).to_string()),
    );
    idp.set("/token", granted("exchanged-6", 600));
    std::env::set_var(SECRET_ENV, "s");
    let c = TestCall::new()
        .params(&[
            ("issuer", idp.base.as_str()),
            ("client_id", "gateway"),
            ("client_secret_env", SECRET_ENV),
        ])
        .metadata("auth_method", "jwt")
        .metadata("sub", "alice");
    let policy = TokenExchange::new();
    for t in ["t1", "t2"] {
        let out = run(&policy, &c, t).await;
        assert_eq!(out.header_set("authorization"), Some("Bearer exchanged-6"));
    }
    assert_eq!(idp.hits("/.well-known/openid-configuration"), 1);
    assert_eq!(idp.hits("/token"), 2);
}

#[tokio::test]
async fn an_upstream_401_evicts_the_entry() {
    let idp = StubIdp::start().await;
    idp.set("/token", granted("exchanged-7", 600));
    let policy = TokenExchange::new();
    let c = call_with(&idp, &[]);
    let out = run(&policy, &c, CALLER).await;
    let key = out.metadata_value(KEY_METADATA).unwrap().to_string();
    let req = TestRequest::new("POST", "/mcp");
    let after = c.clone().metadata(KEY_METADATA, &key);
    after.response(&policy, &req, &TestResponse::new(200)).await.unwrap();
    run(&policy, &c, CALLER).await;
    assert_eq!(idp.hits("/token"), 1);
    after.response(&policy, &req, &TestResponse::new(401)).await.unwrap();
    run(&policy, &c, CALLER).await;
    assert_eq!(idp.hits("/token"), 2);
}

#[test]
fn keys_and_logs_hold_hashes_only() {
    let p: Params = [
        ("token_endpoint", "https://idp.example.com/token"),
        ("client_id", "gateway"),
        ("client_secret_env", SECRET_ENV),
        ("audience", "a"),
    ]
    .into_iter()
    .collect();
    let cfg = Config::parse(&p).unwrap();
    let key = cache_key(&cfg, None, CALLER);
    assert!(!hex::encode(key).contains(CALLER));
    assert!(!key.windows(CALLER.len()).any(|w| w == CALLER.as_bytes()));
    assert_ne!(key, cache_key(&cfg, Some("actor"), CALLER));
    assert_ne!(key, cache_key(&cfg, None, "other"));
    let h = short_hash(CALLER);
    assert_eq!(h.len(), 8);
    assert!(h.bytes().all(|c| c.is_ascii_hexdigit()));
}

#[test]
fn lifetime_is_the_lesser_less_the_margin() {
    let p = |extra: &[(&str, &str)]| {
        let mut v = vec![
            ("token_endpoint", "https://idp.example.com/token"),
            ("client_id", "gateway"),
            ("client_secret_env", SECRET_ENV),
        ];
        v.extend_from_slice(extra);
        Config::parse(&v.into_iter().collect())
    };
    let cfg = p(&[]).unwrap();
    assert_eq!(lifetime(&cfg, Some(600), None), Duration::from_secs(570));
    assert_eq!(lifetime(&cfg, Some(600), Some(unix_now() + 100)).as_secs(), 70);
    assert_eq!(lifetime(&cfg, Some(20), None), Duration::ZERO);
    assert_eq!(lifetime(&cfg, None, None), Duration::from_secs(3570));
    let jwt_payload = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"exp":1234}"#);
    assert_eq!(subject_exp(&format!("h.{jwt_payload}.s")), Some(1234));
    assert_eq!(subject_exp("opaque"), None);
    // Bad params.
    assert!(p(&[("issuer", "https://idp.example.com")]).is_err());
    assert!(p(&[("client_auth", "private_key_jwt")]).is_err());
    assert!(p(&[("client_secret_file", "/s")]).is_err());
    assert!(p(&[("header", "host")]).is_err());
    assert!(p(&[("resource", "not-absolute")]).is_err());
    assert!(p(&[("margin_s", "90000")]).is_err());
}

#[tokio::test]
async fn private_key_jwt_signs_a_client_assertion() {
    let idp = StubIdp::start().await;
    idp.set("/token", granted("exchanged-8", 600));
    let key = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/ec_private.pem");
    let c = call_with(
        &idp,
        &[
            ("client_auth", "private_key_jwt"),
            ("private_key_file", key),
            ("private_key_alg", "ES256"),
            ("private_key_kid", "ec-1"),
        ],
    );
    let out = run(&TokenExchange::new(), &c, CALLER).await;
    assert_eq!(out.header_set("authorization"), Some("Bearer exchanged-8"));
    let (_, auth, body) = idp.requests().remove(0);
    assert!(auth.is_empty());
    let form: HashMap<String, String> = url::form_urlencoded::parse(body.as_bytes()).into_owned().collect();
    assert_eq!(form["client_assertion_type"], ASSERTION_TYPE);
    assert_eq!(form["client_id"], "gateway");
    assert!(!form.contains_key("client_secret"));
    let jwks: jsonwebtoken::jwk::JwkSet = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/jwks.json")).unwrap(),
    )
    .unwrap();
    let jwk = jwks.find("ec-1").unwrap();
    let endpoint = format!("{}/token", idp.base);
    let mut v = jsonwebtoken::Validation::new(Algorithm::ES256);
    v.set_audience(&[endpoint.as_str()]);
    v.set_issuer(&["gateway"]);
    let data = jsonwebtoken::decode::<Value>(
        &form["client_assertion"],
        &jsonwebtoken::DecodingKey::from_jwk(jwk).unwrap(),
        &v,
    )
    .unwrap();
    assert_eq!(data.claims["sub"], "gateway");
    assert_eq!(data.claims["jti"].as_str().unwrap().len(), 32);
    assert_eq!(data.header.kid.as_deref(), Some("ec-1"));
}
