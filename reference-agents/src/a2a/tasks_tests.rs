use super::*;
use policy_agents::stream::sse;
use policy_agents::testing::{TestCall, TestRequest, TestResponse};
use serde_json::json;

fn rpc(method: &str, params: Value) -> TestRequest {
    TestRequest::new("POST", "/")
        .header("content-type", "application/json")
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string())
}

fn as_who(sub: &str, method: &str) -> TestCall {
    TestCall::new().metadata("sub", sub).metadata("a2a.method", method)
}

fn json_reply(v: Value) -> TestResponse {
    TestResponse::new(200)
        .header("content-type", "application/json")
        .body(v.to_string())
}

#[tokio::test]
async fn tasks_belong_to_their_creator() {
    let p = A2aTaskOwnership::default();
    let send = rpc(
        "SendMessage",
        json!({"message": {"messageId": "m", "parts": [{"text": "hi"}]}}),
    );
    let alice = as_who("alice", "SendMessage");
    // The request of a new task passes; its reply makes alice the owner.
    assert!(alice.request(&p, &send).await.unwrap().denial().is_none());
    let reply = json_reply(
        json!({"jsonrpc": "2.0", "id": 1, "result": {"task": {"id": "t1", "status": {"state": "TASK_STATE_COMPLETED"}}}}),
    );
    let out = alice.response(&p, &send, &reply).await.unwrap();
    assert_eq!(out.metadata_value("a2a.tasks_learned"), Some("1"));

    let get = rpc("GetTask", json!({"id": "t1"}));
    let out = as_who("alice", "GetTask").request(&p, &get).await.unwrap();
    assert!(out.denial().is_none());
    assert_eq!(out.metadata_value("a2a.task_access"), Some("owner"));
    // Mallory gets what a task that does not exist gets.
    let out = as_who("mallory", "GetTask").request(&p, &get).await.unwrap();
    let d = out.denial().expect("refused");
    let body: Value = serde_json::from_slice(&d.body).unwrap();
    assert_eq!((d.status, body["error"]["code"].clone()), (200, json!(-32001)));
    assert_eq!(out.metadata_value("a2a.task_access"), Some("not_owner"));
    // A task nobody was seen creating, and a send continuing mallory's way into t1.
    let out = as_who("alice", "GetTask")
        .request(&p, &rpc("GetTask", json!({"id": "t9"})))
        .await
        .unwrap();
    assert_eq!(out.metadata_value("a2a.task_access"), Some("unknown_task"));
    let cont = rpc(
        "SendMessage",
        json!({"message": {"messageId": "m2", "taskId": "t1", "parts": []}}),
    );
    assert!(as_who("mallory", "SendMessage")
        .request(&p, &cont)
        .await
        .unwrap()
        .denial()
        .is_some());
    // Without a principal, task calls are refused.
    let out = TestCall::new().request(&p, &get).await.unwrap();
    assert_eq!(out.metadata_value("a2a.task_access"), Some("no_principal"));
    // A consumer (API key) is a principal of its own kind.
    let by_key = TestCall::new()
        .metadata("consumer", "alice")
        .metadata("a2a.method", "GetTask");
    assert!(by_key.request(&p, &get).await.unwrap().denial().is_some());
    // unknown_tasks: allow.
    let lenient = as_who("alice", "GetTask").params(&[("unknown_tasks", "allow")]);
    let out = lenient.request(&p, &rpc("GetTask", json!({"id": "t9"}))).await.unwrap();
    assert_eq!(out.metadata_value("a2a.task_access"), Some("unknown_task_allowed"));
}

#[tokio::test]
async fn streamed_replies_teach_tasks_event_by_event_and_lists_show_own_tasks() {
    let p = A2aTaskOwnership::default();
    let stream = rpc(
        "SendStreamingMessage",
        json!({"message": {"messageId": "m", "parts": []}}),
    );
    let bob = as_who("bob", "SendStreamingMessage");
    let sse_reply = TestResponse::new(200).header("content-type", "text/event-stream");
    let events = [
        sse::event(
            "message",
            &json!({"jsonrpc": "2.0", "id": 1, "result": {"task": {"id": "s1"}}}).to_string(),
        ),
        sse::event(
            "message",
            &json!({"jsonrpc": "2.0", "id": 1, "result": {"statusUpdate": {"taskId": "s1"}}}).to_string(),
        ),
    ];
    let out = bob
        .chunk(&p, &stream, &sse_reply, &events, 0, false, b"")
        .await
        .unwrap();
    assert!(out.replacement().is_none(), "events pass unchanged");
    let learned = out.metadata_set().iter().find(|(k, _)| k == "a2a.tasks_learned");
    assert_eq!(learned.map(|(_, v)| v.as_str()), Some("2"));
    let get = rpc("GetTask", json!({"id": "s1"}));
    assert!(as_who("bob", "GetTask")
        .request(&p, &get)
        .await
        .unwrap()
        .denial()
        .is_none());

    let list = rpc("ListTasks", json!({}));
    let reply = json_reply(
        json!({"jsonrpc": "2.0", "id": 1, "result": {"tasks": [{"id": "s1"}, {"id": "other"}], "totalSize": 2}}),
    );
    let out = as_who("bob", "ListTasks").response(&p, &list, &reply).await.unwrap();
    assert_eq!(out.metadata_value("a2a.tasks_hidden"), Some("1"));
    let body: Value = serde_json::from_slice(&out.body_set().expect("rewritten").body).unwrap();
    assert_eq!(body["result"]["tasks"], json!([{"id": "s1"}]));
}
