use super::*;
use policy_agents::testing::{TestCall, TestRequest};

/// A history of `calls` (tool, arguments, result) in OpenAI style.
fn history(calls: &[(&str, &str, &str)]) -> Value {
    let mut messages = vec![json!({"role": "user", "content": "do it"})];
    for (i, (tool, args, result)) in calls.iter().enumerate() {
        let id = format!("c{i}");
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": tool, "arguments": args}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": result}));
    }
    json!({"model": "m", "messages": messages})
}

async fn run(policy: &FutilityGuard, params: &[(&str, &str)], session: Option<&str>, doc: &Value) -> RequestOutcome {
    let mut req = TestRequest::new("POST", "/v1/chat/completions").body(doc.to_string());
    if let Some(s) = session {
        req = req.header("x-session-id", s);
    }
    TestCall::new().params(params).request(policy, &req).await.unwrap()
}

const FAIL: (&str, &str, &str) = ("read_file", r#"{"path": "/x"}"#, "Error: ENOENT /x");

#[tokio::test]
async fn four_identical_failing_calls_are_futile() {
    let p = FutilityGuard::new();
    let out = run(&p, &[("action", "deny")], None, &history(&[FAIL; 3])).await;
    assert!(out.denial().is_none());
    assert_eq!(out.metadata_value("futility.decision"), Some("ok"));
    let out = run(&p, &[("action", "deny")], None, &history(&[FAIL; 4])).await;
    let d = out.denial().expect("denied");
    assert_eq!(d.status, 409);
    let b: Value = serde_json::from_slice(&d.body).unwrap();
    assert_eq!(
        (b["reason"].as_str(), b["pattern"].as_str()),
        (Some("futility_detected"), Some("repeated_failure"))
    );
    assert_eq!(b["tool"], "read_file");
    // Flag (the default): a request header for the upstream and metadata.
    let out = run(&p, &[], None, &history(&[FAIL; 4])).await;
    assert!(out.denial().is_none());
    assert_eq!(out.header_set("x-futility-detected"), Some("repeated_failure"));
    assert_eq!(out.metadata_value("futility.pattern"), Some("repeated_failure"));
    // A different error, or success, breaks the run.
    let mixed = [FAIL, FAIL, FAIL, ("read_file", r#"{"path": "/x"}"#, "Error: EACCES")];
    assert_eq!(
        run(&p, &[], None, &history(&mixed))
            .await
            .metadata_value("futility.decision"),
        Some("ok")
    );
    let ok = [("read_file", r#"{"path": "/x"}"#, "contents"); 4];
    assert_eq!(
        run(&p, &[], None, &history(&ok))
            .await
            .metadata_value("futility.decision"),
        Some("ok")
    );
}

#[tokio::test]
async fn oscillation_is_futile() {
    let p = FutilityGuard::new();
    let a = ("open", r#"{"tab": 1}"#, "tab 1 open");
    let b = ("close", r#"{"tab": 1}"#, "tab 1 closed");
    let out = run(&p, &[], None, &history(&[a, b, a, b])).await;
    assert_eq!(out.metadata_value("futility.pattern"), Some("oscillation"));
    let out = run(&p, &[], None, &history(&[a, b, a])).await;
    assert_eq!(out.metadata_value("futility.decision"), Some("ok"));
    let out = run(&p, &[("oscillation_cycles", "3")], None, &history(&[a, b, a, b])).await;
    assert_eq!(out.metadata_value("futility.decision"), Some("ok"));
}

#[tokio::test]
async fn a_productive_session_is_never_flagged_and_a_stagnant_one_is() {
    let p = FutilityGuard::new();
    let mut calls: Vec<(String, String)> = Vec::new();
    for turn in 0..12 {
        calls.push((format!("{{\"page\": {turn}}}"), format!("page {turn} of results")));
        let c: Vec<(&str, &str, &str)> = calls.iter().map(|(a, r)| ("search", a.as_str(), r.as_str())).collect();
        let out = run(&p, &[("action", "deny")], Some("s1"), &history(&c)).await;
        assert!(out.denial().is_none(), "turn {turn}");
    }
    // The same history again and again: no new result.
    let doc = history(&[("search", "{}", "nothing new")]);
    let mut denied_at = None;
    for turn in 0..8 {
        let out = run(&p, &[("action", "deny"), ("stagnation_turns", "3")], Some("s2"), &doc).await;
        if out.denial().is_some() {
            denied_at = Some(turn);
            break;
        }
    }
    assert_eq!(
        denied_at,
        Some(3),
        "the first turn brings a result, the next 3 nothing new"
    );
    // Without a session, stagnation is not tracked.
    for _ in 0..8 {
        let out = run(&p, &[("stagnation_turns", "1")], None, &doc).await;
        assert_eq!(out.metadata_value("futility.decision"), Some("ok"));
    }
}

#[tokio::test]
async fn hostile_bodies_and_bad_params() {
    let p = FutilityGuard::new();
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    for bad in ["not json", deep.as_str()] {
        let out = TestCall::new()
            .request(&p, &TestRequest::new("POST", "/").body(bad.to_string()))
            .await
            .unwrap();
        assert!(out.denial().is_none());
        assert_eq!(out.metadata_value("futility.decision"), Some("unreadable"));
    }
    for (k, v) in [
        ("repeat_threshold", "1"),
        ("oscillation_cycles", "x"),
        ("action", "halt"),
        ("deny_status", "200"),
        ("session_header", "bad header"),
    ] {
        let err = TestCall::new()
            .params(&[(k, v)])
            .request(&p, &TestRequest::new("POST", "/").body("{}"))
            .await
            .unwrap_err();
        assert!(err.message().contains(k), "{k}: {}", err.message());
    }
}
