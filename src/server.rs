//! Serving the ext_proc service on TCP and, optionally, a Unix socket.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use tokio::net::{TcpListener, UnixListener};
use tokio_stream::wrappers::TcpListenerStream;

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
    /// The gRPC server failed.
    #[error("server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Bound listeners, before serving; lets callers learn the real port.
#[derive(Debug)]
pub struct Listeners {
    tcp: TcpListener,
    unix: Option<UnixListener>,
}

impl Listeners {
    /// Binds the TCP address and, when given, the Unix socket. A stale socket
    /// file (one nothing answers on) is removed first; a live one is an error.
    pub async fn bind(addr: SocketAddr, socket_path: Option<&Path>) -> Result<Self, ServeError> {
        let tcp = TcpListener::bind(addr).await.map_err(|source| ServeError::Bind {
            what: addr.to_string(),
            source,
        })?;
        let unix = match socket_path {
            Some(path) => Some(bind_unix(path).await?),
            None => None,
        };
        Ok(Self { tcp, unix })
    }

    /// The bound TCP address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
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
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_socket() {
            return Err(err(std::io::Error::other("path exists and is not a socket")));
        }
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            return Err(err(std::io::Error::other("another process is serving on this socket")));
        }
        std::fs::remove_file(path).map_err(err)?;
    }
    let listener = UnixListener::bind(path).map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE)).map_err(err)?;
    Ok(listener)
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
            .add_service(ExtProc::new(Arc::clone(&kernel)).into_server())
    };
    let (tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let tcp_stop = {
        let mut rx = tx.subscribe();
        async move {
            let _ = rx.recv().await;
        }
    };
    let tcp = router().serve_with_incoming_shutdown(TcpListenerStream::new(listeners.tcp), tcp_stop);
    let unix_path = config.server.socket_path.clone();
    let unix = listeners.unix.map(|l| {
        let mut rx = tx.subscribe();
        router().serve_with_incoming_shutdown(policy_net::incoming(l), async move {
            let _ = rx.recv().await;
        })
    });
    tokio::spawn(async move {
        shutdown.await;
        let _ = tx.send(());
    });
    let result = match unix {
        Some(u) => tokio::try_join!(tcp, u).map(|_| ()),
        None => tcp.await,
    };
    if let Some(p) = unix_path {
        let _ = std::fs::remove_file(p);
    }
    Ok(result?)
}
