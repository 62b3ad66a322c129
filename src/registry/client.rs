//! A pooled HTTP/2 gRPC client to one agent over its Unix socket.
//!
//! The transport is hyper-util's pooling client with a Unix-socket connector:
//! one multiplexed HTTP/2 connection per agent, re-established on demand. It is
//! used instead of tonic's `Channel` because it tells apart a call that
//! provably never left the kernel (the connect failed) from one that may have
//! reached the agent: only the former may be retried, so that, for example, a
//! rate-limit policy never counts one request twice.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::UnixStream;
use tonic::body::Body;

use crate::proto::policy_agent_client::PolicyAgentClient;

/// Connects to a Unix socket, whatever the URI says.
#[derive(Clone, Debug)]
pub struct UnixConnector {
    path: Arc<PathBuf>,
}

impl tower::Service<http::Uri> for UnixConnector {
    type Response = TokioIo<UnixStream>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Uri) -> Self::Future {
        let path = Arc::clone(&self.path);
        Box::pin(async move { Ok(TokioIo::new(UnixStream::connect(&*path).await?)) })
    }
}

/// Why a call to an agent failed at the transport level.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// No connection could be made: the request was never sent.
    #[error("cannot connect to agent socket: {0}")]
    NotSent(#[source] hyper_util::client::legacy::Error),
    /// The request may have been sent; the outcome is unknown.
    #[error("agent transport failed: {0}")]
    Failed(#[source] hyper_util::client::legacy::Error),
}

impl TransportError {
    /// True when `status` was caused by a request that never left the kernel.
    pub fn is_not_sent(status: &tonic::Status) -> bool {
        let mut source = std::error::Error::source(status);
        while let Some(err) = source {
            if let Some(t) = err.downcast_ref::<TransportError>() {
                return matches!(t, TransportError::NotSent(_));
            }
            source = err.source();
        }
        false
    }
}

/// The HTTP service under the generated gRPC client.
#[derive(Clone, Debug)]
pub struct UnixHttp {
    client: Client<UnixConnector, Body>,
}

impl tower::Service<http::Request<Body>> for UnixHttp {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = TransportError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, TransportError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: http::Request<Body>) -> Self::Future {
        // The authority only names the pool key; the connector ignores it.
        let mut parts = req.uri().clone().into_parts();
        parts.scheme = Some(http::uri::Scheme::HTTP);
        parts.authority = Some(http::uri::Authority::from_static("agent"));
        if let Ok(uri) = http::Uri::from_parts(parts) {
            *req.uri_mut() = uri;
        }
        let fut = self.client.request(req);
        Box::pin(async move {
            fut.await.map_err(|e| {
                if e.is_connect() {
                    TransportError::NotSent(e)
                } else {
                    TransportError::Failed(e)
                }
            })
        })
    }
}

/// The gRPC client type the kernel uses for agents.
pub type AgentClient = PolicyAgentClient<UnixHttp>;

/// Builds a lazily connecting, pooled HTTP/2 client for the agent at `path`.
pub fn connect_lazy(path: &Path) -> AgentClient {
    let connector = UnixConnector {
        path: Arc::new(path.to_path_buf()),
    };
    let client = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .http2_keep_alive_interval(std::time::Duration::from_secs(30))
        .pool_idle_timeout(std::time::Duration::from_secs(90))
        .build(connector);
    PolicyAgentClient::new(UnixHttp { client })
        .max_decoding_message_size(MAX_REPLY_BYTES)
        .max_encoding_message_size(MAX_REPLY_BYTES)
}

/// Largest agent reply (and call) accepted: room for a replaced body at
/// Envoy's buffer limits. A larger reply fails the call ("message too
/// large" in the log) and follows `on_failure`.
pub const MAX_REPLY_BYTES: usize = 16 * 1024 * 1024;
