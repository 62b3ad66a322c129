use super::*;
use policy_agents::testing::{TestCall, TestRequest, TestResponse};

const BODY: &str = r#"{"model": "m", "messages": [{"role": "user", "content": "hi"}]}"#;

fn request(session: Option<&str>) -> TestRequest {
    let r = TestRequest::new("POST", "/v1/chat/completions").body(BODY);
    match session {
        Some(s) => r.header("x-session-id", s),
        None => r,
    }
}

/// One turn: the request phase, then a response reporting `usage`.
async fn turn(p: &ContextBudget, params: &[(&str, &str)], session: &str, usage: Value) -> Result<String, u16> {
    let out = TestCall::new()
        .params(params)
        .request(p, &request(Some(session)))
        .await
        .unwrap();
    if let Some(d) = out.denial() {
        return Err(d.status);
    }
    let estimate = out.metadata_value("context.estimate").unwrap().to_string();
    let resp = TestResponse::new(200)
        .header("content-type", "application/json")
        .body(json!({"choices": [], "usage": usage}).to_string());
    let out = TestCall::new()
        .params(params)
        .metadata("context.estimate", &estimate)
        .response(p, &request(Some(session)), &resp)
        .await
        .unwrap();
    let verdict = out.header_set("x-context-budget").unwrap().to_string();
    assert_eq!(out.metadata_value("context.verdict"), Some(verdict.as_str()));
    Ok(verdict)
}

#[tokio::test]
async fn verdicts_in_order_then_429() {
    let p = ContextBudget::new();
    let params = [("budget", "1000")];
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(turn(&p, &params, "s", json!({"total_tokens": 250})).await.unwrap());
    }
    assert_eq!(seen, ["ok", "delegate", "checkpoint", "summarize"]);
    assert_eq!(turn(&p, &params, "s", json!({"total_tokens": 1})).await, Err(429));
    // Another session has its own budget; Anthropic usage counts too.
    assert_eq!(
        turn(&p, &params, "t", json!({"input_tokens": 400, "output_tokens": 200})).await,
        Ok("delegate".to_string())
    );
}

#[tokio::test]
async fn the_429_says_why() {
    let p = ContextBudget::new();
    let out = TestCall::new()
        .params(&[("budget", "1")])
        .request(
            &p,
            &request(Some("s")).body(r#"{"messages": [{"role": "user", "content": "a long prompt"}]}"#),
        )
        .await
        .unwrap();
    let d = out.denial().unwrap();
    assert_eq!(d.status, 429);
    let b: Value = serde_json::from_slice(&d.body).unwrap();
    assert_eq!(b["reason"], "context_budget_exceeded");
    assert_eq!(b["budget"], 1);
}

#[tokio::test]
async fn without_a_session_nothing_is_counted() {
    let p = ContextBudget::new();
    let out = TestCall::new()
        .params(&[("budget", "1")])
        .request(&p, &request(None))
        .await
        .unwrap();
    assert!(out.denial().is_none());
    assert_eq!(out.metadata_value("context.verdict"), Some("no_session"));
}

#[test]
fn usage_shapes_and_thresholds() {
    assert_eq!(reported_usage(br#"{"usage": {"total_tokens": 7}}"#), Some(7));
    assert_eq!(
        reported_usage(br#"{"usage": {"prompt_tokens": 3, "completion_tokens": 4}}"#),
        Some(7)
    );
    assert_eq!(
        reported_usage(br#"{"usage": {"input_tokens": 3, "output_tokens": 4}}"#),
        Some(7)
    );
    assert_eq!(reported_usage(b"not json"), None);
    let cfg = BudgetConfig::parse(&[("budget", "100")].into_iter().collect()).unwrap();
    assert_eq!(
        [0, 49, 50, 70, 85, 100].map(|u| cfg.verdict(u)),
        ["ok", "ok", "delegate", "checkpoint", "summarize", "summarize"]
    );
}

#[test]
fn bad_params_name_the_param() {
    for (k, v) in [
        ("budget", "0"),
        ("budget", "lots"),
        ("delegate_at", "1.5"),
        ("checkpoint_at", "0.1"),
        ("session_ttl_s", "0"),
        ("verdict_header", "a b"),
    ] {
        let mut p: Vec<(&str, &str)> = vec![("budget", "100")];
        p.retain(|(key, _)| *key != k);
        p.push((k, v));
        let err = BudgetConfig::parse(&p.into_iter().collect()).unwrap_err().to_string();
        assert!(err.contains(k), "{k}={v}: {err}");
    }
    assert!(BudgetConfig::parse(&Params::default())
        .unwrap_err()
        .to_string()
        .contains("budget"));
}
