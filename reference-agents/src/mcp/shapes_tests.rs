use serde_json::json;

use super::*;
use crate::jsonrpc::parse;

/// A call as read: method, target, 2026, retry.
type Read = (String, Option<String>, bool, bool);

fn call_of(body: serde_json::Value) -> Result<Option<Read>, ShapeError> {
    let env = parse(body.to_string().as_bytes()).expect("JSON-RPC");
    let m = &env.messages[0];
    Ok(read_call(m)?.map(|c| {
        (
            c.method.to_string(),
            c.target.map(String::from),
            c.is_2026(),
            c.is_retry(),
        )
    }))
}

#[test]
fn a_2026_call_its_capabilities_and_its_retry() {
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}, "url": {}}, "sampling": {},
            "extensions": {"io.modelcontextprotocol/tasks": {}}}
    });
    let first = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "read_file", "arguments": {"path": "/a"}, "_meta": meta}});
    assert_eq!(
        call_of(first.clone()),
        Ok(Some(("tools/call".into(), Some("read_file".into()), true, false)))
    );
    let env = parse(first.to_string().as_bytes()).unwrap();
    let c = read_call(&env.messages[0]).unwrap().unwrap();
    let caps = c.capabilities.unwrap();
    assert!(caps.form && caps.url && caps.sampling && !caps.roots && caps.tasks);
    assert_eq!(Capabilities::from_metadata(&caps.to_metadata()), caps);
    assert_eq!(Capabilities::from_metadata("none"), Capabilities::default());
    // `"elicitation": {}` is form mode only.
    let form_only = Capabilities::read(&json!({"elicitation": {}})).unwrap();
    assert!(form_only.form && !form_only.url);

    let mut retry = first.clone();
    retry["params"]["inputResponses"] = json!({"k": {"action": "accept"}});
    retry["params"]["requestState"] = json!("opaque");
    assert_eq!(
        call_of(retry),
        Ok(Some(("tools/call".into(), Some("read_file".into()), true, true)))
    );
    // An older call: no version, no capabilities.
    let old = json!({"jsonrpc": "2.0", "id": 1, "method": "prompts/get", "params": {"name": "greet"}});
    assert_eq!(
        call_of(old),
        Ok(Some(("prompts/get".into(), Some("greet".into()), false, false)))
    );
    let task = json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"taskId": "t1"}});
    assert_eq!(
        call_of(task),
        Ok(Some(("tasks/get".into(), Some("t1".into()), false, false)))
    );
}

#[test]
fn calls_the_sdks_would_not_read_are_errors() {
    let bad = [
        json!({"name": "a", "inputResponses": []}),
        json!({"name": "a", "requestState": 5}),
        json!({"name": "a", "_meta": "x"}),
        json!({"name": "a", "_meta": {"io.modelcontextprotocol/protocolVersion": 2026}}),
        json!({"name": "a", "_meta": {"io.modelcontextprotocol/clientCapabilities": {"elicitation": true}}}),
        json!({"name": 5}),
    ];
    for params in bad {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
        assert!(call_of(body).is_err(), "{params}");
    }
    let list_retry = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"requestState": "s"}});
    assert!(call_of(list_retry).is_err());
    let untargeted_task = json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/cancel", "params": {}});
    assert!(call_of(untargeted_task).is_err());
}

#[test]
fn is_2026_compares_dates() {
    assert!(is_2026("2026-07-28") && is_2026("2027-01-01"));
    assert!(!is_2026("2025-11-25") && !is_2026("2026-07") && !is_2026(""));
}

#[test]
fn an_input_required_result_is_read_into_questions() {
    let reply = json!({"jsonrpc": "2.0", "id": 7, "result": {"resultType": "input_required",
        "inputRequests": {
            "login": {"method": "elicitation/create", "params": {"mode": "form", "message": "m", "requestedSchema": {}}},
            "go": {"method": "elicitation/create", "params": {"mode": "url", "url": "https://x/", "message": "m"}},
            "llm": {"method": "sampling/createMessage", "params": {"messages": []}},
            "where": {"method": "roots/list"}
        },
        "requestState": "s1"}});
    let items = read_reply(&reply).unwrap();
    let [Item::Result(r)] = items.as_slice() else {
        panic!("{items:?}")
    };
    assert_eq!(
        (r.kind, r.state, r.id),
        (ResultType::InputRequired, Some("s1"), &json!(7))
    );
    let keys: Vec<_> = r.questions.iter().map(|q| (q.asked, q.method)).collect();
    assert_eq!(keys.len(), 4);
    assert!(keys.contains(&(Asked::Key("llm"), "sampling/createMessage")));
    let go = r.questions.iter().find(|q| q.asked == Asked::Key("go")).unwrap();
    assert_eq!(go.elicitation_mode(), "url");
    let none = Capabilities::read(&json!({"elicitation": {}})).unwrap();
    assert_eq!(none.missing_for(go), Some("elicitation.url"));
    let llm = r.questions.iter().find(|q| q.asked == Asked::Key("llm")).unwrap();
    assert_eq!(none.missing_for(llm), Some("sampling"));
    let login = r.questions.iter().find(|q| q.asked == Asked::Key("login")).unwrap();
    assert_eq!(none.missing_for(login), None);

    // State only: a pending round.
    let state_only =
        json!({"jsonrpc": "2.0", "id": 7, "result": {"resultType": "input_required", "requestState": "s"}});
    assert!(read_reply(&state_only).is_ok());
    // A complete result, with or without the type; a task.
    for r in [json!({"content": []}), json!({"resultType": "complete", "content": []})] {
        let doc = json!({"jsonrpc": "2.0", "id": 1, "result": r});
        assert!(matches!(
            read_reply(&doc).unwrap()[0],
            Item::Result(ResultShape {
                kind: ResultType::Complete,
                ..
            })
        ));
    }
    let task =
        json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "task", "taskId": "t9", "status": "working"}});
    let items = read_reply(&task).unwrap();
    assert!(matches!(
        &items[0],
        Item::Result(ResultShape {
            kind: ResultType::Task,
            task_id: Some("t9"),
            ..
        })
    ));
    // A 2025 question on a stream, a notification, an error.
    let asked = json!({"jsonrpc": "2.0", "id": 3, "method": "roots/list"});
    assert!(matches!(
        read_reply(&asked).unwrap()[0],
        Item::Question(Question {
            asked: Asked::Id(_),
            ..
        })
    ));
    let note = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {}});
    assert_eq!(read_reply(&note).unwrap(), vec![Item::Other]);
    let error = json!({"jsonrpc": "2.0", "id": 3, "error": {"code": 1, "message": "m"}});
    assert_eq!(read_reply(&error).unwrap(), vec![Item::Other]);
}

#[test]
fn results_the_sdks_would_not_read_are_errors() {
    let bad = [
        json!({"resultType": "later"}),
        json!({"resultType": 1}),
        json!({"resultType": "input_required"}),
        json!({"resultType": "input_required", "inputRequests": []}),
        json!({"resultType": "input_required", "inputRequests": {"k": "x"}}),
        json!({"resultType": "input_required", "inputRequests": {"k": {"method": "tools/call"}}}),
        json!({"resultType": "input_required", "inputRequests": {"k": {"params": {}}}}),
        json!({"resultType": "input_required", "inputRequests": {"k": {"method": "roots/list", "params": 1}}}),
        json!({"resultType": "input_required", "requestState": {}}),
        json!({"resultType": "task"}),
        // Input requests in a result of another type are read too.
        json!({"status": "input_required", "inputRequests": 5}),
    ];
    for r in bad {
        let doc = json!({"jsonrpc": "2.0", "id": 1, "result": r});
        assert!(read_reply(&doc).is_err(), "{r}");
    }
}

#[test]
fn plain_replies_are_told_apart_without_a_parse() {
    let plain = [
        r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"a \"method\" in text"}]}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"resultType" : "complete"}}"#,
    ];
    for b in plain {
        assert!(surely_plain(b.as_bytes()), "{b}");
    }
    let not = [
        r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","requestState":"s"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"later"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":5}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{"inputRequests":{}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{"\u0072esultType":"input_required"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"roots/list"}"#,
    ];
    for b in not {
        assert!(!surely_plain(b.as_bytes()), "{b}");
    }
}
