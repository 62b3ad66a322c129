use serde_json::{json, Value};

use super::super::store::{Check, Effects, State, Store};
use super::super::tests::{binding, who};
use super::super::{ApprovalRule, GrantKind, Limits, OnExpiry};
use super::payload;
use super::target::Format;

fn rule(extra: Value) -> Result<ApprovalRule, String> {
    let mut raw = json!({"approvers": {"roles_any": ["approver"]}, "ttl_s": 60});
    if let (Value::Object(m), Value::Object(x)) = (&mut raw, extra) {
        m.extend(x);
    }
    ApprovalRule::parse("rules", "r", raw).map_err(|e| e.to_string())
}

#[test]
fn targets_are_checked_when_the_rule_is_read() {
    std::env::set_var("NOTIFY_TEST_SECRET", "a-secret-of-some-length");
    let ok = rule(json!({"notify": [
        {"url": "https://hooks.example/a", "secret_env": "NOTIFY_TEST_SECRET"},
        {"url": "https://hooks.slack.example/T/B/x", "format": "slack", "events": ["requested"]},
    ]}))
    .unwrap();
    assert_eq!(ok.notify.len(), 2);
    assert_eq!(ok.notify[1].format, Format::Slack);
    assert!(ok.notify[1].hears("requested") && !ok.notify[1].hears("decided"));
    assert!(ok.notify[0].hears("consumed") && !ok.notify[0].hears("revoked"));
    for (bad, says) in [
        (json!([{"format": "slack"}]), "notify[0]: url (or url_env) is required"),
        (json!([{"url": "ftp://x/y", "format": "slack"}]), "not an http(s) URL"),
        (json!([{"url": "https://h/x"}]), "a webhook is signed"),
        (
            json!([{"url": "https://h/x", "secret_env": "NOTIFY_TEST_UNSET_VAR"}]),
            "NOTIFY_TEST_UNSET_VAR is unset",
        ),
        (
            json!([{"url": "https://h/x", "format": "teams", "events": ["approved"]}]),
            "unknown event \"approved\"",
        ),
        (
            json!([{"url": "https://h/x", "format": "teams", "secret_file": "/nonexistent/secret"}]),
            "secret_file /nonexistent/secret",
        ),
        (json!([{"url": "https://h/x", "format": "pager"}]), "unknown variant"),
    ] {
        let e = rule(json!({ "notify": bad })).unwrap_err();
        assert!(e.contains(says), "{e} (wanted {says})");
    }
    let e = rule(json!({"on_expiry": "deny", "grants": ["allow_once"]})).unwrap_err();
    assert!(e.contains("on_expiry: deny needs `deny`"), "{e}");
    let e = rule(json!({"expiry_reason": "late"})).unwrap_err();
    assert!(e.contains("only for on_expiry: deny"), "{e}");
}

#[test]
fn where_requests_are_announced_is_not_part_of_what_was_approved() {
    use crate::rules::Rules;
    let digest = |approval: Value| {
        let rules = json!([{"name": "d", "effect": "approve", "tools": ["delete_file"], "approval": approval}]);
        let r = Rules::parse("rules", &rules.to_string()).unwrap();
        let d = r.decide("tools/call", Some("delete_file"), &who("alice", &[]));
        d.approval_need().unwrap().terms.digest.clone()
    };
    let base = json!({"approvers": {"roles_any": ["approver"]}});
    let with_notify = json!({"approvers": {"roles_any": ["approver"]},
        "notify": [{"url": "https://h/x", "format": "slack"}]});
    let other = json!({"approvers": {"roles_any": ["approver", "admin"]}});
    assert_eq!(digest(base.clone()), digest(with_notify));
    assert_ne!(digest(base), digest(other));
}

fn store_with(terms: &ApprovalRule, now: u64) -> (Store, String, Effects) {
    let mut s = Store::new(Limits::default());
    let args = json!({"path": "/srv/a", "token": "hunter2-secret"});
    let mut fx = Effects::default();
    let check = s.check(
        binding(&args, None),
        &args,
        || json!({"path": "/srv/a", "token": "[REDACTED]"}),
        "deletes",
        terms,
        || "id1".to_string(),
        now,
        &mut fx,
    );
    assert!(matches!(check, Check::Pending { created: true, .. }), "{check:?}");
    (s, "id1".into(), fx)
}

#[test]
fn an_undecided_request_is_denied_at_expiry_when_its_rule_says_so() {
    let terms = rule(json!({"on_expiry": "deny", "expiry_reason": "nobody was on call"})).unwrap();
    assert_eq!(terms.on_expiry, OnExpiry::Deny);
    let (mut s, id, _) = store_with(&terms, 1_000);
    let mut fx = Effects::default();
    s.sweep(1_000 + 59_999, &mut fx);
    assert_eq!(fx.auto_denied, 0, "not yet due");
    s.sweep(1_000 + 60_000, &mut fx);
    assert_eq!((fx.auto_denied, fx.expired), (1, 0));
    assert_eq!(fx.records[0]["event"], "decided");
    assert_eq!(fx.records[0]["by"], "expiry");
    let a = s.get(&id, &who("bob", &["approver"]), 61_000, &mut fx).unwrap();
    assert_eq!(a.state, State::Denied);
    // The caller's retry hears the reason, for one more ttl.
    let args = json!({"path": "/srv/a", "token": "hunter2-secret"});
    let again = |s: &mut Store, now| {
        s.check(
            binding(&args, None),
            &args,
            || json!({}),
            "deletes",
            &terms,
            || format!("id{now}"),
            now,
            &mut Effects::default(),
        )
    };
    match again(&mut s, 100_000) {
        Check::Denied { id: d, reason, .. } => {
            assert_eq!(d, id);
            assert_eq!(reason.as_deref(), Some("nobody was on call"));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(again(&mut s, 122_000), Check::Pending { created: true, .. }));

    // Without it, the request only expires.
    let plain = rule(json!({})).unwrap();
    let (mut s, _, _) = store_with(&plain, 1_000);
    let mut fx = Effects::default();
    s.sweep(61_000, &mut fx);
    assert_eq!((fx.auto_denied, fx.expired), (0, 1));
    let grants = rule(json!({"on_expiry": "deny"})).unwrap().expiry_reason();
    assert_eq!(grants, "nobody decided within 60 s");
}

#[test]
fn events_of_rules_with_targets_are_kept_for_announcing_with_the_redacted_preview() {
    let terms = rule(json!({"notify": [{"url": "https://h/x", "format": "slack"}]})).unwrap();
    let (mut s, id, fx) = store_with(&terms, 1_000);
    assert_eq!(fx.announce.len(), 1);
    let (kind, a) = &fx.announce[0];
    assert_eq!(*kind, "approval.requested");
    let link = payload::link(None, a);
    assert_eq!(link, format!("http://gw/approvals/page#id={id}"));
    assert_eq!(
        payload::link(Some("https://approvals.example/approvals/page/"), a),
        format!("https://approvals.example/approvals/page#id={id}")
    );
    for f in [Format::Webhook, Format::Slack, Format::Teams] {
        let body = payload::body(f, kind, a, &link, "d1", 5).to_string();
        assert!(!body.contains("hunter2"), "{f:?} carries a raw argument: {body}");
        assert!(body.contains("[REDACTED]") && body.contains(&link), "{body}");
        assert!(body.contains("delete_file") && body.contains("sub:alice"), "{body}");
    }
    let slack = payload::body(Format::Slack, kind, a, &link, "d1", 5);
    assert_eq!(slack["blocks"][0]["type"], "header");
    assert_eq!(slack["blocks"][3]["elements"][0]["url"], link.as_str());
    let teams = payload::body(Format::Teams, kind, a, &link, "d1", 5);
    assert_eq!(
        teams["attachments"][0]["content"]["actions"][0]["type"],
        "Action.OpenUrl"
    );

    // A decision is kept too; a rule without targets keeps nothing.
    let mut fx = Effects::default();
    s.decide(
        &id,
        &who("bob", &["approver"]),
        serde_json::from_value(json!({"grant": "deny", "reason": "not <today> & not tomorrow"})).unwrap(),
        None,
        2_000,
        &mut fx,
    )
    .unwrap();
    assert_eq!(fx.announce.len(), 1);
    assert_eq!(fx.announce[0].0, "approval.decided");
    let slack = payload::body(Format::Slack, "approval.decided", &fx.announce[0].1, &link, "d2", 5).to_string();
    assert!(slack.contains("not &lt;today&gt; &amp; not tomorrow"), "{slack}");
    assert!(
        slack.contains("bob denied") || slack.contains("sub:bob deny"),
        "{slack}"
    );
    let (_, _, fx) = store_with(&rule(json!({})).unwrap(), 1_000);
    assert!(fx.announce.is_empty());
    let _ = GrantKind::Deny;
}
