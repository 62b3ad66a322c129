//! End to end for approvals: an `approve` rule on MCP tool calls, through a
//! real Envoy, the kernel binary, `auth-agent` (HS256 JWTs with roles) and
//! `tool-agent` (which keeps the approvals, journals them, and serves the
//! approvals API and page), with the official MCP SDKs as clients
//! (`tests/mcp/ts/approval_client.mjs`, `tests/mcp/approval_client.py`), the
//! Python MCP server recording the calls it runs, and the page driven in
//! headless Chromium (`tests/approvals/page.mjs`).

mod support;

use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};
use support::approval_client::{waiting, Client};
use support::reference::verify_audit;
use support::stack::AgentSpec;
use support::*;

const SECRET: &str = "approvals-e2e-secret";

fn jwt(sub: &str, roles: &[&str]) -> String {
    support::jwt::jwt(SECRET, sub, roles)
}

/// Deletes need a person (an `approver`, never the caller itself); reads
/// pass; listing passes.
const RULES: &str = r#"[{"name": "deletes", "effect": "approve", "tools": ["delete_file"], "approval": {"approvers": {"roles_any": ["approver"]}, "ttl_s": 600}}, {"name": "readers", "effect": "allow", "tools": ["read_file", "search", "fetch"]}, {"name": "listing", "effect": "allow", "methods": ["tools/list"]}]"#;

use support::jwt::JWT_PARAMS as JWT;

fn routes() -> String {
    format!(
        r#"  route_policies:
    - route_name: mcp
      request_policy_chain:
        - policy: jwtValidation
          params: {JWT}
        - policy: mcpToolAuthorization
          params: {{rules: {RULES}}}
      response_policy_chain:
        - policy: approvalOutcome
    - route_name: approvals-page
      request_policy_chain:
        - policy: approvals
    - route_name: approvals
      request_policy_chain:
        - policy: jwtValidation
          params: {JWT}
        - policy: approvals
"#
    )
}

struct Approvals {
    s: Stack,
    dir: PathBuf,
    journal: PathBuf,
}

async fn start() -> Approvals {
    let b = Stack::builder();
    let dir = b.dir().to_path_buf();
    let journal = dir.join("approvals.jsonl");
    let journal_arg = format!("--approvals-journal={}", journal.display());
    let s = b
        .agent(AgentSpec::bin("auth-agent", "auth-agent", &[]).env("DEMO_JWT_SECRET", SECRET))
        .agent(AgentSpec::bin(
            "tool-agent",
            "tool-agent",
            &[&journal_arg, "--approvals-per-principal=3"],
        ))
        .config(&routes())
        .mcp_upstream()
        .envoy_config(|kernel, upstream| {
            support::approvals::envoy_config(kernel, upstream, &support::approvals::mcp_route(), Vec::new())
        })
        .start()
        .await;
    Approvals { s, dir, journal }
}

impl Approvals {
    fn diag(&self) -> String {
        format!("{}\ntool-agent:\n{}", self.s.diag(), self.s.agent("tool-agent").log())
    }

    /// The tool calls the MCP server ran: `(tool, path)`.
    fn ran(&self) -> Vec<(String, String)> {
        support::approvals::ran(&self.dir.join("mcp-calls.jsonl"))
    }

    async fn api(
        &self,
        method: &str,
        path: &str,
        token: &str,
        body: Option<Value>,
        if_match: Option<&str>,
    ) -> (u16, Value, Option<String>) {
        let client = reqwest::Client::new();
        let mut req = client
            .request(method.parse().unwrap(), self.s.url(path))
            .header("authorization", format!("Bearer {token}"));
        if let Some(b) = body {
            req = req.json(&b);
        }
        if let Some(tag) = if_match {
            req = req.header("if-match", tag);
        }
        let r = req.send().await.expect("approvals API");
        let status = r.status().as_u16();
        let etag = r.headers().get("etag").and_then(|v| v.to_str().ok()).map(String::from);
        let text = r.text().await.unwrap_or_default();
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, v, etag)
    }
}

/// Runs the page driver; its JSON report.
fn page(args: Value) -> Value {
    let dir = root().join("tests/approvals");
    assert!(
        dir.join("node_modules/playwright-core").exists(),
        "tests/approvals/node_modules missing: run `make test` (it runs `npm ci` there)"
    );
    let out = Command::new("node")
        .current_dir(&dir)
        .arg(dir.join("page.mjs"))
        .arg(args.to_string())
        .output()
        .expect("run the page driver");
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap_or_else(|_| {
        panic!(
            "page driver failed ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_call_waits_for_a_person_and_only_the_approved_call_runs() {
    let a = start().await;
    let url = a.s.url("/mcp");
    let alice = jwt("alice", &["agent"]);
    let bob = jwt("bob", &["approver"]);
    let mallory = jwt("mallory", &["agent"]);
    let args = json!({"path": "/srv/data/old.csv"});

    // The official TypeScript SDK, declaring URL elicitation: -32042 with
    // the page's URL, which names the approval.
    let mut ts = Client::start(
        "ts",
        &url,
        &alice,
        json!({"url_elicitation": true, "tool": "delete_file", "arguments": args}),
        &a.dir,
    );
    let first = ts.next();
    assert!(first.get("elicitation").is_some(), "{first}\n{}", a.diag());
    let (id, page_url) = waiting(&first);
    assert!(page_url.ends_with(&format!("/approvals/page#id={id}")), "{first}");
    assert!(a.ran().is_empty(), "a call waiting for approval ran: {:?}", a.ran());
    // Retried before anyone decided: the same request, still waiting.
    let again = ts.send("retry");
    assert_eq!(waiting(&again).0, id, "{again}");

    // The approver sees it, redacted and bound to the exact call.
    let (status, list, _) = a.api("GET", "/approvals?state=pending", &bob, None, None).await;
    assert_eq!(status, 200, "{list}\n{}", a.diag());
    let item = list["approvals"]
        .as_array()
        .and_then(|l| l.iter().find(|x| x["id"] == id.as_str()))
        .unwrap_or_else(|| panic!("{id} not listed: {list}"))
        .clone();
    assert_eq!(
        (
            item["principal"].as_str(),
            item["target"].as_str(),
            item["route"].as_str()
        ),
        (Some("sub:alice"), Some("delete_file"), Some("mcp")),
        "{item}"
    );
    assert_eq!(item["args_preview"], args, "{item}");
    assert_eq!(item["attempts"], 2, "{item}");
    assert_eq!(item["route_version"].as_str().map(str::len), Some(16), "{item}");
    // Nobody else sees it; the caller sees its own but may not decide it.
    let (_, others, _) = a.api("GET", "/approvals", &mallory, None, None).await;
    assert_eq!(others["approvals"], json!([]), "{others}");
    let (status, own, _) = a
        .api(
            "POST",
            &format!("/approvals/{id}"),
            &alice,
            Some(json!({"grant": "allow_once"})),
            None,
        )
        .await;
    assert_eq!(
        (status, own["reason"].as_str()),
        (403, Some("not_an_approver")),
        "{own}"
    );
    let (status, forged, _) = a
        .api(
            "POST",
            "/approvals/00000000000000000000000000000000",
            &bob,
            Some(json!({"grant": "allow_once"})),
            None,
        )
        .await;
    assert_eq!(status, 404, "{forged}");

    // A stale view is refused (412); the current one decides.
    let (status, one, etag) = a.api("GET", &format!("/approvals/{id}"), &bob, None, None).await;
    assert_eq!(status, 200, "{one}");
    let etag = etag.expect("an ETag");
    let (status, stale, _) = a
        .api(
            "POST",
            &format!("/approvals/{id}"),
            &bob,
            Some(json!({"grant": "allow_once"})),
            Some("\"0000.1\""),
        )
        .await;
    assert_eq!(status, 412, "{stale}");
    let (status, decided, _) = a
        .api(
            "POST",
            &format!("/approvals/{id}"),
            &bob,
            Some(json!({"grant": "allow_once"})),
            Some(&etag),
        )
        .await;
    assert_eq!((status, decided["state"].as_str()), (200, Some("allowed")), "{decided}");
    let (status, twice, _) = a
        .api(
            "POST",
            &format!("/approvals/{id}"),
            &bob,
            Some(json!({"grant": "deny"})),
            None,
        )
        .await;
    assert_eq!(
        (status, twice["reason"].as_str()),
        (409, Some("already_decided")),
        "{twice}"
    );

    // Other arguments do not ride on the approval; the approved call runs once.
    let changed = ts.send(r#"call {"tool": "delete_file", "arguments": {"path": "/srv/data/other.csv"}}"#);
    let (other_id, _) = waiting(&changed);
    assert_ne!(other_id, id);
    let ran = ts.send(&format!("call {}", json!({"tool": "delete_file", "arguments": args})));
    assert_eq!(ran["result"], "deleted /srv/data/old.csv", "{ran}\n{}", a.diag());
    let once_more = ts.send("retry");
    assert_ne!(
        waiting(&once_more).0,
        id,
        "an allow_once grant served twice: {once_more}"
    );
    assert_eq!(
        a.ran(),
        vec![("delete_file".to_string(), "/srv/data/old.csv".to_string())],
        "only the approved call may run"
    );

    // Another principal retrying the approved call's exact arguments is not
    // covered either.
    let other = Client::start(
        "ts",
        &url,
        &mallory,
        json!({"url_elicitation": true, "tool": "delete_file", "arguments": {"path": "/srv/data/other.csv"}}),
        &a.dir,
    );
    let theirs = other.next();
    assert_ne!(waiting(&theirs).0, other_id, "another principal's approval: {theirs}");
    drop(other);

    // Denied with a reason: the retry says so and does not run.
    let (status, denied, _) = a
        .api(
            "POST",
            &format!("/approvals/{other_id}"),
            &bob,
            Some(json!({"grant": "deny", "reason": "not during the audit", "alternative": "archive it"})),
            None,
        )
        .await;
    assert_eq!(status, 200, "{denied}");
    let refused = ts.send(r#"call {"tool": "delete_file", "arguments": {"path": "/srv/data/other.csv"}}"#);
    assert_eq!(refused["error"]["data"]["reason"], "approval_denied", "{refused}");
    assert_eq!(refused["error"]["data"]["alternative"], "archive it", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("not during the audit"),
        "{refused}"
    );
    assert_eq!(a.ran().len(), 1, "a denied call ran: {:?}", a.ran());

    // A flood from one caller is bounded (3 pending each here): 429.
    let mut flood = Client::start(
        "ts",
        &url,
        &alice,
        json!({"url_elicitation": true, "tool": "delete_file", "arguments": {"path": "/tmp/f1"}}),
        &a.dir,
    );
    let mut last = flood.next();
    for n in 2..=4 {
        last = flood.send(&format!(
            r#"call {{"tool": "delete_file", "arguments": {{"path": "/tmp/f{n}"}}}}"#
        ));
    }
    assert_eq!(last["http_status"], 429, "{last}");
    assert!(last.to_string().contains("approval_limit"), "{last}");
    // Reads need no approval and pass meanwhile.
    let read = flood.send(r#"call {"tool": "read_file", "arguments": {"path": "/srv/data/a"}}"#);
    assert_eq!(read["result"], "read /srv/data/a", "{read}");
    drop(flood);
    drop(ts);

    // The journal holds each step, chained.
    let out = verify_audit(&a.journal);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let events: Vec<Value> = std::fs::read_to_string(&a.journal)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|r: &Value| r["approval_id"] == id.as_str())
        .collect();
    let kinds: Vec<&str> = events.iter().filter_map(|r| r["event"].as_str()).collect();
    assert_eq!(kinds, ["requested", "decided", "released", "executed"], "{events:?}");
    assert_eq!(
        events[3]["status"], 200,
        "the server's answer to the released call: {events:?}"
    );
    assert!(events.iter().all(|r| r["at_ms"].as_u64().is_some()), "{events:?}");
    assert!(
        events[..3].iter().all(|r| r["args_digest"] == item["args_digest"]),
        "{events:?}"
    );
    assert_eq!(events[1]["by"], "sub:bob");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_decides_for_the_python_sdk_and_grants_keep_their_scope() {
    let a = start().await;
    let url = a.s.url("/mcp");
    let alice = jwt("alice", &["agent"]);
    let bob = jwt("bob", &["approver"]);
    let diag = || a.diag();

    // The official Python SDK with the initialize handshake (a session).
    let mut py = Client::start(
        "python",
        &url,
        &alice,
        json!({"url_elicitation": true, "mode": "legacy", "tool": "delete_file",
               "arguments": {"path": "/srv/data/bob@example.com/report.csv"}}),
        &a.dir,
    );
    let first = py.next();
    let (id, page_url) = waiting(&first);

    // In the page, in headless Chromium, by keyboard: the preview is
    // redacted; no session (this server keeps none), so no session grant is
    // offered; "Allow always".
    let got = page(
        json!({"url": page_url, "header": "authorization", "credential": format!("Bearer {bob}"),
        "id": id, "action": "allow_always"}),
    );
    assert_eq!(got["ok"], true, "{got}\n{}", diag());
    assert_eq!(got["gone"], true, "{got}");
    assert_eq!(got["console_errors"], json!([]), "{got}");
    assert!(!got["buttons"].to_string().contains("session"), "{got}");
    let preview = got["preview"].as_str().unwrap_or("");
    assert!(preview.contains("/srv/data/") && preview.contains("REDACTED"), "{got}");
    assert!(!preview.contains("bob@example.com"), "unredacted: {got}");

    // The retry passes, and so does another delete by the same caller.
    let ran = py.send("retry");
    assert_eq!(
        ran["result"],
        "deleted /srv/data/bob@example.com/report.csv",
        "{ran}\n{}",
        diag()
    );
    let more = py.send(r#"call {"tool": "delete_file", "arguments": {"path": "/srv/data/b.csv"}}"#);
    assert_eq!(more["result"], "deleted /srv/data/b.csv", "{more}");
    // Revoking the standing grant puts the tool back to approval.
    let (status, revoked, _) = a
        .api("DELETE", &format!("/approvals/{id}/grant"), &bob, None, None)
        .await;
    assert_eq!((status, revoked["state"].as_str()), (200, Some("revoked")), "{revoked}");
    let fresh = py.send(r#"call {"tool": "delete_file", "arguments": {"path": "/srv/data/c.csv"}}"#);
    let (id2, page2) = waiting(&fresh);

    // Constrained, in the page: deletes only under /srv/data/tmp/.
    let got = page(
        json!({"url": page2, "header": "authorization", "credential": format!("Bearer {bob}"),
        "id": id2, "action": "allow_constrained", "constraints": {"path_prefix": {"path": "/srv/data/tmp/"}}}),
    );
    assert_eq!(got["ok"], true, "{got}");
    let inside = py.send(r#"call {"tool": "delete_file", "arguments": {"path": "/srv/data/tmp/x"}}"#);
    assert_eq!(inside["result"], "deleted /srv/data/tmp/x", "{inside}");
    let outside = py.send(r#"call {"tool": "delete_file", "arguments": {"path": "/srv/data/tmp/../secret"}}"#);
    assert_eq!(waiting(&outside).0.len(), 32, "{outside}");
    // The original call (outside the limits) is not allowed by them.
    let orig = py.send(r#"call {"tool": "delete_file", "arguments": {"path": "/srv/data/c.csv"}}"#);
    assert!(orig.get("elicitation").is_some(), "{orig}");
    drop(py);
    let ran: Vec<String> = a.ran().into_iter().map(|(_, p)| p).collect();
    assert_eq!(
        ran,
        [
            "/srv/data/bob@example.com/report.csv",
            "/srv/data/b.csv",
            "/srv/data/tmp/x"
        ],
        "only granted calls may run"
    );

    // A client that says it cannot do URL elicitation (2026-07-28 `_meta`)
    // gets -32021 (a missing client capability) naming the capability, with
    // the URL and the id.
    let plain = Client::start(
        "python",
        &url,
        &alice,
        json!({"url_elicitation": false, "mode": "auto", "tool": "delete_file", "arguments": {"path": "/srv/data/d"}}),
        &a.dir,
    );
    let e = plain.next();
    assert_eq!(e["error"]["code"], -32021, "{e}");
    assert_eq!(
        e["error"]["data"]["requiredCapabilities"],
        json!({"elicitation": {"url": {}}}),
        "{e}"
    );
    let aid = e["error"]["data"]["approval_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{e}"))
        .to_string();
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains(&format!("#id={aid}")),
        "{e}"
    );
    drop(plain);

    // The event stream resumes from Last-Event-ID.
    let client = reqwest::Client::new();
    let events = |after: u64| {
        client
            .get(a.s.url("/approvals/events"))
            .header("authorization", format!("Bearer {bob}"))
            .header("last-event-id", after.to_string())
            .send()
    };
    let all = events(0).await.unwrap().text().await.unwrap();
    assert!(
        all.contains("event: approval.requested") && all.contains("event: approval.decided"),
        "{all}"
    );
    let ids: Vec<u64> = all
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let last = *ids.last().unwrap();
    let tail = events(last - 1).await.unwrap().text().await.unwrap();
    assert_eq!(
        tail.lines().filter(|l| l.starts_with("event: ")).count(),
        1,
        "resumed after {}: {tail}",
        last - 1
    );
}
