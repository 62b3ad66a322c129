//! Tests of remote keys against a local stub provider (real HTTP, real time:
//! short lifetimes keep them quick).

use super::*;
use crate::auth::stub_idp::{Answer, StubIdp};
use serde_json::{json, Value};

const JWKS: &str = include_str!("../../testdata/jwks-remote.json");

fn jwks_with(kids: &[&str]) -> String {
    let all: Value = serde_json::from_str(JWKS).unwrap();
    let rsa = all["keys"][0].clone();
    let keys: Vec<Value> = kids
        .iter()
        .map(|k| {
            let mut key = rsa.clone();
            key["kid"] = json!(k);
            key
        })
        .collect();
    json!({ "keys": keys }).to_string()
}

fn cfg(source: Source) -> RemoteConfig {
    RemoteConfig {
        source,
        ca_file: None,
        cache_min: Duration::from_millis(0),
        cache_max: Duration::from_secs(3600),
        stale_for: Duration::from_secs(3600),
        refresh_interval: Duration::from_secs(3600),
        refresh_min: Duration::from_secs(3600),
    }
}

fn discovery(idp: &StubIdp) -> RemoteConfig {
    idp.set(
        "/.well-known/openid-configuration",
        Answer::json(json!({"issuer": idp.base, "jwks_uri": format!("{}/jwks", idp.base)}).to_string()),
    );
    cfg(Source::Discovery(idp.base.clone()))
}

fn soon(ms: u64) -> Option<Instant> {
    Some(Instant::now() + Duration::from_millis(ms))
}

fn kid_of(l: &Lookup) -> Option<String> {
    match l {
        Lookup::Found { keys, index, .. } => keys[*index].kid.clone(),
        _ => None,
    }
}

fn is_stale(l: &Lookup) -> bool {
    matches!(l, Lookup::Found { stale: true, .. })
}

#[tokio::test]
async fn discovery_finds_the_keys_and_caches_them() {
    let idp = StubIdp::start().await;
    idp.set("/jwks", Answer::json(JWKS).max_age(600));
    let keys = Arc::new(RemoteKeys::new(discovery(&idp)).unwrap());
    for alg in [Algorithm::RS256, Algorithm::PS256, Algorithm::ES384, Algorithm::EdDSA] {
        let l = keys.lookup(alg, None, soon(2000)).await;
        assert!(kid_of(&l).is_some(), "{alg:?}");
    }
    let l = keys.lookup(Algorithm::RS256, Some("rsa-1"), soon(2000)).await;
    assert_eq!(kid_of(&l).as_deref(), Some("rsa-1"));
    // The PS256 key (alg PS256) does not verify RS256 tokens, nor the
    // RS256 key PS256 ones.
    let l = keys.lookup(Algorithm::RS256, Some("rsa-pss"), soon(2000)).await;
    assert!(matches!(l, Lookup::UnknownKey));
    assert_eq!(idp.hits("/.well-known/openid-configuration"), 1);
    // Cached for max-age: one fetch, and one more for the kid that had no
    // RS256 key (an unknown kid); later unknown kids wait for the interval.
    assert_eq!(idp.hits("/jwks"), 2);
    // Published oct and encryption keys are never used.
    for kid in ["oct-1", "enc-1"] {
        let l = keys.lookup(Algorithm::HS256, Some(kid), soon(2000)).await;
        assert!(kid_of(&l).is_none(), "{kid}");
        let l = keys.lookup(Algorithm::RS256, Some(kid), soon(2000)).await;
        assert!(kid_of(&l).is_none(), "{kid}");
    }
}

#[tokio::test]
async fn a_rotated_key_is_fetched_once_and_forged_kids_are_rate_limited() {
    let idp = StubIdp::start().await;
    idp.set("/jwks", Answer::json(jwks_with(&["k1"])).max_age(600));
    let mut c = cfg(Source::JwksUri(Url::parse(&format!("{}/jwks", idp.base)).unwrap()));
    c.refresh_interval = Duration::from_millis(800);
    c.refresh_min = Duration::from_millis(800);
    let keys = Arc::new(RemoteKeys::new(c).unwrap());
    assert_eq!(
        kid_of(&keys.lookup(Algorithm::RS256, Some("k1"), soon(2000)).await).as_deref(),
        Some("k1")
    );
    idp.set("/jwks", Answer::json(jwks_with(&["k1", "k2"])).max_age(600));
    assert_eq!(
        kid_of(&keys.lookup(Algorithm::RS256, Some("k2"), soon(2000)).await).as_deref(),
        Some("k2")
    );
    assert_eq!(idp.hits("/jwks"), 2);

    // A flood of forged kids, concurrent and in a row, inside one interval:
    // no fetch (the rotation's refresh used this interval's turn).
    let flood: Vec<_> = (0..50)
        .map(|i| {
            let keys = Arc::clone(&keys);
            tokio::spawn(async move {
                keys.lookup(Algorithm::RS256, Some(&format!("forged-{i}")), soon(2000))
                    .await
            })
        })
        .collect();
    for f in flood {
        assert!(matches!(f.await.unwrap(), Lookup::UnknownKey));
    }
    assert_eq!(idp.hits("/jwks"), 2);
    // After the interval, one refresh for the next flood, however large.
    tokio::time::sleep(Duration::from_millis(850)).await;
    let flood: Vec<_> = (0..50)
        .map(|i| {
            let keys = Arc::clone(&keys);
            tokio::spawn(async move {
                keys.lookup(Algorithm::RS256, Some(&format!("again-{i}")), soon(2000))
                    .await
            })
        })
        .collect();
    for f in flood {
        assert!(matches!(f.await.unwrap(), Lookup::UnknownKey));
    }
    assert_eq!(idp.hits("/jwks"), 3);
    assert_eq!(keys.stats().kid_refreshes.get(), 2);
    assert!(keys.stats().kid_refreshes_limited.get() >= 50);
    // The known key was never disturbed.
    assert!(kid_of(&keys.lookup(Algorithm::RS256, Some("k1"), soon(2000)).await).is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_kids_do_not_hold_back_a_rotation_and_fetches_stay_bounded() {
    let idp = StubIdp::start().await;
    idp.set("/jwks", Answer::json(jwks_with(&["k1"])).max_age(600));
    let mut c = cfg(Source::JwksUri(Url::parse(&format!("{}/jwks", idp.base)).unwrap()));
    // Forged kids are remembered for the whole test; refreshes for new
    // ones at most every 300 ms.
    c.refresh_min = Duration::from_millis(300);
    let keys = Arc::new(RemoteKeys::new(c).unwrap());
    assert!(kid_of(&keys.lookup(Algorithm::RS256, Some("k1"), soon(2000)).await).is_some());
    let t0 = Instant::now();

    // Distinct forged kids, without pause, from here to the end.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let forger = {
        let (keys, stop) = (Arc::clone(&keys), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let l = keys
                    .lookup(Algorithm::RS256, Some(&format!("forged-{n}")), soon(2000))
                    .await;
                assert!(matches!(l, Lookup::UnknownKey));
                n += 1;
                tokio::task::yield_now().await;
            }
            n
        })
    };
    // Wait until the flood has used up several refreshes.
    let deadline = Instant::now() + Duration::from_secs(10);
    while keys.stats().kid_refreshes.get() < 3 {
        assert!(Instant::now() < deadline, "the flood started no refresh");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The provider rotates; the new key's token passes once a refresh has
    // had its turn: within the minimum interval and a fetch.
    idp.set("/jwks", Answer::json(jwks_with(&["k2", "k1"])).max_age(600));
    let rotated = Instant::now();
    let deadline = rotated + Duration::from_secs(3);
    let mut refused = 0;
    loop {
        match keys.lookup(Algorithm::RS256, Some("k2"), soon(2000)).await {
            Lookup::Found { .. } => break,
            _ => refused += 1,
        }
        assert!(
            Instant::now() < deadline,
            "the rotated key was refused {refused} times in 3 s: {:?}",
            keys.stats()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let forged = forger.await.unwrap();

    // However many forged kids, at most one fetch per 300 ms (plus the first).
    let elapsed = t0.elapsed();
    let bound = 2 + (elapsed.as_millis() / 300) as usize;
    let hits = idp.hits("/jwks");
    assert!(forged > 100, "flood too small: {forged}");
    assert!(hits <= bound, "{hits} fetches for {forged} forged kids in {elapsed:?}");

    // A forged kid that a refresh lacked is remembered: no fetch for it.
    let before = idp.hits("/jwks");
    let known = keys.stats().kid_remembered.get();
    tokio::time::sleep(Duration::from_millis(350)).await; // past the limiter's interval
    for _ in 0..20 {
        assert!(matches!(
            keys.lookup(Algorithm::RS256, Some("forged-0"), soon(2000)).await,
            Lookup::UnknownKey
        ));
    }
    assert_eq!(idp.hits("/jwks"), before);
    assert_eq!(keys.stats().kid_remembered.get(), known + 20);
}

#[tokio::test]
async fn cache_control_bounds_the_lifetime() {
    let idp = StubIdp::start().await;
    idp.set("/jwks", Answer::json(jwks_with(&["k1"])).max_age(0));
    let mut c = cfg(Source::JwksUri(Url::parse(&format!("{}/jwks", idp.base)).unwrap()));
    c.cache_min = Duration::from_millis(300);
    let keys = Arc::new(RemoteKeys::new(c).unwrap());
    for _ in 0..5 {
        assert!(kid_of(&keys.lookup(Algorithm::RS256, Some("k1"), soon(2000)).await).is_some());
    }
    assert_eq!(idp.hits("/jwks"), 1, "max-age=0 is held up to cache_min");
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert!(kid_of(&keys.lookup(Algorithm::RS256, Some("k1"), soon(2000)).await).is_some());
    assert_eq!(idp.hits("/jwks"), 2, "refetched once the lifetime is over");
}

#[tokio::test]
async fn stale_keys_serve_for_their_bound_then_fail_closed() {
    let idp = StubIdp::start().await;
    idp.set("/jwks", Answer::json(jwks_with(&["k1"])).max_age(0));
    let mut c = cfg(Source::JwksUri(Url::parse(&format!("{}/jwks", idp.base)).unwrap()));
    c.cache_min = Duration::from_millis(200);
    c.stale_for = Duration::from_millis(1500);
    let keys = Arc::new(RemoteKeys::new(c).unwrap());
    assert!(!is_stale(&keys.lookup(Algorithm::RS256, Some("k1"), soon(2000)).await));
    idp.set("/jwks", Answer::status(503));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let l = keys.lookup(Algorithm::RS256, Some("k1"), soon(2000)).await;
    assert!(is_stale(&l), "stale keys while the provider fails");
    assert!(keys.stats().failures.get() >= 1);
    assert!(keys.stats().stale_used.get() >= 1);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let l = keys.lookup(Algorithm::RS256, Some("k1"), soon(2000)).await;
    assert!(matches!(l, Lookup::Unavailable), "past the stale bound: no key");
    assert!(keys.stats().unavailable.get() >= 1);
    // The provider is back: after the backoff (2 s after the second
    // failure), keys again.
    idp.set("/jwks", Answer::json(jwks_with(&["k1"])).max_age(60));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!is_stale(&keys.lookup(Algorithm::RS256, Some("k1"), soon(2000)).await));
}

#[tokio::test]
async fn a_slow_provider_never_holds_a_request_past_its_deadline() {
    let idp = StubIdp::start().await;
    idp.set(
        "/jwks",
        Answer::json(jwks_with(&["k1"])).delayed(Duration::from_millis(700)),
    );
    let keys =
        Arc::new(RemoteKeys::new(cfg(Source::JwksUri(Url::parse(&format!("{}/jwks", idp.base)).unwrap()))).unwrap());
    let t0 = Instant::now();
    let l = keys.lookup(Algorithm::RS256, Some("k1"), soon(200)).await;
    assert!(matches!(l, Lookup::Unavailable));
    // Well before the provider's 700 ms (the deadline less the reply margin,
    // plus scheduling on a busy machine).
    assert!(t0.elapsed() < Duration::from_millis(450), "{:?}", t0.elapsed());
    // The fetch went on; a later request finds its keys.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(kid_of(&keys.lookup(Algorithm::RS256, Some("k1"), soon(200)).await).is_some());
    assert_eq!(idp.hits("/jwks"), 1);
}

#[tokio::test]
async fn discovery_must_name_the_configured_issuer() {
    let idp = StubIdp::start().await;
    idp.set("/jwks", Answer::json(JWKS));
    idp.set(
        "/.well-known/openid-configuration",
        Answer::json(json!({"issuer": "https://evil.example", "jwks_uri": format!("{}/jwks", idp.base)}).to_string()),
    );
    let keys = Arc::new(RemoteKeys::new(cfg(Source::Discovery(idp.base.clone()))).unwrap());
    assert!(matches!(
        keys.lookup(Algorithm::RS256, None, soon(2000)).await,
        Lookup::Unavailable
    ));
    assert_eq!(idp.hits("/jwks"), 0);
    // A jwks_uri over plain http to another host is refused as well.
    let err = discover(&fetch::client(None).unwrap(), "http://idp.example.com").await;
    assert!(err.is_err());
}
