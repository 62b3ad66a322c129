//! What an agent's replies say about tasks: the ids of the tasks a reply
//! (or one streamed event) carries, and the tasks of a list.
//!
//! A reply is a JSON-RPC response (its `result`) or an HTTP+JSON body or
//! event (the object itself), in the A2A 1.0 shapes (`task`, `message`,
//! `statusUpdate`, `artifactUpdate`, in camelCase or snake_case) and the
//! 0.3 ones (an object with `kind`: `task`, `message`, `status-update`,
//! `artifact-update`).

use serde_json::Value;

use super::call::{field, text_field};

const TASK_ID: &[&str] = &["taskId", "task_id"];

/// The object a reply document answers with: a JSON-RPC `result` (`None`
/// for an error), or the document itself.
pub fn payload(doc: &Value) -> Option<&Value> {
    if doc.get("jsonrpc").is_some() {
        return doc.get("result");
    }
    Some(doc)
}

/// The ids of the tasks a reply document names, in order, without repeats.
pub fn task_ids(doc: &Value) -> Vec<&str> {
    let Some(v) = payload(doc) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(t) = field(v, &["task"]) {
        out.extend(text_field(t, &["id"]));
    }
    for key in [
        "message",
        "statusUpdate",
        "status_update",
        "artifactUpdate",
        "artifact_update",
    ] {
        if let Some(x) = v.get(key) {
            out.extend(text_field(x, TASK_ID));
        }
    }
    match v.get("kind").and_then(Value::as_str) {
        Some("task") => out.extend(text_field(v, &["id"])),
        Some("message" | "status-update" | "artifact-update") => out.extend(text_field(v, TASK_ID)),
        _ => {}
    }
    super::call::unique(&mut out);
    out
}

/// The tasks of a `ListTasks` reply (`tasks`, or a 0.3 list that is the
/// result itself), mutable.
pub fn task_list(doc: &mut Value) -> Option<&mut Vec<Value>> {
    let v = if doc.get("jsonrpc").is_some() {
        doc.get_mut("result")?
    } else {
        doc
    };
    match v {
        Value::Array(items) => Some(items),
        Value::Object(o) => o.get_mut("tasks").and_then(Value::as_array_mut),
        _ => None,
    }
}

/// The id of one task of a list.
pub fn list_item_id(task: &Value) -> Option<&str> {
    text_field(task, &["id"])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn task_ids_come_from_every_shape() {
        let one = |v: Value| task_ids(&v).into_iter().map(String::from).collect::<Vec<_>>();
        assert_eq!(
            one(json!({"jsonrpc": "2.0", "id": 1, "result": {"task": {"id": "t1"}}})),
            ["t1"]
        );
        assert_eq!(
            one(json!({"jsonrpc": "2.0", "id": 1, "result": {"statusUpdate": {"taskId": "t2"}}})),
            ["t2"]
        );
        assert_eq!(one(json!({"artifact_update": {"task_id": "t3"}})), ["t3"]);
        assert_eq!(one(json!({"message": {"taskId": "t4", "parts": []}})), ["t4"]);
        assert_eq!(
            one(json!({"jsonrpc": "2.0", "id": 1, "result": {"kind": "task", "id": "t5"}})),
            ["t5"]
        );
        assert_eq!(one(json!({"kind": "status-update", "taskId": "t6"})), ["t6"]);
        assert!(one(json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32001}})).is_empty());
        assert!(one(json!({"kind": "message", "messageId": "m"})).is_empty());
    }

    #[test]
    fn lists_are_found_in_both_bindings() {
        let mut rpc = json!({"jsonrpc": "2.0", "id": 1, "result": {"tasks": [{"id": "a"}, {"id": "b"}]}});
        task_list(&mut rpc).unwrap().retain(|t| list_item_id(t) == Some("b"));
        assert_eq!(rpc["result"]["tasks"], json!([{"id": "b"}]));
        let mut rest = json!({"tasks": [{"id": "a"}], "nextPageToken": ""});
        assert_eq!(task_list(&mut rest).map(|l| l.len()), Some(1));
        assert!(task_list(&mut json!({"jsonrpc": "2.0", "id": 1, "error": {}})).is_none());
    }
}
