//! The Redis backend against a real `redis-server` (started by each test on
//! a Unix socket in a temp dir; skipped, with a message, only when
//! `redis-server` is not installed): the scenarios of `tests.rs` run on the
//! in-memory [`Store`] and on Redis side by side, every answer, journal
//! record and event compared; then what only a shared store has: two
//! agents, concurrent callers, keys and TTLs, an outage.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::redis_store::RedisApprovals;
use super::store::{Check, DecideBody, Effects, Filter, Limits, Refused, Store};
use super::tests::{binding, binding_of, decide, pending_id, terms, who};
use super::{ApprovalRule, Approvals, GrantKind};
use crate::rules::Caller;

#[path = "../../../agents/tests/common/redis_server.rs"]
pub(super) mod redis_server;

use redis_server::Redis;

/// A private server, or `None` (the test is skipped) without `redis-server`.
pub(super) fn redis() -> Option<Redis> {
    if Command::new("redis-server").arg("--version").output().is_err() {
        eprintln!("SKIPPED: redis-server is not installed (apt-get install redis-server; `make test` installs it)");
        return None;
    }
    Some(Redis::start())
}

fn same_effects(memory: &Effects, redis: &Effects, step: &str) {
    assert_eq!(memory.records, redis.records, "{step}: journal records");
    assert_eq!(memory.expired, redis.expired, "{step}: expired");
    assert_eq!(memory.decided, redis.decided, "{step}: decided");
}

/// The in-memory store and the Redis one, given the same steps.
struct Twin {
    memory: Store,
    redis: RedisApprovals,
    ids: u64,
}

impl Twin {
    async fn new(server: &Redis, limits: Limits) -> Twin {
        Twin {
            memory: Store::new(limits),
            redis: RedisApprovals::connect(&server.url, limits).await.unwrap(),
            ids: 0,
        }
    }

    async fn ask(&mut self, args: &Value, session: Option<&str>, now: u64) -> Check {
        self.ask_as("sub:alice", args, session, now).await
    }

    async fn ask_as(&mut self, principal: &str, args: &Value, session: Option<&str>, now: u64) -> Check {
        self.ids += 1;
        let id = format!("id{now}-{}", self.ids);
        let b = binding_of(principal, args, session);
        let (mut fm, mut fr) = (Effects::default(), Effects::default());
        let m = self.memory.check(
            b.clone(),
            args,
            || args.clone(),
            "r",
            &terms(),
            || id.clone(),
            now,
            &mut fm,
        );
        let r = self
            .redis
            .check(b, args, args.clone(), "r", &terms(), || id.clone(), now, &mut fr)
            .await
            .unwrap();
        assert_eq!(m, r, "check at {now}");
        same_effects(&fm, &fr, "check");
        assert_eq!(self.memory.pending(), self.redis.pending(), "pending after a check");
        r
    }

    async fn decide(
        &mut self,
        id: &str,
        by: &Caller,
        body: DecideBody,
        if_match: Option<&str>,
        now: u64,
    ) -> Result<Value, Refused> {
        let (mut fm, mut fr) = (Effects::default(), Effects::default());
        let m = self.memory.decide(id, by, body.clone(), if_match, now, &mut fm);
        let r = self.redis.decide(id, by, body, if_match, now, &mut fr).await;
        assert_eq!(m, r, "decide {id} at {now}");
        same_effects(&fm, &fr, "decide");
        r
    }

    async fn get(&mut self, id: &str, by: &Caller, now: u64) -> Result<(Value, String), Refused> {
        let (mut fm, mut fr) = (Effects::default(), Effects::default());
        let m = self.memory.get(id, by, now, &mut fm).map(|a| (a.to_json(), a.etag()));
        let r = self
            .redis
            .get(id, by, now, &mut fr)
            .await
            .map(|a| (a.to_json(), a.etag()));
        assert_eq!(m, r, "get {id} at {now}");
        same_effects(&fm, &fr, "get");
        r
    }

    async fn list(&mut self, by: &Caller, filter: &Filter<'_>, now: u64) -> Vec<Value> {
        let (mut fm, mut fr) = (Effects::default(), Effects::default());
        let m = self.memory.list(by, filter, now, &mut fm);
        let m = (m, self.memory.last_event_id());
        let r = self.redis.list(by, filter, now, &mut fr).await.unwrap();
        assert_eq!(m, r, "list at {now}");
        same_effects(&fm, &fr, "list");
        r.0
    }

    async fn revoke(&mut self, id: &str, by: &Caller, now: u64) -> Result<Value, Refused> {
        let (mut fm, mut fr) = (Effects::default(), Effects::default());
        let m = self.memory.revoke(id, by, now, &mut fm);
        let r = self.redis.revoke(id, by, now, &mut fr).await;
        assert_eq!(m, r, "revoke {id} at {now}");
        same_effects(&fm, &fr, "revoke");
        r
    }

    /// The events after `after`: (id, kind, data).
    async fn events(&mut self, after: u64, now: u64) -> Option<Vec<(u64, &'static str, Value)>> {
        let (mut fm, mut fr) = (Effects::default(), Effects::default());
        self.memory.sweep(now, &mut fm);
        let flat = |evs: Option<Vec<super::Event>>| {
            evs.map(|evs| evs.into_iter().map(|e| (e.id, e.kind, e.data)).collect::<Vec<_>>())
        };
        let m = flat(self.memory.events_after(after));
        let r = flat(self.redis.events_after(after, now, &mut fr).await.unwrap());
        assert_eq!(m, r, "events after {after} at {now}");
        same_effects(&fm, &fr, "events");
        r
    }
}

#[tokio::test]
async fn once_grants_release_the_exact_call_once() {
    let Some(server) = redis() else { return };
    let mut s = Twin::new(&server, Limits::default()).await;
    let args = json!({"path": "/srv/a"});
    let id = pending_id(&s.ask(&args, None, 1000).await);
    // Asking again gives the same request, not a new one.
    assert_eq!(pending_id(&s.ask(&args, None, 1100).await), id);
    s.decide(
        &id,
        &who("bob", &["approver"]),
        decide(GrantKind::AllowOnce),
        None,
        1200,
    )
    .await
    .unwrap();
    // Changed arguments do not ride on it.
    let other = s.ask(&json!({"path": "/srv/b"}), None, 1300).await;
    assert!(matches!(other, Check::Pending { created: true, .. }), "{other:?}");
    // The approved call passes once.
    assert!(matches!(
        s.ask(&args, None, 1400).await,
        Check::Granted {
            grant: GrantKind::AllowOnce,
            ..
        }
    ));
    assert!(matches!(
        s.ask(&args, None, 1500).await,
        Check::Pending { created: true, .. }
    ));
    let kinds: Vec<&str> = s.events(0, 1600).await.unwrap().iter().map(|e| e.1).collect();
    assert_eq!(
        kinds,
        [
            "approval.requested",
            "approval.decided",
            "approval.requested",
            "approval.consumed",
            "approval.requested"
        ]
    );
}

#[tokio::test]
async fn only_named_approvers_decide_never_the_requester_and_never_twice() {
    let Some(server) = redis() else { return };
    let mut s = Twin::new(&server, Limits::default()).await;
    let args = json!({"x": 1});
    let id = pending_id(&s.ask(&args, None, 0).await);
    let r = s
        .decide(&id, &who("mallory", &[]), decide(GrantKind::AllowOnce), None, 1)
        .await;
    assert_eq!(r.unwrap_err().status, 404, "not an approver nor the requester");
    let r = s
        .decide(&id, &who("alice", &["approver"]), decide(GrantKind::AllowOnce), None, 1)
        .await;
    assert_eq!(r.unwrap_err().reason, "self_approval");
    let r = s
        .decide(
            &id,
            &who("bob", &["approver"]),
            decide(GrantKind::AllowOnce),
            Some("\"x.1\""),
            1,
        )
        .await;
    assert_eq!(r.unwrap_err().status, 412);
    let (_, etag) = s.get(&id, &who("bob", &["approver"]), 1).await.unwrap();
    // The requester asks again: the version moves, the ETag read before is stale.
    s.ask(&args, None, 2).await;
    let r = s
        .decide(&id, &who("boss", &[]), decide(GrantKind::Deny), Some(&etag), 2)
        .await;
    assert_eq!(
        (r.as_ref().unwrap_err().status, r.unwrap_err().reason),
        (412, "stale_view")
    );
    let (_, etag) = s.get(&id, &who("alice", &[]), 2).await.unwrap();
    let mut deny = decide(GrantKind::Deny);
    deny.reason = Some("not today".into());
    deny.alternative = Some("archive it".into());
    s.decide(&id, &who("boss", &[]), deny, Some(&etag), 2).await.unwrap();
    let r = s
        .decide(&id, &who("bob", &["approver"]), decide(GrantKind::AllowOnce), None, 3)
        .await;
    assert_eq!(
        (r.as_ref().unwrap_err().status, r.unwrap_err().reason),
        (409, "already_decided")
    );
    match s.ask(&args, None, 4).await {
        Check::Denied {
            reason, alternative, ..
        } => assert_eq!(
            (reason.as_deref(), alternative.as_deref()),
            (Some("not today"), Some("archive it"))
        ),
        other => panic!("{other:?}"),
    }
    // The denial stands until the request would have expired, then the call asks again.
    assert!(matches!(
        s.ask(&args, None, 60_001).await,
        Check::Pending { created: true, .. }
    ));
    assert_eq!(
        s.get("nope", &who("bob", &["approver"]), 5).await.unwrap_err().status,
        404
    );
}

#[tokio::test]
async fn bad_decisions_are_refused_in_the_memory_order() {
    let Some(server) = redis() else { return };
    let mut s = Twin::new(&server, Limits::default()).await;
    let bob = who("bob", &["approver"]);
    let id = pending_id(&s.ask(&json!({"n": 1}), None, 0).await);
    for (body, reason) in [
        (decide(GrantKind::AllowConstrained), "bad_decision"),
        (decide(GrantKind::AllowSession), "no_session"),
        (
            DecideBody {
                constraints: Some(serde_json::from_value(json!({"override": {"a": 1}})).unwrap()),
                ..decide(GrantKind::AllowOnce)
            },
            "bad_decision",
        ),
    ] {
        let r = s.decide(&id, &bob, body, None, 1).await;
        assert_eq!(r.unwrap_err().reason, reason);
    }
    let narrow = ApprovalRule::parse(
        "rules",
        "r",
        json!({"approvers": {"roles_any": ["approver"]}, "grants": ["allow_once"], "ttl_s": 60}),
    )
    .unwrap();
    let args = json!({"n": 2});
    let mut fx = Effects::default();
    let c = s
        .redis
        .check(
            binding(&args, None),
            &args,
            args.clone(),
            "r",
            &narrow,
            || "narrow".into(),
            1,
            &mut fx,
        )
        .await
        .unwrap();
    assert_eq!(pending_id(&c), "narrow");
    let r = s
        .redis
        .decide("narrow", &bob, decide(GrantKind::AllowAlways), None, 2, &mut fx)
        .await;
    assert_eq!(r.unwrap_err().reason, "grant_not_offered");
}

#[tokio::test]
async fn requests_expire_and_then_cannot_be_decided() {
    let Some(server) = redis() else { return };
    let mut s = Twin::new(&server, Limits::default()).await;
    let id = pending_id(&s.ask(&json!({}), None, 0).await);
    let r = s
        .decide(
            &id,
            &who("bob", &["approver"]),
            decide(GrantKind::AllowOnce),
            None,
            60_001,
        )
        .await;
    assert_eq!(r.unwrap_err().reason, "expired");
    assert_eq!(s.redis.pending(), 0);
    let kinds: Vec<&str> = s.events(0, 60_002).await.unwrap().iter().map(|e| e.1).collect();
    assert_eq!(kinds, ["approval.requested", "approval.expired"]);
    // Expired once: a second agent sweeping later finds nothing to do.
    let other = RedisApprovals::connect(&server.url, Limits::default()).await.unwrap();
    let mut fx = Effects::default();
    other.sweep(70_000, &mut fx).await.unwrap();
    assert_eq!(fx.expired, 0);
    let (a, _) = s.get(&id, &who("alice", &[]), 70_000).await.unwrap();
    assert_eq!(a["state"], "expired");
}

#[tokio::test]
async fn session_always_and_constrained_grants_cover_what_they_say() {
    let Some(server) = redis() else { return };
    let mut s = Twin::new(&server, Limits::default()).await;
    let bob = who("bob", &["approver"]);
    let id = pending_id(&s.ask(&json!({"path": "/a"}), Some("s1"), 0).await);
    s.decide(&id, &bob, decide(GrantKind::AllowSession), None, 1)
        .await
        .unwrap();
    assert!(matches!(
        s.ask(&json!({"path": "/b"}), Some("s1"), 2).await,
        Check::Granted { .. }
    ));
    assert!(matches!(
        s.ask(&json!({"path": "/b"}), Some("s2"), 3).await,
        Check::Pending { .. }
    ));

    let server2 = redis().unwrap();
    let mut s = Twin::new(&server2, Limits::default()).await;
    let id = pending_id(&s.ask(&json!({"path": "/srv/x", "force": true}), None, 0).await);
    let mut body = decide(GrantKind::AllowConstrained);
    body.constraints =
        Some(serde_json::from_value(json!({"path_prefix": {"path": "/srv/"}, "override": {"force": false}})).unwrap());
    body.ttl_s = Some(100);
    s.decide(&id, &bob, body, None, 1).await.unwrap();
    match s.ask(&json!({"path": "/srv/y", "force": true}), None, 2).await {
        Check::Granted { args, .. } => assert_eq!(args, Some(json!({"path": "/srv/y", "force": false}))),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        s.ask(&json!({"path": "/etc/passwd"}), None, 3).await,
        Check::Pending { .. }
    ));

    let id = pending_id(&s.ask(&json!({"q": 1}), None, 10).await);
    s.decide(&id, &bob, decide(GrantKind::AllowAlways), None, 11)
        .await
        .unwrap();
    assert!(matches!(s.ask(&json!({"q": 2}), None, 12).await, Check::Granted { .. }));
    s.revoke(&id, &bob, 13).await.unwrap();
    assert_eq!(s.revoke(&id, &bob, 13).await.unwrap_err().reason, "no_grant");
    assert!(matches!(s.ask(&json!({"q": 2}), None, 14).await, Check::Pending { .. }));
    // The constrained grant ends with its ttl_s (100 s after its decision).
    assert!(matches!(
        s.ask(&json!({"path": "/srv/z"}), None, 100_000).await,
        Check::Granted { .. }
    ));
    assert!(matches!(
        s.ask(&json!({"path": "/srv/z"}), None, 100_001).await,
        Check::Pending { created: true, .. }
    ));
    s.list(&bob, &Filter::default(), 100_002).await;
    s.events(0, 100_003).await;
}

#[tokio::test]
async fn pending_requests_are_bounded_per_principal_and_in_total() {
    let Some(server) = redis() else { return };
    let mut s = Twin::new(
        &server,
        Limits {
            per_principal: 2,
            total: 3,
        },
    )
    .await;
    s.ask(&json!({"n": 1}), None, 0).await;
    s.ask(&json!({"n": 2}), None, 0).await;
    assert_eq!(s.ask(&json!({"n": 3}), None, 0).await, Check::Limited("principal"));
    s.ask_as("sub:carol", &json!({"n": 1}), None, 0).await;
    assert_eq!(
        s.ask_as("sub:dave", &json!({"n": 1}), None, 0).await,
        Check::Limited("total")
    );
    let bob = who("bob", &["approver"]);
    assert_eq!(s.list(&bob, &Filter::default(), 0).await.len(), 3);
    let mine = s
        .list(
            &bob,
            &Filter {
                principal: Some("sub:alice"),
                ..Filter::default()
            },
            0,
        )
        .await;
    assert_eq!(mine.len(), 2);
    assert_eq!(s.list(&who("alice", &[]), &Filter::default(), 0).await.len(), 2);
    assert!(s.list(&who("eve", &[]), &Filter::default(), 0).await.is_empty());
    // An expiry frees the slots.
    assert!(matches!(
        s.ask(&json!({"n": 3}), None, 60_000).await,
        Check::Pending { created: true, .. }
    ));
    assert_eq!(
        s.list(
            &bob,
            &Filter {
                state: Some("expired"),
                ..Filter::default()
            },
            60_000
        )
        .await
        .len(),
        3
    );
}

/// Two agents (two `Approvals` on one server): the point of the backend.
#[tokio::test]
async fn two_agents_see_each_others_requests_grants_and_events() {
    let Some(server) = redis() else { return };
    let dir = tempfile::tempdir().unwrap();
    let one = Approvals::redis(&server.url, Limits::default()).await.unwrap();
    let two = Approvals::redis(&server.url, Limits::default()).await.unwrap();
    let journal = dir.path().join("one.jsonl");
    one.set_journal(
        crate::guardrail::Journal::open(&journal, crate::guardrail::JournalOptions::default())
            .await
            .unwrap(),
    );
    let bob = who("bob", &["approver"]);
    let args = json!({"path": "/x"});
    let first = one
        .check(binding(&args, Some("s1")), &args, "r", &terms())
        .await
        .unwrap();
    let id = pending_id(&first);
    // The other agent sees it, and the same call there waits on it.
    let again = two
        .check(binding(&args, Some("s1")), &args, "r", &terms())
        .await
        .unwrap();
    let Check::Pending { expires_ms, .. } = first else {
        unreachable!()
    };
    assert_eq!(
        again,
        Check::Pending {
            id: id.clone(),
            created: false,
            expires_ms
        }
    );
    let (listed, last) = two.list(&bob, &Filter::default()).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], json!(id));
    assert_eq!(listed[0]["attempts"], 2);
    assert_eq!(last, 1);
    let (seen, etag) = two.get(&id, &bob).await.unwrap();
    assert_eq!(seen["state"], "pending");
    // Decided on the other agent, with the ETag it read...
    two.decide(&id, &bob, decide(GrantKind::AllowOnce), Some(&etag))
        .await
        .unwrap();
    // ...and not twice, from either.
    let twice = one.decide(&id, &bob, decide(GrantKind::AllowOnce), None).await;
    assert_eq!(twice.unwrap_err().status, 409);
    // The first agent lets the call through, once.
    let granted = one
        .check(binding(&args, Some("s1")), &args, "r", &terms())
        .await
        .unwrap();
    assert!(
        matches!(
            granted,
            Check::Granted {
                grant: GrantKind::AllowOnce,
                ..
            }
        ),
        "{granted:?}"
    );
    let next = two
        .check(binding(&args, Some("s1")), &args, "r", &terms())
        .await
        .unwrap();
    assert!(matches!(next, Check::Pending { created: true, .. }), "{next:?}");
    // Both see the same events; the requester sees its own.
    let evs = one.events_after(0, &who("alice", &[])).await.unwrap().unwrap();
    let kinds: Vec<&str> = evs.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            "approval.requested",
            "approval.decided",
            "approval.consumed",
            "approval.requested"
        ]
    );
    let ids: Vec<u64> = evs.iter().map(|e| e.id).collect();
    assert_eq!(ids, [1, 2, 3, 4]);
    assert_eq!(two.events_after(2, &bob).await.unwrap().unwrap().len(), 2);
    assert!(two.events_after(0, &who("eve", &[])).await.unwrap().unwrap().is_empty());
    // A session grant decided on one agent covers the session's calls on the other.
    let id = pending_id(&next);
    one.decide(&id, &bob, decide(GrantKind::AllowSession), None)
        .await
        .unwrap();
    let other_args = json!({"path": "/y"});
    let covered = two
        .check(binding(&other_args, Some("s1")), &other_args, "r", &terms())
        .await
        .unwrap();
    assert!(
        matches!(
            covered,
            Check::Granted {
                grant: GrantKind::AllowSession,
                ..
            }
        ),
        "{covered:?}"
    );
    two.revoke(&id, &bob).await.unwrap();
    let revoked = one
        .check(binding(&other_args, Some("s1")), &other_args, "r", &terms())
        .await
        .unwrap();
    assert!(matches!(revoked, Check::Pending { created: true, .. }), "{revoked:?}");
    // Each agent journals what it did.
    one.sync_journal().await.unwrap();
    let text = std::fs::read_to_string(&journal).unwrap();
    let kinds: Vec<String> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["event"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(kinds, ["requested", "released", "decided", "requested"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_once_grant_is_taken_by_exactly_one_of_twenty_concurrent_calls() {
    let Some(server) = redis() else { return };
    let agents = [
        Approvals::redis(&server.url, Limits::default()).await.unwrap(),
        Approvals::redis(&server.url, Limits::default()).await.unwrap(),
    ];
    let args = json!({"path": "/race"});
    let id = pending_id(
        &agents[0]
            .check(binding(&args, None), &args, "r", &terms())
            .await
            .unwrap(),
    );
    agents[1]
        .decide(&id, &who("bob", &["approver"]), decide(GrantKind::AllowOnce), None)
        .await
        .unwrap();
    let calls: Vec<_> = (0..20)
        .map(|i| {
            let a: Arc<Approvals> = agents[i % 2].clone();
            let args = args.clone();
            tokio::spawn(async move { a.check(binding(&args, None), &args, "r", &terms()).await })
        })
        .collect();
    let mut outcomes = Vec::new();
    for c in calls {
        outcomes.push(c.await.unwrap().expect("every check answered"));
    }
    let granted = outcomes.iter().filter(|c| matches!(c, Check::Granted { .. })).count();
    let created = outcomes
        .iter()
        .filter(|c| matches!(c, Check::Pending { created: true, .. }))
        .count();
    let waiting = outcomes
        .iter()
        .filter(|c| matches!(c, Check::Pending { created: false, .. }))
        .count();
    assert_eq!((granted, created, waiting), (1, 1, 18), "{outcomes:?}");
    let (list, _) = agents[0]
        .list(&who("bob", &["approver"]), &Filter::default())
        .await
        .unwrap();
    let states: Vec<&str> = list.iter().map(|a| a["state"].as_str().unwrap()).collect();
    assert_eq!(states.len(), 2);
    assert!(
        states.contains(&"consumed") && states.contains(&"pending"),
        "{states:?}"
    );
    let pending = list.iter().find(|a| a["state"] == "pending").unwrap();
    assert_eq!(pending["attempts"], 19);
}

#[tokio::test]
async fn keys_are_hashed_and_bounded_in_time() {
    let Some(server) = redis() else { return };
    let mut s = Twin::new(&server, Limits::default()).await;
    let bob = who("bob", &["approver"]);
    let waiting = pending_id(&s.ask(&json!({"w": 1}), None, super::now_ms()).await);
    let now = super::now_ms();
    let id = pending_id(&s.ask(&json!({"q": 1}), None, now).await);
    let mut always = decide(GrantKind::AllowAlways);
    always.ttl_s = Some(600);
    s.decide(&id, &bob, always, None, now).await.unwrap();
    let keys = server.cli(&["--scan", "--pattern", "policy-agents:*"]);
    let keys: Vec<&str> = keys.lines().collect();
    assert!(
        keys.iter()
            .all(|k| k.starts_with("policy-agents:{approvals}:") && !k.contains("alice") && !k.contains("delete_file")),
        "{keys:?}"
    );
    let pttl = |k: &str| -> i64 { server.cli(&["PTTL", k]).parse().unwrap() };
    let grants: Vec<&&str> = keys.iter().filter(|k| k.contains(":grants:")).collect();
    assert_eq!(grants.len(), 1, "{keys:?}");
    let t = pttl(grants[0]);
    assert!(t > 590_000 && t <= 600_000, "the grant lives as long as it stands: {t}");
    let t = pttl(&format!("policy-agents:{{approvals}}:approval:{id}"));
    let keep = super::redis_store::KEEP.as_millis() as i64;
    assert!(
        t > keep + 590_000 && t <= keep + 600_000,
        "decided: kept after its grant: {t}"
    );
    assert_eq!(
        pttl(&format!("policy-agents:{{approvals}}:approval:{waiting}")),
        -1,
        "pending: until decided or expired"
    );
    let principals = server.cli(&["HKEYS", "policy-agents:{approvals}:principals"]);
    assert_eq!(principals, super::redis_store::hashed("sub:alice"));
}

#[tokio::test]
async fn an_outage_fails_calls_closed_and_the_api_with_503() {
    let Some(mut server) = redis() else { return };
    let a = Approvals::redis(&server.url, Limits::default()).await.unwrap();
    let bob = who("bob", &["approver"]);
    let args = json!({"path": "/x"});
    let id = pending_id(&a.check(binding(&args, None), &args, "r", &terms()).await.unwrap());
    a.decide(&id, &bob, decide(GrantKind::AllowAlways), None).await.unwrap();
    server.stop();
    for _ in 0..2 {
        let err = a
            .check(binding(&args, None), &args, "r", &terms())
            .await
            .expect_err("no grant without the store");
        assert!(
            err.message().starts_with("approvals: approvals store (redis)"),
            "{}",
            err.message()
        );
        let deny = err.denial().expect("a denial for on_failure: deny");
        assert_eq!((deny.status, deny.reason.as_str()), (503, "session_store_unavailable"));
    }
    let r = a.list(&bob, &Filter::default()).await.unwrap_err();
    assert_eq!((r.status, r.reason), (503, "approvals_store_unavailable"));
    let r = a.decide(&id, &bob, decide(GrantKind::Deny), None).await.unwrap_err();
    assert_eq!((r.status, r.reason), (503, "approvals_store_unavailable"));
    assert_eq!(a.get(&id, &bob).await.unwrap_err().status, 503);
    assert_eq!(a.revoke(&id, &bob).await.unwrap_err().status, 503);
    assert_eq!(a.events_after(0, &bob).await.unwrap_err().status, 503);
    // Back (empty: nothing was saved): answered again, and nothing is granted.
    server.restart();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let back = a.check(binding(&args, None), &args, "r", &terms()).await.unwrap();
    assert!(matches!(back, Check::Pending { created: true, .. }), "{back:?}");
}

#[tokio::test]
async fn a_request_denied_at_expiry_is_denied_once_by_one_of_two_agents_as_in_memory() {
    let Some(server) = redis() else { return };
    let t = ApprovalRule::parse(
        "rules",
        "r",
        json!({"approvers": {"roles_any": ["approver"]}, "ttl_s": 60, "on_expiry": "deny",
            "expiry_reason": "late", "notify": [{"url": "http://127.0.0.1:9/x", "format": "slack"}]}),
    )
    .unwrap();
    let mut memory = Store::new(Limits::default());
    let a = RedisApprovals::connect(&server.url, Limits::default()).await.unwrap();
    let b = RedisApprovals::connect(&server.url, Limits::default()).await.unwrap();
    let args = json!({"path": "/x"});
    let (mut fm, mut fr) = (Effects::default(), Effects::default());
    let m = memory.check(
        binding(&args, None),
        &args,
        || args.clone(),
        "r",
        &t,
        || "id1".into(),
        1_000,
        &mut fm,
    );
    let r = a
        .check(
            binding(&args, None),
            &args,
            args.clone(),
            "r",
            &t,
            || "id1".into(),
            1_000,
            &mut fr,
        )
        .await
        .unwrap();
    assert_eq!(m, r);
    assert_eq!(
        (fm.announce.len(), fr.announce.len()),
        (1, 1),
        "the request is announced"
    );

    let (mut fm, mut fa, mut fb) = (Effects::default(), Effects::default(), Effects::default());
    memory.sweep(61_000, &mut fm);
    let (ra, rb) = tokio::join!(a.sweep(61_000, &mut fa), b.sweep(61_000, &mut fb));
    ra.unwrap();
    rb.unwrap();
    assert_eq!(fm.auto_denied, 1);
    assert_eq!(fa.auto_denied + fb.auto_denied, 1, "denied by exactly one agent");
    let (won, lost) = if fa.auto_denied == 1 { (&fa, &fb) } else { (&fb, &fa) };
    same_effects(&fm, won, "denied at expiry");
    assert_eq!(fm.auto_denied, won.auto_denied);
    assert_eq!(won.announce.len(), 1);
    assert_eq!(won.announce[0].0, "approval.decided");
    assert!(lost.announce.is_empty() && lost.records.is_empty());

    // The caller's retry is refused with the reason, by either agent.
    let (mut fm, mut fr) = (Effects::default(), Effects::default());
    let m = memory.check(
        binding(&args, None),
        &args,
        || args.clone(),
        "r",
        &t,
        || "id2".into(),
        62_000,
        &mut fm,
    );
    let r = b
        .check(
            binding(&args, None),
            &args,
            args.clone(),
            "r",
            &t,
            || "id2".into(),
            62_000,
            &mut fr,
        )
        .await
        .unwrap();
    assert_eq!(m, r);
    match r {
        Check::Denied { id, reason, .. } => {
            assert_eq!(id, "id1");
            assert_eq!(reason.as_deref(), Some("late"));
        }
        other => panic!("{other:?}"),
    }
}
