//! End to end for approvals on A2A: an `approve` rule on a skill, through a
//! real Envoy, the kernel binary, `auth-agent` (HS256 JWTs with roles) and
//! `tool-agent` (`a2aAuthorization`, which asks the approvals; the
//! `approvals` API; the approvals journal), with the official A2A Python
//! SDK (`a2a-sdk` 1.3.0) as agent server (`tests/a2a/server.py --record`,
//! which records every message its agent runs) and as client
//! (`tests/a2a/client.py`: JSON-RPC 1.0, JSON-RPC 0.3 and HTTP+JSON).
//!
//! A send to the skill (streamed or not) is refused in the binding's error
//! form with the approval's id and page (ErrorInfo `APPROVAL_REQUIRED`,
//! metadata `approval_id`, `approval_url`) and does not reach the agent;
//! the card still lists the skill; an approver sees it and allows it once;
//! the same send retried (a new `messageId`, the same content) runs, once;
//! other content does not ride on the approval; a denial comes back with
//! the approver's reason (`APPROVAL_DENIED`); the caller may not approve
//! its own send, others do not see it; a flood is bounded (429); the
//! journal chains every step. The SDK's errors leave the ErrorInfo out
//! (its code -32050 is not one A2A defines; over HTTP+JSON only the
//! status is kept), so the client also prints the gateway's answer.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use support::a2a::{py_client_v, A2aServer};
use support::envoy;
use support::reference::verify_audit;
use support::stack::AgentSpec;
use support::*;

const SECRET: &str = "a2a-approvals-secret";
/// The skill that needs a person's approval (one of `server.py`'s).
const SKILL: &str = "admin_reset";

fn jwt(sub: &str, roles: &[&str]) -> String {
    support::jwt::jwt(SECRET, sub, roles)
}

fn bearer(token: &str) -> Value {
    json!({"authorization": format!("Bearer {token}")})
}

/// `admin_reset` waits for an `approver`; `echo` is open to anyone signed in.
const RULES: &str = r#"[{"name": "payments", "effect": "approve", "skills": ["admin_reset"], "approval": {"approvers": {"roles_any": ["approver"]}, "ttl_s": 600}}, {"name": "users", "effect": "allow", "skills": ["echo"]}]"#;

const JWT: &str = r#"{issuer: "https://auth.example.com", audience: "mcp", hs256_secret_env: "DEMO_JWT_SECRET"}"#;

/// The kernel's routes; `public` is the gateway's address of the agent
/// (the card names it, so the SDK client sends through the gateway).
fn routes(public: &str) -> String {
    format!(
        r#"  route_policies:
    - route_name: a2a
      request_policy_chain:
        - policy: jwtValidation
          params: {JWT}
        - policy: a2aAuthorization
          params: {{rules: {RULES}}}
      response_policy_chain:
        - policy: a2aCardFilter
          params: {{rules: {RULES}, public_url: "{public}"}}
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

/// `/a2a/` to the agent's `/`; `/approvals/page` and `/approvals`
/// answered by the kernel.
fn envoy_config(kernel: &Path, agent: u16) -> String {
    let a2a = envoy::route("a2a", "/a2a/", ", timeout: 0s, prefix_rewrite: \"/\"");
    support::approvals::envoy_config(kernel, agent, &a2a, Vec::new())
}

struct A2aApprovals {
    s: Stack,
    server: A2aServer,
    journal: PathBuf,
    acted: PathBuf,
    card_base: String,
}

async fn start() -> A2aApprovals {
    let b = Stack::builder();
    let dir = b.dir().to_path_buf();
    let journal = dir.join("approvals.jsonl");
    let acted = dir.join("acted.jsonl");
    let server = A2aServer::start_with(&dir, Some(&acted));
    let port = server.port;
    let journal_arg = format!("--approvals-journal={}", journal.display());
    let s = b
        .agent(AgentSpec::bin("auth-agent", "auth-agent", &[]).env("DEMO_JWT_SECRET", SECRET))
        .agent(AgentSpec::bin(
            "tool-agent",
            "tool-agent",
            &[&journal_arg, "--approvals-per-principal=6"],
        ))
        .config("  route_policies: []\n")
        .envoy_config(move |kernel, _| envoy_config(kernel, port))
        .start()
        .await;
    // The card names the gateway, known once Envoy has bound its port.
    let card_base = s.url("/a2a");
    s.reload(&s.kernel_body(&routes(&card_base))).await;
    A2aApprovals {
        s,
        server,
        journal,
        acted,
        card_base,
    }
}

impl A2aApprovals {
    fn diag(&self, out: &str) -> String {
        format!(
            "{out}\n{}\n--- tool-agent ---\n{}\n--- a2a server ---\n{}",
            self.s.diag(),
            self.s.agent("tool-agent").log(),
            self.server.log()
        )
    }

    /// The messages the agent ran: `(skill, text)`.
    fn ran(&self) -> Vec<(String, String)> {
        std::fs::read_to_string(&self.acted)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["event"] == "execute")
            .map(|v| {
                (
                    v["skill"].as_str().unwrap_or("").to_string(),
                    v["texts"][0].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    }

    /// The messages the agent ran for the approved skill.
    fn ran_skill(&self) -> Vec<String> {
        self.ran()
            .into_iter()
            .filter(|(s, _)| s == SKILL)
            .map(|(_, t)| t)
            .collect()
    }

    /// One client run of `sends` (texts to the skill) by `token` over
    /// `binding` (`jsonrpc`, `rest`; 0.3 with `v03`): each send's line,
    /// with the last HTTP answer of a failed one (`wire`).
    fn sends(&self, token: &str, texts: &[&str], binding: &str, v03: bool) -> (Vec<Value>, String) {
        let steps: Vec<Value> = texts
            .iter()
            .map(|t| json!({"op": "send", "text": t, "skill": SKILL, "wire": true}))
            .collect();
        let (got, out) = py_client_v(&self.card_base, &bearer(token), &json!(steps), binding, v03);
        let sends: Vec<Value> = got.into_iter().filter(|l| l["step"] == "send").collect();
        assert_eq!(sends.len(), texts.len(), "{}", self.diag(&out));
        (sends, out)
    }

    /// One client run over JSON-RPC 1.0 of sends to the skill by `token`,
    /// each `(text, contextId)` (none: the message carries no `contextId`).
    fn sends_in(&self, token: &str, sends: &[(&str, Option<&str>)]) -> (Vec<Value>, String) {
        let steps: Vec<Value> = sends
            .iter()
            .map(|(t, c)| {
                let mut step = json!({"op": "send", "text": t, "skill": SKILL, "wire": true});
                if let Some(c) = c {
                    step["context_id"] = json!(c);
                }
                step
            })
            .collect();
        let (got, out) = py_client_v(&self.card_base, &bearer(token), &json!(steps), "jsonrpc", false);
        let got: Vec<Value> = got.into_iter().filter(|l| l["step"] == "send").collect();
        assert_eq!(got.len(), sends.len(), "{}", self.diag(&out));
        (got, out)
    }

    /// One send over JSON-RPC 1.0.
    fn send(&self, token: &str, text: &str) -> (Value, String) {
        let (mut sends, out) = self.sends(token, &[text], "jsonrpc", false);
        (sends.remove(0), out)
    }

    async fn api(&self, method: &str, path: &str, token: &str, body: Option<Value>) -> (u16, Value) {
        let client = reqwest::Client::new();
        let mut req = client
            .request(method.parse().unwrap(), self.s.url(path))
            .header("authorization", format!("Bearer {token}"));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let r = req.send().await.expect("approvals API");
        let status = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }
}

/// The ErrorInfo of a refused send, as the gateway answered it: JSON-RPC
/// `error.data[0]`, HTTP+JSON `error.details[0]`.
fn error_info(line: &Value) -> &Value {
    let e = &line["wire"]["body"]["error"];
    let info = if e["data"].is_array() {
        &e["data"][0]
    } else {
        &e["details"][0]
    };
    assert_eq!(
        info["@type"], "type.googleapis.com/google.rpc.ErrorInfo",
        "not an ErrorInfo: {line}"
    );
    info
}

/// The approval a send waits for: its id (checked against its URL and the
/// SDK's error message).
fn waiting(line: &Value) -> String {
    assert!(line["error"].is_string(), "the send was not refused: {line}");
    let info = error_info(line);
    assert_eq!(info["reason"], "APPROVAL_REQUIRED", "{line}");
    assert_eq!(info["metadata"]["rule"], "payments", "{line}");
    assert_eq!(info["metadata"]["skill"], SKILL, "{line}");
    let id = info["metadata"]["approval_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no approval_id: {line}"))
        .to_string();
    assert_eq!(id.len(), 32, "{line}");
    let url = info["metadata"]["approval_url"].as_str().unwrap_or("");
    assert!(
        url.starts_with("http://") && url.ends_with(&format!("/approvals/page#id={id}")),
        "approval_url {url:?}: {line}"
    );
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a2a_send_waits_for_a_person_and_only_the_approved_send_runs() {
    let a = start().await;
    let alice = jwt("alice", &["agent"]);
    let bob = jwt("bob", &["approver"]);
    let mallory = jwt("mallory", &["agent"]);
    let text = "reset the ledger of account 42";

    // The official SDK client over JSON-RPC 1.0: an open skill runs; the
    // skill under approval is refused with the approval's id and page, and
    // does not reach the agent. Retried with a new messageId and the same
    // content, it is the same call: the same approval.
    let steps = json!([
        {"op": "card"},
        {"op": "stream", "text": text, "skill": SKILL, "wire": true},
        {"op": "send", "text": "hello", "skill": "echo"},
        {"op": "send", "text": text, "skill": SKILL, "wire": true},
        {"op": "send", "text": text, "skill": SKILL, "wire": true}
    ]);
    let (got, out) = py_client_v(&a.card_base, &bearer(&alice), &steps, "jsonrpc", false);
    let diag = |out: &str| a.diag(out);
    // The card shows the skill one may ask for (and hides `summarize`).
    let card = &got[0];
    assert_eq!(card["skills"], json!(["echo", SKILL]), "{}", diag(&out));
    let sends: Vec<&Value> = got.iter().filter(|l| l["step"] == "send").collect();
    assert_eq!(sends.len(), 3, "{}", diag(&out));
    assert_eq!(sends[0]["state"], "completed", "{}", diag(&out));
    let first = sends[1];
    let id = waiting(first);
    // What the SDK raises: the binding's error with the page's URL.
    assert_eq!(first["code"], -32050, "{first}");
    assert!(
        first["error"]
            .as_str()
            .unwrap_or("")
            .contains(&format!("/approvals/page#id={id}")),
        "the SDK's error names the page: {first}"
    );
    assert_eq!(first["wire"]["status"], 200, "JSON-RPC errors on HTTP 200: {first}");
    assert_eq!(waiting(sends[2]), id, "a retry is the same call: {}", sends[2]);
    // Streamed, it is refused before any event, as another call (method
    // SendStreamingMessage).
    let stream = &got[1];
    assert_eq!(stream["step"], "stream", "{}", diag(&out));
    let id_stream = waiting(stream);
    assert_ne!(id_stream, id, "{stream}");
    assert!(!got.iter().any(|l| l["step"] == "event"), "{}", diag(&out));
    assert_eq!(
        a.ran(),
        vec![("echo".to_string(), "hello".to_string())],
        "a send waiting for approval ran"
    );
    let log = a.s.envoy.log();
    assert!(log.contains("\"a2a.decision\":\"approve\""), "{log}");

    // The SDK's other transports are refused alike, and nothing runs:
    // JSON-RPC 0.3 (its error's message names the page too), HTTP+JSON 1.0
    // (403) and 0.3 (retried: the same call, its `message_id` left out).
    // Each is a call of its own: another endpoint (HTTP+JSON), or the
    // values 0.3 spells its own way (role "user", `configuration.blocking`).
    let (v03, out) = a.sends(&alice, &[text], "jsonrpc", true);
    let id_v03 = waiting(&v03[0]);
    assert_eq!(v03[0]["wire"]["status"], 200, "{}", diag(&out));
    assert!(
        v03[0]["error"]
            .as_str()
            .unwrap_or("")
            .contains(&format!("/approvals/page#id={id_v03}")),
        "{}",
        v03[0]
    );
    let (rest, out) = a.sends(&alice, &[text], "rest", false);
    let id_rest = waiting(&rest[0]);
    assert_eq!(rest[0]["code"], 403, "{}", diag(&out));
    assert_eq!(
        rest[0]["wire"]["body"]["error"]["status"], "PERMISSION_DENIED",
        "{}",
        rest[0]
    );
    let (rest03, out) = a.sends(&alice, &[text, text], "rest", true);
    let id_rest03 = waiting(&rest03[0]);
    assert_eq!(rest03[0]["http_status"], 403, "{}", diag(&out));
    assert_eq!(
        waiting(&rest03[1]),
        id_rest03,
        "a 0.3 retry is the same call: {}",
        rest03[1]
    );
    let mut ids = vec![&id, &id_stream, &id_v03, &id_rest, &id_rest03];
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 5, "{ids:?}");
    assert!(a.ran_skill().is_empty(), "ran: {:?}", a.ran());

    // The approver sees it, bound to the caller, the skill and the method.
    let (status, list) = a.api("GET", "/approvals?state=pending", &bob, None).await;
    assert_eq!(status, 200, "{list}\n{}", diag(""));
    let item = list["approvals"]
        .as_array()
        .and_then(|l| l.iter().find(|x| x["id"] == id.as_str()))
        .unwrap_or_else(|| panic!("{id} not listed: {list}"))
        .clone();
    assert_eq!(
        (
            item["principal"].as_str(),
            item["target"].as_str(),
            item["method"].as_str(),
            item["route"].as_str(),
            item["state"].as_str()
        ),
        (
            Some("sub:alice"),
            Some(SKILL),
            Some("SendMessage"),
            Some("a2a"),
            Some("pending")
        ),
        "{item}"
    );
    assert!(item["args_preview"].to_string().contains(text), "{item}");
    assert!(
        !item["args_preview"].to_string().contains("messageId"),
        "the binding leaves the messageId out: {item}"
    );
    assert_eq!(item["attempts"], 2, "{item}");

    // Nobody else sees it; the caller sees its own but may not decide it.
    let (status, others) = a.api("GET", "/approvals", &mallory, None).await;
    assert_eq!((status, &others["approvals"]), (200, &json!([])), "{others}");
    let (status, own) = a.api("GET", &format!("/approvals/{id}"), &alice, None).await;
    assert_eq!((status, own["id"].as_str()), (200, Some(id.as_str())), "{own}");
    let (status, own) = a
        .api(
            "POST",
            &format!("/approvals/{id}"),
            &alice,
            Some(json!({"grant": "allow_once"})),
        )
        .await;
    assert_eq!(
        (status, own["reason"].as_str()),
        (403, Some("not_an_approver")),
        "{own}"
    );
    let (status, still) = a.api("GET", &format!("/approvals/{id}"), &bob, None).await;
    assert_eq!((status, still["state"].as_str()), (200, Some("pending")), "{still}");

    // Allowed once: the same send (a new messageId) runs, once; the next
    // identical send waits again, for a new approval.
    let (status, decided) = a
        .api(
            "POST",
            &format!("/approvals/{id}"),
            &bob,
            Some(json!({"grant": "allow_once"})),
        )
        .await;
    assert_eq!((status, decided["state"].as_str()), (200, Some("allowed")), "{decided}");
    let (ran, out) = a.send(&alice, text);
    assert_eq!(ran["state"], "completed", "{ran}\n{}", diag(&out));
    assert_eq!(ran["artifact_text"], format!("echo: {text} [skill={SKILL}]"), "{ran}");
    assert_eq!(a.ran_skill(), [text], "the approved send ran once");
    let (again, _) = a.send(&alice, text);
    let id_again = waiting(&again);
    assert_ne!(id_again, id, "an allow_once grant served twice: {again}");
    assert_eq!(a.ran_skill(), [text], "ran: {:?}", a.ran());

    // Other content does not ride on an approval; denied with a reason, its
    // retry says so and does not run.
    let other = "reset the ledger of account 43";
    let (changed, _) = a.send(&alice, other);
    let other_id = waiting(&changed);
    assert!(![&id, &id_again].contains(&&other_id), "{changed}");
    let (status, denied) = a
        .api(
            "POST",
            &format!("/approvals/{other_id}"),
            &bob,
            Some(json!({"grant": "deny", "reason": "not during the audit", "alternative": "ask finance"})),
        )
        .await;
    assert_eq!((status, denied["state"].as_str()), (200, Some("denied")), "{denied}");
    let (refused, out) = a.send(&alice, other);
    assert!(refused["error"].is_string(), "{refused}\n{}", diag(&out));
    let info = error_info(&refused);
    assert_eq!(info["reason"], "APPROVAL_DENIED", "{refused}");
    assert_eq!(info["metadata"]["approval_id"], other_id.as_str(), "{refused}");
    assert_eq!(info["metadata"]["alternative"], "ask finance", "{refused}");
    assert!(
        refused["error"].as_str().unwrap_or("").contains("not during the audit"),
        "the SDK's error carries the approver's reason: {refused}"
    );
    assert_eq!(a.ran_skill(), [text], "a denied send ran: {:?}", a.ran());

    // A flood from one caller is bounded (6 waiting each here): 429. The
    // caller, an approver too, may not approve its own sends.
    let carol = jwt("carol", &["agent", "approver"]);
    let flood: Vec<String> = (1..=7).map(|n| format!("reset the ledger of account {n}00")).collect();
    let texts: Vec<&str> = flood.iter().map(String::as_str).collect();
    let (lines, out) = a.sends(&carol, &texts, "jsonrpc", false);
    for l in &lines[..6] {
        waiting(l);
    }
    let last = &lines[6];
    assert_eq!(last["http_status"], 429, "{last}\n{}", diag(&out));
    assert_eq!(error_info(last)["reason"], "APPROVAL_LIMIT", "{last}");
    let carol_id = waiting(&lines[0]);
    let (status, own) = a
        .api(
            "POST",
            &format!("/approvals/{carol_id}"),
            &carol,
            Some(json!({"grant": "allow_once"})),
        )
        .await;
    assert_eq!((status, own["reason"].as_str()), (403, Some("self_approval")), "{own}");
    assert_eq!(a.ran_skill(), [text], "ran: {:?}", a.ran());

    // The journal holds each step, chained. (Its writer acknowledges a
    // record once handed to the file's background write, so the last
    // records may land just after the answers: wait for carol's six.)
    let read = || -> Vec<Value> {
        std::fs::read_to_string(&a.journal)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    until("the journal's last records", Duration::from_secs(10), || async {
        read()
            .iter()
            .filter(|r| r["principal"] == "sub:carol" && r["event"] == "requested")
            .count()
            == 6
    })
    .await;
    let verify = verify_audit(&a.journal);
    assert!(
        verify.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    let records = read();
    let of = |id: &str| -> Vec<&Value> { records.iter().filter(|r| r["approval_id"] == id).collect() };
    let events = of(&id);
    let kinds: Vec<&str> = events.iter().filter_map(|r| r["event"].as_str()).collect();
    assert_eq!(kinds, ["requested", "decided", "released"], "{events:?}");
    assert!(
        events
            .iter()
            .all(|r| r["args_digest"] == item["args_digest"] && r["target"] == SKILL),
        "{events:?}"
    );
    assert_eq!(events[1]["by"], "sub:bob", "{events:?}");
    let kinds: Vec<&str> = of(&other_id).iter().filter_map(|r| r["event"].as_str()).collect();
    assert_eq!(kinds, ["requested", "decided", "refused"], "{records:?}");
}

/// `allow_session` on A2A: the session is the message's `contextId`. The
/// grant lets the caller's sends to the skill in that context through, any
/// content, as often as they come; not in another context, not without one
/// (where the grant is not offered), not for another caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a2a_session_grant_covers_the_callers_sends_in_its_context_only() {
    let a = start().await;
    let alice = jwt("alice", &["agent"]);
    let bob = jwt("bob", &["approver"]);
    let mallory = jwt("mallory", &["agent"]);
    let text = "reset the ledger of account 42";
    let other = "reset the ledger of account 43";
    let (c1, c2) = ("ctx-approvals-one", "ctx-approvals-two");
    let diag = |out: &str| a.diag(out);

    // A send in context C1 waits for approval, bound to that session.
    let (first, out) = a.sends_in(&alice, &[(text, Some(c1))]);
    let id = waiting(&first[0]);
    assert!(a.ran_skill().is_empty(), "ran: {:?}\n{}", a.ran(), diag(&out));
    let (status, item) = a.api("GET", &format!("/approvals/{id}"), &bob, None).await;
    assert_eq!(status, 200, "{item}\n{}", diag(""));
    assert_eq!(
        (
            item["state"].as_str(),
            item["session"].as_str(),
            item["method"].as_str()
        ),
        (Some("pending"), Some(c1), Some("SendMessage")),
        "the contextId is the session: {item}"
    );
    assert!(
        item["grants"]
            .as_array()
            .is_some_and(|g| g.contains(&json!("allow_session"))),
        "a call in a session is offered allow_session: {item}"
    );

    // Allowed for the session.
    let (status, decided) = a
        .api(
            "POST",
            &format!("/approvals/{id}"),
            &bob,
            Some(json!({"grant": "allow_session"})),
        )
        .await;
    assert_eq!(
        (status, decided["state"].as_str()),
        (200, Some("allowed")),
        "{decided}\n{}",
        diag("")
    );

    // In C1, the same send, other content and the same send again all run;
    // in C2, or with no contextId (the SDK client leaves it out unless the
    // message has one), the same send waits for a new approval each.
    let (lines, out) = a.sends_in(
        &alice,
        &[
            (text, Some(c1)),
            (other, Some(c1)),
            (text, Some(c1)),
            (text, Some(c2)),
            (text, None),
        ],
    );
    for (n, (l, t)) in lines[..3].iter().zip([text, other, text]).enumerate() {
        assert_eq!(l["state"], "completed", "send {n} in C1: {l}\n{}", diag(&out));
        assert_eq!(
            l["artifact_text"],
            format!("echo: {t} [skill={SKILL}]"),
            "send {n}: {l}"
        );
        assert_eq!(l["context_id"], c1, "the agent ran it in C1: {l}");
    }
    let id_c2 = waiting(&lines[3]);
    let id_none = waiting(&lines[4]);
    assert!(![&id, &id_none].contains(&&id_c2), "{}\n{}", lines[3], lines[4]);
    assert_ne!(id_none, id, "{}", lines[4]);
    assert_eq!(
        a.ran_skill(),
        [text, other, text],
        "exactly the sends in C1 ran\n{}",
        diag(&out)
    );

    // Another caller in C1 is not covered.
    let (theirs, out) = a.sends_in(&mallory, &[(text, Some(c1))]);
    let id_mallory = waiting(&theirs[0]);
    assert!(
        ![&id, &id_c2, &id_none].contains(&&id_mallory),
        "{}\n{}",
        theirs[0],
        diag(&out)
    );

    // The requests as the API shows them: C1's still allowed (a session
    // grant is not used up), C2's pending in its own session, the one with
    // no contextId in none, so allow_session is neither offered nor taken.
    let (status, granted) = a.api("GET", &format!("/approvals/{id}"), &bob, None).await;
    assert_eq!(
        (status, granted["state"].as_str(), granted["decision"]["grant"].as_str()),
        (200, Some("allowed"), Some("allow_session")),
        "{granted}"
    );
    let (status, in_c2) = a.api("GET", &format!("/approvals/{id_c2}"), &bob, None).await;
    assert_eq!(
        (status, in_c2["state"].as_str(), in_c2["session"].as_str()),
        (200, Some("pending"), Some(c2)),
        "{in_c2}"
    );
    let (status, none) = a.api("GET", &format!("/approvals/{id_none}"), &bob, None).await;
    assert_eq!(
        (status, none["state"].as_str(), &none["session"]),
        (200, Some("pending"), &Value::Null),
        "{none}"
    );
    assert!(
        none["grants"]
            .as_array()
            .is_some_and(|g| !g.is_empty() && !g.contains(&json!("allow_session"))),
        "no session, no allow_session: {none}"
    );
    let (status, refused) = a
        .api(
            "POST",
            &format!("/approvals/{id_none}"),
            &bob,
            Some(json!({"grant": "allow_session"})),
        )
        .await;
    assert_eq!(
        (status, refused["reason"].as_str()),
        (400, Some("no_session")),
        "{refused}"
    );

    // Nothing more ran.
    assert_eq!(a.ran_skill(), [text, other, text], "ran: {:?}", a.ran());

    // The journal: the request in C1, the decision, and one release per send
    // that ran, each with its own content's digest.
    let read = || -> Vec<Value> {
        std::fs::read_to_string(&a.journal)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    until("the journal's requests", Duration::from_secs(10), || async {
        read().iter().filter(|r| r["event"] == "requested").count() == 4
    })
    .await;
    let verify = verify_audit(&a.journal);
    assert!(
        verify.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    let records = read();
    let events: Vec<&Value> = records.iter().filter(|r| r["approval_id"] == id.as_str()).collect();
    let kinds: Vec<&str> = events.iter().filter_map(|r| r["event"].as_str()).collect();
    assert_eq!(
        kinds,
        ["requested", "decided", "released", "released", "released"],
        "{events:?}"
    );
    assert_eq!(events[0]["session"], c1, "{events:?}");
    assert_eq!(
        (events[1]["by"].as_str(), events[1]["grant"].as_str()),
        (Some("sub:bob"), Some("allow_session")),
        "{events:?}"
    );
    let digests: Vec<&Value> = events[2..].iter().map(|r| &r["call_digest"]).collect();
    assert!(
        digests[0].is_string() && digests[0] != digests[1] && digests[0] == digests[2],
        "each release has its call's digest: {events:?}"
    );
    for (rid, session) in [(&id_c2, json!(c2)), (&id_none, Value::Null)] {
        let kinds: Vec<(&Value, &Value)> = records
            .iter()
            .filter(|r| r["approval_id"] == rid.as_str())
            .map(|r| (&r["event"], &r["session"]))
            .collect();
        assert_eq!(kinds, [(&json!("requested"), &session)], "{records:?}");
    }
}
