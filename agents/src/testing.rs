//! Helpers to unit-test a policy without a socket: build a request (and a
//! response), then run the policy's hooks the way the SDK does.
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use policy_agents::testing::{TestCall, TestRequest};
//! use policy_agents::{Policy, RequestContext, RequestOutcome, PolicyError};
//!
//! struct Hello;
//! impl Policy for Hello {
//!     type Params = ();
//!     fn name(&self) -> &str { "hello" }
//!     fn version(&self) -> &str { "1" }
//!     async fn on_request(&self, _: &(), ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
//!         Ok(RequestOutcome::proceed().set_header("x-hello", ctx.request.path()))
//!     }
//! }
//! let out = TestCall::new().request(&Hello, &TestRequest::new("GET", "/a")).await.unwrap();
//! assert_eq!(out.header_set("x-hello"), Some("/a"));
//! # });
//! ```

use bytes::Bytes;
use bytestring::ByteString;

use crate::context::{CallInfo, Metadata, Phase, RequestContext, RequestView, ResponseContext, ResponseView};
use crate::outcome::{RequestOutcome, ResponseOutcome};
use crate::params::{FromParams, Params};
use crate::policy::{Policy, PolicyError};
use crate::proto;
use crate::stream::{ChunkContext, ChunkOutcome, Framing};

fn push_header(headers: &mut Option<proto::HttpHeaders>, name: &str, value: &str) {
    headers
        .get_or_insert_with(Default::default)
        .headers
        .push(proto::HeaderValue::new(name.to_ascii_lowercase(), value));
}

/// A request to run a policy on.
#[derive(Debug, Clone, Default)]
pub struct TestRequest {
    data: proto::RequestData,
}

impl TestRequest {
    /// A request with `method` and `path` (query string included).
    pub fn new(method: &str, path: &str) -> Self {
        let mut data = proto::RequestData {
            method: method.into(),
            path: path.into(),
            scheme: ByteString::from_static("http"),
            authority: ByteString::from_static("example.test"),
            ..Default::default()
        };
        if let Some((_, query)) = path.split_once('?') {
            let params = query
                .split('&')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            data.query_params = Some(proto::QueryParameters { params });
        }
        TestRequest { data }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        push_header(&mut self.data.headers, name, value);
        self
    }

    /// Sets the body (and marks it included).
    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.data.body = body.into();
        self.data.body_included = true;
        self
    }

    /// Sets the client IP.
    pub fn client_ip(mut self, ip: &str) -> Self {
        self.data.client_ip = ip.into();
        self
    }

    /// The proto form, as the kernel would send it.
    pub fn data(&self) -> &proto::RequestData {
        &self.data
    }
}

/// An upstream response to run a policy on.
#[derive(Debug, Clone, Default)]
pub struct TestResponse {
    data: proto::ResponseData,
}

impl TestResponse {
    /// A response with `status`.
    pub fn new(status: u16) -> Self {
        TestResponse {
            data: proto::ResponseData {
                status_code: i32::from(status),
                ..Default::default()
            },
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        push_header(&mut self.data.headers, name, value);
        self
    }

    /// Sets the body (and marks it included).
    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.data.body = body.into();
        self.data.body_included = true;
        self
    }

    /// The proto form, as the kernel would send it.
    pub fn data(&self) -> &proto::ResponseData {
        &self.data
    }
}

/// The parameters, metadata and call facts of one hook invocation.
#[derive(Debug, Clone)]
pub struct TestCall {
    params: Params,
    metadata: Metadata,
    request_id: String,
    traceparent: Option<String>,
    deadline_in: Option<std::time::Duration>,
}

impl Default for TestCall {
    fn default() -> Self {
        TestCall::new()
    }
}

impl TestCall {
    /// No params, no metadata, request id `test-request`.
    pub fn new() -> Self {
        TestCall {
            params: Params::default(),
            metadata: Metadata::new(),
            request_id: "test-request".to_string(),
            traceparent: None,
            deadline_in: None,
        }
    }

    /// Sets the parameters.
    pub fn params(mut self, pairs: &[(&str, &str)]) -> Self {
        self.params = pairs.iter().copied().collect();
        self
    }

    /// Adds a metadata key set by an earlier policy.
    pub fn metadata(mut self, key: &str, value: &str) -> Self {
        self.metadata.insert(key, value);
        self
    }

    /// Sets the trace context the kernel sent.
    pub fn traceparent(mut self, value: &str) -> Self {
        self.traceparent = Some(value.to_string());
        self
    }

    /// Gives the call a deadline this long after the hook starts (as the
    /// kernel's `deadline_ms` would).
    pub fn deadline_in(mut self, after: std::time::Duration) -> Self {
        self.deadline_in = Some(after);
        self
    }

    fn info(&self, phase: Phase) -> CallInfo {
        CallInfo {
            traceparent: self.traceparent.clone(),
            deadline: self.deadline_in.map(|d| tokio::time::Instant::now() + d),
            ..CallInfo::new(self.request_id.clone(), phase)
        }
    }

    /// Parses the params and runs the policy's request hook.
    pub async fn request<P: Policy>(&self, policy: &P, request: &TestRequest) -> Result<RequestOutcome, PolicyError> {
        let params = P::Params::from_params(&self.params)?;
        let info = self.info(Phase::Request);
        let ctx = RequestContext {
            request: RequestView::new(&request.data),
            metadata: &self.metadata,
            call: &info,
        };
        policy.on_request(&params, &ctx).await
    }

    /// Parses the params and runs the policy's response hook.
    pub async fn response<P: Policy>(
        &self,
        policy: &P,
        request: &TestRequest,
        response: &TestResponse,
    ) -> Result<ResponseOutcome, PolicyError> {
        let params = P::Params::from_params(&self.params)?;
        let info = self.info(Phase::Response);
        let ctx = ResponseContext {
            request: RequestView::new(&request.data),
            response: ResponseView::new(&response.data),
            metadata: &self.metadata,
            call: &info,
        };
        policy.on_response(&params, &ctx).await
    }

    /// Parses the params and runs the policy's streaming hook on one call of
    /// a streamed SSE response: `events` (complete events), the call's
    /// `sequence`, `end_of_stream`, and the `state` the policy returned on
    /// the previous call (empty on the first).
    #[allow(clippy::too_many_arguments)]
    pub async fn chunk<P: Policy>(
        &self,
        policy: &P,
        request: &TestRequest,
        response: &TestResponse,
        events: &[Bytes],
        sequence: u64,
        end_of_stream: bool,
        state: &[u8],
    ) -> Result<ChunkOutcome, PolicyError> {
        let params = P::Params::from_params(&self.params)?;
        let info = self.info(Phase::Response);
        let ctx = ChunkContext {
            request: RequestView::new(&request.data),
            response: ResponseView::new(&response.data),
            metadata: &self.metadata,
            call: &info,
            sequence,
            framing: Framing::SseEvent,
            events,
            end_of_stream,
            state,
        };
        policy.on_response_chunk(&params, &ctx).await
    }
}
