//! Serving the ext_proc service on a Unix socket and/or TCP.
//!
//! The TCP listener exists only when the configuration asks for it
//! ([`ServerConfig::tcp_addr`]); it can require TLS with client-certificate
//! verification (`server.tls`). Connections to the Unix socket can be limited
//! to peer uids (`server.allowed_peer_uids`, checked with SO_PEERCRED).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use futures::StreamExt;
use tokio::net::{TcpListener, UnixListener};
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

use crate::config::{ServerConfig, TlsConfig};
use crate::envoy::ExtProc;
use crate::kernel::Kernel;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Binding a listener failed.
    #[error("cannot listen on {what}: {source}")]
    Bind {
        /// The address or path.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A `server.tls` file could not be read or used.
    #[error("{field}: {reason}")]
    Tls {
        /// The field, e.g. `policy_kernel.server.tls.cert_path`.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// The gRPC server failed.
    #[error("server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Bound listeners, before serving; lets callers learn the real port.
#[derive(Debug)]
pub struct Listeners {
    tcp: Option<TcpListener>,
    unix: Option<UnixListener>,
    /// Whether the socket file is this process's to remove when serving
    /// ends: not when the listener was inherited (`supervise` owns it).
    owns_socket_file: bool,
}

impl Listeners {
    /// Binds the TCP address, when given, and the Unix socket, when given. A
    /// stale socket file (one nothing answers on) is removed first; a live
    /// one is an error.
    pub async fn bind(addr: Option<SocketAddr>, socket_path: Option<&Path>) -> Result<Self, ServeError> {
        let tcp = match addr {
            Some(addr) => Some(TcpListener::bind(addr).await.map_err(|source| ServeError::Bind {
                what: addr.to_string(),
                source,
            })?),
            None => None,
        };
        let unix = match socket_path {
            Some(path) => Some(bind_unix(path).await?),
            None => None,
        };
        Ok(Self {
            tcp,
            unix,
            owns_socket_file: true,
        })
    }

    /// Listeners inherited from `policy-kernel supervise`, which owns them:
    /// the socket file is left in place when serving ends.
    pub fn inherited(
        unix: Option<std::os::unix::net::UnixListener>,
        tcp: Option<std::net::TcpListener>,
    ) -> std::io::Result<Self> {
        let unix = unix
            .map(|l| {
                l.set_nonblocking(true)?;
                UnixListener::from_std(l)
            })
            .transpose()?;
        let tcp = tcp
            .map(|l| {
                l.set_nonblocking(true)?;
                TcpListener::from_std(l)
            })
            .transpose()?;
        Ok(Self {
            tcp,
            unix,
            owns_socket_file: false,
        })
    }

    /// The listeners as standard ones, to hand to child processes.
    pub fn into_std(
        self,
    ) -> std::io::Result<(Option<std::os::unix::net::UnixListener>, Option<std::net::TcpListener>)> {
        let unix = self.unix.map(UnixListener::into_std).transpose()?;
        let tcp = self.tcp.map(TcpListener::into_std).transpose()?;
        Ok((unix, tcp))
    }

    /// Whether serving ends by removing the socket file (false when the
    /// listener was inherited).
    pub fn owns_socket_file(&self) -> bool {
        self.owns_socket_file
    }

    /// The bound TCP address; `None` without a TCP listener.
    pub fn local_addr(&self) -> std::io::Result<Option<SocketAddr>> {
        self.tcp.as_ref().map(TcpListener::local_addr).transpose()
    }
}

/// Reads `server.tls`: the kernel's certificate and key, and the CA that
/// client certificates must chain to. A client without such a certificate
/// fails the handshake.
pub fn tls_config(tls: &TlsConfig) -> Result<ServerTlsConfig, ServeError> {
    let read = |name: &str, path: &Path| {
        let field = format!("policy_kernel.server.tls.{name}");
        let text = std::fs::read(path).map_err(|e| ServeError::Tls {
            field: field.clone(),
            reason: format!("cannot read {}: {e}", path.display()),
        })?;
        if !text.windows(11).any(|w| w == b"-----BEGIN ") {
            return Err(ServeError::Tls {
                field,
                reason: format!("{} holds no PEM block", path.display()),
            });
        }
        Ok(text)
    };
    let cert = read("cert_path", &tls.cert_path)?;
    let key = read("key_path", &tls.key_path)?;
    let ca = read("client_ca_path", &tls.client_ca_path)?;
    Ok(ServerTlsConfig::new()
        .identity(Identity::from_pem(cert, key))
        .client_ca_root(Certificate::from_pem(ca))
        .client_auth_optional(false)
        .timeout(std::time::Duration::from_secs(10)))
}

/// Checks that `server.tls` can be used: the files are read and the server
/// TLS setup built (what startup does), without binding anything.
pub fn check_tls(server: &ServerConfig) -> Result<(), ServeError> {
    if let Some(tls) = &server.tls {
        tonic::transport::Server::builder().tls_config(tls_config(tls)?)?;
    }
    Ok(())
}

/// Mode of the kernel's socket: owner and group (Envoy's user) may connect.
const SOCKET_MODE: u32 = 0o660;
/// Mode of a socket directory the kernel creates.
const DIR_MODE: u32 = 0o750;

/// Binds the kernel's own socket safely: its directory is created 0750 when
/// missing and must not be world-writable (anyone could replace the
/// socket); a stale socket is removed only when it is a socket nothing
/// answers on; the socket is made 0660.
async fn bind_unix(path: &Path) -> Result<UnixListener, ServeError> {
    use std::os::unix::fs::PermissionsExt;
    let err = |source| ServeError::Bind {
        what: path.display().to_string(),
        source,
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    if !dir.exists() {
        std::fs::create_dir_all(&dir).map_err(err)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(DIR_MODE)).map_err(err)?;
    }
    let mode = std::fs::metadata(&dir).map_err(err)?.permissions().mode();
    if mode & 0o002 != 0 {
        return Err(err(std::io::Error::other(format!(
            "socket directory {} is world-writable (mode {:o}); use a directory only the kernel's user and group can write",
            dir.display(),
            mode & 0o7777
        ))));
    }
    clear_stale_socket(path).await.map_err(err)?;
    let listener = UnixListener::bind(path).map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE)).map_err(err)?;
    Ok(listener)
}

/// Makes way for a socket at `path`: a socket file nothing answers on is
/// removed; a live socket, or a file of another kind, is an error.
pub(crate) async fn clear_stale_socket(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Err(std::io::Error::other("path exists and is not a socket"));
    }
    if tokio::net::UnixStream::connect(path).await.is_ok() {
        return Err(std::io::Error::other("another process is serving on this socket"));
    }
    std::fs::remove_file(path)
}

/// Serves until `shutdown` resolves, then stops accepting and lets in-flight
/// streams finish.
pub async fn serve(
    kernel: Arc<Kernel>,
    listeners: Listeners,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let config = Arc::clone(&kernel.snapshot().config);
    // Let far more streams than the kernel serves reach it, so that the
    // excess is answered with overload_response at once; a per-connection cap
    // near the limit would make Envoy see REFUSED_STREAM and answer 500.
    let streams = config.server.max_concurrent_streams.saturating_mul(10).max(10_000);
    let router = || {
        tonic::transport::Server::builder()
            .max_concurrent_streams(streams)
            // Envoy cancels streams in bursts when its clients give up (under
            // overload), some before they are accepted here. HTTP/2's
            // rapid-reset guard (GOAWAY after 20 such streams) would then end
            // the connection and fail every request in flight on it.
            .http2_max_pending_accept_reset_streams(Some(streams as usize))
            .tcp_nodelay(true)
    };
    let service = || ExtProc::new(Arc::clone(&kernel)).into_server();
    let (tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let stop = |tx: &tokio::sync::broadcast::Sender<()>| {
        let mut rx = tx.subscribe();
        async move {
            let _ = rx.recv().await;
        }
    };
    let tcp = match listeners.tcp {
        Some(l) => {
            let mut builder = router();
            if let Some(tls) = &config.server.tls {
                builder = builder.tls_config(tls_config(tls)?)?;
            }
            // The builder's tcp_nodelay applies only to listeners tonic binds
            // itself: accepted sockets get TCP_NODELAY here, or Nagle's
            // algorithm holds back small HTTP/2 frames (a reply) while an
            // earlier one is unacknowledged.
            let incoming = tonic::transport::server::TcpIncoming::from(l).with_nodelay(Some(true));
            Some(
                builder
                    .add_service(service())
                    .serve_with_incoming_shutdown(incoming, stop(&tx)),
            )
        }
        None => None,
    };
    let unix_path = config.server.socket_path.clone().filter(|_| listeners.owns_socket_file);
    let allowed = config.server.allowed_peer_uids.clone();
    let unix = listeners.unix.map(|l| {
        let incoming = policy_net::incoming(l).filter(move |conn| {
            let keep = match (conn, &allowed) {
                (Ok(c), Some(uids)) => peer_allowed(c, uids),
                _ => true,
            };
            std::future::ready(keep)
        });
        router()
            .add_service(service())
            .serve_with_incoming_shutdown(incoming, stop(&tx))
    });
    tokio::spawn(async move {
        shutdown.await;
        let _ = tx.send(());
    });
    let result = match (tcp, unix) {
        (Some(t), Some(u)) => tokio::try_join!(t, u).map(|_| ()),
        (Some(t), None) => t.await,
        (None, Some(u)) => u.await,
        (None, None) => Ok(()),
    };
    if let Some(p) = unix_path {
        let _ = std::fs::remove_file(p);
    }
    Ok(result?)
}

/// Whether a connection to the kernel's socket comes from an allowed uid
/// (`server.allowed_peer_uids`); a refused one is logged and counted, and
/// closed before any byte is read from it.
fn peer_allowed(conn: &policy_net::UnixConn, uids: &[u32]) -> bool {
    match conn.peer_cred() {
        Ok(cred) if uids.contains(&cred.uid) => true,
        Ok(cred) => {
            crate::telemetry::metrics::metrics()
                .ext_proc_peers_refused
                .with_label_values(&["uid_not_allowed"])
                .inc();
            tracing::warn!(uid = cred.uid, gid = cred.gid, pid = cred.pid, allowed_peer_uids = ?uids,
                "ext_proc connection refused: peer uid is not in server.allowed_peer_uids");
            false
        }
        Err(e) => {
            crate::telemetry::metrics::metrics()
                .ext_proc_peers_refused
                .with_label_values(&["no_credentials"])
                .inc();
            tracing::warn!(error = %e, "ext_proc connection refused: peer credentials unreadable");
            false
        }
    }
}
