use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;

use super::key::{key, Scope};
use super::*;
use crate::aggregate::{Metadata, RequestCtx};
use crate::proto;

fn decl() -> proto::DecisionCache {
    proto::DecisionCache {
        max_age_ms: 60_000,
        headers: vec!["authorization".into()],
        header_params: [("header_name".to_string(), "x-api-key".to_string())].into(),
        metadata: vec!["consumer".into()],
        body: false,
        body_fields: vec![],
    }
}

fn spec(params: &[(&str, &str)]) -> CacheSpec {
    let params: BTreeMap<String, String> = params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    CacheSpec::resolve(Some(&decl()), &params).unwrap().unwrap()
}

fn request(headers: &[(&str, &str)]) -> RequestCtx {
    RequestCtx {
        headers: headers
            .iter()
            .map(|(n, v)| (n.to_string(), Bytes::from(v.to_string())))
            .collect(),
        method: "GET".into(),
        path: "/a".into(),
        ..RequestCtx::default()
    }
}

const SCOPE: Scope<'static> = Scope {
    version: 1,
    route: "r",
    agent: 0,
    epoch: 1,
};

fn k(scope: Scope<'_>, wire: &[u8], s: &CacheSpec, r: &RequestCtx, m: &Metadata) -> Key {
    key(scope, std::iter::once((wire, s)), r, m).unwrap()
}

#[test]
fn a_key_changes_with_every_part_it_covers_and_only_those() {
    let s = spec(&[]);
    let m = Metadata::new();
    let r = request(&[("x-api-key", "k1"), ("x-request-id", "1")]);
    let base = k(SCOPE, b"p", &s, &r, &m);
    // Not declared: another request id keys the same.
    assert_eq!(
        base,
        k(
            SCOPE,
            b"p",
            &s,
            &request(&[("x-api-key", "k1"), ("x-request-id", "2")]),
            &m
        )
    );
    // Declared header, named by the param's default.
    assert_ne!(base, k(SCOPE, b"p", &s, &request(&[("x-api-key", "k2")]), &m));
    // A header present or absent.
    assert_ne!(
        base,
        k(
            SCOPE,
            b"p",
            &s,
            &request(&[("x-api-key", "k1"), ("authorization", "")]),
            &m
        )
    );
    // Metadata.
    let with = Metadata::from([("consumer".to_string(), "alice".to_string())]);
    assert_ne!(base, k(SCOPE, b"p", &s, &r, &with));
    // Params (the policy as sent), version, route, agent, epoch.
    assert_ne!(base, k(SCOPE, b"q", &s, &r, &m));
    assert_ne!(base, k(Scope { version: 2, ..SCOPE }, b"p", &s, &r, &m));
    assert_ne!(base, k(Scope { route: "s", ..SCOPE }, b"p", &s, &r, &m));
    assert_ne!(base, k(Scope { agent: 1, ..SCOPE }, b"p", &s, &r, &m));
    assert_ne!(base, k(Scope { epoch: 2, ..SCOPE }, b"p", &s, &r, &m));
}

#[test]
fn a_header_param_names_the_header_that_keys() {
    let s = spec(&[("header_name", "X-Key")]);
    assert_eq!(s.headers, ["authorization", "x-key"]);
    let m = Metadata::new();
    let a = k(SCOPE, b"p", &s, &request(&[("x-key", "1"), ("x-api-key", "1")]), &m);
    let b = k(SCOPE, b"p", &s, &request(&[("x-key", "1"), ("x-api-key", "2")]), &m);
    let c = k(SCOPE, b"p", &s, &request(&[("x-key", "2"), ("x-api-key", "1")]), &m);
    assert_eq!(a, b);
    assert_ne!(a, c);
}

#[test]
fn body_fields_key_on_json_values_and_a_body_that_is_not_json_is_not_cached() {
    let d = proto::DecisionCache {
        max_age_ms: 1000,
        body_fields: vec!["/method".into(), "/params/name".into()],
        ..proto::DecisionCache::default()
    };
    let s = CacheSpec::resolve(Some(&d), &BTreeMap::new()).unwrap().unwrap();
    let m = Metadata::new();
    let with = |body: &str| RequestCtx {
        body: Some(Bytes::from(body.to_string())),
        ..request(&[])
    };
    let call = |id: u32, tool: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{"x":{id}}}}}}}"#
        )
    };
    let one = k(SCOPE, b"p", &s, &with(&call(1, "search")), &m);
    assert_eq!(one, k(SCOPE, b"p", &s, &with(&call(2, "search")), &m));
    assert_ne!(one, k(SCOPE, b"p", &s, &with(&call(1, "delete")), &m));
    assert!(key(SCOPE, std::iter::once((&b"p"[..], &s)), &with("not json"), &m).is_none());
}

#[test]
fn declarations_the_kernel_cannot_key_on_are_refused() {
    let bad = proto::DecisionCache {
        max_age_ms: 1000,
        headers: vec!["X-Upper".into()],
        ..proto::DecisionCache::default()
    };
    assert!(CacheSpec::resolve(Some(&bad), &BTreeMap::new()).is_err());
    let pointer = proto::DecisionCache {
        max_age_ms: 1000,
        body_fields: vec!["method".into()],
        ..proto::DecisionCache::default()
    };
    assert!(CacheSpec::resolve(Some(&pointer), &BTreeMap::new()).is_err());
    let zero = proto::DecisionCache::default();
    assert_eq!(CacheSpec::resolve(Some(&zero), &BTreeMap::new()), Ok(None));
}

fn reply(meta: &str) -> Reply {
    Reply {
        instructions: vec![],
        metadata: vec![("consumer".into(), meta.into())],
        cache_max_age_ms: None,
    }
}

#[test]
fn entries_stay_within_the_entry_bound_under_many_distinct_keys() {
    let config = DecisionCacheConfig {
        max_entries: 100_000,
        ..DecisionCacheConfig::default()
    };
    let cache = DecisionCache::new(&config);
    for i in 0u64..150_000 {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&i.to_le_bytes());
        cache.put(key, reply("a"), Duration::from_secs(60));
    }
    let (entries, bytes) = cache.size();
    assert!(entries <= 100_000, "{entries} entries");
    assert!(entries > 50_000, "{entries} entries: the bound, not a collapse");
    assert!(bytes <= config.max_bytes, "{bytes} bytes");
}

#[test]
fn entries_stay_within_the_byte_bound() {
    let config = DecisionCacheConfig {
        max_entries: 1_000_000,
        max_bytes: 1024 * 1024,
        ..DecisionCacheConfig::default()
    };
    let cache = DecisionCache::new(&config);
    let big = "x".repeat(10_000);
    for i in 0u64..1000 {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&i.to_le_bytes());
        cache.put(key, reply(&big), Duration::from_secs(60));
    }
    let (entries, bytes) = cache.size();
    assert!(bytes <= config.max_bytes, "{bytes} bytes");
    assert!(entries <= 105, "{entries} entries of 10 kB in 1 MiB");
}

#[test]
fn an_entry_lives_no_longer_than_its_lifetime_and_zero_keeps_nothing() {
    let cache = DecisionCache::new(&DecisionCacheConfig::default());
    cache.put([1; 32], reply("a"), Duration::from_millis(50));
    cache.put([2; 32], reply("b"), Duration::ZERO);
    assert!(cache.get(&[1; 32]).is_some());
    assert!(cache.get(&[2; 32]).is_none());
    std::thread::sleep(Duration::from_millis(80));
    assert!(cache.get(&[1; 32]).is_none());
}
