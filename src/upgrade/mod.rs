//! Restarts and upgrades that fail no request: `policy-kernel supervise`.
//!
//! # Design
//!
//! Envoy's hot restart keeps a small parent (`hot-restarter.py`) that owns
//! nothing but starts generations of Envoy, which hand their listeners to
//! each other. The kernel does the same with one difference: the parent also
//! **owns the listening sockets**, so that no generation ever binds or
//! removes them and a crash never leaves the socket without a listener.
//!
//! - `policy-kernel supervise --config=PATH` ([`parent`]) binds the ext_proc
//!   Unix socket (`server.socket_path`), the optional ext_proc TCP listener
//!   and the metrics/health listener (`observability.metrics_*`), then runs
//!   the kernel as a child process, a *generation*, numbered from 1. The
//!   child gets the listening sockets as inherited file descriptors (named in
//!   the `POLICY_KERNEL_LISTEN_FDS` environment variable, like systemd's
//!   `LISTEN_FDS`/`LISTEN_FDNAMES`) and a pipe on which it writes `ready`
//!   once its routes are loaded and it serves ([`inherit`]). The supervised
//!   pid (supervisord's, the container's) is the parent's and never changes.
//! - `policy-kernel upgrade` ([`control`]), or SIGUSR2 to the parent, starts
//!   generation N+1 on the same sockets (the binary at the path the parent was
//!   started with, read again, and the configuration file read again). Once
//!   N+1 is ready, N gets SIGTERM: it stops accepting connections and ends
//!   each of its HTTP/2 connections with GOAWAY, lets the streams in flight
//!   finish (at most `server.drain_timeout_ms`) and exits. Envoy opens new
//!   connections for new requests; they wait in the listening socket's
//!   backlog until N+1 accepts them. If N+1 does not become ready within
//!   `server.generations.ready_timeout_ms` (or exits first), it is killed and
//!   N keeps serving: the command reports the error.
//! - A generation that dies (crash, SIGKILL, OOM kill) is replaced at once
//!   (then, while generations keep dying within 2 s of their start, after
//!   100 ms, doubling up to 5 s). The listening
//!   socket stays open in the parent the whole time, so Envoy's connection
//!   attempts queue in the backlog instead of being refused, and are served
//!   when the new generation starts: only the streams in flight on the dead
//!   generation fail.
//! - SIGHUP to the parent is passed to the serving generation (reload);
//!   SIGTERM/SIGINT drains every generation and exits.
//! - A generation dies with its parent (`PR_SET_PDEATHSIG`): a parent killed
//!   by its supervisor never leaves a kernel serving on an orphaned socket.
//! - Each generation's number may be shown per request
//!   (`server.generations.header`, [`tag`]).

pub mod control;
pub mod inherit;
pub mod parent;
pub mod tag;

/// Environment variable naming the inherited listening sockets:
/// `NAME=FD` pairs separated by commas, NAME one of [`inherit::EXT_PROC_UNIX`],
/// [`inherit::EXT_PROC_TCP`], [`inherit::METRICS`].
pub const LISTEN_FDS_ENV: &str = "POLICY_KERNEL_LISTEN_FDS";
/// Environment variable with the write end of the readiness pipe.
pub const READY_FD_ENV: &str = "POLICY_KERNEL_READY_FD";
/// Environment variable with the generation's number.
pub const GENERATION_ENV: &str = "POLICY_KERNEL_GENERATION";

/// This process's generation: the number `supervise` gave it, 0 when the
/// kernel runs on its own.
pub fn generation() -> u64 {
    static GENERATION: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *GENERATION.get_or_init(|| {
        std::env::var(GENERATION_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    })
}
