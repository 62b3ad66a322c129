//! Agent replies (proto) to checked domain replies. This is the boundary where
//! everything an agent says is validated; Envoy never sees an unchecked value.

use bytes::Bytes;

use super::{Immediate, Instr, Reply};
use crate::http::{valid_header_name, valid_header_value, valid_method};
use crate::proto::{self, request_instruction::Instruction as Rq, response_instruction::Instruction as Rs};

/// Why an agent reply was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidReply {
    /// The reply answers another request.
    #[error("reply request_id {got:?} does not match {want:?}")]
    RequestId {
        /// Sent.
        want: String,
        /// Received.
        got: String,
    },
    /// A header name is empty, not a token, a pseudo-header or framing header.
    #[error("illegal header name {0:?}")]
    HeaderName(String),
    /// A header value holds CR, LF or NUL.
    #[error("header {0:?} has a value with CR, LF or NUL")]
    HeaderValue(String),
    /// `host` cannot be removed.
    #[error("header {0:?} cannot be removed")]
    Unremovable(String),
    /// A status outside 200-599.
    #[error("status {0} is outside 200-599")]
    Status(i32),
    /// A path that does not start with `/` or holds forbidden bytes.
    #[error("illegal path {0:?}")]
    Path(String),
    /// A method that is not a token.
    #[error("illegal method {0:?}")]
    Method(String),
    /// A query parameter with an empty name.
    #[error("empty query parameter name")]
    QueryName,
    /// A content-type with CR, LF or NUL.
    #[error("illegal content_type")]
    ContentType,
    /// An instruction with no variant set (or one this kernel does not know).
    #[error("empty or unknown instruction")]
    Empty,
}

/// Headers agents may not touch with header instructions: the kernel derives
/// them (`content-length`) or Envoy owns them.
const RESERVED: [&str; 2] = ["content-length", "transfer-encoding"];

fn header_name(name: &str) -> Result<String, InvalidReply> {
    let lower = name.to_ascii_lowercase();
    if !valid_header_name(lower.as_bytes()) || lower.starts_with(':') || RESERVED.contains(&lower.as_str()) {
        return Err(InvalidReply::HeaderName(name.to_string()));
    }
    Ok(lower)
}

fn header(name: &str, value: &str) -> Result<(String, Bytes), InvalidReply> {
    let n = header_name(name)?;
    if !valid_header_value(value.as_bytes()) {
        return Err(InvalidReply::HeaderValue(n));
    }
    Ok((n, Bytes::copy_from_slice(value.as_bytes())))
}

fn status(code: i32) -> Result<u16, InvalidReply> {
    u16::try_from(code)
        .ok()
        .filter(|c| (200..=599).contains(c))
        .ok_or(InvalidReply::Status(code))
}

fn body(b: proto::SetBody) -> Result<Instr, InvalidReply> {
    let ct = if b.content_type.is_empty() {
        None
    } else if valid_header_value(b.content_type.as_bytes()) {
        Some(b.content_type)
    } else {
        return Err(InvalidReply::ContentType);
    };
    Ok(Instr::SetBody(b.body, ct))
}

fn common(i: Common) -> Result<Instr, InvalidReply> {
    Ok(match i {
        Common::Set(h) => {
            let (n, v) = header(&h.name, &h.value)?;
            Instr::SetHeader(n, v)
        }
        Common::Append(h) => {
            let (n, v) = header(&h.name, &h.value)?;
            Instr::AppendHeader(n, v)
        }
        Common::Remove(h) => {
            let n = header_name(&h.name)?;
            if n == "host" {
                return Err(InvalidReply::Unremovable(n));
            }
            Instr::RemoveHeader(n)
        }
        Common::Body(b) => body(b)?,
        Common::Meta(m) => Instr::SetMetadata(m.key, m.value),
    })
}

enum Common {
    Set(proto::SetHeader),
    Append(proto::AppendHeader),
    Remove(proto::RemoveHeader),
    Body(proto::SetBody),
    Meta(proto::SetMetadata),
}

fn check_id(want: &str, got: String) -> Result<(), InvalidReply> {
    if got != want {
        return Err(InvalidReply::RequestId {
            want: want.to_string(),
            got,
        });
    }
    Ok(())
}

/// Pushes `i` following the composition rules of spec §7.5: `Continue` is
/// dropped, control flow after the first `Immediate` or `Skip` is ignored.
fn push(out: &mut Reply, i: Instr) {
    let stopped = out.instructions.iter().any(|x| matches!(x, Instr::Immediate(_)));
    let skipped = out.instructions.iter().any(|x| matches!(x, Instr::Skip));
    match i {
        _ if stopped => {}
        Instr::Skip if skipped => {}
        i => out.instructions.push(i),
    }
}

/// Checks a reply's id, then converts its instructions with `one` (which
/// returns `None` for instructions that are dropped) under the composition
/// rules, keeping its metadata.
fn convert<I>(
    want_id: &str,
    got_id: String,
    instructions: Vec<Option<I>>,
    metadata: std::collections::HashMap<String, String>,
    one: impl Fn(I) -> Result<Option<Instr>, InvalidReply>,
) -> Result<Reply, InvalidReply> {
    check_id(want_id, got_id)?;
    let mut out = Reply {
        instructions: Vec::with_capacity(instructions.len()),
        metadata: metadata.into_iter().collect(),
        cache_max_age_ms: None,
    };
    for i in instructions {
        if let Some(instr) = one(i.ok_or(InvalidReply::Empty)?)? {
            push(&mut out, instr);
        }
    }
    Ok(out)
}

fn query_name(name: String) -> Result<String, InvalidReply> {
    if name.is_empty() {
        return Err(InvalidReply::QueryName);
    }
    Ok(name)
}

/// Checks a request-phase reply.
pub fn convert_request_reply(want_id: &str, r: proto::PolicyRequestResponse) -> Result<Reply, InvalidReply> {
    let cache_max_age_ms = r.cache_max_age_ms;
    let instructions = r.instructions.into_iter().map(|i| i.instruction).collect();
    let reply = convert(want_id, r.request_id, instructions, r.policy_metadata, |i| {
        Ok(Some(match i {
            Rq::SetHeader(h) => common(Common::Set(h))?,
            Rq::AppendHeader(h) => common(Common::Append(h))?,
            Rq::RemoveHeader(h) => common(Common::Remove(h))?,
            Rq::SetBody(b) => common(Common::Body(b))?,
            Rq::SetMetadata(m) => common(Common::Meta(m))?,
            Rq::SetPath(p) => {
                if !p.path.starts_with('/') || !valid_header_value(p.path.as_bytes()) || p.path.contains(' ') {
                    return Err(InvalidReply::Path(p.path));
                }
                Instr::SetPath(p.path)
            }
            Rq::SetQueryParam(q) => Instr::SetQuery(query_name(q.name)?, q.value),
            Rq::RemoveQueryParam(q) => Instr::RemoveQuery(query_name(q.name)?),
            Rq::SetMethod(m) => {
                if !valid_method(&m.method) {
                    return Err(InvalidReply::Method(m.method));
                }
                Instr::SetMethod(m.method)
            }
            Rq::ImmediateResponse(imm) => Instr::Immediate(Immediate {
                status: status(imm.status_code)?,
                headers: imm
                    .headers
                    .iter()
                    .map(|h| header(&h.key, &h.value))
                    .collect::<Result<_, _>>()?,
                body: imm.body,
                reason: imm.reason,
            }),
            Rq::Continue(_) => return Ok(None),
            Rq::SkipRemainingPolicies(_) => Instr::Skip,
        }))
    })?;
    Ok(Reply {
        cache_max_age_ms,
        ..reply
    })
}

/// Checks a response-phase reply.
pub fn convert_response_reply(want_id: &str, r: proto::PolicyResponseResponse) -> Result<Reply, InvalidReply> {
    let instructions = r.instructions.into_iter().map(|i| i.instruction).collect();
    convert(want_id, r.request_id, instructions, r.policy_metadata, |i| {
        Ok(Some(match i {
            Rs::SetHeader(h) => common(Common::Set(h))?,
            Rs::AppendHeader(h) => common(Common::Append(h))?,
            Rs::RemoveHeader(h) => common(Common::Remove(h))?,
            Rs::SetBody(b) => common(Common::Body(b))?,
            Rs::SetMetadata(m) => common(Common::Meta(m))?,
            Rs::SetStatusCode(s) => Instr::SetStatus(status(s.status_code)?),
            Rs::Continue(_) => return Ok(None),
            Rs::SkipRemainingPolicies(_) => Instr::Skip,
        }))
    })
}
