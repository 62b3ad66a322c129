use super::*;
use serde_json::json;

fn rpc(method: &str, params: Value) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": 3, "method": method, "params": params})
        .to_string()
        .into_bytes()
}

#[test]
fn both_protocol_versions_name_the_same_operations() {
    for (v10, v03) in [
        ("SendMessage", "message/send"),
        ("SendStreamingMessage", "message/stream"),
        ("GetTask", "tasks/get"),
        ("ListTasks", "tasks/list"),
        ("CancelTask", "tasks/cancel"),
        ("SubscribeToTask", "tasks/resubscribe"),
        ("CreateTaskPushNotificationConfig", "tasks/pushNotificationConfig/set"),
        ("GetTaskPushNotificationConfig", "tasks/pushNotificationConfig/get"),
        ("ListTaskPushNotificationConfigs", "tasks/pushNotificationConfig/list"),
        (
            "DeleteTaskPushNotificationConfig",
            "tasks/pushNotificationConfig/delete",
        ),
        ("GetExtendedAgentCard", "agent/getAuthenticatedExtendedCard"),
    ] {
        let op = Op::of_method(v10).expect(v10);
        assert_eq!(Op::of_method(v03), Some(op), "{v03}");
        assert_eq!(op.name(), v10);
    }
    assert_eq!(Op::of_method("tasks/delete"), None);
}

#[test]
fn jsonrpc_calls_name_their_tasks() {
    let c = Call::read("POST", "/", Some(&rpc("GetTask", json!({"id": "t1"})))).unwrap();
    assert_eq!((c.op, c.task_id.as_deref()), (Some(Op::GetTask), Some("t1")));
    assert_eq!(c.binding, Binding::JsonRpc { id: json!(3) });
    let c = Call::read(
        "POST",
        "/",
        Some(&rpc("tasks/pushNotificationConfig/get", json!({"id": "t2"}))),
    )
    .unwrap();
    assert_eq!(
        (c.task_id.as_deref(), c.method.as_str()),
        (Some("t2"), "GetTaskPushNotificationConfig")
    );
    let c = Call::read(
        "POST",
        "/",
        Some(&rpc(
            "GetTaskPushNotificationConfig",
            json!({"taskId": "t3", "id": "cfg"}),
        )),
    )
    .unwrap();
    assert_eq!(c.task_id.as_deref(), Some("t3"));
    let send = rpc(
        "SendMessage",
        json!({"message": {"messageId": "m", "taskId": "t4", "referenceTaskIds": ["t5", "t4"], "parts": [{"text": "x"}]}}),
    );
    let c = Call::read("POST", "/a2a", Some(&send)).unwrap();
    assert_eq!(c.tasks(), ["t4", "t5"]);
    let unknown = Call::read("POST", "/", Some(&rpc("tasks/delete", json!({})))).unwrap();
    assert_eq!((unknown.op, unknown.method.as_str()), (None, "tasks/delete"));
}

#[test]
fn rest_paths_are_read_after_any_prefix() {
    let cases = [
        ("GET", "/.well-known/agent-card.json", Some(Op::GetAgentCard), None),
        ("GET", "/rest/extendedAgentCard", Some(Op::GetExtendedAgentCard), None),
        ("POST", "/rest/message:send", Some(Op::SendMessage), None),
        ("POST", "/tenant-a/message:stream", Some(Op::SendStreamingMessage), None),
        ("GET", "/rest/tasks", Some(Op::ListTasks), None),
        ("GET", "/rest/tasks/abc", Some(Op::GetTask), Some("abc")),
        (
            "GET",
            "/rest/tasks/a%20b?historyLength=2",
            Some(Op::GetTask),
            Some("a b"),
        ),
        ("POST", "/rest/tasks/abc:cancel", Some(Op::CancelTask), Some("abc")),
        (
            "GET",
            "/rest/tasks/abc:subscribe",
            Some(Op::SubscribeToTask),
            Some("abc"),
        ),
        (
            "POST",
            "/rest/tasks/abc/pushNotificationConfigs",
            Some(Op::CreatePushConfig),
            Some("abc"),
        ),
        (
            "GET",
            "/rest/tasks/abc/pushNotificationConfigs",
            Some(Op::ListPushConfigs),
            Some("abc"),
        ),
        (
            "GET",
            "/rest/tasks/abc/pushNotificationConfigs/c1",
            Some(Op::GetPushConfig),
            Some("abc"),
        ),
        (
            "DELETE",
            "/rest/tasks/abc/pushNotificationConfigs/c1",
            Some(Op::DeletePushConfig),
            Some("abc"),
        ),
        ("DELETE", "/rest/tasks/abc", None, Some("abc")),
        ("GET", "/rest/other", None, None),
    ];
    for (method, path, op, task) in cases {
        let c = Call::read(method, path, None).unwrap();
        assert_eq!((c.op, c.task_id.as_deref()), (op, task), "{method} {path}");
        assert_eq!(c.binding, Binding::Rest);
    }
    let c = Call::read("DELETE", "/rest/tasks/abc", None).unwrap();
    assert_eq!(c.method, "DELETE /rest/tasks/abc");
}

#[test]
fn unreadable_bodies_are_refused_in_their_binding() {
    let e = Call::read("POST", "/", Some(b"{\"jsonrpc\": \"2.0\", \"method\": 5}")).unwrap_err();
    assert_eq!(
        (e.binding, e.code),
        (Binding::JsonRpc { id: Value::Null }, crate::jsonrpc::INVALID_REQUEST)
    );
    let batch = br#"[{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t"}}]"#;
    assert!(Call::read("POST", "/", Some(batch)).is_err());
    let e = Call::read("POST", "/rest/message:send", Some(b"{not json")).unwrap_err();
    assert_eq!((e.binding, e.code), (Binding::Rest, 400));
}

#[test]
fn urls_handed_to_the_agent_are_found() {
    let send = rpc(
        "message/send",
        json!({"message": {"messageId": "m", "parts": [{"kind": "file", "file": {"uri": "http://10.0.0.1/x"}}, {"kind": "file", "file": {"uri": "https://ok.example/y"}}]},
               "configuration": {"pushNotificationConfig": {"url": "http://127.0.0.1/hook"}}}),
    );
    let c = Call::read("POST", "/", Some(&send)).unwrap();
    assert_eq!(c.push_urls(), ["http://127.0.0.1/hook"]);
    assert_eq!(c.file_urls(), ["http://10.0.0.1/x", "https://ok.example/y"]);
    // A 1.0 part (`url`) in a 0.3 message is not what the 0.3 server reads.
    let mixed = rpc(
        "message/send",
        json!({"message": {"messageId": "m", "parts": [{"url": "http://10.0.0.1/x"}]}}),
    );
    let e = Call::read("POST", "/", Some(&mixed)).unwrap_err();
    assert!(e.message.contains("parts[0].url"), "{}", e.message);
    // 0.3 over HTTP+JSON: `content`, `file.fileWithUri`, `pushNotification`.
    let rest = json!({"message": {"messageId": "m", "content": [{"file": {"fileWithUri": "http://10.0.0.2/f"}}]},
        "configuration": {"pushNotification": {"url": "http://10.0.0.3/p"}}});
    let c = Call::read("POST", "/a2a/rest/v1/message:send", Some(rest.to_string().as_bytes())).unwrap();
    assert_eq!(
        (c.file_urls(), c.push_urls()),
        (vec!["http://10.0.0.2/f"], vec!["http://10.0.0.3/p"])
    );
    let set = json!({"parent": "tasks/t", "config": {"pushNotificationConfig": {"url": "http://10.0.0.4/p"}}});
    let c = Call::read(
        "POST",
        "/rest/v1/tasks/t9/pushNotificationConfigs",
        Some(set.to_string().as_bytes()),
    )
    .unwrap();
    assert_eq!(
        (c.push_urls(), c.task_id.as_deref()),
        (vec!["http://10.0.0.4/p"], Some("t9"))
    );
    let create = rpc(
        "CreateTaskPushNotificationConfig",
        json!({"taskId": "t", "url": "https://h.example/p"}),
    );
    let c = Call::read("POST", "/", Some(&create)).unwrap();
    assert_eq!(c.push_urls(), ["https://h.example/p"]);
    assert!(c.file_urls().is_empty());
}

#[test]
fn a_field_in_two_spellings_is_refused() {
    let two = rpc("GetTask", json!({"id": "t"}));
    assert!(Call::read("POST", "/", Some(&two)).is_ok());
    let send = rpc(
        "SendMessage",
        json!({"message": {"messageId": "m", "taskId": "mine", "task_id": "yours", "parts": []}}),
    );
    let e = Call::read("POST", "/", Some(&send)).unwrap_err();
    assert_eq!(e.code, crate::jsonrpc::INVALID_PARAMS);
    assert!(e.message.contains("taskId"), "{}", e.message);
    let rest = br#"{"message": {"messageId": "m", "parts": [{"mediaType": "a", "media_type": "b"}]}}"#;
    assert_eq!(Call::read("POST", "/message:send", Some(rest)).unwrap_err().code, 400);
    assert_eq!(
        ambiguous(&json!({"referenceTaskIds": [], "reference_task_ids": []})).as_deref(),
        Some("referenceTaskIds")
    );
}

#[test]
fn the_server_routes_by_path() {
    // An HTTP+JSON path is read as HTTP+JSON whatever the body holds: a
    // JSON-RPC envelope there is unknown members beside the message.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t"},
        "message": {"messageId": "m", "parts": [{"text": "x"}], "metadata": {"skill": "admin_reset"}}});
    let e = Call::read("POST", "/rest/message:send", Some(body.to_string().as_bytes())).unwrap_err();
    assert_eq!((e.binding, e.code), (Binding::Rest, 400));
    let lax = Call::read_with(
        "POST",
        "/rest/message:send",
        None,
        Some(body.to_string().as_bytes()),
        false,
    )
    .unwrap();
    assert_eq!(lax.op, Some(Op::SendMessage));
    assert_eq!(lax.message().unwrap()["metadata"]["skill"], "admin_reset");
    // The path is matched decoded, as the server matches it.
    let c = Call::read("POST", "/rest/tasks/a%2Db%3Acancel", None).unwrap();
    assert_eq!((c.op, c.task_id.as_deref()), (Some(Op::CancelTask), Some("a-b")));
    let c = Call::read("POST", "/rest/message%3Asend", Some(b"{}")).unwrap();
    assert_eq!(c.op, Some(Op::SendMessage));
    // The version: the path's; a 1.0 header on a 0.3 path is refused.
    let c = Call::read("POST", "/x/rest/v1/message:send", Some(b"{}")).unwrap();
    assert_eq!(c.dialect, Dialect::V03Rest);
    let c = Call::read("POST", "/acme/rest/message:send", Some(b"{}")).unwrap();
    assert_eq!(c.dialect, Dialect::V10);
    assert!(Call::read_with("POST", "/rest/v1/message:send", Some("1.0"), Some(b"{}"), true).is_err());
    assert!(Call::read_with("POST", "/rest/v1/message:send", Some("0.3"), Some(b"{}"), true).is_ok());
}

#[test]
fn jsonrpc_refusals_keep_the_requests_id() {
    for (body, id) in [
        (
            json!({"jsonrpc": "1.0", "id": "r-1", "method": "SendMessage"}),
            json!("r-1"),
        ),
        (json!({"jsonrpc": "2.0", "id": 9}), json!(9)),
        (
            json!({"jsonrpc": "2.0", "id": 4, "method": "SendMessage", "params": {"message": {"content": []}}}),
            json!(4),
        ),
    ] {
        let e = Call::read("POST", "/", Some(body.to_string().as_bytes())).unwrap_err();
        assert_eq!(e.binding, Binding::JsonRpc { id }, "{body}");
    }
}
