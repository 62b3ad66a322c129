//! Denials as JSON-RPC errors, in the two styles the `denial` param picks,
//! and the shared handling of request bodies and param errors.

use serde_json::{json, Value};

use crate::jsonrpc::{self, BodyError, Envelope, Kind, INTERNAL_ERROR};
use policy_agents::{Deny, ParamError, Params, PolicyError, RequestContext};

/// The challenge of an `http_403` denial when no rule names a scope that
/// would help and no `resource_metadata` is set (as Envoy AI Gateway sends
/// it); otherwise `scope="..."` and `resource_metadata="..."` follow.
pub const INSUFFICIENT_SCOPE: &str = "Bearer error=\"insufficient_scope\"";

/// How a refused call is answered (param `denial`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// HTTP 403 (authorization adds `WWW-Authenticate: Bearer error="insufficient_scope"`),
    /// with the JSON-RPC error as the body.
    Http403,
    /// HTTP 200 with the JSON-RPC error carrying the request's id.
    JsonRpcError,
}

impl Style {
    /// Reads param `name`: `http_403` (the default) or `jsonrpc_error`.
    pub fn parse(p: &Params, name: &str) -> Result<Style, ParamError> {
        match p.get(name).map(str::trim) {
            None | Some("") | Some("http_403") => Ok(Style::Http403),
            Some("jsonrpc_error") => Ok(Style::JsonRpcError),
            Some(other) => Err(ParamError::invalid(name, other, "expected http_403 or jsonrpc_error")),
        }
    }
}

/// One refused message of a body.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The message's index in the body.
    pub index: usize,
    /// The JSON-RPC error code.
    pub code: i64,
    /// The error message (never an argument's value).
    pub message: String,
    /// The error's `data`.
    pub data: Value,
}

/// A JSON-RPC error response.
pub fn error_object(id: Value, code: i64, message: &str, data: Option<&Value>) -> Value {
    let mut error = json!({"code": code, "message": message});
    if let Some(d) = data {
        error["data"] = d.clone();
    }
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}

/// The reply body for refused messages: one error for a single message; for
/// a batch (refused whole), one error per request, the refused ones with
/// their own reason and the others saying the batch was refused.
pub fn reply_body(env: &Envelope, refusals: &[Refusal]) -> Value {
    let Some(first) = refusals.first() else {
        return Value::Null;
    };
    let id_of = |i: usize| env.messages.get(i).and_then(|m| m.id.clone()).unwrap_or(Value::Null);
    if !env.batch {
        return error_object(id_of(first.index), first.code, &first.message, Some(&first.data));
    }
    let mut out = Vec::new();
    for (i, m) in env.messages.iter().enumerate() {
        let (Kind::Request, Some(id)) = (m.kind, &m.id) else {
            continue;
        };
        out.push(match refusals.iter().find(|r| r.index == i) {
            Some(r) => error_object(id.clone(), r.code, &r.message, Some(&r.data)),
            None => error_object(
                id.clone(),
                first.code,
                "not run: the batch was refused as a whole",
                Some(&json!({"refused_message": first.index})),
            ),
        });
    }
    if out.is_empty() {
        out.push(error_object(Value::Null, first.code, &first.message, Some(&first.data)));
    }
    Value::Array(out)
}

/// A denial in `style`; `challenge` is the `WWW-Authenticate` of a 403.
pub fn render(style: Style, challenge: Option<&str>, env: &Envelope, refusals: &[Refusal], reason: &str) -> Deny {
    let body = reply_body(env, refusals);
    match (style, challenge) {
        (Style::Http403, Some(challenge)) => Deny::json(403, &body).header("www-authenticate", challenge),
        (Style::Http403, None) => Deny::json(403, &body),
        (Style::JsonRpcError, _) => Deny::json(200, &body),
    }
    .reason(reason)
}

/// The 400 for a body that is not JSON-RPC.
pub fn bad_body(e: &BodyError) -> Deny {
    Deny::json(400, &error_object(e.id.clone(), e.code, &e.message, None)).reason("invalid_jsonrpc")
}

/// A policy failure for bad params: logged by the SDK with the whole error,
/// answered (with `on_failure: deny`, the default) with a JSON-RPC internal
/// error that names the param but not its value.
pub fn config_error(policy: &str, e: &ParamError) -> PolicyError {
    let param = match e {
        ParamError::Missing(name) | ParamError::Invalid { name, .. } => name.as_str(),
    };
    let message = format!("policy {policy} is misconfigured: param `{param}`");
    PolicyError::new(format!("{policy}: {e}")).with_deny(
        Deny::json(500, &error_object(Value::Null, INTERNAL_ERROR, &message, None)).reason("policy_misconfigured"),
    )
}

/// What a request carries for the tool policies.
#[derive(Debug)]
pub enum Incoming {
    /// Not a POST (the GET event stream, a DELETE ending a session): no messages.
    NotPost,
    /// JSON-RPC messages.
    Messages(Envelope),
    /// A body that is not JSON-RPC, or headers that disagree with it: the 400.
    Bad(Deny),
}

/// Reads the JSON-RPC messages of a request, each through the MCP reader
/// ([`crate::mcp::shapes`]: what it cannot read is a 400 with -32602). The
/// routing headers of MCP 2026-07-28 must agree with the body
/// ([`crate::mcp::headers`]: a 400 with -32020 otherwise): a header that
/// disagrees could hide another call.
pub fn incoming(policy: &str, ctx: &RequestContext<'_>) -> Result<Incoming, PolicyError> {
    if !ctx.request.method().eq_ignore_ascii_case("POST") {
        return Ok(Incoming::NotPost);
    }
    let Some(body) = ctx.request.body() else {
        return Err(PolicyError::new(format!(
            "{policy}: the request body was not included (the policy requires it)"
        )));
    };
    let env = match jsonrpc::parse(body) {
        Ok(env) => env,
        Err(e) => return Ok(Incoming::Bad(bad_body(&e))),
    };
    // A single message's errors answer with its id; a batch's with null.
    let single_id = match env.messages.as_slice() {
        [m] => m.id.clone().unwrap_or(Value::Null),
        _ => Value::Null,
    };
    for m in &env.messages {
        if let Err(e) = crate::mcp::shapes::read_call(m) {
            let id = single_id.clone();
            return Ok(Incoming::Bad(bad_body(
                &BodyError::new(jsonrpc::INVALID_PARAMS, e.0).with_id(id),
            )));
        }
    }
    if let Some(why) = crate::mcp::headers::mismatch(|n| ctx.request.header(n), &env) {
        return Ok(Incoming::Bad(
            Deny::json(400, &error_object(single_id, crate::mcp::HEADER_MISMATCH, &why, None))
                .reason("header_mismatch"),
        ));
    }
    Ok(Incoming::Messages(env))
}
