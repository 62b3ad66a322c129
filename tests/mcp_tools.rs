//! End to end for MCP tool-call governance: a real MCP server and a real MCP
//! client session (the official Python SDK, PyPI `mcp`, streamable HTTP),
//! through a real Envoy and the kernel binary, with the real `auth-agent`
//! (JWT roles), `tool-agent`, `ratelimit-agent` and `guardrail-agent` on
//! Unix sockets. The client is `tests/mcp/client.py`, the server
//! `tests/mcp/server.py`; both run from the project's `.venv`.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

const SECRET: &str = "mcp-e2e-secret";

/// An HS256 JWT with `roles`.
fn jwt(sub: &str, roles: &[&str]) -> String {
    support::jwt::jwt(SECRET, sub, roles)
}

fn python() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    assert!(
        p.exists(),
        "{} missing: run `make test` (installs tests/requirements.txt, with `mcp`, into .venv)",
        p.display()
    );
    p
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

fn envoy_config(kernel: &Path, upstream: u16) -> String {
    let routes: String = [("mcpj", true), ("mcpr", true), ("mcp", false)]
        .iter()
        .map(|(r, rewrite)| {
            let rw = if *rewrite { ", prefix_rewrite: \"/mcp\"" } else { "" };
            format!("              - name: {r}\n                match: {{prefix: \"/{r}\"}}\n                route: {{cluster: upstream, timeout: 30s{rw}}}\n")
        })
        .collect();
    format!(
        r#"admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
static_resources:
  listeners:
  - name: main
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          access_log:
          - name: envoy.access_loggers.stdout
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog
              log_format:
                text_format_source:
                  inline_string: "ACCESS %REQ(:METHOD)% %REQ(:PATH)% %RESPONSE_CODE% %RESP(CONTENT-TYPE)% %DYNAMIC_METADATA(policy_kernel)%\n"
          route_config:
            name: local
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
{routes}{filters}  clusters:
  - name: policy_kernel
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{}}}}
    load_assignment:
      cluster_name: policy_kernel
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{pipe: {{path: {kernel}}}}}}}}}]}}]
  - name: upstream
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: upstream
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {upstream}}}}}}}}}]}}]
"#,
        kernel = kernel.display(),
        filters = support::envoy::ext_proc_filters("5s")
    )
}

/// Runs one MCP client session: one JSON value per step.
fn session(url: &str, mode: &str, token: Option<&str>, steps: &Value) -> Vec<Value> {
    let headers = match token {
        Some(t) => json!({"authorization": format!("Bearer {t}")}),
        None => json!({}),
    };
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py");
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
    let tmp = workdir();
    let dir = tmp.path();
    let sockets = dir.join("s");
    std::fs::create_dir_all(&sockets).unwrap();
    let sock = |n: &str| sockets.join(format!("{n}.sock"));

    // The MCP server (event-stream replies), on a port it picks.
    let port_file = dir.join("mcp.port");
    let mut cmd = Command::new(python());
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/server.py"))
        .arg("--port-file")
        .arg(&port_file);
    let _server = Proc::spawn("mcp-server", &mut cmd, &dir.join("mcp-server.log"));
    let deadline = Instant::now() + Duration::from_secs(30);
    let mcp_port: u16 = loop {
        if let Some(p) = std::fs::read_to_string(&port_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            break p;
        }
        assert!(
            Instant::now() < deadline,
            "MCP server did not start:\n{}",
            std::fs::read_to_string(dir.join("mcp-server.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    };

    let audit = dir.join("audit.jsonl");
    let spawn = |name: &str, args: Vec<String>| {
        let mut cmd = Command::new(agent_bin(name));
        cmd.args(args).env("DEMO_JWT_SECRET", SECRET);
        Proc::spawn(name, &mut cmd, &dir.join(format!("{name}.log")))
    };
    let _agents = [
        spawn("auth-agent", vec![format!("--socket={}", sock("auth").display())]),
        spawn("tool-agent", vec![format!("--socket={}", sock("tool").display())]),
        spawn(
            "ratelimit-agent",
            vec![format!("--socket={}", sock("ratelimit").display())],
        ),
        spawn(
            "guardrail-agent",
            vec![
                format!("--socket={}", sock("guardrail").display()),
                format!("--audit-path={}", audit.display()),
                "--audit-fsync-ms=5".into(),
            ],
        ),
    ];
    for n in ["auth", "tool", "ratelimit", "guardrail"] {
        wait_socket(&sock(n), Duration::from_secs(20));
    }
    // Health checks may wait up to a second: on a busy 2-core machine (debug
    // builds, parallel compiles) a 100 ms check can miss and turn a request
    // into the kernel's 503.
    let agents: String = ["auth", "tool", "ratelimit", "guardrail"]
        .iter()
        .map(|n| {
            format!(
                "    - name: {n}-agent\n      socket_path: {}\n      health_check_interval_ms: 100\n      health_check_timeout_ms: 1000\n",
                sock(n).display()
            )
        })
        .collect();
    let rate_limit = "        - policy: rateLimit\n          params: {requests_per_second: 0.1, burst: 2, key: \"metadata:mcp.tool\"}\n";
    let audit_log = "        - policy: auditLog\n          params: {log_response_body: false}\n";
    let routes = [
        route("mcp", "http_403", "", ""),
        route("mcpj", "jsonrpc_error", "", ""),
        route("mcpr", "http_403", rate_limit, audit_log),
    ]
    .concat();
    let kernel = KernelProc::start(dir, &format!("  agents:\n{agents}  route_policies:\n{routes}"));
    let envoy = Envoy::launch(dir, &envoy_config(&kernel.socket, mcp_port), &["-l", "warning"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while kernel.admin_get("/config").1.matches("\"healthy\":true").count() < 4 {
        assert!(
            Instant::now() < deadline,
            "agents not healthy: {}",
            kernel.admin_get("/config").1
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let url = |route: &str| envoy.url(&format!("/{route}"));
    let diag = || {
        format!(
            "kernel:\n{}\ntool-agent:\n{}\nenvoy:\n{}",
            kernel.log(),
            std::fs::read_to_string(dir.join("tool-agent.log")).unwrap_or_default(),
            envoy.log()
        )
    };
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
    let log = envoy.log();
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
    let verify = Command::new(agent_bin("guardrail-agent"))
        .arg("verify-audit")
        .arg(&audit)
        .output()
        .unwrap();
    assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stdout));
}
