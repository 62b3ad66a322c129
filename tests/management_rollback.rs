//! Route changes and rollbacks under load through a real Envoy: no request
//! fails, and each response was shaped by exactly one version of the route
//! (the chain of one snapshot, never a mix).

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use support::management::{self, WRITE};
use support::*;

const TAGGER: &str = r#"policies:
  - name: tag
    params: [k]
    request:
      - set_header: {name: x-version, value: "${param:k}"}
  - name: tag2
    params: [k]
    request:
      - set_header: {name: x-version-2, value: "${param:k}"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollbacks_under_load_fail_no_request_and_never_mix_versions() {
    let routes = "  route_policies:\n    - route_name: users\n      request_policy_chain:\n        - policy: tag\n          params: {k: a}\n        - policy: tag2\n          params: {k: a}\n";
    let (s, api) = management::start(Stack::builder().test_agent("a1", TAGGER), routes).await;
    let v_a = api.version().await;
    let (status, body) = api
        .put(&json!({"route_name": "users", "request_policy_chain": [
            {"policy": "tag", "params": {"k": "b"}}, {"policy": "tag2", "params": {"k": "b"}}]}))
        .await;
    assert_eq!(status, 200, "{body}");
    let v_b = v_a + 1;

    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for _ in 0..4 {
        let stop = Arc::clone(&stop);
        let url = s.url("/users");
        workers.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let (mut seen, mut bad) = (Vec::new(), Vec::new());
            while !stop.load(Ordering::Relaxed) {
                let got = send(&client, "GET", &url, &[], None).await;
                if got.status != 200 {
                    bad.push(format!("status {}: {}", got.status, got.body));
                    continue;
                }
                let one = got.echoed_header("x-version");
                let two = got.echoed_header("x-version-2");
                match (one.as_deref(), two.as_deref()) {
                    (Some(x), Some(y)) if x == y && (x == "a" || x == "b") => seen.push(x.to_string()),
                    other => bad.push(format!("mixed or missing versions: {other:?}")),
                }
            }
            (seen, bad)
        }));
    }
    let mut current = v_b;
    for i in 0..10 {
        tokio::time::sleep(Duration::from_millis(30)).await;
        let target = if i % 2 == 0 { v_a } else { v_b };
        let (status, body) = api.rollback(WRITE, current, target).await;
        assert_eq!(status, 200, "{body}");
        current = body["version"].as_u64().unwrap();
    }
    tokio::time::sleep(Duration::from_millis(30)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut seen, mut bad) = (Vec::new(), Vec::new());
    for w in workers {
        let (s, b) = w.await.unwrap();
        seen.extend(s);
        bad.extend(b);
    }
    assert!(
        bad.is_empty(),
        "{} failed of {}: {:?}",
        bad.len(),
        bad.len() + seen.len(),
        &bad[..bad.len().min(5)]
    );
    assert!(
        seen.iter().any(|v| v == "a") && seen.iter().any(|v| v == "b"),
        "both versions served"
    );
    assert!(seen.len() > 50, "only {} requests", seen.len());
    // The last rollback (i = 9) restored version b.
    let got = s.get("/users", &[]).await;
    assert_eq!(got.echoed_header("x-version").as_deref(), Some("b"));
}
