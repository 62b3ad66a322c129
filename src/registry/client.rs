//! A gRPC client to one agent over its Unix socket: one multiplexed HTTP/2
//! connection, made on first use and made again after it closes.
//!
//! The transport is hyper's HTTP/2 client connection, driven directly rather
//! than through a pooling client or tonic's `Channel`: a call costs one
//! lock-free load of the connection handle, and hyper hands back a request
//! that never left the kernel. So the kernel tells apart a call that provably
//! did not reach the agent (no connection could be made, or the connection
//! closed before the request was written) from one that may have: only the
//! former may be retried, so that, for example, a rate-limit policy never
//! counts one request twice.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use hyper::client::conn::http2::{self, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::UnixStream;
use tonic::body::Body;

use crate::proto::policy_agent_client::PolicyAgentClient;

/// Why a call to an agent failed at the transport level.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// No connection could be made: the request was never sent.
    #[error("cannot connect to agent socket: {0}")]
    Connect(#[source] std::io::Error),
    /// The HTTP/2 handshake failed: the request was never sent.
    #[error("cannot open an HTTP/2 connection to the agent: {0}")]
    Handshake(#[source] hyper::Error),
    /// The connection closed before the request was written: never sent.
    #[error("agent connection closed before the request was sent: {0}")]
    Closed(#[source] hyper::Error),
    /// The request may have been sent; the outcome is unknown.
    #[error("agent transport failed: {0}")]
    Failed(#[source] hyper::Error),
}

impl TransportError {
    /// True when the request provably never left the kernel.
    pub fn not_sent(&self) -> bool {
        !matches!(self, TransportError::Failed(_))
    }

    /// True when `status` was caused by a request that never left the kernel.
    pub fn is_not_sent(status: &tonic::Status) -> bool {
        let mut source = std::error::Error::source(status);
        while let Some(err) = source {
            if let Some(t) = err.downcast_ref::<TransportError>() {
                return t.not_sent();
            }
            source = err.source();
        }
        false
    }
}

/// The agent's connection, shared by every clone of its client.
#[derive(Debug)]
struct Connection {
    path: PathBuf,
    /// The open connection's request handle; `None` until the first call.
    sender: ArcSwapOption<SendRequest<Body>>,
    /// Held while connecting, so that concurrent calls make one connection.
    connecting: tokio::sync::Mutex<()>,
}

impl Connection {
    /// A handle on the open connection, if there is one.
    fn open(&self) -> Option<SendRequest<Body>> {
        let current = self.sender.load();
        current.as_deref().filter(|s| !s.is_closed()).cloned()
    }

    /// The open connection, or a new one. The flag is true for a new one.
    async fn get(&self) -> Result<(SendRequest<Body>, bool), TransportError> {
        if let Some(s) = self.open() {
            return Ok((s, false));
        }
        let _one_at_a_time = self.connecting.lock().await;
        if let Some(s) = self.open() {
            return Ok((s, false));
        }
        let io = UnixStream::connect(&self.path).await.map_err(TransportError::Connect)?;
        let (sender, connection) = http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .keep_alive_interval(Duration::from_secs(30))
            .handshake(TokioIo::new(io))
            .await
            .map_err(TransportError::Handshake)?;
        let path = self.path.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(socket = %path.display(), error = %e, "agent connection closed");
            }
        });
        self.sender.store(Some(Arc::new(sender.clone())));
        Ok((sender, true))
    }

    async fn send(&self, req: http::Request<Body>) -> Result<http::Response<hyper::body::Incoming>, TransportError> {
        let (mut sender, fresh) = self.get().await?;
        match sender.try_send_request(req).await {
            Ok(response) => Ok(response),
            Err(mut e) => match e.take_message() {
                // A kept connection that closed under us (the agent
                // restarted): the request was not sent; one new connection.
                Some(req) if !fresh => {
                    let (mut sender, _) = self.get().await?;
                    sender
                        .try_send_request(req)
                        .await
                        .map_err(|mut e| match e.take_message() {
                            Some(_) => TransportError::Closed(e.into_error()),
                            None => TransportError::Failed(e.into_error()),
                        })
                }
                Some(_) => Err(TransportError::Closed(e.into_error())),
                None => Err(TransportError::Failed(e.into_error())),
            },
        }
    }
}

/// The HTTP service under the generated gRPC client.
#[derive(Clone, Debug)]
pub struct UnixHttp {
    connection: Arc<Connection>,
}

impl tower::Service<http::Request<Body>> for UnixHttp {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = TransportError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, TransportError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let connection = Arc::clone(&self.connection);
        Box::pin(async move { connection.send(req).await })
    }
}

/// The gRPC client type the kernel uses for agents.
pub type AgentClient = PolicyAgentClient<UnixHttp>;

/// Builds a lazily connecting HTTP/2 client for the agent at `path`.
pub fn connect_lazy(path: &Path) -> AgentClient {
    let http = UnixHttp {
        connection: Arc::new(Connection {
            path: path.to_path_buf(),
            sender: ArcSwapOption::empty(),
            connecting: tokio::sync::Mutex::new(()),
        }),
    };
    // The authority is only the HTTP/2 :authority the agent sees.
    PolicyAgentClient::with_origin(http, http::Uri::from_static("http://agent"))
        .max_decoding_message_size(MAX_REPLY_BYTES)
        .max_encoding_message_size(MAX_REPLY_BYTES)
}

/// Largest agent reply (and call) accepted: room for a replaced body at
/// Envoy's buffer limits. A larger reply fails the call ("message too
/// large" in the log) and follows `on_failure`.
pub const MAX_REPLY_BYTES: usize = 16 * 1024 * 1024;
