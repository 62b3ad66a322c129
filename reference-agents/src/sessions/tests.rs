use super::*;

const TTL: Duration = Duration::from_secs(60);

fn small(n: usize) -> MemorySessions {
    MemorySessions::new(NonZeroUsize::new(n).unwrap())
}

#[test]
fn results_count_turns_with_nothing_new() {
    let m = small(8);
    let t0 = Instant::now();
    assert_eq!(m.record_results_at("s", &[1, 2], TTL, t0), 0, "new results");
    assert_eq!(m.record_results_at("s", &[1, 2], TTL, t0), 1);
    assert_eq!(m.record_results_at("s", &[2], TTL, t0), 2);
    assert_eq!(m.record_results_at("s", &[2, 3], TTL, t0), 0, "3 is new");
    assert_eq!(m.record_results_at("other", &[1], TTL, t0), 0, "sessions are apart");
}

#[test]
fn sessions_are_bounded_least_recently_used_first_out_and_expire() {
    let m = small(2);
    let t0 = Instant::now();
    for s in ["a", "b", "c"] {
        m.record_results_at(s, &[7], TTL, t0);
        m.charge_at(s, 10, TTL, t0);
    }
    assert_eq!((m.seen.len(), m.tokens.len()), (2, 2));
    assert_eq!(m.used_at("a", TTL, t0), 0, "a was dropped");
    assert_eq!(m.record_results_at("a", &[7], TTL, t0), 0, "a starts over");
    assert_eq!(m.record_results_at("c", &[7], TTL, t0), 1);
    // After the TTL idle, a session starts over.
    let later = t0 + TTL + Duration::from_secs(1);
    assert_eq!(m.record_results_at("c", &[7], TTL, later), 0);
    assert_eq!(m.used_at("c", TTL, later), 0);
    assert_eq!(m.charge_at("c", 5, TTL, later), 5);
}

#[test]
fn seen_results_are_bounded() {
    let m = small(2);
    let t0 = Instant::now();
    let many: Vec<u64> = (0..MAX_SEEN as u64).collect();
    m.record_results_at("s", &many, TTL, t0);
    assert_eq!(m.record_results_at("s", &many, TTL, t0), 1, "all known");
    // One more: the full set is emptied rather than grown.
    assert_eq!(m.record_results_at("s", &[u64::MAX], TTL, t0), 0);
    assert_eq!(m.record_results_at("s", &[0], TTL, t0), 0, "0 was forgotten");
    let seen = m.seen.map.lock().unwrap().peek("s").map(|(s, _)| s.results.len());
    assert_eq!(seen, Some(2));
}

#[test]
fn token_totals_stay_within_bounds() {
    let m = small(2);
    let t0 = Instant::now();
    assert_eq!(m.charge_at("s", 300, TTL, t0), 300);
    assert_eq!(m.charge_at("s", -1000, TTL, t0), 0, "never below 0");
    assert_eq!(m.charge_at("s", i64::MAX, TTL, t0), MAX_TOKENS, "capped");
    assert_eq!(m.used_at("s", TTL, t0), MAX_TOKENS);
    assert_eq!(delta(5, 10), -5);
    assert_eq!(delta(u64::MAX, 0), i64::MAX);
}

#[test]
fn a_request_records_its_last_distinct_results() {
    let r: Vec<u64> = (0..3000u64).chain([5, 5, 2999]).collect();
    let d = distinct_recent(&r);
    assert_eq!(d.len(), MAX_SEEN);
    assert_eq!(d.first(), Some(&(3000 - MAX_SEEN as u64)));
    assert_eq!(d.last(), Some(&2999));
    assert_eq!(distinct_recent(&[3, 1, 3, 2]), [3, 1, 2]);
}

#[tokio::test]
async fn clones_share_sessions() {
    let a = SessionStore::memory();
    let b = a.clone();
    a.charge("s", 40, TTL).await.unwrap();
    assert_eq!(b.charge("s", 2, TTL).await.unwrap(), 42);
    assert_eq!(a.used("s", TTL).await.unwrap(), 42);
    assert_eq!(a.memory_sessions(), Some((0, 1)));
}

#[test]
fn a_store_failure_denies_with_a_named_503() {
    let e = SessionStoreError::from(redis::RedisError::from((redis::ErrorKind::Io, "connection refused")));
    let err = e.policy_error("futilityGuard");
    assert!(
        err.message().starts_with("futilityGuard: session store (redis)"),
        "{}",
        err.message()
    );
    let deny = err.denial().expect("a denial");
    assert_eq!(deny.status, 503);
    assert!(deny.headers.contains(&("retry-after".into(), "1".into())));
    let body: serde_json::Value = serde_json::from_slice(&deny.body).unwrap();
    assert_eq!(body["reason"], "session_store_unavailable");
}

#[test]
fn a_charge_within_the_limit_is_added_and_a_refusal_changes_nothing() {
    let m = small(2);
    let t0 = Instant::now();
    let ok = |used| Charge { charged: true, used };
    let refused = |used| Charge { charged: false, used };
    assert_eq!(m.try_charge_at("s", 600, 1000, TTL, t0), ok(600));
    assert_eq!(m.try_charge_at("s", 401, 1000, TTL, t0), refused(600));
    assert_eq!(m.try_charge_at("s", 400, 1000, TTL, t0), ok(1000), "up to the limit");
    assert_eq!(m.try_charge_at("new", 1001, 1000, TTL, t0), refused(0));
    // A refusal does not keep the session alive: it expires TTL after the
    // last charge.
    let later = t0 + TTL - Duration::from_secs(1);
    assert_eq!(m.try_charge_at("s", 1, 1000, TTL, later), refused(1000));
    assert_eq!(
        m.try_charge_at("s", 1, 1000, TTL, t0 + TTL + Duration::from_secs(1)),
        ok(1)
    );
    assert_eq!(m.try_charge_at("big", u64::MAX, u64::MAX, TTL, t0), ok(MAX_TOKENS));
}

#[test]
fn the_first_owner_of_a_task_stays_until_it_expires() {
    let m = small(4);
    let t0 = Instant::now();
    assert_eq!(m.owner_at("task-1", TTL, t0), None);
    assert_eq!(m.claim_owner_at("task-1", "sub:alice", TTL, t0), "sub:alice");
    assert_eq!(m.claim_owner_at("task-1", "sub:mallory", TTL, t0), "sub:alice");
    assert_eq!(m.owner_at("task-1", TTL, t0).as_deref(), Some("sub:alice"));
    let later = t0 + TTL + Duration::from_secs(1);
    assert_eq!(m.owner_at("task-1", TTL, later), None);
    assert_eq!(m.claim_owner_at("task-1", "sub:bob", TTL, later), "sub:bob");
}
