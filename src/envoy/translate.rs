//! Translation between Envoy's ext_proc messages and the kernel's domain
//! types (spec §9.3 and `shared/notes/envoy-facts.md`): header values travel
//! in `raw_value`, appends use the `append` flag, a body change also sets
//! `content-length`, and decisions go out as dynamic metadata under the
//! `policy_kernel` namespace.

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::{HeaderValue, HeaderValueOption};
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::{processing_mode, ProcessingMode};
use envoy_types::pb::envoy::r#type::v3::HttpStatus;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    body_mutation, common_response::ResponseStatus, processing_response::Response, BodyMutation, BodyResponse,
    CommonResponse, HeaderMutation, HeadersResponse, ImmediateResponse, ProcessingResponse, TrailersResponse,
};
use envoy_types::pb::google::protobuf::{value::Kind, BoolValue, Struct, Value};

use crate::aggregate::{HeaderOp, Immediate, Metadata, Mutations};

/// The dynamic metadata namespace the kernel writes to.
pub const METADATA_NAMESPACE: &str = "policy_kernel";

/// Which Envoy message a response answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// `request_headers`.
    RequestHeaders,
    /// `request_body`.
    RequestBody,
    /// `response_headers`.
    ResponseHeaders,
    /// `response_body`.
    ResponseBody,
    /// `request_trailers`.
    RequestTrailers,
    /// `response_trailers`.
    ResponseTrailers,
}

impl Answer {
    fn is_headers(self) -> bool {
        matches!(self, Answer::RequestHeaders | Answer::ResponseHeaders)
    }

    fn is_request(self) -> bool {
        matches!(
            self,
            Answer::RequestHeaders | Answer::RequestBody | Answer::RequestTrailers
        )
    }
}

fn option(key: &str, value: Bytes, append: bool) -> HeaderValueOption {
    #[allow(deprecated)] // ext_proc honours only the deprecated `append` flag.
    HeaderValueOption {
        header: Some(HeaderValue {
            key: key.to_string(),
            value: String::new(),
            raw_value: value.to_vec(),
        }),
        append: append.then_some(BoolValue { value: true }),
        ..Default::default()
    }
}

/// Envoy header mutation for merged mutations.
pub fn header_mutation(m: &Mutations) -> Option<HeaderMutation> {
    let mut out = HeaderMutation::default();
    for (name, op, _) in &m.headers {
        match op {
            HeaderOp::Set(values) => {
                for (i, v) in values.iter().enumerate() {
                    out.set_headers.push(option(name, v.clone(), i > 0));
                }
            }
            HeaderOp::Append(values) => {
                for v in values {
                    out.set_headers.push(option(name, v.clone(), true));
                }
            }
            HeaderOp::Remove => out.remove_headers.push(name.clone()),
        }
    }
    if let Some((pq, _)) = &m.path {
        out.set_headers.push(option(":path", Bytes::from(pq.to_path()), false));
    }
    if let Some((method, _)) = &m.method {
        out.set_headers
            .push(option(":method", Bytes::from(method.clone()), false));
    }
    if let Some((status, _)) = &m.status {
        out.set_headers
            .push(option(":status", Bytes::from(status.to_string()), false));
    }
    if let Some((body, _, _)) = &m.body {
        // Envoy refuses a body whose length disagrees with content-length.
        out.set_headers
            .push(option("content-length", Bytes::from(body.len().to_string()), false));
    }
    (!out.set_headers.is_empty() || !out.remove_headers.is_empty()).then_some(out)
}

/// The common response for merged mutations answering `answer`. A body
/// replaced while answering a headers message uses CONTINUE_AND_REPLACE, the
/// only way Envoy accepts a body there.
///
/// When the request's path, query, method or headers change, the answer asks
/// Envoy to clear its route cache, so that the request goes where its new
/// path and headers route it (a `SetPath` to `/v2/...` reaches the `/v2`
/// route's cluster, as spec §7.4.3 means it to); otherwise Envoy keeps the
/// route it matched before the policies ran. Envoy ignores the flag in the
/// response direction; its filter option `route_cache_action: RETAIN` turns
/// it off.
pub fn common(m: &Mutations, answer: Answer) -> CommonResponse {
    let body = m.body.as_ref().map(|(b, _, _)| BodyMutation {
        mutation: Some(body_mutation::Mutation::Body(b.to_vec())),
    });
    let status = if body.is_some() && answer.is_headers() {
        ResponseStatus::ContinueAndReplace
    } else {
        ResponseStatus::Continue
    };
    let reroute = answer.is_request() && (!m.headers.is_empty() || m.path.is_some() || m.method.is_some());
    CommonResponse {
        status: status as i32,
        header_mutation: header_mutation(m),
        body_mutation: body,
        clear_route_cache: reroute,
        ..Default::default()
    }
}

/// A response to `answer` carrying `common` (or a plain CONTINUE).
pub fn respond(answer: Answer, common: Option<CommonResponse>) -> ProcessingResponse {
    let headers = || HeadersResponse {
        response: common.clone(),
    };
    let body = || BodyResponse {
        response: common.clone(),
    };
    let response = match answer {
        Answer::RequestHeaders => Response::RequestHeaders(headers()),
        Answer::ResponseHeaders => Response::ResponseHeaders(headers()),
        Answer::RequestBody => Response::RequestBody(body()),
        Answer::ResponseBody => Response::ResponseBody(body()),
        Answer::RequestTrailers => Response::RequestTrailers(TrailersResponse::default()),
        Answer::ResponseTrailers => Response::ResponseTrailers(TrailersResponse::default()),
    };
    ProcessingResponse {
        response: Some(response),
        ..Default::default()
    }
}

/// An immediate response to the client.
pub fn immediate(imm: &Immediate) -> ProcessingResponse {
    let headers = (!imm.headers.is_empty()).then(|| HeaderMutation {
        set_headers: imm.headers.iter().map(|(k, v)| option(k, v.clone(), false)).collect(),
        remove_headers: Vec::new(),
    });
    ProcessingResponse {
        response: Some(Response::ImmediateResponse(ImmediateResponse {
            status: Some(HttpStatus {
                code: i32::from(imm.status),
            }),
            headers,
            body: imm.body.to_vec(),
            grpc_status: None,
            details: details(&imm.reason),
        })),
        ..Default::default()
    }
}

/// Checks a common response against what Envoy accepts (see
/// `shared/notes/envoy-facts.md`): legal lower-case names, values in
/// `raw_value` without CR/LF/NUL, only the pseudo-headers of the phase,
/// `:status` within 200-599, no removal of `:`-headers or `host`, and a
/// `content-length` exactly when the body changes, equal to its length.
/// Used by property tests and fuzzing; the translation never needs it at run
/// time because replies are checked when they arrive.
pub fn check_envoy_accepts(c: &CommonResponse, response_phase: bool) -> Result<(), String> {
    let body = c.body_mutation.as_ref().and_then(|b| match &b.mutation {
        Some(body_mutation::Mutation::Body(b)) => Some(b.len()),
        _ => None,
    });
    let empty = HeaderMutation::default();
    let m = c.header_mutation.as_ref().unwrap_or(&empty);
    let mut length = None;
    for o in &m.set_headers {
        let h = o.header.as_ref().ok_or("set_headers entry without a header")?;
        if !h.value.is_empty() {
            return Err(format!("{}: value instead of raw_value", h.key));
        }
        if h.raw_value.iter().any(|&c| c == b'\r' || c == b'\n' || c == 0) {
            return Err(format!("{}: CR, LF or NUL in the value", h.key));
        }
        if !crate::http::valid_header_name(h.key.as_bytes()) || h.key != h.key.to_ascii_lowercase() {
            return Err(format!("illegal header name {:?}", h.key));
        }
        let allowed: &[&str] = if response_phase {
            &[":status"]
        } else {
            &[":path", ":method"]
        };
        if h.key.starts_with(':') && !allowed.contains(&h.key.as_str()) {
            return Err(format!("{} in this phase", h.key));
        }
        if h.key == ":status" {
            let code: u16 = std::str::from_utf8(&h.raw_value)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or("bad :status")?;
            if !(200..=599).contains(&code) {
                return Err(format!(":status {code}"));
            }
        }
        if h.key == ":path" && (!h.raw_value.starts_with(b"/") || h.raw_value.contains(&b' ')) {
            return Err(format!(":path {:?}", String::from_utf8_lossy(&h.raw_value)));
        }
        if h.key == "content-length" {
            length = std::str::from_utf8(&h.raw_value)
                .ok()
                .and_then(|s| s.parse::<usize>().ok());
        }
    }
    if let Some(r) = m.remove_headers.iter().find(|r| r.starts_with(':') || *r == "host") {
        return Err(format!("removes {r}"));
    }
    if length != body {
        return Err(format!("content-length {length:?} for a body change of {body:?} bytes"));
    }
    Ok(())
}

/// True when `resp` answers the client directly.
pub fn is_immediate(resp: &ProcessingResponse) -> bool {
    matches!(resp.response, Some(Response::ImmediateResponse(_)))
}

/// Envoy's response-code details must be a single token: keep it readable.
fn details(reason: &str) -> String {
    let cleaned: String = reason
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    format!("policy_kernel_{}", if cleaned.is_empty() { "denied" } else { &cleaned })
}

/// The processing mode for the rest of one stream, sent with the answer to
/// `request_headers`: buffered bodies only for the phases whose policies need
/// them, and response headers only when a response chain will run. Every
/// mode is set: an omitted body mode means NONE, and an omitted header mode
/// would mean Envoy's default (SEND). With `response_header_mode: SKIP` in the
/// Envoy filter (as `deploy/envoy.yaml`), a route without response policies
/// costs one ext_proc message instead of two; with SEND there, this turns the
/// response headers off for those streams.
pub fn mode_override(request_body: bool, response_body: bool, response_headers: bool) -> ProcessingMode {
    use processing_mode::{BodySendMode, HeaderSendMode};
    let body = |on: bool| {
        if on {
            BodySendMode::Buffered as i32
        } else {
            BodySendMode::None as i32
        }
    };
    ProcessingMode {
        request_header_mode: HeaderSendMode::Send as i32,
        response_header_mode: if response_headers || response_body {
            HeaderSendMode::Send as i32
        } else {
            HeaderSendMode::Skip as i32
        },
        request_body_mode: body(request_body),
        response_body_mode: body(response_body),
        request_trailer_mode: HeaderSendMode::Skip as i32,
        response_trailer_mode: HeaderSendMode::Skip as i32,
    }
}

/// `mode` with the response body STREAMED: Envoy sends it chunk by chunk
/// as it arrives and waits for each chunk's answer (the kernel's streaming
/// policies, [`crate::stream`]); response headers are sent.
pub fn streamed_response(mut mode: ProcessingMode) -> ProcessingMode {
    use processing_mode::{BodySendMode, HeaderSendMode};
    mode.response_header_mode = HeaderSendMode::Send as i32;
    mode.response_body_mode = BodySendMode::Streamed as i32;
    mode
}

/// Dynamic metadata: `{policy_kernel: {route: .., <metadata>...}}`.
pub fn dynamic_metadata(route: &str, meta: &Metadata) -> Struct {
    let string = |s: &str| Value {
        kind: Some(Kind::StringValue(s.to_string())),
    };
    let mut inner = Struct::default();
    inner.fields.insert("route".into(), string(route));
    for (k, v) in meta {
        inner.fields.insert(k.clone(), string(v));
    }
    let mut outer = Struct::default();
    outer.fields.insert(
        METADATA_NAMESPACE.into(),
        Value {
            kind: Some(Kind::StructValue(inner)),
        },
    );
    outer
}

#[cfg(test)]
mod tests;
