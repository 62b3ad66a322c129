use super::*;
use policy_agents::testing::{TestCall, TestRequest, TestResponse};

fn call(tool: &str, args: Value) -> String {
    json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": tool, "arguments": args}}).to_string()
}

fn schema() -> Value {
    json!({"type": "object", "properties": {"count": {"type": "integer", "maximum": 10}, "q": {"type": "string"}}, "required": ["q"]})
}

fn req(body: String) -> TestRequest {
    TestRequest::new("POST", "/mcp").body(body)
}

#[tokio::test]
async fn schemas_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("schemas.json");
    std::fs::write(&path, json!({"search": schema()}).to_string()).unwrap();
    let p = path.display().to_string();
    let policy = ToolSchemaValidation::new();
    let tc = TestCall::new().params(&[("schemas_file", &p), ("learn", "false")]);
    let ok = tc
        .request(&policy, &req(call("search", json!({"q": "x", "count": 3}))))
        .await
        .unwrap();
    assert!(ok.denial().is_none());
    assert_eq!(ok.metadata_value("mcp.schema"), Some("valid"));
    let out = tc
        .request(
            &policy,
            &req(call("search", json!({"q": "secret-value", "count": "many"}))),
        )
        .await
        .unwrap();
    let d = out.denial().unwrap();
    assert_eq!(d.status, 200);
    let b: Value = serde_json::from_slice(&d.body).unwrap();
    assert_eq!(b["id"], 7);
    assert_eq!(b["error"]["code"], INVALID_PARAMS);
    assert_eq!(b["error"]["data"]["instancePath"], "/count");
    assert!(b["error"]["data"]["schemaPath"].as_str().unwrap().contains("type"));
    assert!(!String::from_utf8_lossy(&d.body).contains("many"));
    let missing = tc.request(&policy, &req(call("search", json!({})))).await.unwrap();
    assert!(missing.denial().is_some());
    // No arguments at all is validated as {}.
    let none = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search"}}).to_string();
    assert!(tc.request(&policy, &req(none)).await.unwrap().denial().is_some());
    // Unknown tools: allowed by default, refused with unknown_tools: deny.
    assert!(tc
        .request(&policy, &req(call("other", json!({}))))
        .await
        .unwrap()
        .denial()
        .is_none());
    let strict = TestCall::new().params(&[("schemas_file", &p), ("unknown_tools", "deny")]);
    assert!(strict
        .request(&policy, &req(call("other", json!({}))))
        .await
        .unwrap()
        .denial()
        .is_some());
    // A changed file is re-read.
    std::fs::write(
        &path,
        json!({"search": {"type": "object"}, "other": {"type": "object", "required": ["z"]}}).to_string(),
    )
    .unwrap();
    let out = tc.request(&policy, &req(call("other", json!({})))).await.unwrap();
    assert!(out.denial().is_some());
}

#[tokio::test]
async fn schemas_are_learned_from_tools_list_replies() {
    let policy = ToolSchemaValidation::new();
    let tc = TestCall::new();
    assert!(tc
        .request(&policy, &req(call("search", json!({"count": 99}))))
        .await
        .unwrap()
        .denial()
        .is_none());
    let list = json!({"jsonrpc": "2.0", "id": 2, "result": {"tools": [
        {"name": "search", "inputSchema": schema()},
        {"name": "broken", "inputSchema": {"type": 12}}
    ]}});
    let sse = format!("event: message\ndata: {list}\n\n");
    let resp = TestResponse::new(200)
        .header("content-type", "text/event-stream")
        .body(sse);
    let out = tc
        .response(&policy, &TestRequest::new("POST", "/mcp"), &resp)
        .await
        .unwrap();
    assert_eq!(out.metadata_value("mcp.schemas_learned"), Some("1"));
    let out = tc
        .request(&policy, &req(call("search", json!({"q": "a", "count": 99}))))
        .await
        .unwrap();
    let b: Value = serde_json::from_slice(&out.denial().unwrap().body).unwrap();
    assert_eq!(b["error"]["data"]["instancePath"], "/count");
    // Learned per endpoint: another path knows nothing.
    let other = TestRequest::new("POST", "/other-mcp").body(call("search", json!({"count": 99})));
    assert!(tc.request(&policy, &other).await.unwrap().denial().is_none());
}

#[tokio::test]
async fn schemas_are_learned_from_streamed_events() {
    let policy = ToolSchemaValidation::new();
    let tc = TestCall::new();
    let list = json!({"jsonrpc": "2.0", "id": 2, "result": {"tools": [{"name": "search", "inputSchema": schema()}]}});
    let progress = bytes::Bytes::from("data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n");
    let events = [
        progress,
        bytes::Bytes::from(format!("event: message\ndata: {list}\n\n")),
    ];
    let resp = TestResponse::new(200).header("content-type", "text/event-stream");
    let out = tc
        .chunk(
            &policy,
            &TestRequest::new("POST", "/mcp"),
            &resp,
            &events,
            0,
            false,
            b"",
        )
        .await
        .unwrap();
    assert!(out.replacement().is_none(), "events pass unchanged");
    assert_eq!(
        out.metadata_set(),
        &[("mcp.schemas_learned".to_string(), "1".to_string())]
    );
    let out = tc
        .request(&policy, &req(call("search", json!({"q": "a", "count": 99}))))
        .await
        .unwrap();
    assert!(out.denial().is_some(), "the learned schema applies");
}

#[tokio::test]
async fn bad_schema_files_fail_closed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.json");
    let policy = ToolSchemaValidation::new();
    for text in ["[1]", "{\"t\": {\"type\": 5}}", "{oops"] {
        std::fs::write(&path, text).unwrap();
        let p = path.display().to_string();
        let err = TestCall::new()
            .params(&[("schemas_file", &p)])
            .request(&policy, &req(call("t", json!({}))))
            .await
            .unwrap_err();
        assert!(err.message().contains("`schemas_file`"), "{text}: {}", err.message());
        assert_eq!(err.denial().map(|d| d.status), Some(500));
    }
    let missing = TestCall::new()
        .params(&[("schemas_file", "/nonexistent/s.json")])
        .request(&policy, &req(call("t", json!({}))))
        .await;
    assert!(missing.is_err());
    let neither = TestCall::new()
        .params(&[("learn", "false")])
        .request(&policy, &req(call("t", json!({}))))
        .await;
    assert!(neither.is_err());
}

#[test]
fn endpoints_are_paths_without_query_or_trailing_slash() {
    assert_eq!(scope("/mcp"), "/mcp");
    assert_eq!(scope("/mcp/?session=1"), "/mcp");
    assert_eq!(scope("/mcp#x"), "/mcp");
    assert_eq!(scope("/"), "/");
    assert_eq!(scope(""), "/");
}
