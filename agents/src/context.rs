//! What a hook sees: read-only views of the request and response, the
//! metadata accumulated so far, and facts about the call (request id, trace
//! context, deadline).

use std::collections::{BTreeMap, HashMap};

use tokio::time::Instant;

use crate::proto;

/// The phase a call runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Before the upstream is called.
    Request,
    /// After the upstream answered.
    Response,
}

impl Phase {
    /// `"request"` or `"response"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Request => "request",
            Phase::Response => "response",
        }
    }
}

/// Metadata shared by the policies of one request: what the kernel sent
/// (set by earlier agents) plus what earlier policies of this call set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metadata {
    map: BTreeMap<String, String>,
}

impl Metadata {
    /// An empty metadata set.
    pub fn new() -> Self {
        Metadata::default()
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.map.get(key).map(String::as_str)
    }

    /// Iterates over `(key, value)` pairs in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.map.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The number of keys.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when no key is set.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Sets `key` (later wins).
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.map.insert(key.into(), value.into());
    }
}

impl From<HashMap<String, String>> for Metadata {
    fn from(map: HashMap<String, String>) -> Self {
        Metadata {
            map: map.into_iter().collect(),
        }
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Metadata {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Metadata {
            map: iter.into_iter().map(|(k, v)| (k.into(), v.into())).collect(),
        }
    }
}

/// Facts about the current call, the same for every policy in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallInfo {
    /// The request id the kernel sent (echoed in the reply by the SDK).
    pub request_id: String,
    /// The phase of this call.
    pub phase: Phase,
    /// The W3C `traceparent` the kernel sent in the gRPC metadata, if any.
    pub traceparent: Option<String>,
    /// The W3C `tracestate` the kernel sent in the gRPC metadata, if any.
    pub tracestate: Option<String>,
    /// When the kernel gives up on the call (from `deadline_ms`), if it said.
    pub deadline: Option<Instant>,
}

impl CallInfo {
    /// A call with the given id and phase, no trace context and no deadline.
    pub fn new(request_id: impl Into<String>, phase: Phase) -> Self {
        CallInfo {
            request_id: request_id.into(),
            phase,
            traceparent: None,
            tracestate: None,
            deadline: None,
        }
    }
}

/// Finds the first value of header `name` (ASCII case-insensitive).
fn find_header<'a>(headers: Option<&'a proto::HttpHeaders>, name: &str) -> Option<&'a str> {
    iter_headers(headers)
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
}

/// Iterates over headers whose value is valid UTF-8 (see `HeaderValue.raw_value`).
fn iter_headers(headers: Option<&proto::HttpHeaders>) -> impl Iterator<Item = (&str, &str)> {
    headers
        .into_iter()
        .flat_map(|h| h.headers.iter())
        .filter(|h| h.raw_value.is_empty() || !h.value.is_empty())
        .map(|h| (&*h.key, &*h.value))
}

/// A read-only view of the HTTP request.
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    data: &'a proto::RequestData,
}

impl<'a> RequestView<'a> {
    /// Wraps the proto request data.
    pub fn new(data: &'a proto::RequestData) -> Self {
        RequestView { data }
    }

    /// The HTTP method.
    pub fn method(&self) -> &'a str {
        &self.data.method
    }

    /// The URL path including the query string (`/a/b?x=1`).
    pub fn path(&self) -> &'a str {
        &self.data.path
    }

    /// The decoded value of query parameter `name` (last one wins).
    pub fn query_param(&self, name: &str) -> Option<&'a str> {
        self.data
            .query_params
            .as_ref()
            .and_then(|q| q.params.get(name))
            .map(String::as_str)
    }

    /// `http` or `https`.
    pub fn scheme(&self) -> &'a str {
        &self.data.scheme
    }

    /// The authority (Host).
    pub fn authority(&self) -> &'a str {
        &self.data.authority
    }

    /// The client IP as Envoy saw it, if known.
    pub fn client_ip(&self) -> Option<&'a str> {
        Some(&*self.data.client_ip).filter(|s| !s.is_empty())
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&'a str> {
        find_header(self.data.headers.as_ref(), name)
    }

    /// All headers as `(name, value)`, in order (names are lower case).
    pub fn headers(&self) -> impl Iterator<Item = (&'a str, &'a str)> {
        iter_headers(self.data.headers.as_ref())
    }

    /// The body, when the kernel included it (the policy `requires_body`).
    pub fn body(&self) -> Option<&'a [u8]> {
        self.data.body_included.then_some(&self.data.body[..])
    }
}

/// A read-only view of the upstream's HTTP response.
#[derive(Debug, Clone, Copy)]
pub struct ResponseView<'a> {
    data: &'a proto::ResponseData,
}

impl<'a> ResponseView<'a> {
    /// Wraps the proto response data.
    pub fn new(data: &'a proto::ResponseData) -> Self {
        ResponseView { data }
    }

    /// The status code.
    pub fn status(&self) -> u16 {
        u16::try_from(self.data.status_code).unwrap_or(0)
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&'a str> {
        find_header(self.data.headers.as_ref(), name)
    }

    /// All headers as `(name, value)`, in order.
    pub fn headers(&self) -> impl Iterator<Item = (&'a str, &'a str)> {
        iter_headers(self.data.headers.as_ref())
    }

    /// The body, when the kernel included it.
    pub fn body(&self) -> Option<&'a [u8]> {
        self.data.body_included.then_some(&self.data.body[..])
    }
}

/// Everything a request-phase hook can read.
#[derive(Debug, Clone, Copy)]
pub struct RequestContext<'a> {
    /// The request.
    pub request: RequestView<'a>,
    /// Metadata set so far (earlier agents and earlier policies of this call).
    pub metadata: &'a Metadata,
    /// Facts about the call.
    pub call: &'a CallInfo,
}

/// Everything a response-phase hook can read.
#[derive(Debug, Clone, Copy)]
pub struct ResponseContext<'a> {
    /// The request as the upstream received it.
    pub request: RequestView<'a>,
    /// The upstream's response.
    pub response: ResponseView<'a>,
    /// Metadata set so far, including the whole request phase.
    pub metadata: &'a Metadata,
    /// Facts about the call.
    pub call: &'a CallInfo,
}
