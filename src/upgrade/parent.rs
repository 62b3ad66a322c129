//! `policy-kernel supervise`: owns the listening sockets and runs the kernel
//! as numbered child generations (see the [module design](super)).

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::io::AsyncReadExt;
use tokio::net::UnixListener;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;

use super::inherit::Sockets;
use super::{control, GENERATION_ENV, LISTEN_FDS_ENV, READY_FD_ENV};
use crate::config::{self, KernelConfig};
use crate::server;

/// Longest pause between starts of a generation that keeps dying.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// First pause when a generation dies again soon after it started.
const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// A generation that served this long before dying counts as a first death
/// (replaced at once) again.
const STABLE: Duration = Duration::from_secs(2);

/// One running kernel process.
struct Generation {
    number: u64,
    pid: i32,
    started: Instant,
    /// Its exit status, once it has exited (and been reaped).
    exit: watch::Receiver<Option<String>>,
}

impl Generation {
    /// Sends `sig` unless it has exited.
    fn signal(&self, sig: libc::c_int) {
        if self.exit.borrow().is_none() {
            // SAFETY: kill has no memory-safety preconditions; the pid is
            // our child's and not yet reaped (its exit is not recorded).
            unsafe { libc::kill(self.pid, sig) };
        }
    }

    fn exited(&self) -> bool {
        self.exit.borrow().is_some()
    }

    /// Waits for its exit; returns the status.
    async fn wait(&mut self) -> String {
        loop {
            if let Some(status) = self.exit.borrow_and_update().clone() {
                return status;
            }
            if self.exit.changed().await.is_err() {
                return self.exit.borrow().clone().unwrap_or_else(|| "unknown status".into());
            }
        }
    }
}

/// The supervising process.
struct Parent {
    config_path: PathBuf,
    /// The kernel binary: the path this process was started with, so that a
    /// new file there is what the next generation runs.
    binary: PathBuf,
    sockets: Sockets,
    socket_path: Option<PathBuf>,
    control_path: PathBuf,
    control: UnixListener,
    drain_timeout: Duration,
    next: u64,
    /// The generation serving; `None` while one is being restarted.
    current: Option<Generation>,
    /// Generations told to drain, until they exit.
    draining: Vec<Generation>,
    backoff: Duration,
    /// Deaths in a row of generations that served less than [`STABLE`].
    quick_deaths: u32,
    retry_at: Instant,
}

/// Runs `policy-kernel supervise --config=PATH` until SIGTERM/SIGINT.
pub fn run(config_path: &Path) -> anyhow::Result<()> {
    let cfg = config::load(config_path)?;
    crate::telemetry::init_logging(&cfg.observability.log_level);
    // One thread: children are started from it, and PR_SET_PDEATHSIG
    // follows the thread that started them.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let result = rt.block_on(supervise(config_path.to_path_buf(), cfg));
    if let Err(e) = &result {
        tracing::error!(error = %format!("{e:#}"), "supervise stopped");
    }
    crate::telemetry::stdout::output().flush(Duration::from_secs(1));
    result
}

async fn supervise(config_path: PathBuf, cfg: KernelConfig) -> anyhow::Result<()> {
    if cfg.management.as_ref().is_some_and(|m| m.listen.is_some()) {
        anyhow::bail!(
            "policy_kernel.management.listen: two generations cannot share a TCP management listener during an upgrade; under `supervise` use management.socket"
        );
    }
    let server = &cfg.server;
    let control_path = server
        .generations
        .control_socket(server.socket_path.as_deref())
        .context("policy_kernel.server.generations.control_socket: required when server.socket_path is not set")?;
    let binary = std::env::args_os()
        .next()
        .map(PathBuf::from)
        .context("the path of the policy-kernel binary (argv[0]) is missing")?;
    // Signals first: none may be lost once children run.
    let mut sig = Signals::new()?;
    let listeners = server::Listeners::bind(server.tcp_addr(), server.socket_path.as_deref()).await?;
    let (ext_proc_unix, ext_proc_tcp) = listeners.into_std()?;
    let o = &cfg.observability;
    let metrics = if o.metrics_port != 0 {
        let addr: SocketAddr = format!("{}:{}", o.metrics_address, o.metrics_port)
            .parse()
            .context("observability.metrics_address")?;
        Some(std::net::TcpListener::bind(addr).with_context(|| format!("binding the metrics port {addr}"))?)
    } else {
        None
    };
    let control = control::bind(&control_path).await?;
    let mut p = Parent {
        config_path,
        binary,
        sockets: Sockets {
            ext_proc_unix,
            ext_proc_tcp,
            metrics,
        },
        socket_path: server.socket_path.clone(),
        control_path,
        control,
        drain_timeout: Duration::from_millis(server.drain_timeout_ms),
        next: 1,
        current: None,
        draining: Vec::new(),
        backoff: Duration::ZERO,
        quick_deaths: 0,
        retry_at: Instant::now(),
    };
    match p.start_generation().await {
        Ok(g) => {
            tracing::info!(generation = g.number, pid = g.pid, control_socket = %p.control_path.display(),
                "supervising: generation serving");
            p.current = Some(g);
        }
        Err(e) => {
            p.remove_files();
            anyhow::bail!("{e}");
        }
    }
    p.serve(&mut sig).await;
    p.shutdown(&mut sig).await;
    Ok(())
}

struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
    usr2: Signal,
}

impl Signals {
    fn new() -> std::io::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
            usr2: signal(SignalKind::user_defined2())?,
        })
    }
}

async fn exit_of(g: &mut Option<Generation>) -> String {
    match g {
        Some(g) => g.wait().await,
        None => std::future::pending().await,
    }
}

impl Parent {
    /// Handles upgrades, deaths and reloads until SIGTERM/SIGINT.
    async fn serve(&mut self, sig: &mut Signals) {
        loop {
            tokio::select! {
                status = exit_of(&mut self.current) => self.died(status),
                _ = tokio::time::sleep_until(self.retry_at.into()), if self.current.is_none() => self.restart().await,
                _ = sig.usr2.recv() => {
                    let _ = self.upgrade().await;
                }
                conn = self.control.accept() => {
                    if let Ok((mut conn, _)) = conn {
                        let result = match control::read_request(&mut conn).await {
                            Ok(req) if req == control::UPGRADE => self.upgrade().await,
                            Ok(other) => Err(format!("unknown request {other:?}: the control socket takes `{}`", control::UPGRADE)),
                            Err(e) => Err(e),
                        };
                        control::reply(&mut conn, &result).await;
                    }
                }
                _ = sig.hup.recv() => {
                    if let Some(g) = &self.current {
                        tracing::info!(generation = g.number, "SIGHUP passed to the serving generation");
                        g.signal(libc::SIGHUP);
                    }
                }
                _ = sig.term.recv() => return,
                _ = sig.int.recv() => return,
            }
            self.draining.retain(|g| !g.exited());
        }
    }

    /// The serving generation exited on its own: it is replaced at once, or
    /// after a growing pause when it keeps dying.
    fn died(&mut self, status: String) {
        let Some(g) = self.current.take() else { return };
        let lived = g.started.elapsed();
        // The first death is answered at once; a generation that dies again
        // within STABLE of its start waits 100 ms, then twice that, up to 5 s.
        self.quick_deaths = if lived >= STABLE { 1 } else { self.quick_deaths + 1 };
        self.backoff = backoff(self.quick_deaths);
        tracing::error!(generation = g.number, pid = g.pid, status = %status, lived_ms = lived.as_millis() as u64,
            restart_in_ms = self.backoff.as_millis() as u64,
            "generation exited; the listening sockets stay open and a new generation is started");
        self.retry_at = Instant::now() + self.backoff;
    }

    async fn restart(&mut self) {
        match self.start_generation().await {
            Ok(g) => {
                tracing::info!(generation = g.number, pid = g.pid, "generation serving after a restart");
                self.current = Some(g);
            }
            Err(e) => {
                self.backoff = (self.backoff * 2).clamp(MIN_BACKOFF, MAX_BACKOFF);
                self.retry_at = Instant::now() + self.backoff;
                tracing::error!(error = %e, retry_in_ms = self.backoff.as_millis() as u64, "generation did not start");
            }
        }
    }

    /// Starts the next generation; once it is ready, the serving one drains.
    async fn upgrade(&mut self) -> Result<String, String> {
        tracing::info!("upgrade: starting a new generation");
        let next = match self.start_generation().await {
            Ok(g) => g,
            Err(e) => {
                tracing::error!(error = %e, "upgrade abandoned: the serving generation keeps serving");
                return Err(e);
            }
        };
        let serving = format!("generation {} (pid {}) serving", next.number, next.pid);
        let text = match self.current.replace(next) {
            Some(old) => {
                old.signal(libc::SIGTERM);
                let text = format!("{serving}; generation {} (pid {}) draining", old.number, old.pid);
                self.draining.push(old);
                text
            }
            None => serving,
        };
        tracing::info!(result = %text, "upgrade done");
        Ok(text)
    }

    /// Starts a generation and waits until it is ready; kills it when it is
    /// not within `server.generations.ready_timeout_ms`.
    async fn start_generation(&mut self) -> Result<Generation, String> {
        let cfg = config::load(&self.config_path).map_err(|e| e.to_string())?;
        let timeout = Duration::from_millis(cfg.server.generations.ready_timeout_ms);
        let number = self.next;
        self.next += 1;
        let (mut g, ready) = self
            .spawn(number)
            .map_err(|e| format!("starting generation {number} ({}): {e}", self.binary.display()))?;
        match wait_ready(ready, &mut g, timeout).await {
            Ok(()) => Ok(g),
            Err(e) => {
                g.signal(libc::SIGKILL);
                Err(e)
            }
        }
    }

    fn spawn(&self, number: u64) -> std::io::Result<(Generation, OwnedFd)> {
        let (read, write) = pipe()?;
        let (list, mut fds) = self.sockets.listen_fds();
        fds.push(write.as_raw_fd());
        let mut cmd = tokio::process::Command::new(&self.binary);
        cmd.arg(format!("--config={}", self.config_path.display()))
            .env(LISTEN_FDS_ENV, list)
            .env(READY_FD_ENV, write.as_raw_fd().to_string())
            .env(GENERATION_ENV, number.to_string());
        // SAFETY: getpid before the fork; the closure runs in the child
        // between fork and exec and only calls async-signal-safe functions
        // (fcntl, prctl, getppid, _exit) on data it owns.
        let parent = unsafe { libc::getpid() };
        unsafe {
            cmd.pre_exec(move || {
                for &fd in &fds {
                    // The inherited descriptors survive exec.
                    if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        drop(write);
        let pid = child.id().map_or(0, |p| p as i32);
        let (tx, rx) = watch::channel(None);
        tokio::spawn(async move {
            let status = match child.wait().await {
                Ok(s) => s.to_string(),
                Err(e) => format!("wait failed: {e}"),
            };
            tracing::info!(generation = number, pid, status = %status, "generation exited");
            let _ = tx.send(Some(status));
        });
        tracing::info!(generation = number, pid, "generation started");
        Ok((
            Generation {
                number,
                pid,
                started: Instant::now(),
                exit: rx,
            },
            read,
        ))
    }

    /// SIGTERM to every generation, which drain; SIGKILL after the drain
    /// timeout (plus 5 s) or on a second signal.
    async fn shutdown(mut self, sig: &mut Signals) {
        let mut all: Vec<Generation> = self.current.take().into_iter().chain(self.draining.drain(..)).collect();
        tracing::info!(generations = all.len(), "stopping: every generation drains");
        for g in &all {
            g.signal(libc::SIGTERM);
        }
        let limit = self.drain_timeout + Duration::from_secs(5);
        tokio::select! {
            _ = async { for g in all.iter_mut() { g.wait().await; } } => {}
            _ = sig.term.recv() => tracing::warn!("second signal: killing every generation"),
            _ = sig.int.recv() => tracing::warn!("second signal: killing every generation"),
            _ = tokio::time::sleep(limit) => tracing::warn!(limit_ms = limit.as_millis() as u64, "generations still running: killed"),
        }
        for g in &all {
            g.signal(libc::SIGKILL);
        }
        for g in all.iter_mut() {
            let _ = tokio::time::timeout(Duration::from_secs(2), g.wait()).await;
        }
        self.remove_files();
        tracing::info!("supervise stopped");
    }

    fn remove_files(&self) {
        if let Some(p) = &self.socket_path {
            let _ = std::fs::remove_file(p);
        }
        let _ = std::fs::remove_file(&self.control_path);
    }
}

/// The pause before the next generation after `quick_deaths` deaths in a
/// row: none after the first, then 100 ms doubling up to [`MAX_BACKOFF`].
fn backoff(quick_deaths: u32) -> Duration {
    match quick_deaths {
        0 | 1 => Duration::ZERO,
        n => (MIN_BACKOFF * 2u32.saturating_pow(n.min(16) - 2)).min(MAX_BACKOFF),
    }
}

/// A pipe whose ends close on exec (the child's end is kept open by
/// `spawn`'s pre-exec step).
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned here only.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Waits for `ready` on the pipe, the generation's exit or the timeout.
async fn wait_ready(read: OwnedFd, g: &mut Generation, timeout: Duration) -> Result<(), String> {
    let mut rx = tokio::net::unix::pipe::Receiver::from_owned_fd(read)
        .map_err(|e| format!("generation {}: readiness pipe: {e}", g.number))?;
    let mut buf = Vec::new();
    match tokio::time::timeout(timeout, rx.read_to_end(&mut buf)).await {
        Ok(Ok(_)) if buf.starts_with(b"ready") => Ok(()),
        Ok(Ok(_)) => {
            let status = tokio::time::timeout(Duration::from_secs(2), g.wait())
                .await
                .unwrap_or_else(|_| "still running".into());
            Err(format!(
                "generation {} (pid {}) stopped before it was ready ({status}); see its log",
                g.number, g.pid
            ))
        }
        Ok(Err(e)) => Err(format!("generation {}: readiness pipe: {e}", g.number)),
        Err(_) => Err(format!(
            "generation {} (pid {}) not ready within {} ms (server.generations.ready_timeout_ms)",
            g.number,
            g.pid,
            timeout.as_millis()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_death_is_answered_at_once_then_the_pause_doubles_up_to_5_s() {
        let ms = |n| backoff(n).as_millis();
        assert_eq!([ms(0), ms(1), ms(2), ms(3), ms(4)], [0, 0, 100, 200, 400]);
        assert_eq!(ms(7), 3200);
        assert_eq!(ms(8), 5000);
        assert_eq!(ms(u32::MAX), 5000);
    }

    #[test]
    fn listen_fds_name_each_inherited_socket() {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let fd = tcp.as_raw_fd();
        let sockets = Sockets {
            ext_proc_unix: None,
            ext_proc_tcp: None,
            metrics: Some(tcp),
        };
        assert_eq!(sockets.listen_fds(), (format!("metrics={fd}"), vec![fd]));
    }
}
