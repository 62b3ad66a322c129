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

mod remote {
    use super::*;
    use crate::auth::stub_idp::{Answer, StubIdp};
    use std::time::Duration;

    const JWKS: &str = include_str!("../../testdata/jwks-remote.json");
    const EC384_PEM: &[u8] = include_bytes!("../../testdata/ec384_private.pem");
    const ED_PEM: &[u8] = include_bytes!("../../testdata/ed25519_private.pem");
    const RM: &str = "https://gw.example.com/.well-known/oauth-protected-resource/api";

    struct Provider {
        idp: StubIdp,
        call: TestCall,
        policy: JwtValidation,
    }

    impl Provider {
        async fn start() -> Self {
            let idp = StubIdp::start().await;
            idp.set(
                "/.well-known/openid-configuration",
                Answer::json(json!({"issuer": idp.base, "jwks_uri": format!("{}/jwks", idp.base)}).to_string()),
            );
            idp.set("/jwks", Answer::json(JWKS).max_age(300));
            let call = TestCall::new()
                .params(&[
                    ("issuer", idp.base.as_str()),
                    ("oidc_discovery", "true"),
                    ("audience", "api-service"),
                    ("leeway_s", "0"),
                    ("resource_metadata", RM),
                ])
                .deadline_in(Duration::from_secs(2));
            Provider {
                idp,
                call,
                policy: JwtValidation::new(),
            }
        }

        fn token(&self, alg: Algorithm, kid: &str, key: &EncodingKey) -> String {
            let mut header = Header::new(alg);
            header.kid = Some(kid.into());
            let mut c = claims();
            c["iss"] = json!(self.idp.base);
            encode(&header, &c, key).unwrap()
        }

        async fn check(&self, token: &str) -> RequestOutcome {
            let req = TestRequest::new("GET", "/api").header("authorization", &format!("Bearer {token}"));
            self.call.request(&self.policy, &req).await.unwrap()
        }
    }

    fn challenge(out: &RequestOutcome) -> String {
        let deny = out.denial().expect("a denial");
        deny.headers
            .iter()
            .find(|(k, _)| k == "www-authenticate")
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn every_asymmetric_algorithm_verifies_against_discovered_keys() {
        let p = Provider::start().await;
        let rsa = EncodingKey::from_rsa_pem(RSA_PEM).unwrap();
        let cases = [
            (Algorithm::RS256, "rsa-1", rsa.clone()),
            (Algorithm::PS256, "rsa-pss", rsa.clone()),
            (Algorithm::ES256, "ec-1", EncodingKey::from_ec_pem(EC_PEM).unwrap()),
            (
                Algorithm::ES384,
                "ec384-1",
                EncodingKey::from_ec_pem(EC384_PEM).unwrap(),
            ),
            (Algorithm::EdDSA, "ed-1", EncodingKey::from_ed_pem(ED_PEM).unwrap()),
        ];
        for (alg, kid, key) in cases {
            let out = p.check(&p.token(alg, kid, &key)).await;
            assert!(out.denial().is_none(), "{alg:?}: {out:?}");
            assert_eq!(out.metadata_value("sub"), Some("alice"));
            assert_eq!(out.metadata_value("jwt.keys"), Some("fresh"));
        }
        // RS384/RS512 with a key whose JWK says RS256: not that key.
        let out = p.check(&p.token(Algorithm::RS512, "rsa-1", &rsa)).await;
        assert_eq!(refused_because(&out), "unknown_key");
        assert_eq!(p.idp.hits("/jwks"), 2, "one fetch, one refresh for the unknown key");
    }

    #[tokio::test]
    async fn hmac_with_the_public_key_and_none_are_refused() {
        let p = Provider::start().await;
        // HS256 signed with the published RSA modulus, or with the published
        // oct key's bytes: no HMAC key is ever taken from a published set.
        let jwks: Value = serde_json::from_str(JWKS).unwrap();
        for (kid, secret) in [("rsa-1", jwks["keys"][0]["n"].as_str().unwrap()), ("oct-1", "secret")] {
            let token = p.token(Algorithm::HS256, kid, &EncodingKey::from_secret(secret.as_bytes()));
            let out = p.check(&token).await;
            assert_eq!(refused_because(&out), "algorithm_not_allowed", "{kid}");
            assert_eq!(
                challenge(&out),
                format!("Bearer error=\"invalid_token\", resource_metadata=\"{RM}\"")
            );
        }
        let mut c = claims();
        c["iss"] = json!(p.idp.base);
        use base64::Engine;
        let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        let none = format!("{}.{}.", b64(&json!({"alg": "none", "typ": "JWT"})), b64(&c));
        assert_eq!(refused_because(&p.check(&none).await), "malformed");
        let out = p
            .call
            .request(&p.policy, &TestRequest::new("GET", "/api"))
            .await
            .unwrap();
        assert_eq!(challenge(&out), format!("Bearer resource_metadata=\"{RM}\""));
    }

    #[tokio::test]
    async fn no_keys_from_the_provider_is_a_503() {
        let p = Provider::start().await;
        p.idp.set("/jwks", Answer::status(500));
        let rsa = EncodingKey::from_rsa_pem(RSA_PEM).unwrap();
        let out = p.check(&p.token(Algorithm::RS256, "rsa-1", &rsa)).await;
        let deny = out.denial().expect("a denial");
        assert_eq!(deny.status, 503);
        assert!(deny.headers.iter().any(|(k, v)| k == "retry-after" && v == "5"));
        let body: Value = serde_json::from_slice(&deny.body).unwrap();
        assert_eq!(body["reason"], "keys_unavailable");
    }

    #[tokio::test]
    async fn the_algorithms_param_narrows_what_is_accepted() {
        let p = Provider::start().await;
        let base = p.idp.base.clone();
        let call = TestCall::new().params(&[
            ("issuer", base.as_str()),
            ("oidc_discovery", "true"),
            ("algorithms", r#"["ES256"]"#),
        ]);
        let token = p.token(Algorithm::RS256, "rsa-1", &EncodingKey::from_rsa_pem(RSA_PEM).unwrap());
        let req = TestRequest::new("GET", "/").header("authorization", &format!("Bearer {token}"));
        let out = call.request(&p.policy, &req).await.unwrap();
        assert_eq!(refused_because(&out), "algorithm_not_allowed");
        assert_eq!(p.idp.hits("/jwks"), 0, "refused before any fetch");
    }
}
