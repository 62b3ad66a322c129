//! What shows a kernel drifting from the fleet's store, on a real 3-member
//! etcd cluster and real kernels each behind its own real Envoy: with every
//! member stopped for longer than the shipped alert's threshold, the sync
//! age grows past it in the metric, `/readyz` and `GET /v1/config` (and a
//! kernel restarted meanwhile starts from its cache's age, not from 0); a
//! value under the prefix that is not a valid route, written over existing
//! routes, makes every kernel (running, restarted, or restarted from its
//! cache with etcd away) refuse those routes and report the same routes
//! digest.

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::fleet::{deny, tag, Fleet};
use support::*;

/// The threshold of the shipped `PolicyKernelConfigStoreStale` alert, in
/// seconds, read from its expression.
fn stale_alert_threshold() -> u64 {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/observability/policy-kernel.rules.yml");
    let rules = std::fs::read_to_string(&path).expect("rules");
    let expr = "policy_kernel_config_store_sync_age_seconds >";
    let at = rules.find(expr).expect("the stale alert's expression") + expr.len();
    rules[at..]
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a threshold in seconds")
}

/// Every `policy_kernel_config_store_*` name the shipped rules read.
fn store_names_in_rules() -> BTreeSet<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/observability/policy-kernel.rules.yml");
    let rules = std::fs::read_to_string(&path).expect("rules");
    rules
        .match_indices("policy_kernel_config_store_")
        .map(|(i, _)| {
            rules[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

/// The `N` of `/readyz`'s "not watching for N s" on kernel `i`.
fn readyz_age(f: &Fleet, i: usize) -> Option<u64> {
    let (_, body) = f.stacks[i].kernel.admin_get("/readyz");
    let rest = body.split("not watching for ").nth(1)?;
    rest.split(' ').next()?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_member_stopped_the_sync_age_grows_past_the_alert_threshold() {
    let threshold = stale_alert_threshold();
    let mut f = Fleet::start(2).await;
    // Every store metric the rules read is served by a kernel with a store.
    let (_, text) = f.stacks[0].kernel.admin_get("/metrics");
    for name in store_names_in_rules() {
        assert!(text.contains(&format!("\n{name}")), "{name} not served:\n{text}");
    }
    let (status, body) = f.put_at(0, 0, &deny("deny")).await;
    assert_eq!(status, 200, "{body}");
    f.until_every("enforces the write", Duration::from_secs(10), |f, i| async move {
        f.status_via(i, "/deny").await == 403
    })
    .await;
    for i in 0..2 {
        assert_eq!(f.store(i).await["seconds_since_sync"], 0, "watching: in sync now");
    }

    let stopped = Instant::now();
    f.etcd.stop_all();
    until("kernels see the store gone", Duration::from_secs(15), || async {
        f.store(0).await["watching"] == false && f.store(1).await["watching"] == false
    })
    .await;
    // The age grows through the outage (retries do not reset it) until it
    // crosses the alert's threshold in all three places.
    let mut last = 0.0;
    until(
        &format!("kernel 0's sync age past {threshold} s"),
        Duration::from_secs(threshold + 30),
        || {
            let age = f.stacks[0].kernel.metric("policy_kernel_config_store_sync_age_seconds");
            assert!(
                age >= last,
                "the sync age went back from {last} to {age} while etcd is away"
            );
            last = age;
            async move { age > threshold as f64 }
        },
    )
    .await;
    assert!(
        last <= stopped.elapsed().as_secs_f64() + 1.0,
        "the age ({last} s) counts from before the outage ({:?} ago)",
        stopped.elapsed()
    );
    f.until_every(
        "past the threshold everywhere",
        Duration::from_secs(10),
        |f, i| async move {
            let metric = f.stacks[i].kernel.metric("policy_kernel_config_store_sync_age_seconds");
            let api = f.store(i).await["seconds_since_sync"].as_u64().unwrap_or(0);
            metric > threshold as f64 && api > threshold && readyz_age(f, i).is_some_and(|n| n > threshold)
        },
    )
    .await;
    assert_eq!(f.status_via(0, "/deny").await, 403, "stale routes keep serving");

    // A kernel restarted while etcd is away serves its cache, as stale as
    // it was: the age does not start again from 0.
    f.restart_kernel(1).await;
    let store = f.store(1).await;
    assert_eq!(store["started_from"], "cache", "{store}\n{}", f.diag());
    let age = store["seconds_since_sync"].as_u64().unwrap_or(0);
    assert!(age > threshold, "restarted from the cache: {store}\n{}", f.diag());
    assert!(readyz_age(&f, 1).is_some_and(|n| n > threshold));
    until("the restarted kernel's gauge", Duration::from_secs(5), || async {
        f.stacks[1].kernel.metric("policy_kernel_config_store_sync_age_seconds") > threshold as f64
    })
    .await;

    // etcd back: in sync again, the age back to 0 everywhere.
    f.etcd.restart_all();
    f.etcd.until_healthy().await;
    f.until_every("in sync again", Duration::from_secs(20), |f, i| async move {
        let store = f.store(i).await;
        store["watching"] == true
            && store["seconds_since_sync"] == 0
            && f.stacks[i].kernel.metric("policy_kernel_config_store_sync_age_seconds") == 0.0
    })
    .await;
}

/// Kernel `i`'s routes digest and invalid routes (from `GET /v1/config`).
async fn in_force(f: &Fleet, i: usize) -> (String, Value, u64) {
    let store = f.store(i).await;
    let digest = store["routes_digest"].as_str().unwrap_or("").to_string();
    (
        digest,
        store["invalid_routes"].clone(),
        store["version"].as_u64().unwrap_or(0),
    )
}

/// Waits until every kernel reports the routes digest of kernel 0 at one
/// version, with `invalid` as its invalid routes; returns that digest.
async fn until_agreed(f: &Fleet, invalid: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (digest, bad, version) = in_force(f, 0).await;
        let mut all = bad == serde_json::json!(invalid) && !digest.is_empty();
        let mut seen = vec![(digest.clone(), bad.clone(), version)];
        for i in 1..f.apis.len() {
            let theirs = in_force(f, i).await;
            all &= theirs == seen[0];
            seen.push(theirs);
        }
        if all {
            return digest;
        }
        assert!(
            Instant::now() < deadline,
            "kernels not on one routes digest with invalid routes {invalid:?}: {seen:?}\n{}",
            f.diag()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_value_over_a_route_refuses_it_on_every_kernel_running_or_restarted() {
    let mut f = Fleet::start(2).await;
    let (status, body) = f.put_at(0, 0, &deny("deny")).await;
    assert_eq!(status, 200, "{body}");
    let v = body["version"].as_u64().expect("version");
    let (status, body) = f.put_at(0, v, &tag("chain", "store")).await;
    assert_eq!(status, 200, "{body}");
    let before = until_agreed(&f, &[]).await;

    // Not JSON over `deny`; another route's name over `chain`. Neither
    // changes the version (no write through the API).
    let version = f.apis[0].version().await;
    let mut client = f.etcd.client().await;
    client.put("/fleet-test/routes/deny", "{", None).await.expect("put");
    let other = tag("users", "elsewhere").to_string();
    client.put("/fleet-test/routes/chain", other, None).await.expect("put");

    // Every kernel refuses both routes (fails closed: no route would let
    // the requests through), at the same version, with the same digest.
    let bad = until_agreed(&f, &["chain", "deny"]).await;
    assert_ne!(bad, before, "the routes in force changed");
    for i in 0..2 {
        assert_eq!(f.apis[i].version().await, version, "kernel {i}: no new version");
        assert_eq!(f.status_via(i, "/deny").await, 500, "kernel {i}\n{}", f.diag());
        assert_eq!(f.status_via(i, "/chain").await, 500, "kernel {i}");
        let got = f.stacks[i].get("/users", &[]).await;
        assert_eq!(got.echo()["headers"]["x-fleet"], "file", "the file's route untouched");
        assert_eq!(
            f.stacks[i].kernel.metric("policy_kernel_config_store_invalid_routes"),
            2.0
        );
        let (_, ready) = f.stacks[i].kernel.admin_get("/readyz");
        assert!(ready.contains("refusing every request: chain, deny"), "{ready}");
        let (_, metrics) = f.stacks[i].kernel.admin_get("/metrics");
        let info: Vec<&str> = metrics
            .lines()
            .filter(|l| l.starts_with("policy_kernel_config_store_routes_info{"))
            .collect();
        assert_eq!(info.len(), 1, "one routes_info series: {info:?}");
        assert!(
            info[0].contains(&format!("digest=\"{}\"", &bad[..16]))
                && info[0].contains(&format!("version=\"{version}\""))
                && info[0].ends_with(" 1"),
            "kernel {i}: {info:?}"
        );
    }
    assert!(f.stacks[0].kernel.log_has("store key routes/deny: not a route"));
    assert!(f.stacks[0].kernel.log_has("store key routes/chain: holds route_name"));

    // A kernel started now reads the same values the same way.
    f.restart_kernel(1).await;
    f.until_watching(1).await;
    assert_eq!(f.store(1).await["started_from"], "store");
    assert_eq!(until_agreed(&f, &["chain", "deny"]).await, bad);
    assert_eq!(f.status_via(1, "/deny").await, 500, "{}", f.diag());
    assert_eq!(f.status_via(1, "/chain").await, 500);

    // The API refuses the reserved policy name.
    let reserved = serde_json::json!({"route_name": "admin",
        "request_policy_chain": [{"policy": "policy-kernel/store-value-invalid"}]});
    let (status, body) = f.put_at(0, version, &reserved).await;
    assert_eq!(status, 422, "{body}");

    // Written again through the API, the route is in force everywhere.
    let (status, body) = f.put_at(1, version, &deny("deny")).await;
    assert_eq!(status, 200, "{body}\n{}", f.diag());
    let fixed = until_agreed(&f, &["chain"]).await;
    f.until_every("enforces deny again", Duration::from_secs(10), |f, i| async move {
        f.status_via(i, "/deny").await == 403
    })
    .await;

    // A kernel restarted from its cache while etcd is away serves the
    // same routes: the refusing one included.
    f.etcd.stop_all();
    f.restart_kernel(1).await;
    let store = f.store(1).await;
    assert_eq!(store["started_from"], "cache", "{store}\n{}", f.diag());
    assert_eq!(store["routes_digest"].as_str(), Some(fixed.as_str()), "{store}");
    assert_eq!(store["invalid_routes"], serde_json::json!(["chain"]));
    assert_eq!(f.status_via(1, "/chain").await, 500);
    assert_eq!(f.status_via(1, "/deny").await, 403);
}
