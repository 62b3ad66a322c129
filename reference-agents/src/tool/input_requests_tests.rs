//! `mcpServerRequestGuard` on MCP 2026-07-28: input requests in results
//! (JSON and SSE), the capabilities a request declared, and the retry.

use serde_json::{json, Value};

use super::{CALL_KEY, CAPABILITIES};
use crate::tool::{McpServerRequestGuard, REFUSED};
use policy_agents::stream::sse;
use policy_agents::testing::{TestCall, TestRequest, TestResponse};

const RULES: &str = r#"[{"name": "ask", "effect": "allow", "methods": ["elicitation/create", "roots/list"]}, {"name": "sample", "effect": "allow", "methods": ["sampling/createMessage"], "when": {"roles_any": ["admin"]}}]"#;
const HOSTS: (&str, &str) = ("allowed_hosts", "[\"example.com\"]");

fn caps_all() -> Value {
    json!({"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}})
}

fn call_body(id: u64, caps: &Value, retry: Option<(Value, &str)>) -> String {
    let mut params = json!({"name": "ask", "arguments": {"kind": "x"}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps}});
    if let Some((responses, state)) = retry {
        params["inputResponses"] = responses;
        params["requestState"] = json!(state);
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}).to_string()
}

/// A 2026-07-28 POST of `tools/call` `ask`, with its routing headers.
fn post(body: String) -> TestRequest {
    TestRequest::new("POST", "/mcp")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "ask")
        .header("mcp-protocol-version", "2026-07-28")
        .body(body)
}

fn asks(id: u64, requests: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": {"resultType": "input_required", "inputRequests": requests, "requestState": "server-state"}})
}

fn form(field: &str) -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "form", "message": "m",
        "requestedSchema": {"type": "object", "properties": {field: {"type": "string"}}}}})
}

fn url(u: &str) -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "url", "message": "m", "url": u}})
}

/// The request phase, then the reply `doc` as JSON; (the reply outcome's
/// body, if replaced, and the call the request phase left).
async fn round(guard: &McpServerRequestGuard, roles: &str, caps: &Value, doc: &Value) -> (Option<Value>, TestCall) {
    let params = [("rules", RULES), HOSTS];
    let req = post(call_body(1, caps, None));
    let first = TestCall::new()
        .params(&params)
        .metadata("roles", roles)
        .metadata("sub", "ann");
    let out = first.request(guard, &req).await.unwrap();
    assert!(out.denial().is_none());
    let mut call = TestCall::new()
        .params(&params)
        .metadata("roles", roles)
        .metadata("sub", "ann");
    for k in [CALL_KEY, CAPABILITIES, crate::tool::events::PENDING_ID] {
        call = call.metadata(k, out.metadata_value(k).expect("request metadata"));
    }
    let resp = TestResponse::new(200)
        .header("content-type", "application/json")
        .body(doc.to_string());
    let r = call.response(guard, &req, &resp).await.unwrap();
    let body = r.body_set().map(|b| serde_json::from_slice(&b.body).unwrap());
    (body, call)
}

#[tokio::test]
async fn input_requests_are_decided_like_the_requests_they_replace() {
    let guard = McpServerRequestGuard::default();
    // Allowed: a plain form, a URL to an allowed host, roots.
    let ok = asks(
        1,
        json!({"a": form("name"), "b": url("https://example.com/x"), "c": {"method": "roots/list"}}),
    );
    let (body, _) = round(&guard, "reader", &caps_all(), &ok).await;
    assert_eq!(body, None, "passes untouched");

    let refused = [
        (json!({"a": form("password")}), "secret_field", "reader"),
        (json!({"a": form("api_key")}), "secret_field", "reader"),
        (json!({"a": url("http://169.254.169.254/latest")}), "", "reader"),
        (json!({"a": url("http://127.0.0.1:8080/x")}), "", "reader"),
        (
            json!({"a": {"method": "sampling/createMessage", "params": {"messages": []}}}),
            "default_deny",
            "reader",
        ),
    ];
    for (requests, rule, roles) in refused {
        let (body, _) = round(&guard, roles, &caps_all(), &asks(1, requests.clone())).await;
        let body = body.unwrap_or_else(|| panic!("refused: {requests}"));
        assert_eq!(body["id"], 1, "{body}");
        assert_eq!(body["error"]["code"], -32001);
        assert_eq!(body["error"]["data"]["input_request"], "a");
        if !rule.is_empty() {
            assert_eq!(body["error"]["data"]["rule"], rule, "{body}");
        }
        assert!(
            body.get("result").is_none() && !body.to_string().contains("169.254"),
            "{body}"
        );
    }
    // An admin may be asked to sample.
    let sampling = asks(
        1,
        json!({"s": {"method": "sampling/createMessage", "params": {"messages": []}}}),
    );
    assert_eq!(round(&guard, "admin", &caps_all(), &sampling).await.0, None);
}

#[tokio::test]
async fn questions_for_undeclared_capabilities_and_unreadable_replies_are_refused() {
    let guard = McpServerRequestGuard::default();
    let form_only = json!({"elicitation": {}});
    let (body, _) = round(
        &guard,
        "reader",
        &form_only,
        &asks(1, json!({"u": url("https://example.com/")})),
    )
    .await;
    let body = body.expect("refused");
    assert_eq!(body["error"]["data"]["rule"], "capability_not_declared");
    assert_eq!(body["error"]["data"]["field"], "elicitation.url");
    let (body, _) = round(
        &guard,
        "reader",
        &json!({}),
        &asks(1, json!({"r": {"method": "roots/list"}})),
    )
    .await;
    assert_eq!(body.expect("refused")["error"]["data"]["field"], "roots");

    for bad in [
        json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "later"}}),
        json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "input_required", "inputRequests": [form("name")]}}),
    ] {
        let (body, _) = round(&guard, "reader", &caps_all(), &bad).await;
        let body = body.unwrap_or_else(|| panic!("refused: {bad}"));
        assert_eq!(body["error"]["data"]["rule"], "unreadable_reply", "{body}");
        assert_eq!(body["id"], 1);
    }
}

#[tokio::test]
async fn an_sse_reply_s_input_requests_are_read_event_by_event() {
    let guard = McpServerRequestGuard::default();
    let params = [("rules", RULES), HOSTS];
    let call = TestCall::new()
        .params(&params)
        .metadata("roles", "reader")
        .metadata(crate::tool::events::PENDING_ID, "4")
        .metadata(CAPABILITIES, "form,url,sampling,roots");
    let progress = sse::event(
        "message",
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#,
    );
    let last = sse::event("message", &asks(4, json!({"k": form("password")})).to_string());
    let resp = TestResponse::new(200).header("content-type", "text/event-stream");
    let out = call
        .chunk(
            &guard,
            &post(call_body(4, &caps_all(), None)),
            &resp,
            &[progress.clone(), last],
            0,
            false,
            b"",
        )
        .await
        .unwrap();
    let (reason, _) = out.ending().expect("the stream ends");
    assert_eq!(reason, REFUSED);
    let events = out.replacement().expect("events replaced");
    assert_eq!(events[0], progress, "what came before passes");
    let data: Value = serde_json::from_str(&sse::data(&events[1]).unwrap()).unwrap();
    assert_eq!(
        (data["id"].clone(), data["error"]["data"]["rule"].clone()),
        (json!(4), json!("secret_field"))
    );
    assert!(
        !data.to_string().contains("password\":{"),
        "nothing of the question: {data}"
    );
}

#[tokio::test]
async fn a_retry_may_answer_only_what_this_caller_was_asked_for_this_call() {
    let guard = McpServerRequestGuard::default();
    let params = [("rules", RULES), HOSTS];
    let ok = asks(1, json!({"a": form("name")}));
    let (body, _) = round(&guard, "reader", &caps_all(), &ok).await;
    assert_eq!(body, None);
    let answer = |key: &str| {
        Some((
            json!({key: {"action": "accept", "content": {"name": "Ada"}}}),
            "server-state",
        ))
    };
    let retry = |key: &str, sub: &str| {
        let call = TestCall::new()
            .params(&params)
            .metadata("roles", "reader")
            .metadata("sub", sub);
        (call, post(call_body(2, &caps_all(), answer(key))))
    };
    // Another caller cannot answer ann's question; a key never asked is refused.
    let (c, r) = retry("a", "bob");
    let out = c.request(&guard, &r).await.unwrap();
    assert_eq!(out.denial().map(|d| d.status), Some(403));
    assert_eq!(out.metadata_value("mcp.rule"), Some("unsolicited_input_response"));
    let (c, r) = retry("zzz", "ann");
    assert_eq!(
        c.request(&guard, &r).await.unwrap().denial().map(|d| d.status),
        Some(403)
    );
    // Ann's answer passes untouched, once.
    let (c, r) = retry("a", "ann");
    let out = c.request(&guard, &r).await.unwrap();
    assert!(out.denial().is_none() && out.body_set().is_none());
    let (c, r) = retry("a", "ann");
    assert!(
        c.request(&guard, &r).await.unwrap().denial().is_some(),
        "answered once only"
    );
    // A refused question is never answerable.
    let (body, _) = round(&guard, "reader", &caps_all(), &asks(1, json!({"p": form("password")}))).await;
    assert!(body.is_some());
    let (c, r) = retry("p", "ann");
    assert!(c.request(&guard, &r).await.unwrap().denial().is_some());
    // Unchecked with check_input_responses: false.
    let off = TestCall::new().params(&[("rules", RULES), ("check_input_responses", "false")]);
    assert!(off
        .request(&guard, &post(call_body(3, &caps_all(), answer("q"))))
        .await
        .unwrap()
        .denial()
        .is_none());
}

#[tokio::test]
async fn a_task_s_questions_are_answered_by_its_caller_through_tasks_update_only() {
    let guard = McpServerRequestGuard::default();
    let params = [("rules", RULES), HOSTS];
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps_all()});
    let task_req = |method: &str, extra: Value| {
        let mut p = json!({"taskId": "t1", "_meta": meta});
        if let Some(o) = extra.as_object() {
            for (k, v) in o {
                p[k] = v.clone();
            }
        }
        TestRequest::new("POST", "/mcp")
            .header("mcp-method", method)
            .header("mcp-name", "t1")
            .header("mcp-protocol-version", "2026-07-28")
            .body(json!({"jsonrpc": "2.0", "id": 8, "method": method, "params": p}).to_string())
    };
    let ann = || TestCall::new().params(&params).metadata("sub", "ann");
    let get = task_req("tasks/get", json!({}));
    let out = ann().request(&guard, &get).await.unwrap();
    let mut call = ann();
    for k in [CALL_KEY, CAPABILITIES] {
        call = call.metadata(k, out.metadata_value(k).expect("task metadata"));
    }
    let status = json!({"jsonrpc": "2.0", "id": 8, "result": {"taskId": "t1", "status": "input_required",
        "inputRequests": {"who": form("name")}}});
    let resp = TestResponse::new(200)
        .header("content-type", "application/json")
        .body(status.to_string());
    assert!(call.response(&guard, &get, &resp).await.unwrap().body_set().is_none());
    let update = |key: &str| task_req("tasks/update", json!({"inputResponses": {key: {"action": "accept"}}}));
    let bob = TestCall::new().params(&params).metadata("sub", "bob");
    assert!(
        bob.request(&guard, &update("who")).await.unwrap().denial().is_some(),
        "not bob's task"
    );
    assert!(
        ann()
            .request(&guard, &update("other"))
            .await
            .unwrap()
            .denial()
            .is_some(),
        "never asked"
    );
    assert!(ann().request(&guard, &update("who")).await.unwrap().denial().is_none());
    // A task status asking a secret is refused like a result.
    let secret = json!({"jsonrpc": "2.0", "id": 8, "result": {"taskId": "t1", "status": "input_required",
        "inputRequests": {"pw": form("password")}}});
    let resp = TestResponse::new(200)
        .header("content-type", "application/json")
        .body(secret.to_string());
    let out = call.response(&guard, &get, &resp).await.unwrap();
    let body: Value = serde_json::from_slice(&out.body_set().expect("refused").body).unwrap();
    assert_eq!(body["error"]["data"]["rule"], "secret_field");
}
