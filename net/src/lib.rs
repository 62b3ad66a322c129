//! Shared by the kernel and its agents: Unix-socket streams that wake their
//! task only for reads ([`UnixConn`]), the gRPC codec of the agent protocol
//! ([`codec::ContiguousCodec`]), and log output that never blocks the
//! threads that log ([`log_output::Output`]) and that a runtime thread writes
//! once per wake-up ([`log_batch`]), the framing of
//! server-sent events in streamed bodies ([`sse`]), and the async runtime
//! sized to the CPUs the process may use ([`runtime`]).
//!
//! Tokio registers every socket with epoll for readability and writability
//! (edge-triggered). On a Unix stream socket the kernel signals writability
//! to the writer each time the peer *reads*: so a process that writes a
//! request is woken as soon as its peer takes the request in, although it has
//! nothing left to write. Between the kernel, its agents and Envoy, which
//! share cores, every such wake-up is a context switch on the request path,
//! twice per call.
//!
//! [`UnixConn`] registers the socket for readability only. Writes are tried
//! directly; only a write that would block registers a second descriptor of
//! the same socket for writability, for as long as the write waits (a full
//! socket buffer: a large body, or a stalled peer).

use std::io::{self, IoSlice, Write};
use std::net::Shutdown;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::Path;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

pub mod codec;
pub mod log_batch;
pub mod log_output;
pub mod runtime;
pub mod sse;

/// Agent calls the kernel may cancel before an agent's server has accepted
/// them, at once, without the connection being closed (HTTP/2's guard
/// against rapid resets closes it after 20 by default). The kernel cancels
/// calls whose request Envoy gave up on: no attack between these two peers.
pub const AGENT_MAX_CANCELLED_BEFORE_ACCEPT: usize = 10_000;

use futures::{Stream, StreamExt};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::UnixListener;

/// A connected Unix stream socket, registered for readability only.
#[derive(Debug)]
pub struct UnixConn {
    read: AsyncFd<StdUnixStream>,
    /// A duplicate of the socket's descriptor registered for writability,
    /// present only while a write waits for room.
    write: Option<AsyncFd<OwnedFd>>,
}

impl UnixConn {
    /// Wraps a connected std socket (made non-blocking here).
    pub fn from_std(stream: StdUnixStream) -> io::Result<Self> {
        stream.set_nonblocking(true)?;
        // SAFETY: the stream owns its descriptor, which stays open and the
        // same until the `AsyncFd` (which owns the stream) is dropped.
        let read = unsafe { AsyncFd::register_with_interest(stream, Interest::READABLE)? };
        Ok(Self { read, write: None })
    }

    /// Takes over a connected tokio socket.
    pub fn from_tokio(stream: tokio::net::UnixStream) -> io::Result<Self> {
        Self::from_std(stream.into_std()?)
    }

    /// Connects to the socket at `path`.
    pub async fn connect(path: impl AsRef<Path>) -> io::Result<Self> {
        Self::from_tokio(tokio::net::UnixStream::connect(path).await?)
    }

    fn poll_write_with(
        &mut self,
        cx: &mut Context<'_>,
        mut write: impl FnMut(&StdUnixStream) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        loop {
            match write(self.read.get_ref()) {
                Ok(n) => {
                    // Room again: stop asking for writability.
                    self.write = None;
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let waiter = match &mut self.write {
                        Some(w) => w,
                        none => {
                            let fd = self.read.get_ref().as_fd().try_clone_to_owned()?;
                            // SAFETY: as in `from_std`: the `AsyncFd` owns `fd`.
                            none.insert(unsafe { AsyncFd::register_with_interest(fd, Interest::WRITABLE)? })
                        }
                    };
                    // Registration reports a socket that is already writable,
                    // so no edge is missed between the failed write and here.
                    let mut guard = ready!(waiter.poll_write_ready(cx))?;
                    guard.clear_ready();
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncRead for UnixConn {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.read.poll_read_ready(cx))?;
            // Read into the buffer's uninitialised room: filling it with
            // zeros first (`initialize_unfilled`) cost a memset of the whole
            // room (several KiB) per read, for bytes read(2) overwrites.
            // SAFETY: only read(2) writes to `room`, and only its first `n`
            // bytes, which are then marked initialised and filled.
            let room = unsafe { buf.unfilled_mut() };
            let len = room.len();
            let got = unsafe { libc::read(guard.get_inner().as_raw_fd(), room.as_mut_ptr().cast(), len) };
            let got = if got < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(got as usize)
            };
            match got {
                Ok(n) => {
                    // SAFETY: read(2) wrote these `n` bytes.
                    unsafe { buf.assume_init(n) };
                    // A short read emptied the socket (edge-triggered: the
                    // next arrival is a new event), so the next poll waits
                    // without another read(2) that would only say EAGAIN.
                    if n > 0 && n < len {
                        guard.clear_ready();
                    }
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => guard.clear_ready(),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for UnixConn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write_with(cx, |mut s| s.write(data))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write_with(cx, |mut s| s.write_vectored(bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.read.get_ref().shutdown(Shutdown::Write) {
            Err(e) if e.kind() != io::ErrorKind::NotConnected => Poll::Ready(Err(e)),
            _ => Poll::Ready(Ok(())),
        }
    }
}

/// Credentials of the process at the other end of a Unix socket, as the
/// operating system recorded them when it connected (SO_PEERCRED): they
/// cannot be forged by the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    /// Effective uid of the peer.
    pub uid: u32,
    /// Effective gid of the peer.
    pub gid: u32,
    /// Process id of the peer.
    pub pid: i32,
}

/// The credentials of the peer of the connected socket `fd`.
pub fn peer_cred(fd: &impl AsRawFd) -> io::Result<PeerCred> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes of the sizes given, and
    // the descriptor is borrowed for the duration of the call.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(PeerCred {
        uid: cred.uid,
        gid: cred.gid,
        pid: cred.pid,
    })
}

/// The identity a peer must have: its uid, and its gid when given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpectedPeer {
    /// Required uid.
    pub uid: u32,
    /// Required gid; `None` accepts any.
    pub gid: Option<u32>,
}

/// A peer that is not the expected one.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// Its credentials could not be read.
    #[error("cannot read the peer's credentials (SO_PEERCRED): {0}")]
    Unreadable(#[source] io::Error),
    /// It runs as another uid or gid.
    #[error("peer runs as uid {} gid {} (pid {}), expected uid {}{}", .found.uid, .found.gid, .found.pid, .expected.uid, .expected.gid.map(|g| format!(" gid {g}")).unwrap_or_default())]
    Mismatch {
        /// What the socket reported.
        found: PeerCred,
        /// What was required.
        expected: ExpectedPeer,
    },
}

/// Checks that the peer of `conn` runs as `expected`.
pub fn check_peer(conn: &UnixConn, expected: ExpectedPeer) -> Result<PeerCred, PeerError> {
    let found = conn.peer_cred().map_err(PeerError::Unreadable)?;
    if found.uid != expected.uid || expected.gid.is_some_and(|g| g != found.gid) {
        return Err(PeerError::Mismatch { found, expected });
    }
    Ok(found)
}

impl UnixConn {
    /// The credentials of the process at the other end.
    pub fn peer_cred(&self) -> io::Result<PeerCred> {
        peer_cred(self.read.get_ref())
    }
}

impl tonic::transport::server::Connected for UnixConn {
    type ConnectInfo = ();

    fn connect_info(&self) -> Self::ConnectInfo {}
}

/// The connections accepted on `listener`, as [`UnixConn`]s, for tonic's
/// `serve_with_incoming`.
pub fn incoming(listener: UnixListener) -> impl Stream<Item = io::Result<UnixConn>> + Send + 'static {
    tokio_stream::wrappers::UnixListenerStream::new(listener).map(|accepted| accepted.and_then(UnixConn::from_tokio))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn pair() -> (UnixConn, UnixConn) {
        let (a, b) = StdUnixStream::pair().expect("socketpair");
        (UnixConn::from_std(a).expect("a"), UnixConn::from_std(b).expect("b"))
    }

    #[tokio::test]
    async fn the_peer_is_checked_against_the_expected_uid_and_gid() {
        let (a, _b) = pair();
        let me = PeerCred {
            uid: unsafe { libc::geteuid() },
            gid: unsafe { libc::getegid() },
            pid: std::process::id() as i32,
        };
        assert_eq!(a.peer_cred().unwrap(), me);
        let ok = ExpectedPeer {
            uid: me.uid,
            gid: Some(me.gid),
        };
        assert_eq!(check_peer(&a, ok).unwrap(), me);
        let any_gid = ExpectedPeer { uid: me.uid, gid: None };
        assert!(check_peer(&a, any_gid).is_ok());
        let other_uid = ExpectedPeer {
            uid: me.uid + 1,
            gid: None,
        };
        let e = check_peer(&a, other_uid).unwrap_err();
        assert!(matches!(e, PeerError::Mismatch { found, .. } if found == me));
        assert!(e.to_string().contains(&format!("uid {}", me.uid)), "{e}");
        let other_gid = ExpectedPeer {
            uid: me.uid,
            gid: Some(me.gid + 1),
        };
        assert!(check_peer(&a, other_gid).is_err());
    }

    #[tokio::test]
    async fn bytes_go_both_ways_and_shutdown_reads_as_end_of_file() {
        let (mut a, mut b) = pair();
        a.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        b.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
        b.write_all(b"pong").await.unwrap();
        a.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"pong");
        a.shutdown().await.unwrap();
        assert_eq!(b.read(&mut buf).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn a_write_larger_than_the_socket_buffer_waits_for_room_and_completes() {
        let (mut a, mut b) = pair();
        // Far over a Unix socket's buffer: the writer must hit EWOULDBLOCK
        // and wait for writability several times.
        let sent: Vec<u8> = (0..8 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
        let expected = sent.clone();
        let writer = tokio::spawn(async move {
            a.write_all(&sent).await.unwrap();
            assert!(
                a.write.is_none(),
                "writability is no longer asked for once the write is done"
            );
            a.shutdown().await.unwrap();
            a
        });
        // Let the writer fill the buffer before anything is read.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.unwrap();
        writer.await.unwrap();
        assert_eq!(got.len(), expected.len());
        assert!(got == expected, "bytes arrive whole and in order");
    }

    #[tokio::test]
    async fn a_closed_peer_is_a_write_error_and_end_of_file() {
        let (mut a, b) = pair();
        drop(b);
        let mut buf = [0u8; 1];
        assert_eq!(a.read(&mut buf).await.unwrap(), 0);
        let err = a.write_all(b"x").await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
    }
}
