use super::*;
use policy_agents::testing::{TestCall, TestRequest};
use serde_json::{json, Value};

const RULES: &str = r#"[
  {"name": "echo", "effect": "allow", "skills": ["echo", "summarize"], "when": {"roles_any": ["user"]}},
  {"name": "admins", "effect": "allow", "skills": ["admin_*"], "when": {"roles_any": ["admin"]}},
  {"name": "tasks", "effect": "allow", "methods": ["GetTask", "ListTasks", "CancelTask", "SubscribeToTask"]}
]"#;

fn send(method: &str, skill: Option<&str>) -> TestRequest {
    let mut message = json!({"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]});
    if let Some(s) = skill {
        message["metadata"] = json!({"skill": s});
    }
    rpc(method, json!({"message": message}))
}

fn rpc(method: &str, params: Value) -> TestRequest {
    TestRequest::new("POST", "/")
        .header("content-type", "application/json")
        .body(json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params}).to_string())
}

fn error(out: &RequestOutcome) -> Value {
    let d = out.denial().expect("denied");
    serde_json::from_slice(&d.body).unwrap()
}

#[tokio::test]
async fn skills_are_allowed_by_caller_and_the_rest_denied_by_default() {
    let p = A2aAuthorization::default();
    let user = TestCall::new().params(&[("rules", RULES)]).metadata("roles", "user");
    for method in ["SendMessage", "message/stream"] {
        let out = user.request(&p, &send(method, Some("echo"))).await.unwrap();
        assert!(out.denial().is_none(), "{method}");
        assert_eq!(out.metadata_value("a2a.rule"), Some("echo"));
        assert_eq!(out.metadata_value("a2a.skill"), Some("echo"));
    }
    let out = user
        .request(&p, &send("SendMessage", Some("admin_reset")))
        .await
        .unwrap();
    let e = error(&out);
    assert_eq!(out.denial().map(|d| d.status), Some(200));
    assert_eq!((e["id"].clone(), e["error"]["code"].clone()), (json!(9), json!(-32050)));
    assert_eq!(e["error"]["data"][0]["reason"], "SKILL_NOT_ALLOWED");
    assert_eq!(e["error"]["data"][0]["metadata"]["rule"], "default_deny");
    assert_eq!(out.metadata_value("a2a.decision"), Some("deny"));
    // No skill named and none fixed by the route: only rules without skills match.
    let out = user.request(&p, &send("SendMessage", None)).await.unwrap();
    assert!(out.denial().is_some());
    let admin = TestCall::new().params(&[("rules", RULES)]).metadata("roles", "admin");
    assert!(admin
        .request(&p, &send("SendMessage", Some("admin_reset")))
        .await
        .unwrap()
        .denial()
        .is_none());
    // Methods by their 1.0 names; unknown ones denied.
    assert!(user
        .request(&p, &rpc("tasks/get", json!({"id": "t"})))
        .await
        .unwrap()
        .denial()
        .is_none());
    let out = user
        .request(&p, &rpc("tasks/pushNotificationConfig/set", json!({"taskId": "t"})))
        .await
        .unwrap();
    assert_eq!(error(&out)["error"]["data"][0]["reason"], "METHOD_NOT_ALLOWED");
    let out = user.request(&p, &rpc("DeleteEverything", json!({}))).await.unwrap();
    assert!(out.denial().is_some());
    // The public card is always there.
    let card = TestRequest::new("GET", "/.well-known/agent-card.json");
    let out = TestCall::new()
        .params(&[("rules", RULES)])
        .request(&p, &card)
        .await
        .unwrap();
    assert!(out.denial().is_none());
}

#[tokio::test]
async fn the_route_can_fix_the_skill_and_rest_gets_http_statuses() {
    let p = A2aAuthorization::default();
    let fixed = TestCall::new()
        .params(&[("rules", RULES), ("skill", "summarize"), ("denial", "http_403")])
        .metadata("roles", "user");
    let out = fixed.request(&p, &send("SendMessage", None)).await.unwrap();
    assert!(out.denial().is_none());
    assert_eq!(out.metadata_value("a2a.skill"), Some("summarize"));
    let out = fixed.request(&p, &send("SendMessage", Some("echo"))).await.unwrap();
    assert_eq!(out.metadata_value("a2a.rule"), Some("skill_mismatch"));
    assert_eq!(out.denial().map(|d| d.status), Some(403));
    let rest = TestRequest::new("POST", "/rest/message:send")
        .header("content-type", "application/json")
        .body(
            json!({"message": {"messageId": "m", "parts": [{"text": "x"}], "metadata": {"skill": "admin_reset"}}})
                .to_string(),
        );
    let user = TestCall::new().params(&[("rules", RULES)]).metadata("roles", "user");
    let out = user.request(&p, &rest).await.unwrap();
    assert_eq!(out.denial().map(|d| d.status), Some(403));
    assert_eq!(error(&out)["error"]["status"], "PERMISSION_DENIED");
    assert_eq!(out.metadata_value("a2a.binding"), Some("rest"));
    let bad = TestRequest::new("POST", "/").body("{\"jsonrpc\": \"2.0\", \"id\": 1}");
    let out = user.request(&p, &bad).await.unwrap();
    assert_eq!(out.denial().map(|d| d.status), Some(200));
    assert_eq!(error(&out)["error"]["code"], -32600);
}

#[tokio::test]
async fn bad_params_name_the_param() {
    let p = A2aAuthorization::default();
    let call = TestCall::new().params(&[("rules", RULES), ("denial", "teapot")]);
    let err = call.request(&p, &send("SendMessage", Some("echo"))).await.unwrap_err();
    assert!(err.to_string().contains("denial"), "{err}");
}
