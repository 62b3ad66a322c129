use super::*;
use policy_agents::testing::{TestCall, TestRequest};

const CONSTRAINTS: &str = r#"[
    {"tools": ["read_file", "fs_*"], "path_args": ["path", "paths"], "allowed_paths": ["/srv/data"]},
    {"tools": ["fetch"], "url_args": ["url"], "max_arg_bytes": 2048},
    {"tools": ["docs_fetch"], "url_args": ["url"], "allowed_hosts": ["docs.example.com"]},
    {"tools": ["run"], "command_args": ["command"], "allowed_commands": ["git", "ls"]}
]"#;

fn call(tool: &str, args: serde_json::Value) -> String {
    serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": tool, "arguments": args}})
        .to_string()
}

async fn run(params: &[(&str, &str)], body: &str) -> RequestOutcome {
    TestCall::new()
        .params(params)
        .request(
            &ToolArgumentGuard::new(),
            &TestRequest::new("POST", "/mcp").body(body.to_string()),
        )
        .await
        .unwrap()
}

async fn refused(tool: &str, args: serde_json::Value) -> Option<(String, String)> {
    let out = run(&[("constraints", CONSTRAINTS)], &call(tool, args)).await;
    let d = out.denial()?;
    let b: serde_json::Value = serde_json::from_slice(&d.body).unwrap();
    Some((
        b["error"]["data"]["argument"].as_str().unwrap().to_string(),
        b["error"]["data"]["rule"].as_str().unwrap().to_string(),
    ))
}

fn r(arg: &str, rule: &str) -> Option<(String, String)> {
    Some((arg.to_string(), rule.to_string()))
}

#[tokio::test]
async fn paths() {
    assert_eq!(
        refused("read_file", serde_json::json!({"path": "/srv/data/a.txt"})).await,
        None
    );
    assert_eq!(
        refused("read_file", serde_json::json!({"path": "../../etc/passwd"})).await,
        r("path", "relative_path")
    );
    assert_eq!(
        refused("read_file", serde_json::json!({"path": "/srv/data/../secret"})).await,
        r("path", "path_not_allowed")
    );
    assert_eq!(
        refused("fs_list", serde_json::json!({"paths": ["/srv/data", "/etc"]})).await,
        r("paths", "path_not_allowed")
    );
    assert_eq!(
        refused("read_file", serde_json::json!({"path": 5})).await,
        r("path", "not_a_string")
    );
    // Other tools are not constrained.
    assert_eq!(
        refused("write_note", serde_json::json!({"path": "/etc/passwd"})).await,
        None
    );
}

#[tokio::test]
async fn urls_and_commands() {
    for url in [
        "http://169.254.169.254/",
        "http://2130706433/",
        "http://0x7f.1/",
        "http://[::ffff:127.0.0.1]/",
        "http://10.0.0.1:8080/",
    ] {
        assert_eq!(
            refused("fetch", serde_json::json!({"url": url})).await,
            r("url", "private_address"),
            "{url}"
        );
    }
    assert_eq!(
        refused("fetch", serde_json::json!({"url": "https://example.com/"})).await,
        None
    );
    assert_eq!(
        refused("fetch", serde_json::json!({"url": "http://example.com:22/"})).await,
        r("url", "port_not_allowed")
    );
    assert_eq!(
        refused("docs_fetch", serde_json::json!({"url": "https://evil.example/"})).await,
        r("url", "host_not_allowed")
    );
    assert_eq!(refused("run", serde_json::json!({"command": "git status"})).await, None);
    assert_eq!(
        refused("run", serde_json::json!({"command": "git status && rm -rf /"})).await,
        r("command", "shell_operator")
    );
    assert_eq!(
        refused("run", serde_json::json!({"command": ["/bin/rm", "-rf"]})).await,
        r("command", "path_in_command")
    );
}

#[tokio::test]
async fn sizes_and_secrets() {
    let big = "x".repeat(4000);
    assert_eq!(
        refused("fetch", serde_json::json!({"url": "https://example.com/", "body": big})).await,
        r("body", "argument_too_large")
    );
    // The value is never echoed: a secret in a refused URL stays out of the reply.
    let out = run(
        &[("constraints", CONSTRAINTS)],
        &call("fetch", serde_json::json!({"url": "http://admin:hunter2@10.0.0.1/"})),
    )
    .await;
    let d = out.denial().unwrap();
    assert!(!String::from_utf8_lossy(&d.body).contains("hunter2"));
    assert_eq!(d.status, 403);
    assert!(d.headers.iter().all(|(k, _)| k != "www-authenticate"));
    assert_eq!(out.metadata_value("mcp.rule"), Some("argument:url:credentials_in_url"));
    let global = run(
        &[("max_arg_bytes", "10")],
        &call("any", serde_json::json!({"q": "0123456789abc"})),
    )
    .await;
    assert!(global.denial().is_some());
    let ok = run(
        &[("max_arg_bytes", "10")],
        &call("any", serde_json::json!({"q": "short"})),
    )
    .await;
    assert_eq!(ok.metadata_value("mcp.args"), Some("ok"));
    let not_obj = run(&[("max_arg_bytes", "10")], &call("any", serde_json::json!(["a"]))).await;
    assert!(not_obj.denial().is_some());
}

#[tokio::test]
async fn jsonrpc_style_and_batches() {
    let p = [("constraints", CONSTRAINTS), ("denial", "jsonrpc_error")];
    let batch = format!(
        "[{},{}]",
        call("read_file", serde_json::json!({"path": "/srv/data/x"})),
        call("read_file", serde_json::json!({"path": "/etc/shadow"})).replace("\"id\":3", "\"id\":4")
    );
    let out = run(&p, &batch).await;
    let d = out.denial().unwrap();
    assert_eq!(d.status, 200);
    let b: serde_json::Value = serde_json::from_slice(&d.body).unwrap();
    assert_eq!(b.as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn bad_constraints_name_the_param() {
    let req = TestRequest::new("POST", "/mcp").body(call("read_file", serde_json::json!({})));
    for bad in [
        r#"[{"tools": []}]"#,
        r#"[{"tools": ["x"], "path_args": ["p"]}]"#,
        r#"[{"tools": ["x"], "command_args": ["c"]}]"#,
        r#"[{"tools": ["x"], "allowed_paths": ["relative"]}]"#,
        r#"[{"tools": ["x"], "allowed_hosts": ["*"]}]"#,
        r#"[{"tools": ["x"], "unknown": 1}]"#,
        "not json",
    ] {
        let err = TestCall::new()
            .params(&[("constraints", bad)])
            .request(&ToolArgumentGuard::new(), &req)
            .await
            .unwrap_err();
        assert!(err.message().contains("`constraints`"), "{bad}: {}", err.message());
    }
    let err = TestCall::new()
        .request(&ToolArgumentGuard::new(), &req)
        .await
        .unwrap_err();
    assert!(err.message().contains("constraints or max_arg_bytes"));
}
