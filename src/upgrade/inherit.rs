//! A generation's side: the listening sockets inherited from
//! `policy-kernel supervise`, and the readiness pipe.

use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::{LISTEN_FDS_ENV, READY_FD_ENV};

/// Name of the ext_proc Unix socket in [`LISTEN_FDS_ENV`].
pub const EXT_PROC_UNIX: &str = "ext_proc_unix";
/// Name of the ext_proc TCP listener.
pub const EXT_PROC_TCP: &str = "ext_proc_tcp";
/// Name of the metrics and health listener.
pub const METRICS: &str = "metrics";

/// Why the inherited descriptors cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{var}: {reason}")]
pub struct InheritError {
    /// The environment variable.
    pub var: &'static str,
    /// What is wrong.
    pub reason: String,
}

/// The listening sockets `supervise` owns and each generation inherits.
#[derive(Debug, Default)]
pub struct Sockets {
    /// The ext_proc Unix socket (`server.socket_path`).
    pub ext_proc_unix: Option<std::os::unix::net::UnixListener>,
    /// The ext_proc TCP listener.
    pub ext_proc_tcp: Option<std::net::TcpListener>,
    /// The metrics and health listener.
    pub metrics: Option<std::net::TcpListener>,
}

impl Sockets {
    /// The [`LISTEN_FDS_ENV`] value naming these sockets (what
    /// [`Inherited::take`] reads back), and their descriptors.
    pub fn listen_fds(&self) -> (String, Vec<RawFd>) {
        let named = [
            (EXT_PROC_UNIX, self.ext_proc_unix.as_ref().map(|l| l.as_raw_fd())),
            (EXT_PROC_TCP, self.ext_proc_tcp.as_ref().map(|l| l.as_raw_fd())),
            (METRICS, self.metrics.as_ref().map(|l| l.as_raw_fd())),
        ];
        let present: Vec<(&str, RawFd)> = named.iter().filter_map(|(n, fd)| fd.map(|fd| (*n, fd))).collect();
        let text = present
            .iter()
            .map(|(n, fd)| format!("{n}={fd}"))
            .collect::<Vec<_>>()
            .join(",");
        (text, present.into_iter().map(|(_, fd)| fd).collect())
    }
}

/// What a generation got from its parent.
#[derive(Debug, Default)]
pub struct Inherited {
    /// The listening sockets.
    pub sockets: Sockets,
    ready: Option<std::fs::File>,
}

/// An inherited descriptor `fd`, checked to be open and, when `socket`, a
/// socket (the readiness pipe is not).
fn inherited_fd(var: &'static str, name: &str, fd: RawFd, socket: bool) -> Result<OwnedFd, InheritError> {
    let err = |reason: String| InheritError { var, reason };
    if fd < 3 {
        return Err(err(format!("{name}={fd}: not an inherited descriptor")));
    }
    // SAFETY: fstat only writes into `st`; an fd that is not open fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(err(format!("{name}={fd}: {}", std::io::Error::last_os_error())));
    }
    if socket && st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(err(format!("{name}={fd}: not a socket")));
    }
    // SAFETY: the descriptor is open (fstat succeeded), was handed to this
    // process by its parent for this use, and is taken once (`take`).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn parse_fd(var: &'static str, name: &str, value: &str) -> Result<RawFd, InheritError> {
    value.trim().parse().map_err(|_| InheritError {
        var,
        reason: format!("{name}={value}: not a descriptor number"),
    })
}

impl Inherited {
    /// Takes the descriptors named in the environment; `None` when the
    /// kernel was not started by `supervise`. Call once, before anything
    /// else opens files.
    pub fn take() -> Result<Option<Self>, InheritError> {
        let Ok(list) = std::env::var(LISTEN_FDS_ENV) else {
            return Ok(None);
        };
        let mut out = Self::default();
        for pair in list.split(',').filter(|p| !p.is_empty()) {
            let (name, fd) = pair.split_once('=').ok_or_else(|| InheritError {
                var: LISTEN_FDS_ENV,
                reason: format!("{pair:?} is not NAME=FD"),
            })?;
            let fd = inherited_fd(LISTEN_FDS_ENV, name, parse_fd(LISTEN_FDS_ENV, name, fd)?, true)?;
            match name {
                EXT_PROC_UNIX => out.sockets.ext_proc_unix = Some(fd.into()),
                EXT_PROC_TCP => out.sockets.ext_proc_tcp = Some(fd.into()),
                METRICS => out.sockets.metrics = Some(fd.into()),
                other => {
                    return Err(InheritError {
                        var: LISTEN_FDS_ENV,
                        reason: format!("unknown listener name {other:?}"),
                    })
                }
            }
        }
        if let Ok(fd) = std::env::var(READY_FD_ENV) {
            let fd = inherited_fd(READY_FD_ENV, "ready", parse_fd(READY_FD_ENV, "ready", &fd)?, false)?;
            out.ready = Some(fd.into());
        }
        Ok(Some(out))
    }

    /// Tells the parent this generation serves (writes `ready` on the pipe
    /// and closes it). Later calls do nothing.
    pub fn notify_ready(&mut self) {
        if let Some(mut pipe) = self.ready.take() {
            if let Err(e) = pipe.write_all(b"ready\n") {
                tracing::warn!(error = %e, "cannot tell the supervising process this generation is ready");
            }
        }
    }
}

/// Longest wait of a new generation for its agents, before it serves.
pub const AGENT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Before a generation serves: health rounds, every 100 ms, of the agents
/// not yet healthy, until all are or `limit` has passed. The generation it
/// replaces serves meanwhile, so a health check that was slow once (a busy
/// host) does not make the new one answer `agent_unavailable_response`
/// until the next scheduled check. Returns the agents still unhealthy.
pub async fn wait_for_agents(kernel: &crate::kernel::Kernel, limit: std::time::Duration) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let snapshot = kernel.snapshot();
        let down: Vec<_> = snapshot.agents.iter().filter(|a| !a.is_healthy()).collect();
        if down.is_empty() || tokio::time::Instant::now() >= deadline {
            return down.iter().map(|a| a.name().to_string()).collect();
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let changed = futures::future::join_all(down.iter().map(|a| crate::registry::health::round(a))).await;
        if changed.into_iter().any(|c| c) {
            kernel.refresh();
        }
    }
}
