//! ext_proc messages as Envoy 1.40 sends them to a processor configured with
//! `request_attributes: ["xds.route_name"]`, request headers SEND, response
//! headers SKIP unless an answer's `mode_override` turns them on (a processor
//! that never overrides, like the floor, gets them: Envoy's default is SEND),
//! NONE for both bodies (`allow_mode_override: true`): header values in
//! `raw_value`, the route name in
//! `attributes["envoy.filters.http.ext_proc"]["xds.route_name"]` on the first
//! message only, `protocol_config` on the first message only. Bodies travel
//! only when an answer switched the body mode to BUFFERED.

use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue};
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::processing_mode::{BodySendMode, HeaderSendMode};
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::ProcessingMode;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    common_response::ResponseStatus, processing_request::Request, processing_response::Response, HttpBody, HttpHeaders,
    ProcessingRequest, ProcessingResponse, ProtocolConfiguration,
};
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};

/// Envoy's attribute namespace for ext_proc.
pub const ATTRIBUTES: &str = "envoy.filters.http.ext_proc";

/// The shape of the HTTP request each stream stands for.
#[derive(Debug, Clone)]
pub struct RequestShape {
    /// `xds.route_name` attribute; `None` sends no attribute at all.
    pub route: Option<String>,
    /// Request body size: 0 is a GET without body, more a POST of a JSON body
    /// of that size (sent only when the processor asks for it).
    pub request_body: usize,
    /// Response body size (sent only when the processor asks for it).
    pub response_body: usize,
}

/// Which Envoy message an answer must answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `request_headers`.
    RequestHeaders,
    /// `request_body`.
    RequestBody,
    /// `response_headers`.
    ResponseHeaders,
    /// `response_body`.
    ResponseBody,
}

/// Why an answer is not the CONTINUE the harness expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadAnswer {
    /// An `immediate_response` (the processor answered the client itself).
    Immediate,
    /// A common response whose status is not CONTINUE.
    NotContinue,
    /// An answer to another message, or no answer variant at all.
    WrongKind,
}

/// What a good answer said besides CONTINUE.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Good {
    /// The `mode_override`, when the answer carried one.
    pub mode_override: Option<ProcessingMode>,
    /// True when the answer carried header mutations.
    pub mutated: bool,
}

impl Good {
    /// True when the override turns on BUFFERED request body mode.
    pub fn buffers_request_body(&self) -> bool {
        self.mode_override
            .as_ref()
            .is_some_and(|m| m.request_body_mode == BodySendMode::Buffered as i32)
    }

    /// True when the override turns on BUFFERED response body mode.
    pub fn buffers_response_body(&self) -> bool {
        self.mode_override
            .as_ref()
            .is_some_and(|m| m.response_body_mode == BodySendMode::Buffered as i32)
    }

    /// True when the override turns the response headers message off
    /// (without an override, Envoy sends it).
    pub fn skips_response_headers(&self) -> bool {
        self.mode_override
            .as_ref()
            .is_some_and(|m| m.response_header_mode == HeaderSendMode::Skip as i32)
    }

    /// True when the override makes Envoy buffer a body.
    pub fn buffers_a_body(&self) -> bool {
        self.buffers_request_body() || self.buffers_response_body()
    }
}

fn hv(key: &str, value: &str) -> HeaderValue {
    HeaderValue {
        key: key.to_string(),
        value: String::new(),
        raw_value: value.as_bytes().to_vec(),
    }
}

/// The request headers of one request: 15 for a GET, 17 for a POST, the
/// kind a browser or API client sends through an edge proxy.
pub fn request_header_list(request_id: &str, body: usize) -> Vec<HeaderValue> {
    let method = if body > 0 { "POST" } else { "GET" };
    let mut h = vec![
        hv(":authority", "api.example.com"),
        hv(":path", "/api/v1/users/12345/orders?limit=20&offset=40&sort=created_at"),
        hv(":method", method),
        hv(":scheme", "https"),
        hv(
            "user-agent",
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36",
        ),
        hv("accept", "application/json, text/plain, */*"),
        hv("accept-encoding", "gzip, deflate, br"),
        hv("accept-language", "en-US,en;q=0.9,de;q=0.8"),
        hv(
            "authorization",
            "Bearer eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NSIsImlzcyI6Imh0dHBzOi8vYXV0aC5leGFtcGxlLmNvbSIsImF1ZCI6ImFwaS1zZXJ2aWNlIn0.c2lnbmF0dXJl",
        ),
        hv("x-api-key", "k_live_4f9a8b7c6d5e4f3a2b1c0d9e"),
        hv("cookie", "session=8b1f4c2a9e7d4b3c; theme=dark; consent=1"),
        hv("x-forwarded-for", "203.0.113.7"),
        hv("x-forwarded-proto", "https"),
        hv("x-request-id", request_id),
        hv("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
    ];
    if body > 0 {
        h.push(hv("content-type", "application/json"));
        h.push(hv("content-length", &body.to_string()));
    }
    h
}

/// The upstream's response headers.
pub fn response_header_list(body: usize) -> Vec<HeaderValue> {
    vec![
        hv(":status", "200"),
        hv("content-type", "application/json"),
        hv("content-length", &body.to_string()),
        hv("date", "Sat, 21 Nov 2026 06:00:00 GMT"),
        hv("server", "envoy"),
        hv("cache-control", "no-store"),
        hv("vary", "accept-encoding"),
        hv("x-envoy-upstream-service-time", "1"),
    ]
}

/// An id shaped like Envoy's UUID x-request-id, unique per `n` and `salt`.
pub fn request_id(salt: u32, n: u64) -> String {
    format!(
        "{salt:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
        (n >> 48) & 0xffff,
        (n >> 36) & 0xfff,
        (n >> 24) & 0xfff,
        n & 0xffff_ffff_ffff
    )
}

/// The first message of a stream.
pub fn request_headers(shape: &RequestShape, request_id: &str) -> ProcessingRequest {
    let mut msg = ProcessingRequest {
        request: Some(Request::RequestHeaders(HttpHeaders {
            headers: Some(HeaderMap {
                headers: request_header_list(request_id, shape.request_body),
            }),
            end_of_stream: shape.request_body == 0,
            ..Default::default()
        })),
        protocol_config: Some(ProtocolConfiguration {
            request_body_mode: BodySendMode::None as i32,
            response_body_mode: BodySendMode::None as i32,
            ..Default::default()
        }),
        ..Default::default()
    };
    if let Some(route) = &shape.route {
        let mut fields = Struct::default();
        fields.fields.insert(
            "xds.route_name".into(),
            Value {
                kind: Some(Kind::StringValue(route.clone())),
            },
        );
        msg.attributes.insert(ATTRIBUTES.into(), fields);
    }
    msg
}

/// The whole request body, in one message (BUFFERED mode).
pub fn request_body(body: Vec<u8>) -> ProcessingRequest {
    ProcessingRequest {
        request: Some(Request::RequestBody(HttpBody {
            body,
            end_of_stream: true,
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// The response headers; the response always has a body.
pub fn response_headers(shape: &RequestShape) -> ProcessingRequest {
    ProcessingRequest {
        request: Some(Request::ResponseHeaders(HttpHeaders {
            headers: Some(HeaderMap {
                headers: response_header_list(shape.response_body),
            }),
            end_of_stream: false,
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// The whole response body, in one message (BUFFERED mode).
pub fn response_body(body: Vec<u8>) -> ProcessingRequest {
    ProcessingRequest {
        request: Some(Request::ResponseBody(HttpBody {
            body,
            end_of_stream: true,
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// A valid JSON document of exactly `size` bytes (at least 21).
pub fn json_body(size: usize) -> Vec<u8> {
    let size = size.max(21);
    let mut s = String::with_capacity(size);
    s.push_str("{\"items\":[");
    let tail = "],\"pad\":\"\"}";
    let mut i = 0u32;
    loop {
        let item = format!(
            "{}{{\"id\":{i},\"name\":\"item-{i:05}\",\"tags\":[\"blue\",\"large\"],\"price\":{}.{:02},\"in_stock\":{}}}",
            if i == 0 { "" } else { "," },
            10 + i % 90,
            i % 100,
            !i.is_multiple_of(3)
        );
        if s.len() + item.len() + tail.len() > size {
            break;
        }
        s.push_str(&item);
        i += 1;
    }
    s.push_str("],\"pad\":\"");
    while s.len() + 2 < size {
        s.push('x');
    }
    s.push_str("\"}");
    s.into_bytes()
}

/// Checks that `resp` is a plain CONTINUE answering `phase`.
pub fn check(resp: &ProcessingResponse, phase: Phase) -> Result<Good, BadAnswer> {
    let common = match (&resp.response, phase) {
        (Some(Response::ImmediateResponse(_)), _) => return Err(BadAnswer::Immediate),
        (Some(Response::RequestHeaders(h)), Phase::RequestHeaders)
        | (Some(Response::ResponseHeaders(h)), Phase::ResponseHeaders) => h.response.as_ref(),
        (Some(Response::RequestBody(b)), Phase::RequestBody)
        | (Some(Response::ResponseBody(b)), Phase::ResponseBody) => b.response.as_ref(),
        _ => return Err(BadAnswer::WrongKind),
    };
    if common.is_some_and(|c| c.status != ResponseStatus::Continue as i32) {
        return Err(BadAnswer::NotContinue);
    }
    Ok(Good {
        mode_override: resp.mode_override,
        mutated: common.is_some_and(|c| c.header_mutation.is_some() || c.body_mutation.is_some()),
    })
}

/// The CONTINUE answer to `req`, as the floor server sends it.
pub fn continue_for(req: &ProcessingRequest) -> ProcessingResponse {
    use envoy_types::pb::envoy::service::ext_proc::v3::{BodyResponse, HeadersResponse, TrailersResponse};
    let response = match &req.request {
        Some(Request::RequestHeaders(_)) | None => Response::RequestHeaders(HeadersResponse::default()),
        Some(Request::ResponseHeaders(_)) => Response::ResponseHeaders(HeadersResponse::default()),
        Some(Request::RequestBody(_)) => Response::RequestBody(BodyResponse::default()),
        Some(Request::ResponseBody(_)) => Response::ResponseBody(BodyResponse::default()),
        Some(Request::RequestTrailers(_)) => Response::RequestTrailers(TrailersResponse::default()),
        Some(Request::ResponseTrailers(_)) => Response::ResponseTrailers(TrailersResponse::default()),
    };
    ProcessingResponse {
        response: Some(response),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_body_is_valid_and_exact() {
        for size in [21, 22, 100, 1024, 16 * 1024, 16 * 1024 + 7] {
            let b = json_body(size);
            assert_eq!(b.len(), size);
            let v: serde_json::Value = serde_json::from_slice(&b).expect("valid json");
            assert!(v.get("items").is_some());
        }
    }

    #[test]
    fn request_headers_look_like_envoy() {
        let shape = RequestShape {
            route: Some("k1".into()),
            request_body: 0,
            response_body: 64,
        };
        let m = request_headers(&shape, &request_id(7, 1));
        let route = &m.attributes[ATTRIBUTES].fields["xds.route_name"];
        assert_eq!(route.kind, Some(Kind::StringValue("k1".into())));
        let Some(Request::RequestHeaders(h)) = &m.request else {
            panic!("not request headers")
        };
        assert!(h.end_of_stream);
        let hs = &h.headers.as_ref().unwrap().headers;
        assert_eq!(hs.len(), 15);
        assert!(hs.iter().all(|v| v.value.is_empty() && !v.raw_value.is_empty()));
        let post = RequestShape {
            request_body: 16384,
            ..shape
        };
        let Some(Request::RequestHeaders(h)) = request_headers(&post, "id").request else {
            panic!("not request headers")
        };
        assert!(!h.end_of_stream);
    }

    #[test]
    fn request_ids_are_uuid_shaped_and_distinct() {
        let a = request_id(1, 1);
        assert_eq!(a.len(), 36);
        assert_ne!(a, request_id(1, 2));
        assert_ne!(a, request_id(2, 1));
    }

    #[test]
    fn check_accepts_continue_and_reads_mode_override() {
        let req = request_headers(
            &RequestShape {
                route: None,
                request_body: 0,
                response_body: 0,
            },
            "x",
        );
        let mut resp = continue_for(&req);
        assert_eq!(check(&resp, Phase::RequestHeaders), Ok(Good::default()));
        assert_eq!(check(&resp, Phase::ResponseHeaders), Err(BadAnswer::WrongKind));
        resp.mode_override = Some(ProcessingMode {
            request_body_mode: BodySendMode::Buffered as i32,
            ..Default::default()
        });
        let good = check(&resp, Phase::RequestHeaders).unwrap();
        assert!(good.buffers_request_body());
        assert!(!good.buffers_response_body());
        let imm = ProcessingResponse {
            response: Some(Response::ImmediateResponse(Default::default())),
            ..Default::default()
        };
        assert_eq!(check(&imm, Phase::RequestHeaders), Err(BadAnswer::Immediate));
    }
}
