//! Tests of `jwtValidation` with the throw-away keys in `testdata/`.

use super::*;
use jsonwebtoken::{encode, EncodingKey, Header};
use policy_agents::testing::{TestCall, TestRequest};
use serde_json::json;

const RSA_PEM: &[u8] = include_bytes!("../../testdata/rsa_private.pem");
const EC_PEM: &[u8] = include_bytes!("../../testdata/ec_private.pem");

fn jwks_path() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/jwks.json").to_string()
}

fn now() -> i64 {
    jsonwebtoken::get_current_timestamp() as i64
}

fn claims() -> Value {
    json!({
        "sub": "alice",
        "iss": "https://auth.example.com",
        "aud": "api-service",
        "exp": now() + 600,
        "roles": ["admin", "ops"],
        "scope": "read write",
        "email": "alice@example.com"
    })
}

fn rs256(claims: &Value) -> String {
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("rsa-1".into());
    encode(&header, claims, &EncodingKey::from_rsa_pem(RSA_PEM).unwrap()).unwrap()
}

fn es256(claims: &Value) -> String {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some("ec-1".into());
    encode(&header, claims, &EncodingKey::from_ec_pem(EC_PEM).unwrap()).unwrap()
}

fn hs256(claims: &Value, secret: &str) -> String {
    encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}

fn call() -> TestCall {
    let path = jwks_path();
    TestCall::new().params(&[
        ("issuer", "https://auth.example.com"),
        ("audience", "api-service"),
        ("jwks_file", path.as_str()),
        ("leeway_s", "0"),
        ("forward_claims", r#"["email","sub"]"#),
    ])
}

async fn run(call: &TestCall, token: &str) -> RequestOutcome {
    let req = TestRequest::new("GET", "/admin").header("authorization", &format!("Bearer {token}"));
    call.request(&JwtValidation::new(), &req).await.unwrap()
}

fn refused_because(out: &RequestOutcome) -> String {
    let deny = out.denial().expect("a denial");
    assert_eq!(deny.status, 401);
    let body: Value = serde_json::from_slice(&deny.body).unwrap();
    body["reason"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn rs256_token_passes_and_fills_metadata_and_headers() {
    let out = run(&call(), &rs256(&claims())).await;
    assert!(out.denial().is_none(), "{out:?}");
    assert_eq!(out.metadata_value("sub"), Some("alice"));
    assert_eq!(out.metadata_value("roles"), Some("admin,ops"));
    assert_eq!(out.metadata_value("scope"), Some("read write"));
    assert_eq!(out.header_set("x-jwt-email"), Some("alice@example.com"));
    assert_eq!(out.header_set("x-jwt-sub"), Some("alice"));
}

#[tokio::test]
async fn es256_token_passes() {
    let out = run(&call(), &es256(&claims())).await;
    assert!(out.denial().is_none(), "{out:?}");
}

#[tokio::test]
async fn hs256_token_uses_the_secret_from_the_environment() {
    // A variable name used by this test only.
    std::env::set_var("POLICY_AGENTS_TEST_HS256", "0123456789abcdef0123456789abcdef");
    let call = TestCall::new().params(&[
        ("hs256_secret_env", "POLICY_AGENTS_TEST_HS256"),
        ("audience", "api-service"),
    ]);
    let good = hs256(&claims(), "0123456789abcdef0123456789abcdef");
    assert!(run(&call, &good).await.denial().is_none());
    let forged = hs256(&claims(), "another secret, another signature");
    assert_eq!(refused_because(&run(&call, &forged).await), "bad_signature");
}

#[tokio::test]
async fn expired_token_is_refused() {
    let mut c = claims();
    c["exp"] = json!(now() - 60);
    assert_eq!(refused_because(&run(&call(), &rs256(&c)).await), "expired");
}

#[tokio::test]
async fn leeway_accepts_slightly_expired_tokens() {
    let mut c = claims();
    c["exp"] = json!(now() - 5);
    let path = jwks_path();
    let lenient = TestCall::new().params(&[("jwks_file", path.as_str()), ("leeway_s", "60")]);
    assert!(run(&lenient, &rs256(&c)).await.denial().is_none());
}

#[tokio::test]
async fn not_yet_valid_token_is_refused() {
    let mut c = claims();
    c["nbf"] = json!(now() + 300);
    assert_eq!(refused_because(&run(&call(), &rs256(&c)).await), "not_yet_valid");
}

#[tokio::test]
async fn wrong_audience_and_issuer_are_refused() {
    let mut c = claims();
    c["aud"] = json!("someone-else");
    assert_eq!(refused_because(&run(&call(), &rs256(&c)).await), "wrong_audience");
    let mut c = claims();
    c.as_object_mut().unwrap().remove("aud");
    assert_eq!(refused_because(&run(&call(), &rs256(&c)).await), "wrong_audience");
    let mut c = claims();
    c["iss"] = json!("https://evil.example.com");
    assert_eq!(refused_because(&run(&call(), &es256(&c)).await), "wrong_issuer");
}

#[tokio::test]
async fn tampered_and_malformed_tokens_are_refused() {
    let token = rs256(&claims());
    let mut parts: Vec<String> = token.split('.').map(String::from).collect();
    let mut c = claims();
    c["sub"] = json!("mallory");
    let forged = rs256(&c);
    parts[1] = forged.split('.').nth(1).unwrap().to_string();
    assert_eq!(refused_because(&run(&call(), &parts.join(".")).await), "bad_signature");
    assert_eq!(refused_because(&run(&call(), "not.a.jwt").await), "malformed");
    assert_eq!(refused_because(&run(&call(), "garbage").await), "malformed");
    let req = TestRequest::new("GET", "/");
    let out = call().request(&JwtValidation::new(), &req).await.unwrap();
    assert_eq!(refused_because(&out), "missing_token");
}

#[tokio::test]
async fn algorithm_confusion_and_unknown_keys_are_refused() {
    // HS256 is not allowed when the route only configured a JWKS file.
    let confused = hs256(&claims(), "whatever");
    assert_eq!(refused_because(&run(&call(), &confused).await), "algorithm_not_allowed");
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("rotated-away".into());
    let token = encode(&header, &claims(), &EncodingKey::from_rsa_pem(RSA_PEM).unwrap()).unwrap();
    assert_eq!(refused_because(&run(&call(), &token).await), "unknown_key");
}

#[tokio::test]
async fn missing_key_source_and_missing_files_are_policy_errors() {
    let req = TestRequest::new("GET", "/").header("authorization", "Bearer x.y.z");
    assert!(TestCall::new().request(&JwtValidation::new(), &req).await.is_err());
    let call = TestCall::new().params(&[("jwks_file", "/nonexistent/jwks.json")]);
    let req = TestRequest::new("GET", "/").header("authorization", &format!("Bearer {}", rs256(&claims())));
    let err = call.request(&JwtValidation::new(), &req).await.unwrap_err();
    assert!(err.message().contains("/nonexistent/jwks.json"), "{err}");
}
