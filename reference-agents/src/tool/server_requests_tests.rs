use super::*;
use policy_agents::stream::sse;
use policy_agents::testing::{TestCall, TestRequest, TestResponse};
use serde_json::json;

const RULES: &str = r#"[{"name": "ask", "effect": "allow", "methods": ["elicitation/create", "roots/list"]}, {"name": "sample", "effect": "allow", "methods": ["sampling/createMessage"], "when": {"roles_any": ["admin"]}}]"#;

fn event(msg: Value) -> Bytes {
    sse::event("message", &msg.to_string())
}

fn elicit(id: u64, field: &str) -> Bytes {
    event(
        json!({"jsonrpc": "2.0", "id": id, "method": "elicitation/create", "params": {
        "message": "Confirm?", "requestedSchema": {"type": "object", "properties": {field: {"type": "string"}}}}}),
    )
}

fn progress() -> Bytes {
    event(json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}}))
}

fn sse_response() -> TestResponse {
    TestResponse::new(200).header("content-type", "text/event-stream")
}

fn post(session: &str) -> TestRequest {
    TestRequest::new("POST", "/mcp").header("mcp-session-id", session)
}

#[tokio::test]
async fn allowed_requests_and_notifications_pass_unchanged() {
    let guard = McpServerRequestGuard::default();
    let call = TestCall::new().params(&[("rules", RULES)]).metadata("roles", "admin");
    let sampling =
        event(json!({"jsonrpc": "2.0", "id": 2, "method": "sampling/createMessage", "params": {"messages": []}}));
    let events = [progress(), elicit(1, "name"), sampling];
    let out = call
        .chunk(&guard, &post("s"), &sse_response(), &events, 0, false, b"")
        .await
        .unwrap();
    assert!(out.replacement().is_none() && out.ending().is_none());
    let md: std::collections::HashMap<_, _> = out.metadata_set().iter().cloned().collect();
    assert_eq!(md["mcp.server_method"], "sampling/createMessage");
    assert_eq!(
        md["mcp.server_requests"],
        "elicitation/create:allow:ask,sampling/createMessage:allow:sample"
    );
    assert_eq!(md["mcp.server_requests_allowed"], "2");
}

#[tokio::test]
async fn a_refused_request_answers_the_pending_call_and_ends_the_stream() {
    let guard = McpServerRequestGuard::default();
    let call = TestCall::new()
        .params(&[("rules", RULES)])
        .metadata("roles", "reader")
        .metadata(PENDING_ID, "7");
    let sampling =
        event(json!({"jsonrpc": "2.0", "id": 3, "method": "sampling/createMessage", "params": {"messages": []}}));
    let events = [progress(), sampling, progress()];
    let out = call
        .chunk(&guard, &post("s"), &sse_response(), &events, 0, false, b"")
        .await
        .unwrap();
    let (reason, _) = out.ending().expect("ended");
    assert_eq!(reason, REFUSED);
    let sent = out.replacement().expect("replaced");
    assert_eq!(sent.len(), 2, "the progress before, then the error; nothing after");
    assert_eq!(sent[0], progress());
    let EventMessage::Message(err) = events::read(&sent[1]) else {
        panic!("an error event")
    };
    assert_eq!(err["id"], 7);
    assert_eq!(err["error"]["code"], -32001);
    assert_eq!(err["error"]["data"]["rule"], "default_deny");
    let md: std::collections::HashMap<_, _> = out.metadata_set().iter().cloned().collect();
    assert_eq!(md["mcp.server_decision"], "deny");
    assert_eq!(md["mcp.server_requests_refused"], "1");
    // A secret field in a form: refused too; on a GET stream (no pending
    // call) the event is dropped and the stream goes on.
    let get = TestCall::new().params(&[("rules", RULES)]);
    let list_changed = event(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
    let out = get
        .chunk(
            &guard,
            &TestRequest::new("GET", "/mcp"),
            &sse_response(),
            &[elicit(1, "password"), list_changed.clone()],
            0,
            false,
            b"",
        )
        .await
        .unwrap();
    assert_eq!(out.replacement(), Some(&[list_changed][..]));
    assert!(out.ending().is_none());
    let md: std::collections::HashMap<_, _> = out.metadata_set().iter().cloned().collect();
    assert_eq!(md["mcp.server_rule"], "secret_field");
}

#[tokio::test]
async fn client_responses_must_answer_what_the_server_asked() {
    let guard = McpServerRequestGuard::default();
    let params = [("rules", RULES), ("check_client_responses", "true")];
    let call = TestCall::new().params(&params);
    // The server asks id 4 in session s1.
    call.chunk(
        &guard,
        &post("s1"),
        &sse_response(),
        &[elicit(4, "name")],
        0,
        false,
        b"",
    )
    .await
    .unwrap();
    let answer = |id: u64, session: &str| {
        post(session)
            .body(json!({"jsonrpc": "2.0", "id": id, "result": {"action": "accept", "content": {}}}).to_string())
    };
    let out = call.request(&guard, &answer(4, "s2")).await.unwrap();
    assert_eq!(
        out.denial().map(|d| d.status),
        Some(403),
        "another session never asked 4"
    );
    let out = call.request(&guard, &answer(4, "s1")).await.unwrap();
    assert!(out.denial().is_none());
    assert_eq!(out.metadata_value("mcp.rule"), Some("answers_server_request"));
    let out = call.request(&guard, &answer(4, "s1")).await.unwrap();
    assert_eq!(out.denial().map(|d| d.status), Some(403), "answered once only");
    assert_eq!(out.metadata_value("mcp.rule"), Some("unsolicited_response"));
    // No session (protocol 2026-07-28): passes; unchecked without the param.
    let none = TestRequest::new("POST", "/mcp").body(r#"{"jsonrpc":"2.0","id":9,"result":{}}"#);
    assert!(call.request(&guard, &none).await.unwrap().denial().is_none());
    let unchecked = TestCall::new().params(&[("rules", RULES)]);
    assert!(unchecked
        .request(&guard, &answer(5, "s1"))
        .await
        .unwrap()
        .denial()
        .is_none());
}

#[tokio::test]
async fn requests_record_their_id_and_bad_input_changes_nothing() {
    let guard = McpServerRequestGuard::default();
    let call = TestCall::new().params(&[("rules", RULES)]);
    let req = TestRequest::new("POST", "/mcp")
        .body(r#"{"jsonrpc":"2.0","id":"a1","method":"tools/call","params":{"name":"t"}}"#);
    let out = call.request(&guard, &req).await.unwrap();
    assert_eq!(out.metadata_value(PENDING_ID), Some("\"a1\""));
    let bad = TestRequest::new("POST", "/mcp").body("{oops");
    assert_eq!(
        call.request(&guard, &bad).await.unwrap().denial().map(|d| d.status),
        Some(400)
    );
    let junk = [Bytes::from("data: {not json\n\n"), Bytes::from(": ping\n\n")];
    let out = call
        .chunk(&guard, &post("s"), &sse_response(), &junk, 0, false, b"")
        .await
        .unwrap();
    assert!(out.replacement().is_none() && out.ending().is_none());
    let err = call
        .chunk(&guard, &post("s"), &sse_response(), &junk, 1, false, b"{broken")
        .await
        .unwrap_err();
    assert!(err.message().contains("stream state"), "{}", err.message());
    let missing = TestCall::new().request(&guard, &req).await.unwrap_err();
    assert!(missing.message().contains("rules"), "{}", missing.message());
}
