use super::*;
use serde_json::json;

fn send(d: Dialect, v: Value) -> Result<Value, Unread> {
    read_params(Op::SendMessage, d, &v, true)
}

#[test]
fn a_0_3_rest_send_reads_into_the_1_0_shape() {
    let body = json!({
        "request": {"message_id": "m", "taskId": "t1", "role": "ROLE_USER",
            "content": [{"text": "hi"}, {"file": {"fileWithUri": "http://x/f", "mimeType": "text/plain", "name": "f"}},
                        {"data": {"data": {"k": "v"}}}],
            "metadata": {"skill": "echo"}},
        "configuration": {"pushNotification": {"url": "http://169.254.169.254/"}, "blocking": true}
    });
    let got = send(Dialect::V03Rest, body).unwrap();
    assert_eq!(
        got,
        json!({
            "message": {"messageId": "m", "taskId": "t1", "role": "ROLE_USER",
                "parts": [{"text": "hi"}, {"url": "http://x/f", "mediaType": "text/plain", "filename": "f"}, {"data": {"k": "v"}}],
                "metadata": {"skill": "echo"}},
            "configuration": {"taskPushNotificationConfig": {"url": "http://169.254.169.254/"}, "blocking": true}
        })
    );
}

#[test]
fn a_0_3_jsonrpc_send_reads_into_the_1_0_shape() {
    let params = json!({"message": {"kind": "message", "messageId": "m", "role": "user",
        "parts": [{"kind": "text", "text": "hi"}, {"kind": "file", "file": {"uri": "http://10.0.0.1/a", "mime_type": "x"}}],
        "reference_task_ids": ["r1"]},
        "configuration": {"push_notification_config": {"url": "https://h/x", "token": "t"}}});
    let got = send(Dialect::V03JsonRpc, params).unwrap();
    assert_eq!(
        got["message"]["parts"][1],
        json!({"url": "http://10.0.0.1/a", "mediaType": "x"})
    );
    assert_eq!(got["message"]["referenceTaskIds"], json!(["r1"]));
    assert_eq!(
        got["configuration"]["taskPushNotificationConfig"],
        json!({"url": "https://h/x", "token": "t"})
    );
}

#[test]
fn a_field_named_twice_is_refused_in_every_dialect() {
    let e = send(
        Dialect::V03Rest,
        json!({"message": {"content": []}, "request": {"content": []}}),
    )
    .unwrap_err();
    assert!(e.contains("twice"), "{e}");
    let e = send(
        Dialect::V10,
        json!({"message": {"taskId": "a", "task_id": "b", "parts": []}}),
    )
    .unwrap_err();
    assert!(e.contains("params.message") && e.contains("twice"), "{e}");
    let e = read_params(
        Op::GetTask,
        Dialect::V10,
        &json!({"id": "a", "historyLength": 1, "history_length": 2}),
        true,
    )
    .unwrap_err();
    assert!(e.contains("twice"), "{e}");
}

#[test]
fn another_versions_names_are_refused_or_left_out() {
    // 0.3 REST reads `content`; a `parts` beside it is what a 1.0 reader
    // would see instead.
    let decoy = json!({"message": {"content": [{"text": "jailbreak"}], "parts": [{"text": "harmless"}]}});
    let e = send(Dialect::V03Rest, decoy.clone()).unwrap_err();
    assert!(e.contains("params.message.parts"), "{e}");
    let lax = read_params(Op::SendMessage, Dialect::V03Rest, &decoy, false).unwrap();
    assert_eq!(lax["message"]["parts"], json!([{"text": "jailbreak"}]));
    // 1.0 has no `content`, no part `kind`, no `request`.
    for bad in [
        json!({"message": {"parts": [], "content": [{"text": "x"}]}}),
        json!({"message": {"parts": [{"kind": "text", "text": "x"}]}}),
        json!({"request": {"parts": []}}),
        json!({"message": {"parts": [{"file": {"uri": "http://x"}}]}}),
        json!({"configuration": {"pushNotificationConfig": {"url": "http://x"}}}),
    ] {
        assert!(send(Dialect::V10, bad.clone()).is_err(), "{bad}");
    }
    // A 0.3 part kind this reader does not know.
    let e = send(
        Dialect::V03JsonRpc,
        json!({"message": {"parts": [{"kind": "video", "text": "x"}]}}),
    )
    .unwrap_err();
    assert!(e.contains("kind"), "{e}");
    // Free-form members are not checked.
    assert!(send(
        Dialect::V10,
        json!({"message": {"parts": [{"data": {"anything": 1}}], "metadata": {"any": {"x": 1}}}})
    )
    .is_ok());
}

#[test]
fn push_configs_read_their_url_in_every_dialect() {
    let url = |d, v: Value| read_params(Op::CreatePushConfig, d, &v, true).map(|p| p["url"].clone());
    assert_eq!(url(Dialect::V10, json!({"taskId": "t", "url": "u1"})), Ok(json!("u1")));
    assert_eq!(
        url(
            Dialect::V03JsonRpc,
            json!({"taskId": "t", "pushNotificationConfig": {"url": "u2"}})
        ),
        Ok(json!("u2"))
    );
    assert_eq!(
        url(
            Dialect::V03Rest,
            json!({"parent": "tasks/t", "config": {"push_notification_config": {"url": "u3"}}})
        ),
        Ok(json!("u3"))
    );
    // The JavaScript server's form (what its client sends) ...
    assert_eq!(
        url(
            Dialect::V03Rest,
            json!({"name": "tasks/t/pushNotificationConfigs/", "pushNotificationConfig": {"url": "u4"}})
        ),
        Ok(json!("u4"))
    );
    // ... and both forms at once, which the two servers read differently.
    assert!(url(
        Dialect::V03Rest,
        json!({"config": {"pushNotificationConfig": {"url": "a"}}, "pushNotificationConfig": {"url": "b"}})
    )
    .is_err());
    assert!(read_params(Op::SendMessage, Dialect::V10, &json!("x"), true).is_err());
    assert!(read_params(
        Op::SendMessage,
        Dialect::V10,
        &json!({"message": {"parts": [{"text": 5}]}}),
        true
    )
    .is_err());
}
