//! The management API's listeners: a loopback TCP address and/or a Unix
//! socket. The socket is created with mode 0600 (0660 with `socket_gid`),
//! and each connection's peer uid is read with SO_PEERCRED: only the
//! kernel's own uid and `allowed_uids` are served; others get a 403 and the
//! connection is closed. Each connection is served with hyper's HTTP/1.1,
//! like the admin endpoints.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hyper::service::service_fn;
use hyper::StatusCode;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};

use super::changes::ApiError;
use super::handlers::error_reply;
use super::Management;

/// Where the listeners are bound.
#[derive(Debug, Clone, Default)]
pub struct Bound {
    /// The TCP address, when `listen` is set.
    pub tcp: Option<SocketAddr>,
    /// The socket path, when `socket` is set.
    pub socket: Option<PathBuf>,
}

fn serve_conn<S>(m: Arc<Management>, io: S, refused: Option<u32>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let service = service_fn(move |req| {
            let m = Arc::clone(&m);
            async move {
                let resp = match refused {
                    Some(uid) => error_reply(
                        &ApiError::new(
                            StatusCode::FORBIDDEN,
                            "uid_not_allowed",
                            format!("uid {uid} is not in management.allowed_uids"),
                        ),
                        0,
                    ),
                    None => m.handle(req).await,
                };
                Ok::<_, std::convert::Infallible>(resp)
            }
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder.keep_alive(refused.is_none());
        let _ = builder.serve_connection(TokioIo::new(io), service).await;
    });
}

/// Binds a Unix socket at `path` with mode 0600 (0660 and group `gid`).
/// A stale socket file is replaced; any other file is an error.
fn bind_socket(path: &Path, gid: Option<u32>) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(std::io::Error::other(format!(
                "{} exists and is not a socket",
                path.display()
            )));
        }
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)?;
    let mode = if gid.is_some() { 0o660 } else { 0o600 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    if let Some(gid) = gid {
        std::os::unix::fs::chown(path, None, Some(gid))?;
    }
    Ok(listener)
}

impl Management {
    /// Binds the configured listeners and serves them in the background.
    pub async fn spawn_listeners(self: &Arc<Self>) -> anyhow::Result<Bound> {
        let mut bound = Bound::default();
        let cfg = self.config().clone();
        if let Some(addr) = cfg.listen_addr()? {
            let listener = TcpListener::bind(addr)
                .await
                .map_err(|e| anyhow::anyhow!("binding management.listen {addr}: {e}"))?;
            bound.tcp = Some(listener.local_addr()?);
            let m = Arc::clone(self);
            tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    serve_conn(Arc::clone(&m), stream, None);
                }
            });
        }
        if let Some(path) = &cfg.socket {
            let listener = bind_socket(path, cfg.socket_gid)
                .map_err(|e| anyhow::anyhow!("binding management.socket {}: {e}", path.display()))?;
            bound.socket = Some(path.clone());
            // The socket file was created by this process: its owner is
            // the kernel's effective uid.
            let own = {
                use std::os::unix::fs::MetadataExt;
                std::fs::metadata(path)?.uid()
            };
            let allowed = cfg.allowed_uids.clone();
            let m = Arc::clone(self);
            tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let uid = stream.peer_cred().map(|c| c.uid()).ok();
                    let refused = match uid {
                        Some(u) if u == own || allowed.contains(&u) => None,
                        Some(u) => Some(u),
                        None => Some(u32::MAX),
                    };
                    if let Some(u) = refused {
                        tracing::warn!(uid = u, "management socket: peer uid not allowed; refused");
                    }
                    serve_conn(Arc::clone(&m), stream, refused);
                }
            });
        }
        Ok(bound)
    }
}
