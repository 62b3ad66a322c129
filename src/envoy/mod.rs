//! Envoy's `envoy.service.ext_proc.v3.ExternalProcessor` service: one
//! [`session::Session`] per `Process` stream.
//!
//! The response stream is driven by the session: each inbound message is
//! answered before the next is read. When Envoy resets the stream, tonic drops
//! the response stream, which drops any agent call in flight; the pooled
//! HTTP/2 client then resets that call's stream, so the agent sees it
//! cancelled.

pub mod body_limit;
pub mod session;
pub mod translate;

use std::pin::Pin;
use std::sync::Arc;

use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_server::{
    ExternalProcessor, ExternalProcessorServer,
};
use envoy_types::pb::envoy::service::ext_proc::v3::{ProcessingRequest, ProcessingResponse};
use futures::{FutureExt, Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use crate::kernel::Kernel;
use session::Session;

/// gRPC metadata key that may carry the route name (Envoy's per-route
/// `grpc_initial_metadata`).
pub const ROUTE_METADATA: &str = "x-route-name";

/// The ext_proc service.
#[derive(Debug, Clone)]
pub struct ExtProc {
    kernel: Arc<Kernel>,
    /// The generation header, when configured (`server.generations.header`).
    tag: Option<Arc<crate::upgrade::tag::Tag>>,
}

impl ExtProc {
    /// A service over `kernel`.
    pub fn new(kernel: Arc<Kernel>) -> Self {
        let tag = crate::upgrade::tag::Tag::from_config(&kernel.snapshot().config.server, crate::upgrade::generation());
        Self { kernel, tag }
    }

    /// The tonic server wrapper, with message limits raised for buffered bodies.
    pub fn into_server(self) -> ExternalProcessorServer<Self> {
        ExternalProcessorServer::new(self)
            .max_decoding_message_size(64 * 1024 * 1024)
            .max_encoding_message_size(64 * 1024 * 1024)
    }
}

type ResponseStream = Pin<Box<dyn Stream<Item = Result<ProcessingResponse, Status>> + Send>>;

#[tonic::async_trait]
impl ExternalProcessor for ExtProc {
    type ProcessStream = ResponseStream;

    async fn process(
        &self,
        request: Request<Streaming<ProcessingRequest>>,
    ) -> Result<Response<Self::ProcessStream>, Status> {
        let hint = request
            .metadata()
            .get(ROUTE_METADATA)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
            .map(String::from);
        let permit = self.kernel.try_stream();
        let mut session = Session::new(Arc::clone(&self.kernel), hint, permit);
        let mut inbound = request.into_inner();
        // Every answer gets the generation header when it is configured.
        let tag = self.tag.clone();
        let answer = move |mut resp: ProcessingResponse| {
            if let Some(t) = &tag {
                t.apply(&mut resp);
            }
            resp
        };
        // When the first message came with the stream's headers (Envoy sends
        // them together), it is answered before the response is returned, so
        // that the response headers leave in the same write as the first
        // answer and Envoy wakes once for both. A client that waits for the
        // response headers before sending gets them at once.
        let first = match inbound.message().now_or_never() {
            Some(Ok(Some(msg))) => Some(Ok(answer(session.handle(msg).await))),
            // End of stream or reset by Envoy: a normal end.
            Some(Ok(None) | Err(_)) => return Ok(Response::new(Box::pin(futures::stream::empty()))),
            None => None,
        };
        let rest = futures::stream::unfold((inbound, session), move |(mut inbound, mut session)| {
            let answer = answer.clone();
            async move {
                match inbound.message().await {
                    Ok(Some(msg)) => {
                        let resp = answer(session.handle(msg).await);
                        Some((Ok(resp), (inbound, session)))
                    }
                    Ok(None) | Err(_) => None,
                }
            }
        });
        let stream = futures::stream::iter(first).chain(rest);
        Ok(Response::new(Box::pin(stream)))
    }
}
