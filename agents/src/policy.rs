//! The [`Policy`] trait authors implement, its error type, and the type
//! erasure the SDK uses to keep policies of different types in one agent.

use std::future::Future;

use futures::future::BoxFuture;

use crate::action::Deny;
use crate::context::{RequestContext, ResponseContext};
use crate::outcome::{RequestOutcome, ResponseOutcome};
use crate::params::{FromParams, ParamError, Params};
use crate::proto;
use crate::stream::{ChunkContext, ChunkOutcome};

/// The phases in which a policy may run (`PolicyInfo.supported_phases`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phases {
    /// Only the request phase.
    Request,
    /// Only the response phase.
    Response,
    /// Both phases.
    Both,
}

impl Phases {
    pub(crate) fn to_proto(self) -> proto::PolicyPhase {
        match self {
            Phases::Request => proto::PolicyPhase::Request,
            Phases::Response => proto::PolicyPhase::Response,
            Phases::Both => proto::PolicyPhase::RequestResponse,
        }
    }
}

/// A failure of a policy itself (not a denial): a bad parameter, an
/// unreadable key file, a backend that is down...
///
/// The kernel's `on_failure` for the policy decides what happens: `deny`
/// answers 500, or the denial attached with [`PolicyError::with_deny`];
/// `continue` runs the next policy; `skip_remaining` stops the chain.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct PolicyError {
    message: String,
    deny: Option<Deny>,
}

impl PolicyError {
    /// A failure with a message (logged with the policy name).
    pub fn new(message: impl Into<String>) -> Self {
        PolicyError {
            message: message.into(),
            deny: None,
        }
    }

    /// The answer to send instead of the default 500 when `on_failure` is `deny`.
    pub fn with_deny(mut self, deny: Deny) -> Self {
        self.deny = Some(deny);
        self
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The denial attached with [`PolicyError::with_deny`], if any.
    pub fn denial(&self) -> Option<&Deny> {
        self.deny.as_ref()
    }
}

impl From<ParamError> for PolicyError {
    fn from(e: ParamError) -> Self {
        PolicyError::new(e.to_string())
    }
}

/// One policy: its description and its hooks.
///
/// Hooks default to no-ops that let the request through. Write them as
/// `async fn` in your `impl`; the futures must be `Send`.
pub trait Policy: Send + Sync + 'static {
    /// The typed parameters, parsed from the kernel's strings before each hook.
    type Params: FromParams + Send + Sync;

    /// The name route chains use (for example `"jwtValidation"`).
    fn name(&self) -> &str;

    /// The policy's version, free-form.
    fn version(&self) -> &str;

    /// The names of the parameters the policy accepts.
    fn param_schema(&self) -> &[&str] {
        &[]
    }

    /// The parameters a route must give (a subset of `param_schema`). The
    /// kernel does not run the policy on this agent for a route that leaves
    /// one out, and its management API refuses such a route.
    fn required_params(&self) -> &[&str] {
        &[]
    }

    /// The phases the policy supports.
    fn phases(&self) -> Phases {
        Phases::Request
    }

    /// True when the policy needs the HTTP body in the phases it runs in.
    fn requires_body(&self) -> bool {
        false
    }

    /// True when the policy can take the response body piece by piece
    /// ([`Policy::on_response_chunk`]) instead of whole. When every body
    /// policy of a route's response chain streams, the kernel streams the
    /// response instead of buffering it and calls only the streaming hook of
    /// this policy for that response, not [`Policy::on_response`]. When
    /// another body policy of the chain cannot stream, the response is
    /// buffered and [`Policy::on_response`] runs with the whole body, as for
    /// any policy. Meaningful with [`Policy::requires_body`].
    fn streams_response_body(&self) -> bool {
        false
    }

    /// True when the policy streams only event streams: for a response
    /// that is not `text/event-stream`, the kernel buffers the body and
    /// calls [`Policy::on_response`] with it, as if the chain did not
    /// stream (a JSON reply can then still get a new status or headers).
    /// Meaningful with [`Policy::streams_response_body`].
    fn streams_event_streams_only(&self) -> bool {
        false
    }

    /// Whether the kernel may keep this policy's request-phase outcome and
    /// answer repeats of the declared request parts with it, without a call
    /// (see [`Cacheable`](crate::Cacheable)). `None` (the default): every
    /// request calls the agent. Never declare it for a stateful policy.
    fn cache(&self) -> Option<crate::Cacheable> {
        None
    }

    /// The streaming hook: one call per piece of a streamed response body
    /// (complete SSE events, or raw chunks), in order, the last with
    /// `end_of_stream`. Runs only when [`Policy::streams_response_body`].
    fn on_response_chunk(
        &self,
        params: &Self::Params,
        ctx: &ChunkContext<'_>,
    ) -> impl Future<Output = Result<ChunkOutcome, PolicyError>> + Send {
        let _ = (params, ctx);
        async { Ok(ChunkOutcome::pass()) }
    }

    /// The request-phase hook.
    fn on_request(
        &self,
        params: &Self::Params,
        ctx: &RequestContext<'_>,
    ) -> impl Future<Output = Result<RequestOutcome, PolicyError>> + Send {
        let _ = (params, ctx);
        async { Ok(RequestOutcome::proceed()) }
    }

    /// The response-phase hook.
    fn on_response(
        &self,
        params: &Self::Params,
        ctx: &ResponseContext<'_>,
    ) -> impl Future<Output = Result<ResponseOutcome, PolicyError>> + Send {
        let _ = (params, ctx);
        async { Ok(ResponseOutcome::proceed()) }
    }

    /// Called once when the agent stops, after in-flight calls drained
    /// (flush buffers, close files).
    fn on_shutdown(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// Object-safe form of [`Policy`], blanket-implemented for every policy.
pub(crate) trait DynPolicy: Send + Sync {
    fn name(&self) -> &str;
    fn info(&self) -> proto::PolicyInfo;
    fn run_request<'a>(
        &'a self,
        params: &'a Params,
        ctx: &'a RequestContext<'a>,
    ) -> BoxFuture<'a, Result<RequestOutcome, PolicyError>>;
    fn run_response<'a>(
        &'a self,
        params: &'a Params,
        ctx: &'a ResponseContext<'a>,
    ) -> BoxFuture<'a, Result<ResponseOutcome, PolicyError>>;
    fn run_chunk<'a>(
        &'a self,
        params: &'a Params,
        ctx: &'a ChunkContext<'a>,
    ) -> BoxFuture<'a, Result<ChunkOutcome, PolicyError>>;
    fn shutdown(&self) -> BoxFuture<'_, ()>;
}

impl<P: Policy> DynPolicy for P {
    fn name(&self) -> &str {
        Policy::name(self)
    }

    fn info(&self) -> proto::PolicyInfo {
        proto::PolicyInfo {
            name: Policy::name(self).to_string(),
            version: self.version().to_string(),
            param_schema: self.param_schema().iter().map(|s| s.to_string()).collect(),
            supported_phases: self.phases().to_proto() as i32,
            requires_body: self.requires_body(),
            streams_response_body: self.streams_response_body(),
            streams_event_streams_only: self.streams_event_streams_only(),
            required_params: self.required_params().iter().map(|s| s.to_string()).collect(),
            cache: self.cache().map(|c| c.to_proto()),
        }
    }

    fn run_request<'a>(
        &'a self,
        params: &'a Params,
        ctx: &'a RequestContext<'a>,
    ) -> BoxFuture<'a, Result<RequestOutcome, PolicyError>> {
        Box::pin(async move {
            let typed = P::Params::from_params(params)?;
            self.on_request(&typed, ctx).await
        })
    }

    fn run_response<'a>(
        &'a self,
        params: &'a Params,
        ctx: &'a ResponseContext<'a>,
    ) -> BoxFuture<'a, Result<ResponseOutcome, PolicyError>> {
        Box::pin(async move {
            let typed = P::Params::from_params(params)?;
            self.on_response(&typed, ctx).await
        })
    }

    fn run_chunk<'a>(
        &'a self,
        params: &'a Params,
        ctx: &'a ChunkContext<'a>,
    ) -> BoxFuture<'a, Result<ChunkOutcome, PolicyError>> {
        Box::pin(async move {
            let typed = P::Params::from_params(params)?;
            self.on_response_chunk(&typed, ctx).await
        })
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.on_shutdown())
    }
}
