//! Approvals for MCP 2026-07-28 clients: an `input_required` URL
//! elicitation with the gateway's sealed state, and the retry.

use serde_json::{json, Value};

use crate::approvals::tests::decide;
use crate::approvals::{Approvals, GrantKind, Limits};
use crate::mcp::state::APPROVAL_KEY;
use crate::rules::Caller;
use crate::tool::McpToolAuthorization;
use policy_agents::testing::{TestCall, TestRequest};
use policy_agents::RequestOutcome;

const RULES: &str = r#"[{"name": "deletes", "effect": "approve", "tools": ["delete_file"], "approval": {"approvers": {"roles_any": ["approver"]}}}]"#;

fn request(caps: Value, retry: Option<(Value, &str)>, path: &str) -> TestRequest {
    let mut params = json!({"name": "delete_file", "arguments": {"path": path}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps}});
    if let Some((responses, state)) = retry {
        params["inputResponses"] = responses;
        params["requestState"] = json!(state);
    }
    TestRequest::new("POST", "/mcp")
        .header("host", "gw.local")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "delete_file")
        .header("mcp-protocol-version", "2026-07-28")
        .body(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params}).to_string())
}

fn url_caps() -> Value {
    json!({"elicitation": {"form": {}, "url": {}}})
}

fn answered(state: &str) -> Option<(Value, &str)> {
    Some((json!({APPROVAL_KEY: {"action": "accept"}}), state))
}

fn denial_body(out: &RequestOutcome) -> (u16, Value) {
    let d = out.denial().expect("answered by the gateway");
    (d.status, serde_json::from_slice(&d.body).expect("JSON"))
}

/// (approval id, page URL, state) of an `input_required` answer.
fn asked(out: &RequestOutcome) -> (String, String, String) {
    let (status, body) = denial_body(out);
    assert_eq!(status, 200, "{body}");
    let r = &body["result"];
    assert_eq!(r["resultType"], "input_required", "{body}");
    assert!(
        body.get("error").is_none() && !body.to_string().contains("-32042"),
        "{body}"
    );
    let q = &r["inputRequests"][APPROVAL_KEY];
    assert_eq!(
        (q["method"].as_str(), q["params"]["mode"].as_str()),
        (Some("elicitation/create"), Some("url"))
    );
    let url = q["params"]["url"].as_str().unwrap().to_string();
    let id = url.split("#id=").nth(1).unwrap().to_string();
    (id, url, r["requestState"].as_str().unwrap().to_string())
}

#[tokio::test]
async fn a_2026_client_is_asked_by_url_and_its_retry_is_released_as_the_approval_says() {
    let approvals = Approvals::memory(Limits::default());
    let policy = McpToolAuthorization::with_approvals(approvals.clone());
    let ann = TestCall::new().params(&[("rules", RULES)]).metadata("sub", "ann");
    let bob = Caller {
        sub: Some("bob".into()),
        roles: vec!["approver".into()],
        ..Caller::default()
    };

    let first = ann.request(&policy, &request(url_caps(), None, "/a")).await.unwrap();
    let (id, url, state) = asked(&first);
    assert!(url.ends_with(&format!("/approvals/page#id={id}")), "{url}");
    assert_eq!(first.metadata_value("mcp.decision"), Some("approve"));
    // The retry before a decision: asked again, the URL again.
    let again = ann
        .request(&policy, &request(url_caps(), answered(&state), "/a"))
        .await
        .unwrap();
    assert_eq!(asked(&again).0, id);
    // A forged, altered, or other call's state: 400, -32602.
    let mut altered = state.clone();
    altered.push('x');
    for (bad, path) in [(altered.as_str(), "/a"), (state.as_str(), "/b")] {
        let out = ann
            .request(&policy, &request(url_caps(), answered(bad), path))
            .await
            .unwrap();
        let (status, body) = denial_body(&out);
        assert_eq!((status, body["error"]["code"].clone()), (400, json!(-32602)), "{body}");
    }
    // Without URL elicitation declared: -32021 naming it.
    let out = ann
        .request(&policy, &request(json!({"elicitation": {}}), None, "/a"))
        .await
        .unwrap();
    let (status, body) = denial_body(&out);
    assert_eq!((status, body["error"]["code"].clone()), (400, json!(-32021)));
    assert_eq!(
        body["error"]["data"]["requiredCapabilities"],
        json!({"elicitation": {"url": {}}})
    );

    // Approved once: the retry goes to the server without the gateway's
    // question and state.
    approvals
        .decide(&id, &bob, decide(GrantKind::AllowOnce), None)
        .await
        .unwrap();
    let released = ann
        .request(&policy, &request(url_caps(), answered(&state), "/a"))
        .await
        .unwrap();
    assert!(released.denial().is_none());
    let body: Value = serde_json::from_slice(&released.body_set().expect("rewritten").body).unwrap();
    assert!(
        body["params"].get("inputResponses").is_none() && body["params"].get("requestState").is_none(),
        "{body}"
    );
    assert_eq!(body["params"]["arguments"], json!({"path": "/a"}));
    // Once only: the next call is held again.
    let next = ann.request(&policy, &request(url_caps(), None, "/a")).await.unwrap();
    assert_ne!(asked(&next).0, id);
}

#[tokio::test]
async fn the_servers_own_state_and_answers_survive_a_hold() {
    let approvals = Approvals::memory(Limits::default());
    let policy = McpToolAuthorization::with_approvals(approvals.clone());
    let ann = TestCall::new().params(&[("rules", RULES)]).metadata("sub", "ann");
    // A retry of a round the server asked: its state and answer, held.
    let server_round = Some((
        json!({"who": {"action": "accept", "content": {"name": "Ada"}}}),
        "server-state==",
    ));
    let held = ann
        .request(&policy, &request(url_caps(), server_round, "/a"))
        .await
        .unwrap();
    let (id, _, state) = asked(&held);
    let bob = Caller {
        sub: Some("bob".into()),
        roles: vec!["approver".into()],
        ..Caller::default()
    };
    approvals
        .decide(&id, &bob, decide(GrantKind::AllowOnce), None)
        .await
        .unwrap();
    // The SDK answers only the latest round: the gateway's question.
    let released = ann
        .request(&policy, &request(url_caps(), answered(&state), "/a"))
        .await
        .unwrap();
    let body: Value = serde_json::from_slice(&released.body_set().expect("rewritten").body).unwrap();
    assert_eq!(
        body["params"]["requestState"], "server-state==",
        "the server's state, byte for byte"
    );
    assert_eq!(
        body["params"]["inputResponses"],
        json!({"who": {"action": "accept", "content": {"name": "Ada"}}})
    );
}
