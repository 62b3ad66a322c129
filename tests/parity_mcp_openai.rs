//! Parser parity for MCP and the OpenAI-shaped bodies, through a real Envoy
//! and the kernel with the real auth, tool and guardrail agents:
//! * MCP (`tests/mcp/parity.py`): variants of tool calls (duplicate keys,
//!   escapes, batches, notifications, ids, params forms, routing headers,
//!   the 2026-07-28 envelope, path and URL spellings) to the official Python
//!   SDK server (stateless) and TypeScript SDK server (sessions), which
//!   record each tool call they run as their SDK parsed it; every call that
//!   ran was allowed, every clean call ran, and the gateway's refusals keep
//!   the request's id;
//! * OpenAI (`tests/openai/parity.py`): an injection in every place the
//!   model reads text (chat messages as strings and parts, tool messages and
//!   calls, Responses API input as a string and as items, instructions,
//!   completions prompts; Gemini `generateContent` in both spellings of
//!   its field names and Bedrock Converse, with their function calls and
//!   results), escaped and repeated, and deep inside a long document a tool
//!   returned, to a model stand-in that records what the API documents the
//!   model is given; none reaches it, while a tool's ordinary README
//!   (`curl ... | sh`, read as tool output) does.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::envoy::{self, EnvoyConfig, KernelAt};
use support::mcp_ts::TsServer;
use support::python::python;
use support::*;

const SECRET: &str = "parity-secret";

const RULES: &str = r#"[{"name": "readers", "effect": "allow", "tools": ["read_file", "fetch", "search"], "when": {"roles_any": ["reader"]}}, {"name": "listing", "effect": "allow", "methods": ["tools/list"]}]"#;
const CONSTRAINTS: &str = r#"[{"tools": ["read_file", "delete_file"], "path_args": ["path"], "allowed_paths": ["/srv/data"]}, {"tools": ["fetch"], "url_args": ["url"]}]"#;

fn mcp_route(name: &str) -> String {
    format!(
        r#"    - route_name: "{name}"
      request_policy_chain:
        - policy: jwtValidation
          params: {{issuer: "https://auth.example.com", audience: "mcp", hs256_secret_env: "DEMO_JWT_SECRET"}}
        - policy: mcpToolAuthorization
          params: {{denial: "jsonrpc_error", rules: {RULES}}}
        - policy: toolArgumentGuard
          params: {{denial: "jsonrpc_error", constraints: {CONSTRAINTS}}}
        - policy: promptInjectionGuard
          params: {{action: block}}
"#
    )
}

/// A route to another cluster than `upstream`.
fn route_to(name: &str, prefix: &str, cluster: &str, rewrite: &str) -> String {
    format!(
        "              - name: {name}\n                match: {{prefix: \"{prefix}\"}}\n                route: {{cluster: {cluster}, timeout: 30s{rewrite}}}\n"
    )
}

fn spawn_py(dir: &Path, name: &str, script: &str, args: &[&str]) -> (Proc, u16) {
    let port_file = dir.join(format!("{name}.port"));
    let log = dir.join(format!("{name}.log"));
    let mut cmd = Command::new(python());
    cmd.arg(root().join(script))
        .arg("--port-file")
        .arg(&port_file)
        .args(args);
    let proc = Proc::spawn(name, &mut cmd, &log);
    let port = port_from_file(&port_file, Duration::from_secs(30), name, &log);
    (proc, port)
}

fn run_harness(script: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(python())
        .arg(root().join(script))
        .args(args)
        .output()
        .expect("run the parity harness");
    let text = format!(
        "{}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_servers_and_the_model_act_only_on_what_the_policies_read() {
    let b = Stack::builder();
    let dir = b.dir().to_path_buf();
    let tools_record = dir.join("tool-calls.jsonl");
    let model_record = dir.join("model.jsonl");
    let record = tools_record.display().to_string();
    let (_py, py_port) = spawn_py(&dir, "mcp-py", "tests/mcp/server.py", &["--json", "--record", &record]);
    let ts = TsServer::start_with(&dir, Some(&tools_record));
    let model_rec = model_record.display().to_string();
    let (_model, model_port) = spawn_py(&dir, "model", "tests/openai/model.py", &["--record", &model_rec]);
    let ts_port = ts.port;
    let llm_routes: String = ["llm", "gemini", "converse"]
        .iter()
        .map(|name| {
            format!("    - route_name: \"{name}\"\n      request_policy_chain:\n        - policy: promptInjectionGuard\n          params: {{action: block}}\n")
        })
        .collect();
    let routes = format!(
        "  route_policies:\n{}{}{llm_routes}",
        mcp_route("mcp"),
        mcp_route("mcpts")
    );
    let audit = dir.join("audit.jsonl");
    let s = b
        .governing_agents(SECRET, &audit)
        .config(&routes)
        .envoy_config(move |kernel, _| {
            EnvoyConfig {
                kernels: vec![KernelAt::Socket(kernel)],
                upstream: py_port,
                access_log: "ACCESS %REQ(:METHOD)% %REQ(:PATH)% %RESPONSE_CODE% %DYNAMIC_METADATA(policy_kernel)%",
                routes: [
                    route_to("mcpts", "/ts/mcp", "ts", ", prefix_rewrite: \"/mcp\""),
                    route_to("llm", "/v1/", "llm", ""),
                    route_to("gemini", "/v1beta/", "llm", ""),
                    route_to("converse", "/model/", "llm", ""),
                    envoy::route("mcp", "/mcp", ", timeout: 30s"),
                ]
                .concat(),
                message_timeout: "5s".into(),
                buffer_limit: None,
                upstream_limits: false,
                no_idle_timeout: false,
                extra_clusters: vec![("ts", ts_port), ("llm", model_port)],
            }
            .render()
        })
        .start()
        .await;
    let token = support::jwt::jwt(SECRET, "rita", &["reader"]);
    let diag = |report: &str| {
        format!(
            "{report}\n--- kernel ---\n{}\n--- envoy ---\n{}\n--- tool-agent ---\n{}",
            s.kernel.log(),
            s.envoy.log(),
            std::fs::read_to_string(s.dir.join("tool-agent.log")).unwrap_or_default()
        )
    };

    let (ok, report) = run_harness(
        "tests/mcp/parity.py",
        &[&s.envoy.url("/mcp"), &s.envoy.url("/ts/mcp"), &record, &token],
    );
    println!("{report}");
    assert!(ok && report.contains("\"violations\": []"), "{}", diag(&report));

    let (ok, report) = run_harness("tests/openai/parity.py", &[&s.envoy.url(""), &model_rec]);
    println!("{report}");
    assert!(ok && report.contains("\"violations\": []"), "{}", diag(&report));
}
