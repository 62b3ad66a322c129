//! End to end for MCP tool-call governance: a real MCP server and a real MCP
//! client session (the official Python SDK, PyPI `mcp`, streamable HTTP),
//! through a real Envoy and the kernel binary, with the real `auth-agent`
//! (JWT roles), `tool-agent`, `ratelimit-agent` and `guardrail-agent` on
//! Unix sockets. The client is `tests/mcp/client.py`, the server
//! `tests/mcp/server.py`; both run from the project's `.venv`.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use support::envoy::{self, EnvoyConfig, KernelAt};
use support::python::python;
use support::reference::{self, verify_audit};
use support::stack::AgentSpec;
use support::*;

const SECRET: &str = "mcp-e2e-secret";

/// An HS256 JWT with `roles`.
fn jwt(sub: &str, roles: &[&str]) -> String {
    let now = reference::now();
    let claims = json!({"sub": sub, "iss": "https://auth.example.com", "aud": "mcp", "roles": roles, "iat": now, "exp": now + 600});
    reference::jwt(SECRET, &claims)
}

const RULES: &str = r#"[{"name": "admins", "effect": "allow", "when": {"roles_any": ["admin"]}}, {"name": "readers", "effect": "allow", "tools": ["read_file", "fetch", "search"], "when": {"roles_any": ["reader"]}}, {"name": "listing", "effect": "allow", "methods": ["tools/list"]}]"#;

const CONSTRAINTS: &str = r#"[{"tools": ["read_file", "delete_file"], "path_args": ["path"], "allowed_paths": ["/srv/data"]}, {"tools": ["fetch"], "url_args": ["url"]}]"#;

fn route(name: &str, denial: &str, extra_request: &str, extra_response: &str) -> String {
    format!(
        r#"    - route_name: "{name}"
      request_policy_chain:
        - policy: jwtValidation
          params: {{issuer: "https://auth.example.com", audience: "mcp", hs256_secret_env: "DEMO_JWT_SECRET"}}
        - policy: mcpToolAuthorization
          params: {{denial: "{denial}", rules: {RULES}}}
        - policy: toolArgumentGuard
          params: {{denial: "{denial}", max_arg_bytes: 4096, constraints: {CONSTRAINTS}}}
        - policy: toolSchemaValidation
{extra_request}      response_policy_chain:
        - policy: mcpToolFilter
          params: {{rules: {RULES}}}
        - policy: toolSchemaValidation
{extra_response}"#
    )
}

/// Envoy's routes `mcpj` and `mcpr` (both rewritten to `/mcp`) and `mcp`,
/// each to the MCP server; the access log shows the reply's content type.
fn envoy_config(kernel: &Path, upstream: u16) -> String {
    let routes: String = [("mcpj", true), ("mcpr", true), ("mcp", false)]
        .iter()
        .map(|(r, rewrite)| {
            let rw = if *rewrite { ", prefix_rewrite: \"/mcp\"" } else { "" };
            envoy::route(r, &format!("/{r}"), &format!(", timeout: 30s{rw}"))
        })
        .collect();
    EnvoyConfig {
        kernels: vec![KernelAt::Socket(kernel)],
        upstream,
        access_log:
            "ACCESS %REQ(:METHOD)% %REQ(:PATH)% %RESPONSE_CODE% %RESP(CONTENT-TYPE)% %DYNAMIC_METADATA(policy_kernel)%",
        routes,
        message_timeout: "5s".into(),
        buffer_limit: None,
        upstream_limits: false,
        no_idle_timeout: false,
        extra_clusters: Vec::new(),
    }
    .render()
}

/// Runs one MCP client session: one JSON value per step.
fn session(url: &str, mode: &str, token: Option<&str>, steps: &Value) -> Vec<Value> {
    let headers = match token {
        Some(t) => json!({"authorization": format!("Bearer {t}")}),
        None => json!({}),
    };
    let client = root().join("tests/mcp/client.py");
    let out = Command::new(python())
        .arg(client)
        .args([url, mode, &headers.to_string(), &steps.to_string()])
        .output()
        .expect("run the MCP client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<Value> = stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    assert_eq!(
        lines.len(),
        steps.as_array().map_or(0, Vec::len),
        "client session failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    lines
}

fn tools(v: &Value) -> Vec<&str> {
    v["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_sessions_through_envoy_are_governed() {
    let b = Stack::builder();
    let audit = b.dir().join("audit.jsonl");
    let agent = |bin: &str, args: &[&str]| AgentSpec::bin(bin, bin, args).env("DEMO_JWT_SECRET", SECRET);
    let audit_path = format!("--audit-path={}", audit.display());
    let rate_limit = "        - policy: rateLimit\n          params: {requests_per_second: 0.1, burst: 2, key: \"metadata:mcp.tool\"}\n";
    let audit_log = "        - policy: auditLog\n          params: {log_response_body: false}\n";
    let routes = [
        route("mcp", "http_403", "", ""),
        route("mcpj", "jsonrpc_error", "", ""),
        route("mcpr", "http_403", rate_limit, audit_log),
    ]
    .concat();
    let s = b
        .agent(agent("auth-agent", &[]))
        .agent(agent("tool-agent", &[]))
        .agent(agent("ratelimit-agent", &[]))
        .agent(agent("guardrail-agent", &[&audit_path, "--audit-fsync-ms=5"]))
        .config(&format!("  route_policies:\n{routes}"))
        .mcp_upstream()
        .envoy_config(envoy_config)
        .start()
        .await;
    let url = |route: &str| s.url(&format!("/{route}"));
    let diag = || format!("{}\ntool-agent:\n{}", s.diag(), s.agent("tool-agent").log());
    let admin = jwt("ada", &["admin"]);
    let reader = jwt("rob", &["reader"]);

    // Two roles, two filtered lists; 2026-07-28 (server/discover) for one,
    // the older handshake (initialize) for the other. The server answers
    // with event streams, which the filter rewrites in place.
    let got = session(
        &url("mcp"),
        "auto",
        Some(&admin),
        &json!([["list"], ["call", "delete_file", {"path": "/srv/data/old"}]]),
    );
    assert_eq!(
        tools(&got[0]),
        vec!["delete_file", "fetch", "read_file", "search"],
        "{}",
        diag()
    );
    assert_eq!(got[1]["result"], "deleted /srv/data/old", "{got:?}");

    let ssrf = [
        "http://169.254.169.254/",
        "http://2130706433/",
        "http://0x7f.1/",
        "http://[::ffff:127.0.0.1]/",
        "http://10.0.0.1:8080/",
    ];
    let mut steps = vec![
        json!(["list"]),
        json!(["call", "read_file", {"path": "/srv/data/a.txt"}]),
        json!(["call", "delete_file", {"path": "/srv/data/a.txt"}]),
        json!(["call", "read_file", {"path": "../../etc/passwd"}]),
        json!(["call", "read_file", {"path": "/srv/data/../secret"}]),
        json!(["call", "fetch", {"url": "https://example.com/"}]),
        json!(["call", "search", {"q": "x", "count": "many"}]),
        json!(["call", "search", {"q": "x", "count": 3}]),
    ];
    steps.extend(ssrf.iter().map(|u| json!(["call", "fetch", {"url": u}])));
    let got = session(&url("mcp"), "legacy", Some(&reader), &Value::Array(steps));
    assert_eq!(tools(&got[0]), vec!["fetch", "read_file", "search"], "{}", diag());
    assert_eq!(got[1]["result"], "read /srv/data/a.txt", "{got:?}");
    for (i, what) in [(2, "denied tool"), (3, "relative path"), (4, "path traversal")] {
        assert_eq!(got[i]["status"], 403, "{what}: {:?}", got[i]);
    }
    assert_eq!(got[2]["error"]["data"]["rule"], "default_deny", "{got:?}");
    assert_eq!(got[3]["error"]["data"]["rule"], "relative_path", "{got:?}");
    assert_eq!(got[4]["error"]["data"]["rule"], "path_not_allowed", "{got:?}");
    assert_eq!(got[5]["result"], "fetched https://example.com/", "{got:?}");
    assert_eq!(
        (got[6]["status"].clone(), got[6]["error"]["code"].clone()),
        (json!(200), json!(-32602)),
        "{:?}",
        got[6]
    );
    assert_eq!(got[6]["error"]["data"]["instancePath"], "/count", "{:?}", got[6]);
    assert_eq!(got[7]["result"], "found 3 for x", "{got:?}");
    for (i, u) in ssrf.iter().enumerate() {
        assert_eq!(got[8 + i]["status"], 403, "{u}: {:?}", got[8 + i]);
        assert_eq!(
            got[8 + i]["error"]["data"]["rule"],
            "private_address",
            "{u}: {:?}",
            got[8 + i]
        );
    }

    // The other denial style: HTTP 200, a JSON-RPC error with the request's id.
    let got = session(
        &url("mcpj"),
        "auto",
        Some(&reader),
        &json!([["call", "delete_file", {"path": "/srv/data/a"}], ["call", "read_file", {"path": "/srv/data/../../etc/passwd"}], ["call", "fetch", {"url": "http://0x7f.1/"}]]),
    );
    assert!(got.iter().all(|g| g["status"] == 200), "{got:?}");
    assert_eq!(got[0]["error"]["code"], -32001, "{got:?}");
    assert_eq!(got[0]["error"]["data"]["rule"], "default_deny", "{got:?}");
    assert_eq!(got[1]["error"]["data"]["rule"], "path_not_allowed", "{got:?}");
    assert_eq!(got[2]["error"]["data"]["rule"], "private_address", "{got:?}");

    // No token: jwtValidation answers before any tool policy.
    let got = session(&url("mcp"), "auto", None, &json!([["list"]]));
    assert_eq!(got[0]["status"], 401, "{got:?}");

    // A per-tool rate limit (rateLimit keyed on metadata mcp.tool), journaled.
    let calls: Vec<Value> = (0..4)
        .map(|_| json!(["call", "search", {"q": "r", "count": 1}]))
        .collect();
    let got = session(&url("mcpr"), "auto", Some(&reader), &Value::Array(calls));
    assert_eq!(got[0]["result"], "found 1 for r", "{got:?}");
    assert!(got.iter().any(|g| g["status"] == 429), "no 429: {got:?}");

    // Hostile bodies from a client that is not the SDK.
    let c = reqwest::Client::new();
    let h = [
        ("authorization", format!("Bearer {reader}")),
        ("content-type", "application/json".into()),
    ];
    let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let r = send(&c, "POST", &url("mcp"), &h, Some("{\"jsonrpc\": \"2.0\", ")).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(serde_json::from_str::<Value>(&r.body).unwrap()["error"]["code"], -32700);
    let one = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let r = send(
        &c,
        "POST",
        &url("mcp"),
        &h,
        Some(&format!("[{}]", vec![one; 10_000].join(","))),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(serde_json::from_str::<Value>(&r.body).unwrap()["error"]["code"], -32600);
    let deep = format!("{}{}", "[".repeat(50_000), "]".repeat(50_000));
    let r = send(&c, "POST", &url("mcp"), &h, Some(&deep)).await;
    assert_eq!(r.status, 400, "{}\n{}", r.body, diag());

    // Decisions reach Envoy's access log as dynamic metadata.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let log = s.envoy.log();
    for needle in [
        "\"mcp.decision\":\"deny\"",
        "\"mcp.rule\":\"default_deny\"",
        "\"mcp.tool\":\"delete_file\"",
        "argument:path:relative_path",
        "argument:url:private_address",
        "\"mcp.rule\":\"schema\"",
    ] {
        assert!(log.contains(needle), "{needle} not in the access log:\n{log}");
    }
    assert!(
        log.lines()
            .any(|l| l.contains("text/event-stream") && l.contains("\"mcp.tools_hidden\":\"1\"")),
        "no filtered event-stream reply in the access log:\n{log}"
    );

    // The audit journal has the tool calls and its chain verifies.
    let journal = std::fs::read_to_string(&audit).unwrap_or_default();
    assert!(journal.contains("\"mcp.tool\":\"search\""), "{journal}");
    let verify = verify_audit(&audit);
    assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stdout));
}
