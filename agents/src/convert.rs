//! Converts outcomes to the protocol's instructions, enforcing the rules the
//! kernel checks (header tokens, no pseudo or framing headers, no CR/LF/NUL,
//! status 200-599). A violation is a failure of the policy that produced it.

use crate::action::{Deny, HeaderOp, NewBody, RequestAction, ResponseAction};
use crate::proto::response_instruction::Instruction as RespI;
use crate::proto::{self, request_instruction::Instruction as ReqI};

/// An instruction that breaks a protocol rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstructionError {
    /// The header name is not an HTTP token.
    #[error("invalid header name {0:?}")]
    HeaderName(String),
    /// Pseudo and framing headers are not set with header instructions.
    #[error("header {0:?} cannot be changed with a header instruction")]
    ForbiddenHeader(String),
    /// The header value holds CR, LF or NUL.
    #[error("value of header {0:?} contains CR, LF or NUL")]
    HeaderValue(String),
    /// Status codes are between 200 and 599.
    #[error("status code {0} is outside 200-599")]
    Status(u16),
    /// Paths start with `/` and hold no whitespace or control characters.
    #[error("invalid path {0:?}")]
    Path(String),
    /// Methods are HTTP tokens.
    #[error("invalid method {0:?}")]
    Method(String),
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Checks a header name as the kernel will (an HTTP token; not a pseudo-header,
/// `content-length` or `transfer-encoding`) and returns it in lower case. For
/// policies that take header names in their params, to refuse a bad name when
/// the params are parsed rather than when the instruction is sent.
pub fn header_name(name: &str) -> Result<String, InstructionError> {
    let lower = name.to_ascii_lowercase();
    if lower.starts_with(':') || lower == "content-length" || lower == "transfer-encoding" {
        return Err(InstructionError::ForbiddenHeader(name.to_string()));
    }
    if !is_token(&lower) {
        return Err(InstructionError::HeaderName(name.to_string()));
    }
    Ok(lower)
}

fn header_value(name: &str, value: &str) -> Result<String, InstructionError> {
    if value.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
        return Err(InstructionError::HeaderValue(name.to_string()));
    }
    Ok(value.to_string())
}

fn status(code: u16) -> Result<i32, InstructionError> {
    if (200..=599).contains(&code) {
        Ok(i32::from(code))
    } else {
        Err(InstructionError::Status(code))
    }
}

fn header_pair(name: &str, value: &str) -> Result<(String, String), InstructionError> {
    Ok((header_name(name)?, header_value(name, value)?))
}

/// The three header instructions are the same messages in both phases.
enum HeaderMsg {
    Set(proto::SetHeader),
    Append(proto::AppendHeader),
    Remove(proto::RemoveHeader),
}

fn header_msg(op: HeaderOp) -> Result<HeaderMsg, InstructionError> {
    Ok(match op {
        HeaderOp::Set { name, value } => {
            let (name, value) = header_pair(&name, &value)?;
            HeaderMsg::Set(proto::SetHeader { name, value })
        }
        HeaderOp::Append { name, value } => {
            let (name, value) = header_pair(&name, &value)?;
            HeaderMsg::Append(proto::AppendHeader { name, value })
        }
        HeaderOp::Remove { name } => {
            let lower = header_name(&name)?;
            if lower == "host" {
                return Err(InstructionError::ForbiddenHeader(name));
            }
            HeaderMsg::Remove(proto::RemoveHeader { name: lower })
        }
    })
}

fn set_body(b: NewBody) -> Result<proto::SetBody, InstructionError> {
    let content_type = match b.content_type {
        Some(ct) => header_value("content-type", &ct)?,
        None => String::new(),
    };
    Ok(proto::SetBody {
        body: b.body,
        content_type,
    })
}

fn req(i: ReqI) -> proto::RequestInstruction {
    proto::RequestInstruction { instruction: Some(i) }
}

fn resp(i: RespI) -> proto::ResponseInstruction {
    proto::ResponseInstruction { instruction: Some(i) }
}

/// Converts request actions, all or nothing.
pub(crate) fn request_actions(actions: Vec<RequestAction>) -> Result<Vec<proto::RequestInstruction>, InstructionError> {
    let mut out = Vec::with_capacity(actions.len());
    for action in actions {
        let i = match action {
            RequestAction::Header(op) => match header_msg(op)? {
                HeaderMsg::Set(m) => ReqI::SetHeader(m),
                HeaderMsg::Append(m) => ReqI::AppendHeader(m),
                HeaderMsg::Remove(m) => ReqI::RemoveHeader(m),
            },
            RequestAction::SetBody(b) => ReqI::SetBody(set_body(b)?),
            RequestAction::SetPath(path) => {
                let bad = path.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control());
                if !path.starts_with('/') || bad {
                    return Err(InstructionError::Path(path));
                }
                ReqI::SetPath(proto::SetPath { path })
            }
            RequestAction::SetQueryParam(name, value) => ReqI::SetQueryParam(proto::SetQueryParam { name, value }),
            RequestAction::RemoveQueryParam(name) => ReqI::RemoveQueryParam(proto::RemoveQueryParam { name }),
            RequestAction::SetMethod(method) => {
                if !is_token(&method) {
                    return Err(InstructionError::Method(method));
                }
                ReqI::SetMethod(proto::SetMethod { method })
            }
        };
        out.push(req(i));
    }
    Ok(out)
}

/// Converts response actions, all or nothing.
pub(crate) fn response_actions(
    actions: Vec<ResponseAction>,
) -> Result<Vec<proto::ResponseInstruction>, InstructionError> {
    let mut out = Vec::with_capacity(actions.len());
    for action in actions {
        let i = match action {
            ResponseAction::Header(op) => match header_msg(op)? {
                HeaderMsg::Set(m) => RespI::SetHeader(m),
                HeaderMsg::Append(m) => RespI::AppendHeader(m),
                HeaderMsg::Remove(m) => RespI::RemoveHeader(m),
            },
            ResponseAction::SetBody(b) => RespI::SetBody(set_body(b)?),
            ResponseAction::SetStatus(code) => RespI::SetStatusCode(proto::SetStatusCode {
                status_code: status(code)?,
            }),
        };
        out.push(resp(i));
    }
    Ok(out)
}

/// A request-phase denial: one `ImmediateResponse`.
pub(crate) fn request_deny(deny: Deny) -> Result<proto::RequestInstruction, InstructionError> {
    let headers = deny
        .headers
        .iter()
        .map(|(n, v)| {
            let (key, value) = header_pair(n, v)?;
            Ok(proto::HeaderValue::new(key, value))
        })
        .collect::<Result<Vec<_>, InstructionError>>()?;
    Ok(req(ReqI::ImmediateResponse(proto::ImmediateResponse {
        status_code: status(deny.status)?,
        body: deny.body,
        headers,
        reason: deny.reason,
    })))
}

/// A response-phase denial: status, headers and body replaced, then the chain stops.
pub(crate) fn response_deny(deny: Deny) -> Result<Vec<proto::ResponseInstruction>, InstructionError> {
    let mut out = vec![resp(RespI::SetStatusCode(proto::SetStatusCode {
        status_code: status(deny.status)?,
    }))];
    for (n, v) in &deny.headers {
        let (name, value) = header_pair(n, v)?;
        out.push(resp(RespI::SetHeader(proto::SetHeader { name, value })));
    }
    out.push(resp(RespI::SetBody(proto::SetBody {
        body: deny.body,
        content_type: String::new(),
    })));
    out.push(resp(RespI::SkipRemainingPolicies(proto::SkipRemainingPolicies {
        reason: deny.reason,
    })));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_rules() {
        assert_eq!(header_name("X-Api-Key").unwrap(), "x-api-key");
        assert!(header_name(":path").is_err());
        assert!(header_name("Content-Length").is_err());
        assert!(header_name("bad name").is_err());
        assert!(header_value("a", "x\r\ny").is_err());
        assert!(status(199).is_err() && status(600).is_err() && status(200).is_ok());
    }

    #[test]
    fn request_actions_are_all_or_nothing() {
        let actions = vec![
            RequestAction::Header(HeaderOp::Set {
                name: "X-A".into(),
                value: "1".into(),
            }),
            RequestAction::SetPath("no-slash".into()),
        ];
        assert_eq!(request_actions(actions), Err(InstructionError::Path("no-slash".into())));
        let removed = request_actions(vec![RequestAction::Header(HeaderOp::Remove { name: "Host".into() })]);
        assert!(removed.is_err());
    }
}
