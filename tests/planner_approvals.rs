//! End to end for approvals of planned tool calls: a completion whose plan
//! calls a tool under an `approve` rule is refused by `planCritic` with the
//! approval's id, an approver grants it through the approvals API (served
//! by the same `planner-agent`), and the same plan then passes; through a
//! real Envoy, the kernel binary, `auth-agent` and `planner-agent`.

mod support;

use std::path::Path;

use serde_json::{json, Value};
use support::envoy;
use support::reference;
use support::sse_upstream::Script;
use support::stack::AgentSpec;
use support::*;

const SECRET: &str = "planner-approvals-secret";
const JWT: &str = r#"{issuer: "https://auth.example.com", audience: "mcp", hs256_secret_env: "DEMO_JWT_SECRET"}"#;
const RULES: &str = r#"[{"name": "deletes", "effect": "approve", "tools": ["delete_file"], "approval": {"approvers": {"roles_any": ["approver"]}}}, {"name": "rest", "effect": "allow", "tools": ["*"]}]"#;

fn jwt(sub: &str, roles: &[&str]) -> String {
    let now = reference::now();
    reference::jwt(
        SECRET,
        &json!({"sub": sub, "iss": "https://auth.example.com", "aud": "mcp", "roles": roles, "iat": now, "exp": now + 900}),
    )
}

fn routes() -> String {
    let critic =
        format!("{{policy: planCritic, params: {{on_violation: block, allowed_tools: [\"*\"], rules: {RULES}}}}}");
    format!(
        r#"  route_policies:
    - route_name: plan
      request_policy_chain: [{{policy: jwtValidation, params: {JWT}}}, {critic}]
      response_policy_chain: [{critic}]
    - route_name: approvals
      request_policy_chain: [{{policy: jwtValidation, params: {JWT}}}, {{policy: approvals, agent: planner-agent}}]
"#
    )
}

/// `/plan` to the model API; `/approvals` answered by the kernel.
fn envoy_config(kernel: &Path, upstream: u16) -> String {
    support::approvals::envoy_config(kernel, upstream, &envoy::route("plan", "/plan", ""), Vec::new())
}

fn completion(calls: &[(&str, Value)]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (n, a))| json!({"id": format!("call_{i}"), "type": "function", "function": {"name": n, "arguments": a.to_string()}}))
        .collect();
    json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "m", "choices": [{"index": 0, "finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": null, "tool_calls": calls}}]})
}

/// Posts a chat request as `auth`; the model (upstream) answers `plan`.
async fn post_plan(s: &Stack, name: &str, plan: &Value, auth: &str) -> support::http::Got {
    s.sse().script(name, Script::json(plan.to_string().as_bytes()));
    let request = json!({"model": "m", "messages": [{"role": "user", "content": "clean up"}]}).to_string();
    s.send(
        "POST",
        "/plan/v1/chat/completions",
        &[
            ("content-type", "application/json"),
            ("x-script", name),
            ("authorization", auth),
        ],
        Some(&request),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_call_waits_for_a_person_then_the_same_plan_passes() {
    let b = Stack::builder();
    let journal = b.dir().join("planner-approvals.jsonl");
    let journal_arg = format!("--approvals-journal={}", journal.display());
    let s = b
        .agent(AgentSpec::bin("auth-agent", "auth-agent", &[]).env("DEMO_JWT_SECRET", SECRET))
        .agent(AgentSpec::bin("planner-agent", "planner-agent", &[&journal_arg]))
        .config(&routes())
        .sse_upstream()
        .envoy_config(envoy_config)
        .start()
        .await;
    let alice = format!("Bearer {}", jwt("alice", &["agent"]));
    let bob = format!("Bearer {}", jwt("bob", &["approver"]));
    let plan = completion(&[
        ("read_file", json!({"path": "/srv/data/a"})),
        ("delete_file", json!({"path": "/srv/data/old"})),
    ]);
    let post = |name: &'static str| post_plan(&s, name, &plan, &alice);

    // Refused, naming the approval and its page.
    let got = post("p1").await;
    assert_eq!(got.status, 403, "{}\n{}", got.body, s.diag());
    let body: Value = serde_json::from_str(&got.body).unwrap();
    assert_eq!(body["call"]["check"], "approval_required", "{body}");
    assert_eq!(body["call"]["tool"], "delete_file", "{body}");
    let id = body["call"]["approval_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{body}"))
        .to_string();
    assert!(
        body["call"]["detail"]
            .as_str()
            .unwrap_or("")
            .contains(&format!("/approvals/page#id={id}")),
        "{body}"
    );
    // The same plan again: the same request, still waiting.
    let again = post("p2").await;
    assert_eq!(again.status, 403, "{}", again.body);
    assert!(again.body.contains(&id), "{}", again.body);

    // The approver grants it once, through the planner agent's API.
    let client = reqwest::Client::new();
    let list: Value = client
        .get(s.url("/approvals?state=pending"))
        .header("authorization", &bob)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let item = list["approvals"]
        .as_array()
        .and_then(|l| l.iter().find(|x| x["id"] == id.as_str()))
        .unwrap_or_else(|| panic!("{id} not listed: {list}\n{}", s.diag()))
        .clone();
    assert_eq!(
        (item["target"].as_str(), item["principal"].as_str()),
        (Some("delete_file"), Some("sub:alice"))
    );
    assert_eq!(item["args_preview"], json!({"path": "/srv/data/old"}), "{item}");
    let decided = client
        .post(s.url(&format!("/approvals/{id}")))
        .header("authorization", &bob)
        .json(&json!({"grant": "allow_once"}))
        .send()
        .await
        .unwrap();
    assert_eq!(decided.status(), 200);

    // The same plan passes, unchanged, once.
    let passed = post("p3").await;
    assert_eq!(passed.status, 200, "{}\n{}", passed.body, s.diag());
    assert_eq!(passed.body, plan.to_string(), "unchanged, byte for byte");
    let once_more = post("p4").await;
    assert_eq!(
        once_more.status, 403,
        "an allow_once grant served twice: {}",
        once_more.body
    );
    // A plan with other arguments never rode on the approval.
    let other_plan = completion(&[("delete_file", json!({"path": "/srv/data/other"}))]);
    let other = post_plan(&s, "p5", &other_plan, &alice).await;
    assert_eq!(other.status, 403, "{}", other.body);
    assert!(!other.body.contains(&id), "{}", other.body);

    let out = reference::verify_audit(&journal);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
