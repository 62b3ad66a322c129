//! The params of an A2A call read the way the official server reads them,
//! for each protocol version and binding, into one shape: the A2A 1.0
//! protobuf JSON (camelCase) that every policy reads.
//!
//! What the server (`a2a-sdk`, the reference) accepts, per [`Dialect`]:
//! * **1.0**, both bindings: protobuf JSON of the 1.0 messages. Each field
//!   under its JSON name or its proto name (`taskId`, `task_id`); a part is
//!   `{"text"}`, `{"url"}`, `{"raw"}` or `{"data"}` with `mediaType`,
//!   `filename`, `metadata`; a send's push config is
//!   `configuration.taskPushNotificationConfig`.
//! * **0.3 JSON-RPC** (`message/send`, ...): the 0.3 JSON schema, camelCase
//!   or snake_case. Parts carry `kind` (`text`, `file`, `data`); a file is
//!   `file.uri` or `file.bytes`; the push config is
//!   `configuration.pushNotificationConfig`.
//! * **0.3 HTTP+JSON** (`/v1/message:send`, ...): protobuf JSON of the 0.3
//!   messages. The message is `message` or `request`; its parts are
//!   `content`; a file is `file.fileWithUri` / `file.fileWithBytes`; a data
//!   part is `{"data": {"data": {...}}}`; the push config is
//!   `configuration.pushNotification`; a config's own URL is
//!   `config.pushNotificationConfig.url` (the Python server) or
//!   `pushNotificationConfig.url` (the JavaScript server; a body with both
//!   is refused).
//!
//! The server ignores members it does not know, and takes the last of a
//! field given twice. A policy that read other members than the server,
//! or the other of two, could be walked around; so here:
//! * a field given under two of its names is refused (the server would
//!   act on whichever came last);
//! * a member that the dialect does not define, in a governed place (the
//!   params, a message, a part, a file, a send's configuration, a push
//!   config), is refused (`strict`, the default of the policies' param
//!   `unknown_fields: refuse`): another version's name, a part kind the
//!   policies cannot read, a field a newer agent might act on. With
//!   `unknown_fields: ignore` it is left out, as the reference server
//!   leaves it out. Free-form members (`metadata`, a data part's `data`)
//!   are not checked.
//!
//! The shape read ([`read_params`]) holds only the fields the server reads,
//! under their 1.0 names, so a policy never sees a member the agent does
//! not, nor misses one it does.

use serde_json::{Map, Value};

use super::call::Op;

/// The protocol version and binding whose names a call's params use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// A2A 1.0, JSON-RPC or HTTP+JSON (the same protobuf JSON).
    V10,
    /// A2A 0.3 over JSON-RPC (the 0.3 JSON schema).
    V03JsonRpc,
    /// A2A 0.3 over HTTP+JSON (protobuf JSON of the 0.3 messages).
    V03Rest,
}

impl Dialect {
    /// `1.0` or `0.3`.
    pub fn version(self) -> &'static str {
        match self {
            Dialect::V10 => "1.0",
            Dialect::V03JsonRpc | Dialect::V03Rest => "0.3",
        }
    }
}

/// Why params cannot be read: a message naming the member.
pub type Unread = String;

/// One field: the names the server accepts for it.
type Names = &'static [&'static str];

/// The members of `v` (an object, or `null` for none) by field: for each
/// of `fields`, the value under whichever of its names is present. A field
/// under two names, a value that is not an object, and (when `strict`) a
/// member no field names are refused, naming `at`.
fn pick<'v, const N: usize>(
    v: &'v Value,
    fields: [Names; N],
    at: &str,
    strict: bool,
) -> Result<[Option<&'v Value>; N], Unread> {
    let mut out: [Option<&'v Value>; N] = [None; N];
    let map = match v {
        Value::Null => return Ok(out),
        Value::Object(m) => m,
        _ => return Err(format!("{at} must be an object")),
    };
    let mut seen: [Option<&str>; N] = [None; N];
    for (key, value) in map {
        match fields.iter().position(|names| names.contains(&key.as_str())) {
            Some(i) => {
                if let Some(other) = seen[i] {
                    return Err(format!("{at} names one field twice, as {other} and {key}"));
                }
                seen[i] = Some(key);
                // JSON null is the field's default: absent.
                out[i] = Some(value).filter(|v| !v.is_null());
            }
            None if strict => {
                return Err(format!("{at}.{key} is not an A2A field this policy can read"));
            }
            None => {}
        }
    }
    Ok(out)
}

/// A string field, checked.
fn string<'v>(v: Option<&'v Value>, at: &str, name: &str) -> Result<Option<&'v Value>, Unread> {
    match v {
        None => Ok(None),
        Some(s @ Value::String(_)) => Ok(Some(s)),
        Some(_) => Err(format!("{at}.{name} must be a string")),
    }
}

/// A list of strings, checked.
fn strings<'v>(v: Option<&'v Value>, at: &str, name: &str) -> Result<Option<&'v Value>, Unread> {
    match v {
        None => Ok(None),
        Some(list @ Value::Array(items)) if items.iter().all(Value::is_string) => Ok(Some(list)),
        Some(_) => Err(format!("{at}.{name} must be a list of strings")),
    }
}

/// Builds an object from `(name, value)` pairs, leaving out absent ones.
fn object<const N: usize>(members: [(&str, Option<Value>); N]) -> Value {
    let mut m = Map::new();
    for (k, v) in members {
        if let Some(v) = v {
            m.insert(k.to_string(), v);
        }
    }
    Value::Object(m)
}

fn owned(v: Option<&Value>) -> Option<Value> {
    v.cloned()
}

const MESSAGE_ID: Names = &["messageId", "message_id"];
const CONTEXT_ID: Names = &["contextId", "context_id"];
const TASK_ID: Names = &["taskId", "task_id"];
const REFERENCE_TASK_IDS: Names = &["referenceTaskIds", "reference_task_ids"];
const MEDIA_TYPE: Names = &["mediaType", "media_type"];
const MIME_TYPE: Names = &["mimeType", "mime_type"];
const HISTORY_LENGTH: Names = &["historyLength", "history_length"];
const ACCEPTED_OUTPUT_MODES: Names = &["acceptedOutputModes", "accepted_output_modes"];

/// A part in the 1.0 shape, from its members (each already checked).
struct Part<'v> {
    text: Option<&'v Value>,
    raw: Option<&'v Value>,
    url: Option<&'v Value>,
    data: Option<&'v Value>,
    metadata: Option<&'v Value>,
    filename: Option<&'v Value>,
    media_type: Option<&'v Value>,
}

impl Part<'_> {
    fn shape(self) -> Value {
        object([
            ("text", owned(self.text)),
            ("raw", owned(self.raw)),
            ("url", owned(self.url)),
            ("data", owned(self.data)),
            ("metadata", owned(self.metadata)),
            ("filename", owned(self.filename)),
            ("mediaType", owned(self.media_type)),
        ])
    }
}

/// A 0.3 file part's `file` (its URI and bytes under `uri_names` and
/// `bytes_names`), as (url, raw, filename, mediaType), each checked.
type File<'v> = (
    Option<&'v Value>,
    Option<&'v Value>,
    Option<&'v Value>,
    Option<&'v Value>,
);

fn file_of<'v>(
    file: Option<&'v Value>,
    uri_names: Names,
    bytes_names: Names,
    at: &str,
    strict: bool,
) -> Result<File<'v>, Unread> {
    let Some(f) = file else {
        return Ok((None, None, None, None));
    };
    let at = format!("{at}.file");
    let [uri, bytes, name, mime] = pick(f, [uri_names, bytes_names, &["name"], MIME_TYPE], &at, strict)?;
    Ok((
        string(uri, &at, uri_names[0])?,
        string(bytes, &at, bytes_names[0])?,
        string(name, &at, "name")?,
        string(mime, &at, "mimeType")?,
    ))
}

/// One part, in the 1.0 shape.
fn part(d: Dialect, v: &Value, at: &str, strict: bool) -> Result<Value, Unread> {
    match d {
        Dialect::V10 => {
            let [text, raw, url, data, metadata, filename, media_type] = pick(
                v,
                [
                    &["text"],
                    &["raw"],
                    &["url"],
                    &["data"],
                    &["metadata"],
                    &["filename"],
                    MEDIA_TYPE,
                ],
                at,
                strict,
            )?;
            Ok(Part {
                text: string(text, at, "text")?,
                raw: string(raw, at, "raw")?,
                url: string(url, at, "url")?,
                data,
                metadata,
                filename: string(filename, at, "filename")?,
                media_type: string(media_type, at, "mediaType")?,
            }
            .shape())
        }
        Dialect::V03JsonRpc => {
            let [kind, text, file, data, metadata] = pick(
                v,
                [&["kind"], &["text"], &["file"], &["data"], &["metadata"]],
                at,
                strict,
            )?;
            match kind.map(|k| k.as_str().unwrap_or("")) {
                None | Some("text" | "file" | "data") => {}
                Some(other) => return Err(format!("{at}.kind {other:?} is not a part kind this policy can read")),
            }
            let (url, raw, name, mime) = file_of(file, &["uri"], &["bytes"], at, strict)?;
            Ok(Part {
                text: string(text, at, "text")?,
                raw,
                url,
                data,
                metadata,
                filename: name,
                media_type: mime,
            }
            .shape())
        }
        Dialect::V03Rest => {
            let [text, file, data, metadata] = pick(v, [&["text"], &["file"], &["data"], &["metadata"]], at, strict)?;
            let (url, raw, name, mime) = file_of(
                file,
                &["fileWithUri", "file_with_uri"],
                &["fileWithBytes", "file_with_bytes"],
                at,
                strict,
            )?;
            // A 0.3 DataPart wraps its Struct: `{"data": {"data": {...}}}`.
            let data = match data {
                Some(d) => pick(d, [&["data"]], &format!("{at}.data"), strict)?[0],
                None => None,
            };
            Ok(Part {
                text: string(text, at, "text")?,
                raw,
                url,
                data,
                metadata,
                filename: name,
                media_type: mime,
            }
            .shape())
        }
    }
}

/// A message, in the 1.0 shape.
pub fn message(d: Dialect, v: &Value, at: &str, strict: bool) -> Result<Value, Unread> {
    // The parts' member, and the members only one dialect has.
    let (parts_names, kind_names, refs_names): (Names, Names, Names) = match d {
        Dialect::V10 => (&["parts"], &[], REFERENCE_TASK_IDS),
        Dialect::V03JsonRpc => (&["parts"], &["kind"], REFERENCE_TASK_IDS),
        Dialect::V03Rest => (&["content"], &[], &[]),
    };
    let [message_id, context_id, task_id, role, parts, metadata, extensions, refs, kind] = pick(
        v,
        [
            MESSAGE_ID,
            CONTEXT_ID,
            TASK_ID,
            &["role"],
            parts_names,
            &["metadata"],
            &["extensions"],
            refs_names,
            kind_names,
        ],
        at,
        strict,
    )?;
    if let Some(k) = kind.filter(|k| k.as_str() != Some("message")) {
        return Err(format!("{at}.kind {k} is not \"message\""));
    }
    let parts_at = format!("{at}.{}", parts_names[0]);
    let parts = match parts {
        None => None,
        Some(Value::Array(items)) => Some(Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, p)| part(d, p, &format!("{parts_at}[{i}]"), strict))
                .collect::<Result<_, _>>()?,
        )),
        Some(_) => return Err(format!("{parts_at} must be a list")),
    };
    Ok(object([
        ("messageId", owned(string(message_id, at, "messageId")?)),
        ("contextId", owned(string(context_id, at, "contextId")?)),
        ("taskId", owned(string(task_id, at, "taskId")?)),
        ("role", owned(role)),
        ("parts", parts),
        ("metadata", owned(metadata)),
        ("extensions", owned(strings(extensions, at, "extensions")?)),
        ("referenceTaskIds", owned(strings(refs, at, "referenceTaskIds")?)),
    ]))
}

/// A push-notification config given to the agent, in the 1.0 shape
/// (`TaskPushNotificationConfig`: `url`, `taskId`, `id`, `token`,
/// `authentication`). `task_names` are the names of its task field, if any.
fn push_config(v: &Value, task_names: Names, at: &str, strict: bool) -> Result<Value, Unread> {
    let [url, id, token, authentication, task_id, tenant] = pick(
        v,
        [
            &["url"],
            &["id"],
            &["token"],
            &["authentication"],
            task_names,
            &["tenant"],
        ],
        at,
        strict,
    )?;
    Ok(object([
        ("url", owned(string(url, at, "url")?)),
        ("id", owned(string(id, at, "id")?)),
        ("token", owned(string(token, at, "token")?)),
        ("authentication", owned(authentication)),
        ("taskId", owned(string(task_id, at, "taskId")?)),
        ("tenant", owned(tenant)),
    ]))
}

/// A send's params (`SendMessageRequest`, 0.3 `MessageSendParams`).
fn send(d: Dialect, v: &Value, strict: bool) -> Result<Value, Unread> {
    let (message_names, tenant_names): (Names, Names) = match d {
        Dialect::V10 => (&["message"], &["tenant"]),
        Dialect::V03JsonRpc => (&["message"], &[]),
        Dialect::V03Rest => (&["message", "request"], &[]),
    };
    let [message_v, configuration, metadata, tenant] = pick(
        v,
        [message_names, &["configuration"], &["metadata"], tenant_names],
        "params",
        strict,
    )?;
    let message = match message_v {
        Some(m) => Some(message(d, m, "params.message", strict)?),
        None => None,
    };
    let configuration = match configuration {
        Some(c) => Some(send_configuration(d, c, strict)?),
        None => None,
    };
    Ok(object([
        ("message", message),
        ("configuration", configuration),
        ("metadata", owned(metadata)),
        ("tenant", owned(tenant)),
    ]))
}

/// A send's configuration; its push config as `taskPushNotificationConfig`.
fn send_configuration(d: Dialect, v: &Value, strict: bool) -> Result<Value, Unread> {
    let at = "params.configuration";
    let (push_names, last_names): (Names, Names) = match d {
        Dialect::V10 => (
            &["taskPushNotificationConfig", "task_push_notification_config"],
            &["returnImmediately", "return_immediately"],
        ),
        Dialect::V03JsonRpc => (&["pushNotificationConfig", "push_notification_config"], &["blocking"]),
        Dialect::V03Rest => (&["pushNotification", "push_notification"], &["blocking"]),
    };
    let [modes, push, history, last] = pick(
        v,
        [ACCEPTED_OUTPUT_MODES, push_names, HISTORY_LENGTH, last_names],
        at,
        strict,
    )?;
    let push_at = format!("{at}.{}", push_names[0]);
    let push = match push {
        Some(p) => Some(push_config(
            p,
            if d == Dialect::V10 { TASK_ID } else { &[] },
            &push_at,
            strict,
        )?),
        None => None,
    };
    Ok(object([
        ("acceptedOutputModes", owned(strings(modes, at, "acceptedOutputModes")?)),
        ("taskPushNotificationConfig", push),
        ("historyLength", owned(history)),
        (last_names[0], owned(last)),
    ]))
}

/// `CreateTaskPushNotificationConfig`'s params, as a 1.0
/// `TaskPushNotificationConfig` (`taskId`, `url`, ...).
fn create_push(d: Dialect, v: &Value, strict: bool) -> Result<Value, Unread> {
    match d {
        Dialect::V10 => push_config(v, TASK_ID, "params", strict),
        Dialect::V03JsonRpc => {
            let [task_id, config] = pick(
                v,
                [TASK_ID, &["pushNotificationConfig", "push_notification_config"]],
                "params",
                strict,
            )?;
            let mut out = match config {
                Some(c) => push_config(c, &[], "params.pushNotificationConfig", strict)?,
                None => Value::Object(Map::new()),
            };
            if let Some(t) = string(task_id, "params", "taskId")? {
                out["taskId"] = t.clone();
            }
            Ok(out)
        }
        Dialect::V03Rest => {
            // The Python server reads `{"parent", "configId", "config":
            // {"name", "pushNotificationConfig": {...}}}`, the JavaScript
            // server `{"name", "pushNotificationConfig": {...}}`; the task
            // is the path's. A body with both configs is read differently
            // by the two: refused.
            const CONFIG: Names = &["pushNotificationConfig", "push_notification_config"];
            let [_parent, _config_id, config, _name, top] = pick(
                v,
                [&["parent"], &["configId", "config_id"], &["config"], &["name"], CONFIG],
                "params",
                strict,
            )?;
            let nested = match config {
                Some(c) => pick(c, [&["name"], CONFIG], "params.config", strict)?[1],
                None => None,
            };
            match (nested, top) {
                (Some(_), Some(_)) => {
                    Err("params has a push config both in config and at its top; servers read one or the other".into())
                }
                (Some(p), None) => push_config(p, &[], "params.config.pushNotificationConfig", strict),
                (None, Some(p)) => push_config(p, &[], "params.pushNotificationConfig", strict),
                (None, None) => Ok(Value::Object(Map::new())),
            }
        }
    }
}

/// The params of the calls on a task and of the others, checked against
/// the fields each dialect defines; read as they are (their ids are read
/// by [`super::call`]).
fn other(op: Op, d: Dialect, v: &Value, strict: bool) -> Result<Value, Unread> {
    let v10 = d == Dialect::V10;
    let fields: &[Names] = match (op, v10) {
        (Op::GetTask, true) => &[&["tenant"], &["id"], HISTORY_LENGTH],
        (Op::GetTask, false) => &[&["id"], HISTORY_LENGTH, &["metadata"]],
        (Op::CancelTask, true) => &[&["tenant"], &["id"], &["metadata"]],
        (Op::CancelTask | Op::SubscribeToTask | Op::ListPushConfigs, false) => &[&["id"], &["metadata"]],
        (Op::SubscribeToTask, true) => &[&["tenant"], &["id"]],
        (Op::GetPushConfig | Op::DeletePushConfig, true) => &[&["tenant"], TASK_ID, &["id"]],
        (Op::GetPushConfig | Op::DeletePushConfig, false) => &[
            &["id"],
            &["metadata"],
            &["pushNotificationConfigId", "push_notification_config_id"],
        ],
        (Op::ListPushConfigs, true) => &[
            &["tenant"],
            TASK_ID,
            &["pageSize", "page_size"],
            &["pageToken", "page_token"],
        ],
        (Op::ListTasks, _) => &[
            &["tenant"],
            CONTEXT_ID,
            &["status"],
            &["pageSize", "page_size"],
            &["pageToken", "page_token"],
            HISTORY_LENGTH,
            &["statusTimestampAfter", "status_timestamp_after"],
            &["includeArtifacts", "include_artifacts"],
        ],
        (Op::GetExtendedAgentCard | Op::GetAgentCard, _) => &[&["tenant"]],
        _ => &[],
    };
    let map = match v {
        Value::Null => return Ok(Value::Null),
        Value::Object(m) => m,
        _ => return Err("params must be an object".into()),
    };
    for names in fields {
        let present: Vec<&str> = names.iter().copied().filter(|n| map.contains_key(*n)).collect();
        if let [first, second, ..] = present.as_slice() {
            return Err(format!("params names one field twice, as {first} and {second}"));
        }
    }
    if strict {
        if let Some(k) = map
            .keys()
            .find(|k| !fields.iter().any(|names| names.contains(&k.as_str())))
        {
            return Err(format!("params.{k} is not an A2A field this policy can read"));
        }
    }
    Ok(v.clone())
}

/// Reads the params (JSON-RPC) or body (HTTP+JSON) of `op` in dialect `d`
/// into the 1.0 shape: sends and push configs field by field, the other
/// calls' params checked and kept as they are.
pub fn read_params(op: Op, d: Dialect, params: &Value, strict: bool) -> Result<Value, Unread> {
    match op {
        Op::SendMessage | Op::SendStreamingMessage => send(d, params, strict),
        Op::CreatePushConfig => create_push(d, params, strict),
        _ => other(op, d, params, strict),
    }
}

#[cfg(test)]
#[path = "shapes_tests.rs"]
mod tests;
