use serde_json::json;

use super::binding::{canonical, digest, CallBinding};
use super::store::{Check, DecideBody, Effects, Filter, Limits, Store};
use super::{ApprovalRule, GrantKind};
use crate::rules::Caller;

/// An `approve` rule's terms: approvers with role `approver` (or sub
/// `boss`), 60 s.
pub(crate) fn terms() -> ApprovalRule {
    ApprovalRule::parse(
        "rules",
        "r",
        json!({"approvers": {"roles_any": ["approver"], "subs": ["boss"]}, "ttl_s": 60}),
    )
    .unwrap()
}

/// alice's `delete_file` with `args` at `gw/mcp`, in `session`.
pub(crate) fn binding(args: &serde_json::Value, session: Option<&str>) -> CallBinding {
    binding_of("sub:alice", args, session)
}

/// `principal`'s `delete_file` with `args` at `gw/mcp`, in `session`.
pub(crate) fn binding_of(principal: &str, args: &serde_json::Value, session: Option<&str>) -> CallBinding {
    CallBinding {
        principal: principal.into(),
        route: "mcp".into(),
        route_version: "v1".into(),
        endpoint: "gw/mcp".into(),
        method: "tools/call".into(),
        target: "delete_file".into(),
        args_digest: digest(args),
        session: session.map(String::from),
        rule: String::new(),
    }
}

/// A caller.
pub(crate) fn who(sub: &str, roles: &[&str]) -> Caller {
    Caller {
        sub: Some(sub.into()),
        roles: roles.iter().map(|s| s.to_string()).collect(),
        ..Caller::default()
    }
}

fn ask(s: &mut Store, args: &serde_json::Value, session: Option<&str>, now: u64) -> Check {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    s.check(
        binding(args, session),
        args,
        || args.clone(),
        "r",
        &terms(),
        || format!("id{now}-{}", N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)),
        now,
        &mut Effects::default(),
    )
}

/// A decision with `grant` and nothing else.
pub(crate) fn decide(grant: GrantKind) -> DecideBody {
    DecideBody {
        grant,
        reason: None,
        alternative: None,
        constraints: None,
        ttl_s: None,
    }
}

/// The id of a check left pending.
pub(crate) fn pending_id(c: &Check) -> String {
    match c {
        Check::Pending { id, .. } => id.clone(),
        other => panic!("not pending: {other:?}"),
    }
}

#[test]
fn the_digest_ignores_key_order_and_whitespace_but_not_values() {
    let a: serde_json::Value = serde_json::from_str(r#"{"b": [1, {"y":2,"x":1}], "a":"s"}"#).unwrap();
    let b: serde_json::Value = serde_json::from_str(r#"{"a":"s","b":[1,{"x":1,"y":2}]}"#).unwrap();
    assert_eq!(canonical(&a), r#"{"a":"s","b":[1,{"x":1,"y":2}]}"#);
    assert_eq!(digest(&a), digest(&b));
    assert_ne!(digest(&a), digest(&json!({"a": "s", "b": [1, {"x": 1, "y": 3}]})));
}

#[test]
fn once_grants_release_the_exact_call_once() {
    let mut s = Store::new(Limits::default());
    let args = json!({"path": "/srv/a"});
    let id = pending_id(&ask(&mut s, &args, None, 1000));
    // Asking again gives the same request, not a new one.
    assert_eq!(pending_id(&ask(&mut s, &args, None, 1100)), id);
    let mut fx = Effects::default();
    s.decide(
        &id,
        &who("bob", &["approver"]),
        decide(GrantKind::AllowOnce),
        None,
        1200,
        &mut fx,
    )
    .unwrap();
    // Changed arguments do not ride on it.
    let other = ask(&mut s, &json!({"path": "/srv/b"}), None, 1300);
    assert!(matches!(other, Check::Pending { created: true, .. }), "{other:?}");
    // The approved call passes once.
    assert!(matches!(
        ask(&mut s, &args, None, 1400),
        Check::Granted {
            grant: GrantKind::AllowOnce,
            ..
        }
    ));
    assert!(matches!(
        ask(&mut s, &args, None, 1500),
        Check::Pending { created: true, .. }
    ));
}

#[test]
fn only_named_approvers_decide_never_the_requester_and_never_twice() {
    let mut s = Store::new(Limits::default());
    let args = json!({"x": 1});
    let id = pending_id(&ask(&mut s, &args, None, 0));
    let mut fx = Effects::default();
    let r = s.decide(
        &id,
        &who("mallory", &[]),
        decide(GrantKind::AllowOnce),
        None,
        1,
        &mut fx,
    );
    assert_eq!(
        r.unwrap_err().status,
        404,
        "not an approver nor the requester: not even seen"
    );
    let r = s.decide(
        &id,
        &who("alice", &["approver"]),
        decide(GrantKind::AllowOnce),
        None,
        1,
        &mut fx,
    );
    assert_eq!(r.unwrap_err().reason, "self_approval");
    let r = s.decide(
        &id,
        &who("bob", &["approver"]),
        decide(GrantKind::AllowOnce),
        Some("\"x.1\""),
        1,
        &mut fx,
    );
    assert_eq!(r.unwrap_err().status, 412);
    let etag = s.get(&id, &who("bob", &["approver"]), 1, &mut fx).unwrap().etag();
    s.decide(&id, &who("boss", &[]), decide(GrantKind::Deny), Some(&etag), 2, &mut fx)
        .unwrap();
    let r = s.decide(
        &id,
        &who("bob", &["approver"]),
        decide(GrantKind::AllowOnce),
        None,
        3,
        &mut fx,
    );
    assert_eq!(
        (r.as_ref().unwrap_err().status, r.unwrap_err().reason),
        (409, "already_decided")
    );
    assert!(matches!(ask(&mut s, &args, None, 4), Check::Denied { .. }));
}

#[test]
fn requests_expire_and_then_cannot_be_decided() {
    let mut s = Store::new(Limits::default());
    let id = pending_id(&ask(&mut s, &json!({}), None, 0));
    let mut fx = Effects::default();
    let r = s.decide(
        &id,
        &who("bob", &["approver"]),
        decide(GrantKind::AllowOnce),
        None,
        60_001,
        &mut fx,
    );
    assert_eq!(r.unwrap_err().reason, "expired");
    assert_eq!(fx.expired, 1);
    assert_eq!(s.pending(), 0);
    let evs = s.events_after(0).unwrap();
    let kinds: Vec<_> = evs.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, ["approval.requested", "approval.expired"]);
}

#[test]
fn session_always_and_constrained_grants_cover_what_they_say() {
    let mut s = Store::new(Limits::default());
    let bob = who("bob", &["approver"]);
    let mut fx = Effects::default();
    let id = pending_id(&ask(&mut s, &json!({"path": "/a"}), Some("s1"), 0));
    s.decide(&id, &bob, decide(GrantKind::AllowSession), None, 1, &mut fx)
        .unwrap();
    assert!(matches!(
        ask(&mut s, &json!({"path": "/b"}), Some("s1"), 2),
        Check::Granted { .. }
    ));
    assert!(matches!(
        ask(&mut s, &json!({"path": "/b"}), Some("s2"), 3),
        Check::Pending { .. }
    ));

    let mut s = Store::new(Limits::default());
    let id = pending_id(&ask(&mut s, &json!({"path": "/srv/x", "force": true}), None, 0));
    let mut body = decide(GrantKind::AllowConstrained);
    body.constraints =
        Some(serde_json::from_value(json!({"path_prefix": {"path": "/srv/"}, "override": {"force": false}})).unwrap());
    s.decide(&id, &bob, body, None, 1, &mut fx).unwrap();
    match ask(&mut s, &json!({"path": "/srv/y", "force": true}), None, 2) {
        Check::Granted { args, .. } => assert_eq!(args, Some(json!({"path": "/srv/y", "force": false}))),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        ask(&mut s, &json!({"path": "/etc/passwd"}), None, 3),
        Check::Pending { .. }
    ));

    let id = pending_id(&ask(&mut s, &json!({"q": 1}), None, 10));
    s.decide(&id, &bob, decide(GrantKind::AllowAlways), None, 11, &mut fx)
        .unwrap();
    assert!(matches!(ask(&mut s, &json!({"q": 2}), None, 12), Check::Granted { .. }));
    s.revoke(&id, &bob, 13, &mut fx).unwrap();
    assert!(matches!(ask(&mut s, &json!({"q": 2}), None, 14), Check::Pending { .. }));
}

#[test]
fn pending_requests_are_bounded_per_principal_and_in_total() {
    let mut s = Store::new(Limits {
        per_principal: 2,
        total: 3,
    });
    ask(&mut s, &json!({"n": 1}), None, 0);
    ask(&mut s, &json!({"n": 2}), None, 0);
    assert_eq!(ask(&mut s, &json!({"n": 3}), None, 0), Check::Limited("principal"));
    let mut fx = Effects::default();
    let listed = s.list(&who("bob", &["approver"]), &Filter::default(), 0, &mut fx);
    assert_eq!(listed.len(), 2);
    assert!(s.list(&who("eve", &[]), &Filter::default(), 0, &mut fx).is_empty());
}

#[test]
fn approval_terms_are_checked() {
    for bad in [
        json!({}),
        json!({"approvers": {}}),
        json!({"approvers": {"subs": ["a"]}, "ttl_s": 0}),
        json!({"approvers": {"subs": ["a"]}, "grants": []}),
        json!({"approvers": {"subs": ["a"]}, "grants": ["maybe"]}),
        json!({"approvers": {"subs": ["a"]}, "extra": 1}),
    ] {
        let e = ApprovalRule::parse("rules", "r", bad.clone()).unwrap_err().to_string();
        assert!(e.contains("`rules`") && e.contains("approval"), "{bad}: {e}");
    }
}

#[test]
fn previews_hide_secrets_and_pii_but_show_the_rest() {
    let p = super::preview(
        &json!({"path": "/srv/a", "api_key": "sk-live-123", "note": "mail bob@example.com",
        "nested": {"password": "x", "n": 3}}),
    );
    let text = p.to_string();
    assert_eq!(p["path"], "/srv/a");
    assert_eq!(p["api_key"], "[REDACTED:secret]");
    assert_eq!(p["nested"]["password"], "[REDACTED:secret]");
    assert_eq!(p["nested"]["n"], 3);
    assert!(!text.contains("sk-live") && !text.contains("bob@example.com"), "{text}");
}

#[tokio::test]
async fn the_shared_store_answers_and_journals_each_step() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("approvals.jsonl");
    let a = super::Approvals::memory(Limits::default());
    a.set_journal(
        crate::guardrail::Journal::open(&path, crate::guardrail::JournalOptions::default())
            .await
            .unwrap(),
    );
    let args = json!({"path": "/x"});
    let check = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        a.check(binding(&args, None), &args, "r", &terms()),
    )
    .await
    .expect("check answers")
    .unwrap();
    let id = pending_id(&check);
    a.decide(&id, &who("bob", &["approver"]), decide(GrantKind::AllowOnce), None)
        .await
        .unwrap();
    let again = a.check(binding(&args, None), &args, "r", &terms()).await.unwrap();
    assert!(matches!(again, Check::Granted { .. }), "{again:?}");
    a.sync_journal().await.unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let kinds: Vec<String> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["event"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(kinds, ["requested", "decided", "released"]);
}

/// The approve rule's digest, as `Rules::parse` computes it for `rule`.
fn rule_digest(rule: serde_json::Value) -> String {
    let rules = crate::rules::Rules::parse("rules", &json!([rule]).to_string()).unwrap();
    let caller = who("alice", &["agent"]);
    let d = rules.decide("tools/call", Some("delete_file"), &caller);
    d.approval_need().expect("an approve rule").terms.digest.clone()
}

#[test]
fn standing_grants_follow_the_approve_rule_not_the_route_entry() {
    let rule = json!({"name": "deletes", "effect": "approve", "tools": ["delete_file"],
        "approval": {"approvers": {"roles_any": ["approver"]}, "ttl_s": 60}});
    let d1 = rule_digest(rule.clone());
    // The name is not what the rule matches or asks.
    let mut renamed = rule.clone();
    renamed["name"] = json!("deletes-need-a-person");
    assert_eq!(rule_digest(renamed), d1);
    let mut other_matcher = rule.clone();
    other_matcher["tools"] = json!(["delete_*"]);
    let mut other_approvers = rule.clone();
    other_approvers["approval"]["approvers"] = json!({"roles_any": ["admin"]});
    let (d2, d3) = (rule_digest(other_matcher), rule_digest(other_approvers));
    assert!(d2 != d1 && d3 != d1 && d2 != d3);

    let mut s = Store::new(Limits::default());
    let bob = who("bob", &["approver"]);
    let mut fx = Effects::default();
    let ask_as = |s: &mut Store, version: &str, digest: &str, args: serde_json::Value, now: u64| {
        let mut b = binding(&args, None);
        b.route_version = version.into();
        b.rule = digest.into();
        s.check(
            b,
            &args,
            || args.clone(),
            "deletes",
            &terms(),
            || format!("id{now}"),
            now,
            &mut Effects::default(),
        )
    };
    let id = pending_id(&ask_as(&mut s, "v1", &d1, json!({"path": "/a"}), 0));
    s.decide(&id, &bob, decide(GrantKind::AllowAlways), None, 1, &mut fx)
        .unwrap();
    // Another param of the route changed (a new route version), the rule not:
    // the grant stands.
    assert!(matches!(
        ask_as(&mut s, "v2", &d1, json!({"path": "/b"}), 2),
        Check::Granted { .. }
    ));
    // The rule's matcher or approvers changed: asked again.
    assert!(matches!(
        ask_as(&mut s, "v3", &d2, json!({"path": "/b"}), 3),
        Check::Pending { .. }
    ));
    assert!(matches!(
        ask_as(&mut s, "v4", &d3, json!({"path": "/c"}), 4),
        Check::Pending { .. }
    ));

    // allow_once keeps its exact-call binding, the route's version with it.
    let mut s = Store::new(Limits::default());
    let id = pending_id(&ask_as(&mut s, "v1", &d1, json!({"path": "/a"}), 10));
    s.decide(&id, &bob, decide(GrantKind::AllowOnce), None, 11, &mut fx)
        .unwrap();
    assert!(matches!(
        ask_as(&mut s, "v2", &d1, json!({"path": "/a"}), 12),
        Check::Pending { .. }
    ));
    assert!(matches!(
        ask_as(&mut s, "v1", &d1, json!({"path": "/a"}), 13),
        Check::Granted { .. }
    ));
}
