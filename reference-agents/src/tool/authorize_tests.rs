use super::*;
use crate::tool::INSUFFICIENT_SCOPE;
use policy_agents::testing::{TestCall, TestRequest};
use serde_json::Value;

const RULES: &str = r#"[
    {"name": "admins", "effect": "allow", "methods": ["tools/call", "prompts/get"], "when": {"roles_any": ["admin"]}},
    {"name": "readers", "effect": "allow", "tools": ["read_file"], "when": {"roles_any": ["reader"]}},
    {"name": "listing", "effect": "allow", "methods": ["tools/list"]}
]"#;

fn call(id: u64, tool: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#)
}

async fn run(params: &[(&str, &str)], role: &str, body: &str) -> RequestOutcome {
    let req = TestRequest::new("POST", "/mcp").body(body.to_string());
    TestCall::new()
        .params(params)
        .metadata("roles", role)
        .request(&McpToolAuthorization::new(), &req)
        .await
        .unwrap()
}

fn body(out: &RequestOutcome) -> Value {
    serde_json::from_slice(&out.denial().unwrap().body).unwrap()
}

#[tokio::test]
async fn allowed_calls_pass_with_metadata() {
    let out = run(&[("rules", RULES)], "reader", &call(1, "read_file")).await;
    assert!(out.denial().is_none());
    assert_eq!(out.metadata_value("mcp.method"), Some("tools/call"));
    assert_eq!(out.metadata_value("mcp.tool"), Some("read_file"));
    assert_eq!(out.metadata_value("mcp.decision"), Some("allow"));
    assert_eq!(out.metadata_value("mcp.rule"), Some("readers"));
    for open in [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"server/discover"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":"srv-1","result":{}}"#,
    ] {
        let out = run(&[("rules", "[]")], "", open).await;
        assert!(out.denial().is_none(), "{open}");
        assert_eq!(out.metadata_value("mcp.rule"), Some(ALWAYS_ALLOWED));
    }
}

#[tokio::test]
async fn http_403_denial() {
    let out = run(&[("rules", RULES)], "reader", &call(9, "delete_file")).await;
    let d = out.denial().unwrap();
    assert_eq!(d.status, 403);
    assert!(d
        .headers
        .iter()
        .any(|(k, v)| k == "www-authenticate" && v == INSUFFICIENT_SCOPE));
    let b = body(&out);
    assert_eq!(b["id"], 9);
    assert_eq!(b["error"]["data"]["rule"], "default_deny");
    assert_eq!(out.metadata_value("mcp.decision"), Some("deny"));
    assert_eq!(out.metadata_value("mcp.rule"), Some("default_deny"));
    assert_eq!(out.metadata_value("mcp.tool"), Some("delete_file"));
}

#[tokio::test]
async fn jsonrpc_error_denial_carries_the_id() {
    let p = [("rules", RULES), ("denial", "jsonrpc_error")];
    let out = run(&p, "reader", &call(42, "delete_file").replace("42", "\"abc\"")).await;
    let d = out.denial().unwrap();
    assert_eq!(d.status, 200);
    let b = body(&out);
    assert_eq!(
        (b["id"].clone(), b["error"]["code"].clone()),
        (Value::from("abc"), Value::from(DENIED))
    );
}

#[tokio::test]
async fn a_batch_with_one_denied_call_is_denied_whole() {
    let p = [("rules", RULES), ("denial", "jsonrpc_error")];
    let batch = format!(
        "[{},{},{}]",
        call(1, "read_file"),
        r#"{"jsonrpc":"2.0","method":"notifications/progress"}"#,
        call(2, "delete_file")
    );
    let out = run(&p, "reader", &batch).await;
    let b = body(&out);
    let errors = b.as_array().unwrap();
    assert_eq!(errors.len(), 2, "{b}");
    assert_eq!(errors[0]["id"], 1);
    assert!(errors[0]["error"]["message"].as_str().unwrap().contains("batch"));
    assert_eq!(errors[1]["id"], 2);
    assert_eq!(errors[1]["error"]["data"]["rule"], "default_deny");
    assert_eq!(out.metadata_value("mcp.method"), Some("batch"));
    assert_eq!(out.metadata_value("mcp.tool"), Some("read_file,delete_file"));
    assert_eq!(out.metadata_value("mcp.batch_size"), Some("3"));
    let fine = format!("[{},{}]", call(1, "read_file"), call(2, "read_file"));
    assert!(run(&p, "reader", &fine).await.denial().is_none());
}

#[tokio::test]
async fn other_methods_and_prefixes() {
    assert!(run(
        &[("rules", RULES)],
        "",
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#
    )
    .await
    .denial()
    .is_none());
    let out = run(
        &[("rules", RULES)],
        "reader",
        r#"{"jsonrpc":"2.0","id":1,"method":"completion/complete","params":{}}"#,
    )
    .await;
    assert_eq!(out.denial().map(|d| d.status), Some(403));
    // A notification is not a way around the rules.
    let sneaky = r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"delete_file"}}"#;
    assert!(run(&[("rules", RULES)], "reader", sneaky).await.denial().is_some());
    let p = [("rules", RULES), ("tool_prefix_separator", "__")];
    assert!(run(&p, "reader", &call(1, "files__read_file")).await.denial().is_none());
    assert!(run(&[("rules", RULES)], "reader", &call(1, "files__read_file"))
        .await
        .denial()
        .is_some());
}

#[tokio::test]
async fn bad_bodies_get_400_with_jsonrpc_errors() {
    for (raw, code) in [
        ("{not json", -32700),
        (r#"{"jsonrpc":"2.0","id":1}"#, -32600),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":5}}"#,
            -32602,
        ),
    ] {
        let out = run(&[("rules", RULES)], "admin", raw).await;
        let d = out.denial().unwrap();
        assert_eq!(d.status, 400, "{raw}");
        assert_eq!(body(&out)["error"]["code"], code, "{raw}");
        assert_eq!(out.metadata_value("mcp.rule"), Some("invalid_jsonrpc"));
    }
}

#[tokio::test]
async fn headers_must_agree_with_the_body() {
    let policy = McpToolAuthorization::new();
    let call_ = TestCall::new().params(&[("rules", RULES)]).metadata("roles", "reader");
    let req = |method: &str, name: &str| {
        TestRequest::new("POST", "/mcp")
            .header("mcp-method", method)
            .header("mcp-name", name)
            .body(call(1, "delete_file"))
    };
    let out = call_.request(&policy, &req("tools/call", "read_file")).await.unwrap();
    assert_eq!(out.denial().map(|d| d.status), Some(400));
    let out = call_.request(&policy, &req("tools/list", "delete_file")).await.unwrap();
    assert_eq!(out.denial().map(|d| d.status), Some(400));
    let out = call_.request(&policy, &req("tools/call", "delete_file")).await.unwrap();
    assert_eq!(out.denial().map(|d| d.status), Some(403));
    // Names that are not printable ASCII come base64-wrapped, as the SDK sends them.
    let wrapped = TestRequest::new("POST", "/mcp")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "=?base64?cmVhZF9maWxl?=")
        .body(call(1, "read_file"));
    assert!(call_.request(&policy, &wrapped).await.unwrap().denial().is_none());
    let bad = TestRequest::new("POST", "/mcp")
        .header("mcp-name", "=?base64?!!?=")
        .body(call(1, "read_file"));
    assert_eq!(
        call_.request(&policy, &bad).await.unwrap().denial().map(|d| d.status),
        Some(400)
    );
    // GET (the event stream) and DELETE carry no message.
    let get = call_.request(&policy, &TestRequest::new("GET", "/mcp")).await.unwrap();
    assert!(get.denial().is_none());
}

#[tokio::test]
async fn bad_params_fail_closed_naming_the_param() {
    let policy = McpToolAuthorization::new();
    let req = TestRequest::new("POST", "/mcp").body(call(1, "read_file"));
    for params in [
        vec![],
        vec![("rules", "{oops")],
        vec![("rules", RULES), ("denial", "teapot")],
    ] {
        let err = TestCall::new()
            .params(&params)
            .request(&policy, &req)
            .await
            .unwrap_err();
        let d = err.denial().unwrap();
        assert_eq!(d.status, 500);
        let b: Value = serde_json::from_slice(&d.body).unwrap();
        assert_eq!(b["error"]["code"], -32603);
        let msg = b["error"]["message"].as_str().unwrap();
        assert!(msg.contains("param `rules`") || msg.contains("param `denial`"), "{msg}");
    }
}

#[tokio::test]
async fn missing_body_is_a_failure_not_a_pass() {
    let req = TestRequest::new("POST", "/mcp");
    let r = TestCall::new()
        .params(&[("rules", RULES)])
        .request(&McpToolAuthorization::new(), &req)
        .await;
    assert!(r.is_err());
}

#[tokio::test]
async fn names_in_metadata_are_made_safe() {
    let evil = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": format!("x\r\nset-cookie: a{}", "y".repeat(1000))}})
    .to_string();
    let out = run(&[("rules", RULES)], "reader", &evil).await;
    let tool = out.metadata_value("mcp.tool").unwrap();
    assert!(
        tool.starts_with("x??set-cookie") && tool.chars().count() == 128,
        "{tool}"
    );
    assert_eq!(out.denial().map(|d| d.status), Some(403));
}

#[tokio::test]
async fn the_403_names_the_scope_that_would_allow_the_call() {
    let rules = r#"[
        {"name": "writers", "effect": "allow", "tools": ["write_*"], "when": {"scopes": ["files:write"]}},
        {"name": "readers", "effect": "allow", "tools": ["read_file"], "when": {"scopes": ["files:read"]}}
    ]"#;
    let rm = "https://gw.example.com/.well-known/oauth-protected-resource/mcp";
    let req = TestRequest::new("POST", "/mcp").body(call(3, "write_file"));
    let out = TestCall::new()
        .params(&[("rules", rules), ("resource_metadata", rm)])
        .metadata("scope", "files:read")
        .request(&McpToolAuthorization::new(), &req)
        .await
        .unwrap();
    let d = out.denial().unwrap();
    assert_eq!(d.status, 403);
    let challenge = &d.headers.iter().find(|(k, _)| k == "www-authenticate").unwrap().1;
    assert_eq!(
        challenge,
        &format!("Bearer error=\"insufficient_scope\", scope=\"files:write\", resource_metadata=\"{rm}\"")
    );
    // No rule would allow it with more scope: no `scope`.
    let req = TestRequest::new("POST", "/mcp").body(call(4, "delete_file"));
    let out = TestCall::new()
        .params(&[("rules", rules)])
        .request(&McpToolAuthorization::new(), &req)
        .await
        .unwrap();
    let challenge = &out
        .denial()
        .unwrap()
        .headers
        .iter()
        .find(|(k, _)| k == "www-authenticate")
        .unwrap()
        .1;
    assert_eq!(challenge, INSUFFICIENT_SCOPE);
}
