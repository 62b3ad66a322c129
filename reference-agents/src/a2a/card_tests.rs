use super::*;
use policy_agents::testing::{TestCall, TestRequest, TestResponse};
use serde_json::json;

const RULES: &str = r#"[
  {"name": "users", "effect": "allow", "skills": ["echo", "summarize"], "when": {"roles_any": ["user"]}},
  {"name": "admins", "effect": "allow", "skills": ["*"], "when": {"roles_any": ["admin"]}}
]"#;

fn card() -> Value {
    json!({
        "name": "Research agent",
        "version": "1.0.0",
        "supportedInterfaces": [
            {"url": "http://127.0.0.1:9999/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": "http://127.0.0.1:9999/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}
        ],
        "capabilities": {"streaming": true},
        "skills": [{"id": "echo", "name": "Echo"}, {"id": "summarize", "name": "Summarize"}, {"id": "admin_reset", "name": "Reset"}],
        "signatures": [{"protected": "x", "signature": "y"}]
    })
}

async fn filtered(call: &TestCall, body: Value) -> (Value, ResponseOutcome) {
    let p = A2aCardFilter::default();
    let req = TestRequest::new("GET", "/.well-known/agent-card.json");
    let resp = TestResponse::new(200)
        .header("content-type", "application/json")
        .body(body.to_string());
    let out = call.response(&p, &req, &resp).await.unwrap();
    let doc = match out.body_set() {
        Some(b) => serde_json::from_slice(&b.body).unwrap(),
        None => body,
    };
    (doc, out)
}

fn ids(card: &Value) -> Vec<&str> {
    card["skills"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect()
}

#[tokio::test]
async fn callers_see_the_skills_they_may_use() {
    let user = TestCall::new().params(&[("rules", RULES)]).metadata("roles", "user");
    let (doc, out) = filtered(&user, card()).await;
    assert_eq!(ids(&doc), ["echo", "summarize"]);
    assert_eq!(out.metadata_value("a2a.card_skills_hidden"), Some("1"));
    assert!(doc.get("signatures").is_none(), "a changed card is no longer signed");
    assert_eq!(doc["name"], "Research agent");
    let admin = TestCall::new().params(&[("rules", RULES)]).metadata("roles", "admin");
    let (doc, out) = filtered(&admin, card()).await;
    assert_eq!(ids(&doc).len(), 3);
    assert!(out.body_set().is_none(), "nothing to change: the card passes as it was");
    let nobody = TestCall::new().params(&[("rules", RULES)]);
    let (doc, _) = filtered(&nobody, card()).await;
    assert!(ids(&doc).is_empty());
    // The extended card as a JSON-RPC result.
    let rpc = json!({"jsonrpc": "2.0", "id": 4, "result": card()});
    let (doc, _) = filtered(&user, rpc).await;
    assert_eq!(ids(&doc["result"]), ["echo", "summarize"]);
    assert_eq!(doc["id"], 4);
}

#[tokio::test]
async fn interface_urls_name_the_gateway() {
    let call = TestCall::new()
        .params(&[
            ("rules", RULES),
            ("public_url", "https://gw.example.com/agents/research"),
        ])
        .metadata("roles", "admin");
    let (doc, out) = filtered(&call, card()).await;
    let urls: Vec<&str> = doc["supportedInterfaces"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["url"].as_str())
        .collect();
    assert_eq!(
        urls,
        [
            "https://gw.example.com/agents/research/",
            "https://gw.example.com/agents/research/rest"
        ]
    );
    assert_eq!(out.metadata_value("a2a.card_urls_rewritten"), Some("2"));
    let v03 = json!({"name": "old", "url": "http://10.1.1.1:8000/a2a", "skills": [],
        "additionalInterfaces": [{"url": "http://10.1.1.1:8000/a2a/rest", "transport": "HTTP+JSON"}]});
    let (doc, _) = filtered(&call, v03).await;
    assert_eq!(doc["url"], "https://gw.example.com/agents/research/a2a");
    assert_eq!(
        doc["additionalInterfaces"][0]["url"],
        "https://gw.example.com/agents/research/a2a/rest"
    );
    let bad = TestCall::new().params(&[("rules", RULES), ("public_url", "ftp://x")]);
    let p = A2aCardFilter::default();
    let err = bad
        .response(
            &p,
            &TestRequest::new("GET", "/"),
            &TestResponse::new(200).body(card().to_string()),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("public_url"), "{err}");
}

#[tokio::test]
async fn other_replies_pass() {
    let call = TestCall::new().params(&[("rules", RULES)]);
    let (doc, out) = filtered(
        &call,
        json!({"jsonrpc": "2.0", "id": 1, "result": {"task": {"id": "t"}}}),
    )
    .await;
    assert!(out.body_set().is_none());
    assert_eq!(doc["result"]["task"]["id"], "t");
}

#[tokio::test]
async fn a_compressed_reply_fails_instead_of_passing_unfiltered() {
    let p = A2aCardFilter::default();
    let call = TestCall::new().params(&[("rules", RULES)]);
    let resp = TestResponse::new(200)
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(vec![0x1f, 0x8b, 0x08]);
    let err = call
        .response(&p, &TestRequest::new("GET", "/.well-known/agent-card.json"), &resp)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("gzip"), "{err}");
}
