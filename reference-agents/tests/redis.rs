//! The rate limits' Redis backend against a real `redis-server` (Debian's),
//! started on a Unix socket in a temp dir (`common::redis_server`). Without
//! `redis-server` on PATH these tests fail: install it with
//! `apt-get install redis-server`.

/// The agents' test helpers, shared with the SDK's tests.
#[path = "../../agents/tests/common/mod.rs"]
mod common;

use std::time::Duration;

use common::redis_server::Redis;
use common::*;
use policy_agents::testing::{TestCall, TestRequest, TestResponse};
use reference_agents::ratelimit::{Backend, RateLimit, TokenBasedRateLimit};

async fn backend(redis: &Redis) -> Backend {
    Backend::redis(&redis.url).await.expect("connect to redis")
}

fn client(ip: &str) -> TestRequest {
    TestRequest::new("GET", "/").client_ip(ip)
}

#[tokio::test]
async fn two_replicas_share_one_gcra_limit() {
    let redis = Redis::start();
    let (a, b) = (
        RateLimit::new(backend(&redis).await),
        RateLimit::new(backend(&redis).await),
    );
    let call = TestCall::new().params(&[("requests_per_second", "1"), ("burst", "3")]);
    let req = client("10.0.0.1");
    let mut remaining = Vec::new();
    for policy in [&a, &b, &a] {
        let out = call.request(policy, &req).await.unwrap();
        assert!(out.denial().is_none());
        remaining.push(out.header_set("x-ratelimit-remaining").unwrap().to_string());
    }
    assert_eq!(remaining, ["2", "1", "0"]);
    let denied = call.request(&b, &req).await.unwrap();
    let deny = denied.denial().expect("429 from the other replica");
    assert_eq!(deny.status, 429);
    assert!(deny.headers.contains(&("retry-after".into(), "1".into())), "{deny:?}");
    assert!(call.request(&b, &client("10.0.0.2")).await.unwrap().denial().is_none());
}

#[tokio::test]
async fn gcra_refills_with_server_time() {
    let redis = Redis::start();
    let policy = RateLimit::new(backend(&redis).await);
    let call = TestCall::new().params(&[("requests_per_second", "20"), ("burst", "1")]);
    let req = client("10.0.0.3");
    assert!(call.request(&policy, &req).await.unwrap().denial().is_none());
    assert!(call.request(&policy, &req).await.unwrap().denial().is_some());
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert!(call.request(&policy, &req).await.unwrap().denial().is_none());
}

#[tokio::test]
async fn token_budget_is_shared_and_corrected() {
    let redis = Redis::start();
    let (a, b) = (
        TokenBasedRateLimit::new(backend(&redis).await),
        TokenBasedRateLimit::new(backend(&redis).await),
    );
    let call = TestCall::new().params(&[("tokens_per_minute", "1000")]);
    let body = serde_json::json!({"messages": [{"role": "user", "content": "x".repeat(2000)}]}).to_string();
    let req = client("10.0.0.4").body(body);
    let first = call.request(&a, &req).await.unwrap();
    assert_eq!(first.header_set("x-ratelimit-remaining-tokens"), Some("500"));
    let usage = TestResponse::new(200).body(r#"{"usage":{"total_tokens":900}}"#);
    let corrected = call
        .clone()
        .metadata("tokens_estimated", "500")
        .response(&b, &req, &usage)
        .await
        .unwrap();
    assert_eq!(corrected.header_set("x-ratelimit-remaining-tokens"), Some("100"));
    let denied = call.request(&b, &req).await.unwrap();
    assert_eq!(denied.denial().map(|d| d.status), Some(429));
}

#[tokio::test]
async fn ratelimit_agents_share_limits_through_redis() {
    let redis = Redis::start();
    let bin = env!("CARGO_BIN_EXE_ratelimit-agent");
    let one = Spawned::start(bin, &["--redis-url", &redis.url]).await;
    let two = Spawned::start(bin, &["--redis-url", &redis.url]).await;
    let params = [("requests_per_second", "0.1"), ("burst", "2"), ("key", "header:x-user")];
    let mut statuses = Vec::new();
    for agent in [&one, &two, &one] {
        let mut call = request_call("r", vec![policy("rateLimit", &params, "")]);
        call.request_data.as_mut().unwrap().headers = Some(policy_agents::proto::HttpHeaders {
            headers: vec![policy_agents::proto::HeaderValue::new("x-user", "u1")],
        });
        let reply = agent
            .client()
            .await
            .execute_policy_request(call)
            .await
            .unwrap()
            .into_inner();
        statuses.push(immediate(&reply).map_or(200, |r| r.status_code));
    }
    assert_eq!(statuses, [200, 200, 429]);
}
