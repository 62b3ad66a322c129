//! MCP messages read once, for both revisions, into what the policies
//! decide on.
//!
//! **Requests** ([`read_call`]): the method and its target (`params.name`
//! of `tools/call` and `prompts/get`, `params.uri` of `resources/read`,
//! `params.taskId` of the tasks extension's methods), the arguments, and
//! from `params._meta` the revision (`io.modelcontextprotocol/protocolVersion`)
//! and the client capabilities the request declares
//! (`io.modelcontextprotocol/clientCapabilities`: 2026-07-28 declares them
//! per request); a retry's `inputResponses` and `requestState`.
//!
//! **Replies** ([`read_reply`]): each message of a reply (JSON, or one SSE
//! event's data) as [`Item`]s:
//! * a **question** the server puts to the client: a 2025-11-25 request on
//!   the call's stream (`id` + `method`), or one entry of a 2026-07-28
//!   result's `inputRequests` (its key, `method`, `params`). Both are the
//!   same three methods (`elicitation/create`, `sampling/createMessage`,
//!   `roots/list`), so one rule decides both forms;
//! * a **result**: its `resultType` (absent: `complete`, as an older server
//!   sends it), its questions, its `requestState`, its task id.
//!
//! Read as the SDKs read them, and refused where they would not read them
//! ([`ShapeError`]): a `resultType` that is not a string or not one of
//! `complete`, `input_required` and `task`; `inputRequests` that is not an
//! object, or an entry that is not `{method, params}` with one of the three
//! methods; an `input_required` result with neither `inputRequests` nor
//! `requestState`; a `requestState` that is not a string. A policy that
//! passed what it could not read would let through what it never decided.

use std::fmt;

use serde_json::{Map, Value};

use crate::jsonrpc::{Kind, Message};

/// The revision that moved server questions into results.
pub const REVISION_2026: &str = "2026-07-28";
/// `params._meta` key of a request's protocol version (2026-07-28).
pub const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `params._meta` key of a request's client capabilities (2026-07-28).
pub const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// The tasks extension's name in `clientCapabilities.extensions`.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// The methods a server may ask the client, in either revision.
pub const QUESTION_METHODS: &[&str] = &["elicitation/create", "sampling/createMessage", "roots/list"];

/// The methods whose result may be `input_required`.
pub const INPUT_METHODS: &[&str] = &["tools/call", "prompts/get", "resources/read"];

/// What a body holds that the SDKs would not read as MCP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeError(pub String);

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn err<T>(why: impl Into<String>) -> Result<T, ShapeError> {
    Err(ShapeError(why.into()))
}

/// True for a protocol version at or after 2026-07-28 (versions are dates,
/// `YYYY-MM-DD`, and compare as text).
pub fn is_2026(version: &str) -> bool {
    version.len() == REVISION_2026.len() && version >= REVISION_2026
}

/// The client capabilities a request declares, as far as the server's
/// questions need them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// `elicitation` with form mode (`{}` or `{"form": ...}`).
    pub form: bool,
    /// `elicitation.url`.
    pub url: bool,
    /// `sampling`.
    pub sampling: bool,
    /// `roots`.
    pub roots: bool,
    /// The tasks extension.
    pub tasks: bool,
}

impl Capabilities {
    /// Reads a `clientCapabilities` object.
    pub fn read(caps: &Value) -> Result<Capabilities, ShapeError> {
        let Some(caps) = caps.as_object() else {
            return err("clientCapabilities must be an object");
        };
        let elicitation = match caps.get("elicitation") {
            None | Some(Value::Null) => None,
            Some(Value::Object(e)) => Some(e),
            Some(_) => return err("clientCapabilities.elicitation must be an object"),
        };
        let tasks = match caps.get("extensions") {
            None | Some(Value::Null) => false,
            Some(Value::Object(x)) => x.get(TASKS_EXTENSION).is_some_and(|v| !v.is_null()),
            Some(_) => return err("clientCapabilities.extensions must be an object"),
        };
        let present = |k: &str| caps.get(k).is_some_and(|v| !v.is_null());
        Ok(Capabilities {
            // An empty elicitation object means form mode (what 2025-06-18
            // clients declared).
            form: elicitation.is_some_and(|e| e.is_empty() || e.contains_key("form")),
            url: elicitation.is_some_and(|e| e.contains_key("url")),
            sampling: present("sampling"),
            roots: present("roots"),
            tasks,
        })
    }

    /// The capability a question needs that these lack, by its name in
    /// `clientCapabilities` (`elicitation.url`, `sampling`, ...).
    pub fn missing_for(&self, q: &Question<'_>) -> Option<&'static str> {
        match q.method {
            "elicitation/create" if q.elicitation_mode() == "url" => (!self.url).then_some("elicitation.url"),
            "elicitation/create" => (!self.form).then_some("elicitation.form"),
            "sampling/createMessage" => (!self.sampling).then_some("sampling"),
            "roots/list" => (!self.roots).then_some("roots"),
            _ => None,
        }
    }

    /// As metadata text: the declared names, comma-separated (`none`).
    pub fn to_metadata(self) -> String {
        let names = [
            (self.form, "form"),
            (self.url, "url"),
            (self.sampling, "sampling"),
            (self.roots, "roots"),
            (self.tasks, "tasks"),
        ];
        let out: Vec<&str> = names.iter().filter(|(on, _)| *on).map(|(_, n)| *n).collect();
        if out.is_empty() {
            "none".to_string()
        } else {
            out.join(",")
        }
    }

    /// Reads [`Capabilities::to_metadata`]'s text.
    pub fn from_metadata(text: &str) -> Capabilities {
        let has = |n: &str| text.split(',').any(|p| p == n);
        Capabilities {
            form: has("form"),
            url: has("url"),
            sampling: has("sampling"),
            roots: has("roots"),
            tasks: has("tasks"),
        }
    }
}

/// A client's request, read.
#[derive(Debug, Clone, PartialEq)]
pub struct Call<'a> {
    /// The method.
    pub method: &'a str,
    /// The tool or prompt name, the resource URI, or the task id.
    pub target: Option<&'a str>,
    /// `params.arguments` (`tools/call`, `prompts/get`).
    pub arguments: Option<&'a Value>,
    /// The protocol version `_meta` names (2026-07-28 requests).
    pub version: Option<&'a str>,
    /// The client capabilities `_meta` declares (2026-07-28 requests).
    pub capabilities: Option<Capabilities>,
    /// A retry's answers to the questions of the previous round.
    pub input_responses: Option<&'a Map<String, Value>>,
    /// A retry's echoed state.
    pub request_state: Option<&'a str>,
}

impl Call<'_> {
    /// True when the request speaks 2026-07-28 or later.
    pub fn is_2026(&self) -> bool {
        self.version.is_some_and(is_2026)
    }

    /// True for a retry of a call the server answered `input_required`.
    pub fn is_retry(&self) -> bool {
        self.input_responses.is_some() || self.request_state.is_some()
    }
}

/// The key of a method's target in its params.
fn target_key(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

/// Reads a request (`None` for a notification or a response).
pub fn read_call(m: &Message) -> Result<Option<Call<'_>>, ShapeError> {
    let (Kind::Request, Some(method)) = (m.kind, m.method.as_deref()) else {
        return Ok(None);
    };
    let params = m.params.as_ref().and_then(Value::as_object);
    let get = |k: &str| params.and_then(|p| p.get(k)).filter(|v| !v.is_null());
    let target = match target_key(method) {
        Some(key) => match get(key) {
            Some(Value::String(s)) => Some(s.as_str()),
            _ => return err(format!("{method} needs a string params.{key}")),
        },
        None => None,
    };
    let (mut version, mut capabilities) = (None, None);
    match get("_meta") {
        None => {}
        Some(Value::Object(meta)) => {
            match meta.get(META_VERSION) {
                None | Some(Value::Null) => {}
                Some(Value::String(v)) => version = Some(v.as_str()),
                Some(_) => return err(format!("_meta {META_VERSION} must be a string")),
            }
            if let Some(caps) = meta.get(META_CAPABILITIES).filter(|v| !v.is_null()) {
                capabilities = Some(Capabilities::read(caps)?);
            }
        }
        Some(_) => return err("params._meta must be an object"),
    }
    let input_responses = match get("inputResponses") {
        None => None,
        Some(Value::Object(r)) => Some(r),
        Some(_) => return err("params.inputResponses must be an object"),
    };
    let request_state = match get("requestState") {
        None => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => return err("params.requestState must be a string"),
    };
    if request_state.is_some() && !INPUT_METHODS.contains(&method) {
        return err(format!("{method} takes no requestState"));
    }
    // The tasks extension answers a task's questions with `tasks/update`.
    if input_responses.is_some() && !INPUT_METHODS.contains(&method) && method != "tasks/update" {
        return err(format!("{method} takes no inputResponses"));
    }
    Ok(Some(Call {
        method,
        target,
        arguments: get("arguments"),
        version,
        capabilities,
        input_responses,
        request_state,
    }))
}

/// How a question was asked: a 2025 request's id, or a 2026 entry's key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Asked<'a> {
    /// A server-to-client request on the call's stream (2025-11-25).
    Id(&'a Value),
    /// An `inputRequests` entry (2026-07-28).
    Key(&'a str),
}

/// A question the server puts to the client (or its user, or its model).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Question<'a> {
    /// How it was asked.
    pub asked: Asked<'a>,
    /// `elicitation/create`, `sampling/createMessage` or `roots/list`
    /// (2025 requests may carry any method; 2026 entries only these).
    pub method: &'a str,
    /// Its params.
    pub params: Option<&'a Value>,
}

impl Question<'_> {
    /// An elicitation's mode (`form` when absent).
    pub fn elicitation_mode(&self) -> &str {
        self.params
            .and_then(|p| p.get("mode"))
            .and_then(Value::as_str)
            .unwrap_or("form")
    }
}

/// A result's `resultType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultType {
    /// The call's answer (or an older server's result, which has none).
    Complete,
    /// The server asks before it answers (2026-07-28).
    InputRequired,
    /// A task was created (the tasks extension).
    Task,
}

/// A result, read.
#[derive(Debug, Clone, PartialEq)]
pub struct ResultShape<'a> {
    /// The id of the request it answers.
    pub id: &'a Value,
    /// Its type.
    pub kind: ResultType,
    /// Its `inputRequests`, in order (an `input_required` result, or a
    /// task's status that asks).
    pub questions: Vec<Question<'a>>,
    /// Its `requestState`.
    pub state: Option<&'a str>,
    /// Its `taskId` (a task, or a task's status).
    pub task_id: Option<&'a str>,
}

/// One item of a reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Item<'a> {
    /// A 2025 server request (a question asked on the stream).
    Question(Question<'a>),
    /// A result.
    Result(ResultShape<'a>),
    /// A notification, an error, or a server request's answer.
    Other,
}

/// Reads one `inputRequests` entry.
fn question<'a>(key: &'a str, entry: &'a Value) -> Result<Question<'a>, ShapeError> {
    let Some(obj) = entry.as_object() else {
        return err(format!("inputRequests.{key} must be an object"));
    };
    let method = match obj.get("method") {
        Some(Value::String(m)) if QUESTION_METHODS.contains(&m.as_str()) => m.as_str(),
        Some(Value::String(m)) => {
            return err(format!(
                "inputRequests.{key} has method {m}, which a client does not answer"
            ))
        }
        _ => return err(format!("inputRequests.{key} needs a string method")),
    };
    let params = match obj.get("params") {
        None | Some(Value::Null) => None,
        Some(p @ Value::Object(_)) => Some(p),
        Some(_) => return err(format!("inputRequests.{key}.params must be an object")),
    };
    Ok(Question {
        asked: Asked::Key(key),
        method,
        params,
    })
}

/// Reads a result object answering `id`.
fn result<'a>(id: &'a Value, r: &'a Value) -> Result<ResultShape<'a>, ShapeError> {
    let Some(obj) = r.as_object() else {
        return err("result must be an object");
    };
    let kind = match obj.get("resultType") {
        None | Some(Value::Null) => ResultType::Complete,
        Some(Value::String(t)) => match t.as_str() {
            "complete" => ResultType::Complete,
            "input_required" => ResultType::InputRequired,
            "task" => ResultType::Task,
            other => return err(format!("unknown resultType {:?}", crate::tool::metadata_text(other))),
        },
        Some(_) => return err("resultType must be a string"),
    };
    let mut questions = Vec::new();
    match obj.get("inputRequests") {
        None | Some(Value::Null) => {}
        Some(Value::Object(entries)) => {
            for (key, entry) in entries {
                questions.push(question(key, entry)?);
            }
        }
        Some(_) => return err("inputRequests must be an object"),
    }
    let state = match obj.get("requestState") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => return err("requestState must be a string"),
    };
    if kind == ResultType::InputRequired && obj.get("inputRequests").is_none() && state.is_none() {
        return err("an input_required result needs inputRequests or requestState");
    }
    let task_id = match obj.get("taskId") {
        Some(Value::String(t)) => Some(t.as_str()),
        None | Some(Value::Null) if kind != ResultType::Task => None,
        _ => return err("a task needs a string taskId"),
    };
    Ok(ResultShape {
        id,
        kind,
        questions,
        state,
        task_id,
    })
}

/// Reads one message of a reply.
fn item(msg: &Value) -> Result<Item<'_>, ShapeError> {
    let Some(obj) = msg.as_object() else {
        return err("a message must be a JSON object");
    };
    let id = obj.get("id").filter(|v| !v.is_null());
    match (obj.get("method"), id, obj.get("result")) {
        (Some(Value::String(method)), Some(id), _) => Ok(Item::Question(Question {
            asked: Asked::Id(id),
            method,
            params: obj.get("params").filter(|p| !p.is_null()),
        })),
        (Some(Value::String(_)), None, _) => Ok(Item::Other),
        (Some(_), _, _) => err("method must be a string"),
        (None, Some(id), Some(r)) => Ok(Item::Result(result(id, r)?)),
        (None, _, _) => Ok(Item::Other),
    }
}

/// The key texts (`"name"`, quotes included) a scan looks for.
pub struct Keys(Vec<memchr::memmem::Finder<'static>>);

impl Keys {
    /// Finders for `names` (each searched as `"name"`).
    pub fn new(names: &[&str]) -> Keys {
        let mut finders = vec![memchr::memmem::Finder::new(b"\\u").into_owned()];
        finders.extend(
            names
                .iter()
                .map(|n| memchr::memmem::Finder::new(format!("\"{n}\"").as_bytes()).into_owned()),
        );
        Keys(finders)
    }

    /// True when a JSON body surely has none of these keys anywhere: none
    /// of their texts occurs, and no `\u` escape that could spell one
    /// (serde, like the SDKs' parsers, decodes escapes in keys; inside a
    /// string value a quote is escaped, so a key's text cannot occur
    /// there). A body that mentions one is read in full.
    pub fn surely_absent(&self, body: &[u8]) -> bool {
        self.0.iter().all(|f| f.find(body).is_none())
    }
}

/// True when a JSON reply body surely asks nothing and is a complete
/// result: no `inputRequests` or `method` key ([`Keys::surely_absent`]),
/// and every `"resultType"` followed by `"complete"`. Then reading the
/// body would find nothing to decide, and the policies skip the parse (the
/// common case: a tool's answer).
pub fn surely_plain(body: &[u8]) -> bool {
    use memchr::memmem::Finder;
    use std::sync::LazyLock;
    static ASKS: LazyLock<Keys> = LazyLock::new(|| Keys::new(&["inputRequests", "method"]));
    static RESULT_TYPE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"resultType\""));
    if !ASKS.surely_absent(body) {
        return false;
    }
    RESULT_TYPE.find_iter(body).all(|at| {
        let after = &body[at + RESULT_TYPE.needle().len()..];
        trim_json_space(after)
            .strip_prefix(b":")
            .map(trim_json_space)
            .is_some_and(|v| v.starts_with(b"\"complete\""))
    })
}

fn trim_json_space(b: &[u8]) -> &[u8] {
    let n = b
        .iter()
        .take_while(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
        .count();
    &b[n..]
}

/// Reads one reply document (a message, or a batch of them).
pub fn read_reply(doc: &Value) -> Result<Vec<Item<'_>>, ShapeError> {
    match doc {
        Value::Array(items) => items.iter().map(item).collect(),
        one => Ok(vec![item(one)?]),
    }
}

#[cfg(test)]
#[path = "shapes_tests.rs"]
mod tests;
