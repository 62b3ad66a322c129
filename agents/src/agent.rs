//! [`Agent`]: registers policies and serves them on a Unix socket until
//! SIGTERM (or SIGINT), then drains in-flight calls and exits.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::policy::{DynPolicy, Policy};
use crate::proto::policy_agent_server::PolicyAgentServer;
use crate::registry::Registry;
use crate::service::{AgentService, DrainState, Shared};
use crate::socket::{self, BoundSocket, SocketError};

/// Why an agent could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Two policies have the same name.
    #[error("policy {0:?} is registered twice")]
    DuplicatePolicy(String),
    /// The socket could not be bound.
    #[error(transparent)]
    Socket(#[from] SocketError),
    /// The gRPC server failed.
    #[error("grpc server: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The metrics endpoint could not be bound.
    #[error("metrics endpoint {addr}: {source}")]
    Metrics {
        /// The address of `--metrics-addr`.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Signal handlers could not be installed.
    #[error("installing signal handlers: {0}")]
    Signal(std::io::Error),
}

/// Configures an [`Agent`]; see [`Agent::builder`].
pub struct AgentBuilder {
    name: String,
    version: String,
    policies: Vec<Arc<dyn DynPolicy>>,
    socket_mode: u32,
    drain_timeout: Duration,
    max_message_size: usize,
    metrics_addr: Option<SocketAddr>,
}

impl AgentBuilder {
    /// Registers a policy. Policies are listed in `GetAgentConfig` in this order.
    pub fn policy<P: Policy>(mut self, policy: P) -> Self {
        self.policies.push(Arc::new(policy));
        self
    }

    /// Permission bits of the socket file (default `0o660`).
    pub fn socket_mode(mut self, mode: u32) -> Self {
        self.socket_mode = mode & 0o777;
        self
    }

    /// How long to wait for in-flight calls after SIGTERM (default 30 s).
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// Largest gRPC message accepted or sent (default 16 MiB; bodies travel in them).
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.max_message_size = bytes;
        self
    }

    /// Serves the agent's Prometheus metrics on `addr` (see
    /// [`metrics`](crate::metrics)); off by default.
    pub fn metrics_addr(mut self, addr: Option<SocketAddr>) -> Self {
        self.metrics_addr = addr;
        self
    }

    /// Builds the agent, checking that policy names are unique.
    pub fn build(self) -> Result<Agent, AgentError> {
        let registry = Registry::new(self.policies).map_err(AgentError::DuplicatePolicy)?;
        Ok(Agent {
            shared: Arc::new(Shared {
                name: self.name,
                version: self.version,
                registry,
                drain: DrainState::new(),
            }),
            socket_mode: self.socket_mode,
            drain_timeout: self.drain_timeout,
            max_message_size: self.max_message_size,
            metrics_addr: self.metrics_addr,
        })
    }

    /// Builds the agent and serves it on `path` until SIGTERM/SIGINT
    /// ([`Agent::serve_unix`]).
    pub async fn serve_unix(self, path: impl AsRef<Path>) -> Result<(), AgentError> {
        self.build()?.serve_unix(path).await
    }
}

/// A policy agent: a set of policies served over gRPC on a Unix socket.
pub struct Agent {
    shared: Arc<Shared>,
    socket_mode: u32,
    drain_timeout: Duration,
    max_message_size: usize,
    metrics_addr: Option<SocketAddr>,
}

/// Installs SIGTERM and SIGINT handlers; the future resolves on the first one.
fn terminate_signal() -> Result<impl Future<Output = ()>, AgentError> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(AgentError::Signal)?;
    let mut int = signal(SignalKind::interrupt()).map_err(AgentError::Signal)?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received"),
            _ = int.recv() => tracing::info!("SIGINT received"),
        }
    })
}

impl Agent {
    /// Starts configuring an agent named `name` at version `version`.
    pub fn builder(name: impl Into<String>, version: impl Into<String>) -> AgentBuilder {
        AgentBuilder {
            name: name.into(),
            version: version.into(),
            policies: Vec::new(),
            socket_mode: 0o660,
            drain_timeout: Duration::from_secs(30),
            max_message_size: 16 * 1024 * 1024,
            metrics_addr: None,
        }
    }

    /// The gRPC service, for mounting in a server of your own.
    pub fn into_service(self) -> PolicyAgentServer<AgentService> {
        PolicyAgentServer::new(AgentService { shared: self.shared })
            .max_decoding_message_size(self.max_message_size)
            .max_encoding_message_size(self.max_message_size)
    }

    /// Serves on the Unix socket `path` until SIGTERM or SIGINT, then drains.
    pub async fn serve_unix(self, path: impl AsRef<Path>) -> Result<(), AgentError> {
        // Install the handlers before binding so that no signal is missed.
        let signal = terminate_signal()?;
        self.serve_unix_with_shutdown(path, signal).await
    }

    /// Serves on the Unix socket `path` until `shutdown` resolves, then drains:
    /// health checks answer NOT_SERVING, in-flight calls finish (up to the
    /// drain timeout), the server stops, policies' shutdown hooks run and the
    /// socket file is removed.
    pub async fn serve_unix_with_shutdown(
        self,
        path: impl AsRef<Path>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), AgentError> {
        let path = path.as_ref();
        let bound = socket::bind(path, self.socket_mode)?;
        let (sock_path, dev, ino) = bound.identity();
        let result = self.run(bound, shutdown).await;
        BoundSocket::cleanup(&sock_path, dev, ino);
        result
    }

    async fn run(self, bound: BoundSocket, shutdown: impl Future<Output = ()>) -> Result<(), AgentError> {
        let (path, _, _) = bound.identity();
        let listener = tokio::net::UnixListener::from_std(bound.listener).map_err(|source| {
            AgentError::Socket(SocketError::Io {
                op: "register",
                path,
                source,
            })
        })?;
        let shared = Arc::clone(&self.shared);
        crate::metrics::record_info(&shared.name, &shared.version);
        if let Some(addr) = self.metrics_addr {
            let bound = crate::metrics::serve(addr)
                .await
                .map_err(|source| AgentError::Metrics { addr, source })?;
            tracing::info!(address = %bound, "metrics on http://{bound}/metrics");
        }
        let drain_timeout = self.drain_timeout;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tonic::transport::Server::builder()
            // The kernel cancels the calls of requests Envoy gave up on, in
            // bursts under overload, some before they are accepted here.
            // HTTP/2's rapid-reset guard (GOAWAY after 20 such calls) would
            // then end the kernel's connection and fail every call on it.
            .http2_max_pending_accept_reset_streams(Some(policy_net::AGENT_MAX_CANCELLED_BEFORE_ACCEPT))
            .add_service(self.into_service())
            .serve_with_incoming_shutdown(policy_net::incoming(listener), async {
                let _ = stop_rx.await;
            });
        tokio::pin!(server);
        tracing::info!(agent = %shared.name, version = %shared.version, "agent serving");

        tokio::select! {
            res = &mut server => {
                shared.registry.shutdown().await;
                return res.map_err(AgentError::from);
            }
            () = shutdown => {}
        }

        shared.drain.start_draining();
        tracing::info!("draining in-flight calls");
        let idle = tokio::select! {
            () = shared.drain.wait_idle() => true,
            _ = tokio::time::sleep(drain_timeout) => false,
            res = &mut server => {
                shared.registry.shutdown().await;
                return res.map_err(AgentError::from);
            }
        };
        if !idle {
            tracing::warn!(timeout = ?drain_timeout, "drain timeout; stopping with calls in flight");
        }
        let _ = stop_tx.send(());
        let result = match tokio::time::timeout(Duration::from_secs(5), &mut server).await {
            Ok(res) => res.map_err(AgentError::from),
            Err(_) => {
                tracing::warn!("connections did not close in time; dropping them");
                Ok(())
            }
        };
        shared.registry.shutdown().await;
        tracing::info!("agent stopped");
        // This thread's held lines go out first (policy_net::log_batch), then
        // lines held back while stderr was not being read get a last chance.
        policy_net::log_batch::flush();
        let _ = tokio::task::spawn_blocking(crate::cli::flush_logs).await;
        result
    }
}
