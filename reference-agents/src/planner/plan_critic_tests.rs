use super::*;
use policy_agents::testing::{TestCall, TestRequest, TestResponse};

fn request() -> TestRequest {
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [
        {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
        {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}
    ]});
    TestRequest::new("POST", "/v1/chat/completions").body(body.to_string())
}

fn completion(calls: &[(&str, &str)]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (n, a))| json!({"id": format!("call_{i}"), "type": "function", "function": {"name": n, "arguments": a}}))
        .collect();
    json!({"id": "c1", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": null, "tool_calls": calls}}]})
}

async fn run(params: &[(&str, &str)], body: &Value) -> ResponseOutcome {
    TestCall::new()
        .params(params)
        .response(
            &PlanCritic::new(),
            &request(),
            &TestResponse::new(200)
                .header("content-type", "application/json")
                .body(body.to_string()),
        )
        .await
        .unwrap()
}

const GUARDS: (&str, &str) = (
    "constraints",
    r#"[{"tools": ["read_file"], "path_args": ["path"], "allowed_paths": ["/srv/data"]}]"#,
);

#[tokio::test]
async fn an_allowed_plan_passes_unchanged() {
    let out = run(&[GUARDS], &completion(&[("read_file", r#"{"path": "/srv/data/a"}"#)])).await;
    assert!(out.denial().is_none() && out.body_set().is_none());
    assert_eq!(out.metadata_value("plan.decision"), Some("pass"));
    assert_eq!(out.metadata_value("plan.calls"), Some("1"));
}

#[tokio::test]
async fn block_names_the_call_and_the_check() {
    let out = run(
        &[GUARDS],
        &completion(&[("search", "{}"), ("read_file", r#"{"path": "/etc/shadow"}"#)]),
    )
    .await;
    let d = out.denial().expect("blocked");
    assert_eq!(d.status, 403);
    let b: Value = serde_json::from_slice(&d.body).unwrap();
    assert_eq!(b["reason"], "plan_rejected");
    assert_eq!(b["call"]["index"], 1);
    assert_eq!(b["call"]["id"], "call_1");
    assert_eq!(b["call"]["tool"], "read_file");
    assert_eq!(b["call"]["check"], "argument_refused");
    assert!(
        !d.body.windows(6).any(|w| w == b"shadow"),
        "no argument values in the error"
    );
    assert_eq!(out.metadata_value("plan.decision"), Some("block"));
    assert_eq!(out.metadata_value("plan.check"), Some("argument_refused"));
}

#[tokio::test]
async fn strip_removes_only_the_refused_calls() {
    let out = run(
        &[("on_violation", "strip")],
        &completion(&[("search", "{}"), ("delete_repo", "{}"), ("read_file", r#"{"path": 1}"#)]),
    )
    .await;
    assert!(out.denial().is_none());
    let body: Value = serde_json::from_slice(&out.body_set().expect("rewritten").body).unwrap();
    let left = body["choices"][0]["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["function"]["name"], "search");
    assert_eq!(out.metadata_value("plan.stripped"), Some("2"));
    assert_eq!(out.metadata_value("plan.refused"), Some("2"));
    assert_eq!(out.metadata_value("plan.check"), Some("unknown_tool"));
}

#[tokio::test]
async fn flag_sets_the_header_and_keeps_the_body() {
    let out = run(
        &[("on_violation", "flag"), ("max_calls", "1")],
        &completion(&[("search", "{}"), ("search", "{}")]),
    )
    .await;
    assert!(out.denial().is_none() && out.body_set().is_none());
    assert_eq!(out.header_set("x-plan-violation"), Some("step_limit:search"));
    assert_eq!(out.metadata_value("plan.decision"), Some("flag"));
}

#[tokio::test]
async fn anthropic_tool_use_blocks_are_checked() {
    let body = json!({"id": "m", "type": "message", "stop_reason": "tool_use", "content": [
        {"type": "text", "text": "ok"},
        {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": 5}}
    ]});
    let out = run(&[("on_violation", "strip")], &body).await;
    let body: Value = serde_json::from_slice(&out.body_set().expect("rewritten").body).unwrap();
    assert_eq!(body["content"].as_array().unwrap().len(), 1);
    assert_eq!(body["stop_reason"], "end_turn");
    assert_eq!(out.metadata_value("plan.check"), Some("schema_mismatch"));
}

#[tokio::test]
async fn bodies_that_are_not_plans_pass() {
    let deep = format!("{}{}", "[".repeat(50_000), "]".repeat(50_000));
    let out = TestCall::new()
        .response(
            &PlanCritic::new(),
            &request(),
            &TestResponse::new(200)
                .header("content-type", "application/json")
                .body(deep),
        )
        .await
        .unwrap();
    assert!(out.denial().is_none());
    assert_eq!(out.metadata_value("plan.decision"), Some("unreadable"));
    let out = TestCall::new()
        .response(
            &PlanCritic::new(),
            &request(),
            &TestResponse::new(500)
                .header("content-type", "application/json")
                .body("{}"),
        )
        .await
        .unwrap();
    assert!(out.metadata().is_empty());
}

#[tokio::test]
async fn bad_params_fail_with_a_500_naming_the_param() {
    let err = TestCall::new()
        .params(&[("on_violation", "explode")])
        .response(&PlanCritic::new(), &request(), &TestResponse::new(200))
        .await
        .unwrap_err();
    let d = err.denial().unwrap();
    assert_eq!(d.status, 500);
    assert!(String::from_utf8_lossy(&d.body).contains("on_violation"));
}
