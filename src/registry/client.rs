//! A gRPC client to one agent over its Unix socket: one multiplexed HTTP/2
//! connection, made on first use and made again after it closes.
//!
//! The transport is the h2 crate's client connection, driven directly rather
//! than through hyper or tonic's `Channel`. A call costs one lock-free load of
//! the connection handle, and its headers and its (single, already encoded)
//! message are queued together, so they leave in one write and the agent
//! wakes once per call. The kernel tells apart a call that provably did not
//! reach the agent's policies (no connection could be made, the connection
//! was gone before the request was handed to it, or the agent refused the
//! stream unprocessed) from one that may have: only the former may be
//! retried, so that, for example, a rate-limit policy never counts one
//! request twice. The socket asks epoll for readability only
//! ([`policy_net::UnixConn`]). There are no keep-alive pings: a Unix socket
//! whose agent died reads end-of-file at once.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use h2::client::SendRequest;
use http_body::Frame;
use http_body_util::BodyExt;
use tonic::body::Body;

use crate::proto::policy_agent_client::PolicyAgentClient;

/// Why a call to an agent failed at the transport level.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// No connection could be made: the request was never sent.
    #[error("cannot connect to agent socket: {0}")]
    Connect(#[source] std::io::Error),
    /// The process serving the socket is not the expected one: the
    /// connection was closed before anything was sent.
    #[error("agent socket served by the wrong process: {0}")]
    Identity(#[source] policy_net::PeerError),
    /// The HTTP/2 handshake failed: the request was never sent.
    #[error("cannot open an HTTP/2 connection to the agent: {0}")]
    Handshake(#[source] h2::Error),
    /// The connection was closed before the request was handed to it, or
    /// the agent refused the stream unprocessed (REFUSED_STREAM, or a stream
    /// beyond its GOAWAY): never processed.
    #[error("agent connection closed before the request was sent: {0}")]
    Closed(#[source] h2::Error),
    /// The call could not be encoded: nothing was sent.
    #[error("cannot encode the call: {0}")]
    Encode(#[source] tonic::Status),
    /// The request may have been sent; the outcome is unknown.
    #[error("agent transport failed: {0}")]
    Failed(#[source] h2::Error),
}

impl TransportError {
    /// True when the request provably never reached the agent's policies.
    pub fn not_sent(&self) -> bool {
        !matches!(self, TransportError::Failed(_) | TransportError::Encode(_))
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

    /// An error of a stream that was handed to the connection: "not sent"
    /// only when the agent said it did not process it.
    fn after_send(e: h2::Error) -> Self {
        let refused = e.reason() == Some(h2::Reason::REFUSED_STREAM) || (e.is_go_away() && e.is_remote());
        if refused {
            TransportError::Closed(e)
        } else {
            TransportError::Failed(e)
        }
    }
}

/// An open connection: its request handle, and whether it has ended.
#[derive(Debug)]
pub(super) struct Open {
    pub(super) sender: SendRequest<Bytes>,
    closed: Arc<AtomicBool>,
}

/// The agent's connection, shared by every clone of its client.
#[derive(Debug)]
pub(super) struct Connection {
    path: PathBuf,
    /// The agent's name, for the identity check's log line and metric.
    agent: String,
    /// Who must serve `path` (`expected_uid` / `expected_gid`).
    expected: policy_net::ExpectedPeer,
    /// The open connection; `None` until the first call.
    open: ArcSwapOption<Open>,
    /// Held while connecting, so that concurrent calls make one connection.
    connecting: tokio::sync::Mutex<()>,
    /// +1 each time a connection is made or ends: outcomes cached from one
    /// connection's agent process are not reused on another's.
    epoch: Arc<AtomicU64>,
}

/// HTTP/2 flow-control windows: room for a large (up to 16 MiB) reply
/// without waiting for window updates on every frame.
const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
const CONNECTION_WINDOW: u32 = 5 * 1024 * 1024;

/// The HTTP/2 client settings of every agent connection: the windows above.
pub fn h2_builder() -> h2::client::Builder {
    let mut builder = h2::client::Builder::new();
    builder
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW);
    builder
}

impl Connection {
    /// The open connection, if there is one.
    fn current(&self) -> Option<Arc<Open>> {
        self.open.load_full().filter(|o| !o.closed.load(Ordering::Acquire))
    }

    /// The open connection, or a new one. The flag is true for a new one.
    pub(super) async fn get(&self) -> Result<(Arc<Open>, bool), TransportError> {
        if let Some(o) = self.current() {
            return Ok((o, false));
        }
        let _one_at_a_time = self.connecting.lock().await;
        if let Some(o) = self.current() {
            return Ok((o, false));
        }
        let io = policy_net::UnixConn::connect(&self.path)
            .await
            .map_err(TransportError::Connect)?;
        self.verify(&io)?;
        let (sender, connection) = h2_builder().handshake(io).await.map_err(TransportError::Handshake)?;
        let closed = Arc::new(AtomicBool::new(false));
        let path = self.path.clone();
        let ended = Arc::clone(&closed);
        let epoch = Arc::clone(&self.epoch);
        epoch.fetch_add(1, Ordering::AcqRel);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(socket = %path.display(), error = %e, "agent connection closed");
            }
            ended.store(true, Ordering::Release);
            epoch.fetch_add(1, Ordering::AcqRel);
        });
        let open = Arc::new(Open { sender, closed });
        self.open.store(Some(Arc::clone(&open)));
        Ok((open, true))
    }

    /// The connection epoch: it changes whenever a connection is made or
    /// ends, so an agent restart always changes it.
    pub(super) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Checks who serves the socket before anything is sent on it; a
    /// mismatch is logged, counted, and fails the connection (so the agent's
    /// health checks fail and it serves no traffic).
    fn verify(&self, io: &policy_net::UnixConn) -> Result<(), TransportError> {
        policy_net::check_peer(io, self.expected).map_err(|e| {
            crate::telemetry::metrics::metrics()
                .agent_identity_mismatch
                .with_label_values(&[&self.agent])
                .inc();
            let (uid, gid, pid) = match &e {
                policy_net::PeerError::Mismatch { found, .. } => (Some(found.uid), Some(found.gid), Some(found.pid)),
                policy_net::PeerError::Unreadable(_) => (None, None, None),
            };
            tracing::error!(agent = %self.agent, socket = %self.path.display(), uid_found = ?uid, gid_found = ?gid,
                pid_found = ?pid, expected_uid = self.expected.uid, expected_gid = ?self.expected.gid, error = %e,
                "agent identity check failed: connection closed, agent not used");
            TransportError::Identity(e)
        })?;
        Ok(())
    }

    /// Hands the request to the connection. On `Err` it was not taken; the
    /// request comes back when the connection was found closed before it.
    async fn start(
        sender: SendRequest<Bytes>,
        request: http::Request<()>,
        message: Bytes,
    ) -> Result<h2::client::ResponseFuture, (h2::Error, Option<http::Request<()>>)> {
        let mut sender = match sender.ready().await {
            Ok(sender) => sender,
            Err(e) => return Err((e, Some(request))),
        };
        let (response, mut body) = sender.send_request(request, false).map_err(|e| (e, None))?;
        // Queued with the headers before the connection task runs, so both
        // leave in one write.
        body.send_data(message, true).map_err(|e| (e, None))?;
        Ok(response)
    }

    async fn send(&self, req: http::Request<Body>) -> Result<http::Response<ReplyBody>, TransportError> {
        let (head, body) = req.into_parts();
        // A unary call's body is its one encoded message, ready at once.
        let message = body.collect().await.map_err(TransportError::Encode)?.to_bytes();
        let request = http::Request::from_parts(head, ());
        let (open, fresh) = self.get().await?;
        let response = match Self::start(open.sender.clone(), request, message.clone()).await {
            Ok(response) => response,
            // A kept connection that closed under us (the agent restarted):
            // the request was not taken; one new connection.
            Err((_, Some(request))) if !fresh => {
                open.closed.store(true, Ordering::Release);
                let (open, _) = self.get().await?;
                Self::start(open.sender.clone(), request, message)
                    .await
                    .map_err(|(e, _)| TransportError::Closed(e))?
            }
            Err((e, _)) => return Err(TransportError::Closed(e)),
        };
        let (parts, recv) = response.await.map_err(TransportError::after_send)?.into_parts();
        Ok(http::Response::from_parts(
            parts,
            ReplyBody {
                recv,
                state: ReplyState::Data,
            },
        ))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReplyState {
    Data,
    Trailers,
    Done,
}

/// An agent's reply body: its DATA frames, then its trailers (the gRPC
/// status). Received bytes are given back to flow control as they are read.
#[derive(Debug)]
pub struct ReplyBody {
    recv: h2::RecvStream,
    state: ReplyState,
}

impl http_body::Body for ReplyBody {
    type Data = Bytes;
    type Error = TransportError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, TransportError>>> {
        if self.state == ReplyState::Data {
            match ready!(self.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = self.recv.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => {
                    self.state = ReplyState::Done;
                    return Poll::Ready(Some(Err(TransportError::Failed(e))));
                }
                None => self.state = ReplyState::Trailers,
            }
        }
        if self.state == ReplyState::Trailers {
            let trailers = ready!(self.recv.poll_trailers(cx));
            self.state = ReplyState::Done;
            return Poll::Ready(match trailers {
                Ok(Some(t)) => Some(Ok(Frame::trailers(t))),
                Ok(None) => None,
                Err(e) => Some(Err(TransportError::Failed(e))),
            });
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.state == ReplyState::Done
    }
}

/// The HTTP service under the generated gRPC client.
#[derive(Clone, Debug)]
pub struct UnixHttp {
    connection: Arc<Connection>,
}

impl tower::Service<http::Request<Body>> for UnixHttp {
    type Response = http::Response<ReplyBody>;
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

/// The same connection as a plain gRPC client, for the policy calls, which
/// come encoded ([`crate::wire`]) instead of as generated messages.
pub type CallClient = tonic::client::Grpc<UnixHttp>;

/// Lazily connecting clients for the agent `agent` at `path`, sharing one
/// connection: the generated one (discovery, health), the one for unary
/// policy calls, and the call stream. Each new connection is first checked
/// to be served by `expected` ([`policy_net::check_peer`]).
pub fn connect_lazy(
    path: &Path,
    agent: &str,
    expected: policy_net::ExpectedPeer,
) -> (AgentClient, CallClient, Arc<super::mux::CallStream>) {
    let http = UnixHttp {
        connection: Arc::new(Connection {
            path: path.to_path_buf(),
            agent: agent.to_string(),
            expected,
            open: ArcSwapOption::empty(),
            connecting: tokio::sync::Mutex::new(()),
            epoch: Arc::new(AtomicU64::new(0)),
        }),
    };
    let stream = Arc::new(super::mux::CallStream::new(Arc::clone(&http.connection)));
    // The authority is only the HTTP/2 :authority the agent sees.
    let origin = http::Uri::from_static("http://agent");
    let calls = tonic::client::Grpc::with_origin(http.clone(), origin.clone())
        .max_decoding_message_size(MAX_REPLY_BYTES)
        .max_encoding_message_size(MAX_REPLY_BYTES);
    let client = PolicyAgentClient::with_origin(http, origin)
        .max_decoding_message_size(MAX_REPLY_BYTES)
        .max_encoding_message_size(MAX_REPLY_BYTES);
    (client, calls, stream)
}

/// Largest agent reply (and call) accepted: room for a replaced body at
/// Envoy's buffer limits. A larger reply fails the call ("message too
/// large" in the log) and follows `on_failure`.
pub const MAX_REPLY_BYTES: usize = 16 * 1024 * 1024;
