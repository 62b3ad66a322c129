//! Many kernels on one configuration: the management API's store in a real
//! 3-member etcd cluster (Debian `etcd-server`), real kernels each behind
//! its own real Envoy. A write through one kernel is enforced through every
//! Envoy; If-Match holds across kernels; a leader lost mid-writes loses and
//! repeats nothing; with etcd gone, kernels serve on (and a restarted one
//! from its cache) while writes get 503; a compaction during a kernel's
//! disconnect leads to a full read.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::fleet::{deny, tag, Fleet};
use support::management::WRITE;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_through_one_kernel_is_enforced_through_every_envoy_and_if_match_holds_fleet_wide() {
    let f = Fleet::start(3).await;
    let diag = || f.diag();
    for i in 0..3 {
        assert_eq!(f.status_via(i, "/deny").await, 200, "no route yet\n{}", diag());
    }
    let v0 = f.apis[0].version().await;
    assert_eq!(v0, 0, "an empty store has version 0");

    // Through kernel A; enforced through Envoy C within 1 s of the answer.
    let (status, body) = f.put_at(0, v0, &deny("deny")).await;
    assert_eq!(status, 200, "{body}\n{}", diag());
    let v1 = body["version"].as_u64().expect("version");
    let written = Instant::now();
    until(
        "Envoy C enforces the route written through kernel A",
        Duration::from_secs(1),
        || async { f.status_via(2, "/deny").await == 403 },
    )
    .await;
    eprintln!("write-to-enforced through Envoy C: {:?}", written.elapsed());
    f.until_every(
        "on the fleet's version, enforcing it",
        Duration::from_secs(10),
        |f, i| async move { f.apis[i].version().await == v1 && f.status_via(i, "/deny").await == 403 },
    )
    .await;

    // Concurrent writers on different kernels, all at v1: exactly one wins.
    let routes: Vec<Value> = (0..3).map(|i| tag("chain", &format!("k{i}"))).collect();
    let puts = routes.iter().enumerate().map(|(i, r)| f.put_at(i, v1, r));
    let results = futures::future::join_all(puts).await;
    let won: Vec<usize> = (0..3).filter(|&i| results[i].0 == 200).collect();
    assert_eq!(won.len(), 1, "exactly one writer wins: {results:?}\n{}", diag());
    for (i, (status, body)) in results.iter().enumerate() {
        if !won.contains(&i) {
            assert_eq!(*status, 409, "{body}");
            assert_eq!(body["code"], "version_conflict");
        }
    }
    let v2 = results[won[0]].1["version"].as_u64().expect("version");
    let winner = format!("k{}", won[0]);
    until("every Envoy tags with the winner", Duration::from_secs(2), || async {
        let mut all = true;
        for s in &f.stacks {
            let got = s.get("/chain", &[]).await;
            all &= got.echo()["headers"]["x-fleet"] == winner.as_str();
        }
        all
    })
    .await;
    // A stale If-Match through yet another kernel is refused.
    let (status, body) = f.put_at(1, v1, &deny("late")).await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["message"].as_str().unwrap_or("").contains(&v2.to_string()),
        "{body}"
    );

    // History written through A and B is read through C; rollback through
    // C to v1 drops the race route on every kernel.
    let versions = f.apis[2].get("/v1/versions").await;
    let listed: Vec<u64> = versions["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .map(|v| v["version"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(listed, [v2, v1], "{versions}");
    let at_v1 = f.apis[2].get(&format!("/v1/versions/{v1}")).await;
    let names: Vec<&str> = at_v1["routes"]
        .as_array()
        .expect("routes")
        .iter()
        .filter_map(|r| r["route_name"].as_str())
        .collect();
    assert_eq!(names, ["users", "deny"], "{at_v1}");
    let (status, body) = f.apis[2].rollback(WRITE, v2, v1).await;
    assert_eq!(status, 200, "{body}\n{}", diag());
    f.until_routes(&["deny", "users"]).await;
    // The file's route is untouched everywhere.
    let got = f.stacks[1].get("/users", &[]).await;
    assert_eq!(got.echo()["headers"]["x-fleet"], "file");
    let metric = f.stacks[1].kernel.metric("policy_kernel_config_store_watch_up");
    assert_eq!(metric, 1.0);
}

/// PUTs `route` through kernel `i` until it is in the store: a 409 re-reads
/// the version; a 503 (no leader, or an answer lost) first checks whether
/// the write was stored after all. Returns the attempts made.
async fn write_until_stored(f: &Fleet, i: usize, route: &Value) -> usize {
    let name = route["route_name"].as_str().expect("name").to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    for attempt in 1.. {
        assert!(Instant::now() < deadline, "write of {name} never stored\n{}", f.diag());
        let (status, body) = f.apis[i]
            .call("GET", "/v1/config", Some(support::management::READ), None, None)
            .await;
        if status != 200 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        if body["routes"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["route_name"] == name.as_str()))
        {
            return attempt;
        }
        let version = body["version"].as_u64().unwrap_or(0);
        match f.put_at(i, version, route).await {
            (200, _) => return attempt,
            (409 | 503, _) => tokio::time::sleep(Duration::from_millis(50)).await,
            (s, b) => panic!("write of {name}: {s} {b}"),
        }
    }
    unreachable!()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_stopped_during_100_writes_loses_none_and_applies_none_twice() {
    let mut f = Fleet::start(3).await;
    let mut retried = 0;
    for n in 0..100 {
        if n == 30 {
            let leader = f.etcd.leader().await;
            eprintln!("stopping etcd leader m{leader}");
            f.etcd.stop(leader);
        }
        retried += write_until_stored(&f, n % 3, &tag(&format!("w{n}"), &n.to_string())).await - 1;
    }
    eprintln!("writes retried: {retried}");
    // Every kernel ends on the same version with all 100 routes.
    let mut versions = Vec::new();
    for i in 0..3 {
        until(
            &format!("kernel {i} has all 100 routes"),
            Duration::from_secs(10),
            || async { f.apis[i].route_names().await.len() == 101 },
        )
        .await;
        versions.push(f.apis[i].version().await);
    }
    assert!(versions.windows(2).all(|w| w[0] == w[1]), "{versions:?}\n{}", f.diag());
    // None applied twice: each kernel applied each stored version once.
    let stored = f.apis[0].get("/v1/versions").await["versions"]
        .as_array()
        .expect("versions")
        .len() as u64;
    assert_eq!(stored, 100, "one version per write, none repeated");
    for i in 0..3 {
        let store = f.store(i).await;
        assert_eq!(store["changes_applied"], stored, "kernel {i}: {store}\n{}", f.diag());
    }
    for i in 0..3 {
        let got = f.stacks[i].get("/w99", &[]).await;
        assert_eq!(got.status, 200);
    }
    // Unlisted in Envoy's routes, but in the kernel's: w* routes are
    // checked through the API; the route names above prove the content.
    f.etcd.restart_all();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_member_stopped_kernels_serve_on_writes_get_503_and_a_restart_serves_the_cache() {
    let mut f = Fleet::start(2).await;
    let (status, body) = f.put_at(0, 0, &deny("deny")).await;
    assert_eq!(status, 200, "{body}");
    let v1 = body["version"].as_u64().expect("version");
    until("kernel B enforces", Duration::from_secs(2), || async {
        f.status_via(1, "/deny").await == 403
    })
    .await;

    f.etcd.stop_all();
    until("kernels see the store gone", Duration::from_secs(15), || async {
        f.store(0).await["watching"] == false && f.store(1).await["watching"] == false
    })
    .await;
    for i in 0..2 {
        assert_eq!(f.status_via(i, "/deny").await, 403, "kernel {i} keeps enforcing");
        let (status, body) = f.put_at(i, v1, &deny("admin")).await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["code"], "store_unavailable");
        let (code, ready) = f.stacks[i].kernel.admin_get("/readyz");
        assert_eq!(code, 200, "losing the store never stops requests: {ready}");
        assert!(ready.contains("routes may be stale"), "{ready}");
    }
    let metric = f.stacks[0].kernel.metric("policy_kernel_config_store_watch_up");
    assert_eq!(metric, 0.0);

    // Kernel B restarted while etcd is away serves the routes it cached.
    f.restart_kernel(1).await;
    let store = f.store(1).await;
    assert_eq!(store["started_from"], "cache", "{store}\n{}", f.diag());
    assert_eq!(store["version"], v1);
    assert_eq!(store["stale"], true);
    assert_eq!(f.status_via(1, "/deny").await, 403, "{}", f.diag());
    let (_, admin_config) = f.stacks[1].kernel.admin_get("/config");
    assert!(admin_config.contains("\"stale\":true"), "{admin_config}");

    // The store back: both watch again and writes go through.
    f.etcd.restart_all();
    f.etcd.until_healthy().await;
    for i in 0..2 {
        f.until_watching(i).await;
    }
    let (status, body) = f.put_at(1, v1, &deny("admin")).await;
    assert_eq!(status, 200, "{body}\n{}", f.diag());
    until(
        "kernel A enforces the write through B",
        Duration::from_secs(2),
        || async { f.status_via(0, "/admin").await == 403 },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_during_a_kernels_disconnect_leads_to_a_full_read() {
    // Kernel B reaches etcd through a forwarder the test cuts.
    let mut f = Fleet::start_cut(2).await;
    let (status, body) = f.put_at(0, 0, &tag("users", "store")).await;
    assert_eq!(status, 200, "{body}");
    let before = f.stacks[1].kernel.metric("policy_kernel_config_store_full_reads_total");

    f.cut.as_mut().expect("forwarder").cut();
    until("kernel B disconnected", Duration::from_secs(15), || async {
        f.store(1).await["watching"] == false
    })
    .await;
    let mut version = 0;
    for n in 0..5 {
        let (status, body) = f.put_at(0, f.apis[0].version().await, &deny(&format!("c{n}"))).await;
        assert_eq!(status, 200, "{body}\n{}", f.diag());
        version = body["version"].as_u64().expect("version");
    }
    let (status, body) = f.put_at(0, version, &deny("deny")).await;
    assert_eq!(status, 200, "{body}");
    let version = body["version"].as_u64().expect("version");
    let mut client = f.etcd.client().await;
    client
        .compact(
            version as i64,
            Some(etcd_client::CompactionOptions::new().with_physical()),
        )
        .await
        .expect("compact");
    assert_eq!(f.status_via(1, "/deny").await, 200, "B still has the old routes");

    f.cut.as_mut().expect("forwarder").restore();
    f.until_watching(1).await;
    let store = f.store(1).await;
    assert_eq!(store["version"], version, "{store}\n{}", f.diag());
    let after = f.stacks[1].kernel.metric("policy_kernel_config_store_full_reads_total");
    assert_eq!(after, before + 1.0, "one full read after the compaction\n{}", f.diag());
    let names = f.apis[1].route_names().await;
    assert_eq!(names, ["c0", "c1", "c2", "c3", "c4", "deny", "users"]);
    assert_eq!(f.status_via(1, "/deny").await, 403);
    let got = f.stacks[1].get("/users", &[]).await;
    assert_eq!(got.echo()["headers"]["x-fleet"], "store");

    // The history outlives etcd's: every version is listed and the first
    // one restored, though etcd compacted past all of them.
    let versions = f.apis[1].get("/v1/versions").await["versions"].clone();
    let listed: Vec<u64> = versions
        .as_array()
        .expect("versions")
        .iter()
        .map(|v| v["version"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(listed.len(), 7, "{versions}");
    let first = listed[6];
    assert!(first < version, "compacted past {first}");
    let (status, body) = f.apis[1].rollback(WRITE, version, first).await;
    assert_eq!(status, 200, "{body}\n{}", f.diag());
    f.until_routes(&["users"]).await;
    f.until_every("lets /deny through again", Duration::from_secs(10), |f, i| async move {
        f.status_via(i, "/deny").await == 200
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_a_client_certificate_from_the_trusted_ca_syncs_and_another_is_refused() {
    use support::certs::{ca, leaf, write};
    use support::etcd::{EtcdCluster, EtcdTls};
    let dir = workdir();
    let (trusted, other) = (ca("etcd test CA"), ca("unknown CA"));
    let ca_pem = write(dir.path(), "ca.pem", &trusted.pem());
    let (cert, key) = leaf(dir.path(), "etcd", &trusted);
    let tls = EtcdTls {
        ca: ca_pem.clone(),
        cert,
        key,
    };
    let etcd = EtcdCluster::start_with(dir.path(), 1, Some(tls)).await;
    assert!(etcd.endpoints()[0].starts_with("https://"));
    let client_tls = |(cert, key): (std::path::PathBuf, std::path::PathBuf)| {
        format!(
            "        tls: {{ca: {}, cert: {}, key: {}}}\n",
            ca_pem.display(),
            cert.display(),
            key.display()
        )
    };
    let trusted_yaml = client_tls(leaf(dir.path(), "kernel", &trusted));
    let stranger_yaml = client_tls(leaf(dir.path(), "stranger", &other));
    let (_good, bad) = one_admitted_one_refused(&etcd, &trusted_yaml, &stranger_yaml).await;
    assert_eq!(bad.get("/deny", &[]).await.status, 200, "not in its routes");
    assert_eq!(bad.get("/users", &[]).await.echo()["headers"]["x-fleet"], "file");
}

/// Starts a kernel on `etcd` with `admitted` (its extra `store.etcd` lines)
/// and one with `refused`. The first watches the store, writes route
/// `deny` through it and enforces it; the second, refused at connection,
/// serves its file's routes (`started_from: file_only`, not watching) and
/// gets 503 on a write.
async fn one_admitted_one_refused(
    etcd: &support::etcd::EtcdCluster,
    admitted: &str,
    refused: &str,
) -> (support::stack::Stack, support::stack::Stack) {
    let (good, good_api) = support::fleet::kernel(&etcd.endpoints(), admitted).await;
    let (bad, bad_api) = support::fleet::kernel(&etcd.endpoints(), refused).await;
    let diag = || format!("{}\n{}\n{}", good.diag(), bad.diag(), etcd.logs());
    until("the admitted kernel watches", Duration::from_secs(15), || async {
        good_api.get("/v1/config").await["store"]["watching"] == true
    })
    .await;
    let (status, body) = good_api
        .call("PUT", "/v1/routes/deny", Some(WRITE), Some(0), Some(&deny("deny")))
        .await;
    assert_eq!(status, 200, "{body}\n{}", diag());
    assert_eq!(good.get("/deny", &[]).await.status, 403);

    let store = bad_api.get("/v1/config").await["store"].clone();
    assert_eq!(store["started_from"], "file_only", "{store}\n{}", diag());
    assert_eq!(store["watching"], false);
    let (status, body) = bad_api
        .call("PUT", "/v1/routes/admin", Some(WRITE), Some(0), Some(&deny("admin")))
        .await;
    assert_eq!(status, 503, "{body}");
    (good, bad)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kernel_starts_on_a_store_larger_than_one_read() {
    let mut f = Fleet::start(1).await;
    // 1,200 routes put straight into etcd, 100 per transaction: more than
    // one page (500 keys) of the kernel's reads.
    let mut client = f.etcd.client().await;
    for batch in 0..12 {
        let ops: Vec<etcd_client::TxnOp> = (0..100)
            .map(|n| {
                let name = format!("r{:04}", batch * 100 + n);
                etcd_client::TxnOp::put(
                    format!("/fleet-test/routes/{name}"),
                    tag(&name, "bulk").to_string(),
                    None,
                )
            })
            .collect();
        client.txn(etcd_client::Txn::new().and_then(ops)).await.expect("txn");
    }
    f.restart_kernel(0).await;
    f.until_watching(0).await;
    let names = f.apis[0].route_names().await;
    assert_eq!(names.len(), 1201, "{}", f.diag());
    assert_eq!(names[1199], "r1199");
    assert_eq!(f.store(0).await["started_from"], "store");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_etcd_authentication_a_user_with_the_prefix_syncs_and_a_wrong_password_is_refused() {
    use support::etcd::EtcdCluster;
    let dir = workdir();
    let etcd = EtcdCluster::start(dir.path(), 1).await;
    // A root user (etcd needs one to turn authentication on), and the
    // kernels' user with read-write on the fleet's prefix only.
    let mut admin = etcd.client().await;
    admin.user_add("root", "root-pw", None).await.expect("root");
    let _ = admin.role_add("root").await;
    admin.user_grant_role("root", "root").await.expect("root role");
    admin.role_add("fleet").await.expect("role");
    admin
        .role_grant_permission(
            "fleet",
            etcd_client::Permission::read_write("/fleet-test/").with_prefix(),
        )
        .await
        .expect("permission");
    admin.user_add("kernel", "s3cret", None).await.expect("user");
    admin.user_grant_role("kernel", "fleet").await.expect("grant");
    admin.auth_enable().await.expect("auth enable");

    let password = dir.path().join("password");
    std::fs::write(&password, "s3cret\n").expect("password file");
    let admitted = format!(
        "        username: kernel\n        password_file: {}\n",
        password.display()
    );
    let refused = "        username: kernel\n        password: wrong\n";
    let (_good, bad) = one_admitted_one_refused(&etcd, &admitted, refused).await;
    assert!(bad.kernel.log_has("authentication failed"), "{}", bad.kernel.log());
}
