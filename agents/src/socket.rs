//! Binding the agent's Unix socket safely.
//!
//! * the parent directory is created (mode 0750) when missing;
//! * an existing path is never followed when it is a symbolic link, never
//!   removed when it is not a socket, and removed when it is a socket only if
//!   nothing answers on it (a stale socket left by a crash);
//! * the socket is bound under a temporary name, given its mode, then renamed
//!   into place, so it never exists with a wider mode;
//! * on exit the socket is removed only if it is still ours (same inode).

use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// Why the socket could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// The path is a symbolic link; it is not followed.
    #[error("socket path {0} is a symbolic link; refusing to follow it")]
    Symlink(PathBuf),
    /// The path exists and is not a socket; it is left alone.
    #[error("socket path {0} exists and is not a socket; refusing to remove it")]
    NotASocket(PathBuf),
    /// A live process answers on the socket.
    #[error("socket path {0} is in use by a running process")]
    InUse(PathBuf),
    /// The path has no parent directory or file name.
    #[error("socket path {0} is not a valid file path")]
    InvalidPath(PathBuf),
    /// A file-system operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was attempted.
        op: &'static str,
        /// On which path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> SocketError + 'a {
    move |source| SocketError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// A bound listening socket and the identity of its file.
pub(crate) struct BoundSocket {
    pub(crate) listener: std::os::unix::net::UnixListener,
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl BoundSocket {
    /// Removes the socket file if it is still the one we bound.
    pub(crate) fn cleanup(path: &Path, dev: u64, ino: u64) {
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if meta.file_type().is_socket() && meta.dev() == dev && meta.ino() == ino {
                if let Err(e) = std::fs::remove_file(path) {
                    tracing::warn!(path = %path.display(), error = %e, "cannot remove socket");
                }
            }
        }
    }

    /// The path, device and inode needed by [`BoundSocket::cleanup`].
    pub(crate) fn identity(&self) -> (PathBuf, u64, u64) {
        (self.path.clone(), self.dev, self.ino)
    }
}

/// Makes way for a new socket at `path`, or says why not.
fn clear_path(path: &Path) -> Result<(), SocketError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("inspect", path)(e)),
    };
    if meta.file_type().is_symlink() {
        return Err(SocketError::Symlink(path.to_path_buf()));
    }
    if !meta.file_type().is_socket() {
        return Err(SocketError::NotASocket(path.to_path_buf()));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(SocketError::InUse(path.to_path_buf())),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            tracing::info!(path = %path.display(), "removing stale socket");
            std::fs::remove_file(path).map_err(io_err("remove stale socket", path))
        }
        Err(e) => Err(io_err("probe existing socket", path)(e)),
    }
}

/// Binds a listening socket at `path` with permission bits `mode`.
pub(crate) fn bind(path: &Path, mode: u32) -> Result<BoundSocket, SocketError> {
    let invalid = || SocketError::InvalidPath(path.to_path_buf());
    let file_name = path.file_name().ok_or_else(invalid)?;
    let dir = match path.parent() {
        Some(d) if d.as_os_str().is_empty() => Path::new("."),
        Some(d) => d,
        None => return Err(invalid()),
    };
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(dir)
            .map_err(io_err("create directory", dir))?;
    }
    clear_path(path)?;

    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{}.{n}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let listener = std::os::unix::net::UnixListener::bind(&tmp).map_err(io_err("bind", &tmp))?;
    let placed = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))
        .map_err(io_err("set mode of", &tmp))
        .and_then(|()| std::fs::rename(&tmp, path).map_err(io_err("rename socket to", path)));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    let meta = std::fs::symlink_metadata(path).map_err(io_err("inspect", path))?;
    listener.set_nonblocking(true).map_err(io_err("configure", path))?;
    tracing::debug!(path = %path.display(), file = ?file_name, mode = format!("{mode:o}"), "socket bound");
    Ok(BoundSocket {
        listener,
        path: path.to_path_buf(),
        dev: meta.dev(),
        ino: meta.ino(),
    })
}
