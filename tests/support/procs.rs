//! Processes of the reliability suite: the kernel under supervisord as the
//! deployment runs it, and samples read from `/proc` (RSS, open fds).
//! Re-exported by [`super::load`].

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{KernelProc, Proc};

/// The kernel under supervisord (`chaos/supervisord-kernel.conf`), as the
/// deployment runs it. Dropping it shuts supervisord down with SIGTERM, which
/// stops the kernel (a SIGKILLed supervisord would leave it running).
pub struct Supervised {
    pub supervisord: Proc,
    conf: PathBuf,
    kernel_socket: PathBuf,
}

/// `supervisord` of the project venv, when installed and selected with
/// `CHAOS_SUPERVISORD=1` (what `make chaos` does).
pub fn supervisord_bin() -> Option<PathBuf> {
    if !std::env::var("CHAOS_SUPERVISORD").is_ok_and(|v| v == "1") {
        return None;
    }
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/supervisord");
    assert!(
        bin.exists(),
        "CHAOS_SUPERVISORD=1 but {} is missing: .venv/bin/pip install supervisor",
        bin.display()
    );
    Some(bin)
}

impl Supervised {
    /// Hands the kernel over to supervisord: the harness' kernel process is
    /// SIGKILLed (its socket stays behind) and supervisord starts the same
    /// binary on the same configuration and log.
    pub fn take_over(bin: &Path, dir: &Path, k: &mut KernelProc) -> Self {
        k.proc.kill();
        let conf = Path::new(env!("CARGO_MANIFEST_DIR")).join("chaos/supervisord-kernel.conf");
        let mut cmd = Command::new(bin);
        cmd.arg("-c")
            .arg(&conf)
            .env("CHAOS_DIR", dir)
            .env("CHAOS_KERNEL_BIN", env!("CARGO_BIN_EXE_policy-kernel"))
            .env("CHAOS_KERNEL_CONFIG", &k.config)
            .env("CHAOS_KERNEL_LOG", &k.log);
        let supervisord = Proc::spawn("supervisord", &mut cmd, &dir.join("supervisord.out"));
        let s = Self {
            supervisord,
            conf,
            kernel_socket: k.socket.clone(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while s.kernel_pid().is_none() || std::os::unix::net::UnixStream::connect(&s.kernel_socket).is_err() {
            assert!(
                Instant::now() < deadline,
                "supervisord did not start the kernel:\n{}",
                k.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    }

    fn ctl(&self, args: &[&str]) -> String {
        let ctl = self.supervisord_bin_dir().join("supervisorctl");
        let dir = self.kernel_socket.parent().unwrap_or(Path::new("/tmp"));
        Command::new(ctl)
            .arg("-c")
            .arg(&self.conf)
            .args(args)
            .env("CHAOS_DIR", dir)
            .env("CHAOS_KERNEL_BIN", env!("CARGO_BIN_EXE_policy-kernel"))
            .env("CHAOS_KERNEL_CONFIG", "-")
            .env("CHAOS_KERNEL_LOG", "-")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    }

    fn supervisord_bin_dir(&self) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin")
    }

    /// The kernel's pid as supervisord reports it (None while it is down).
    pub fn kernel_pid(&self) -> Option<u32> {
        self.ctl(&["pid", "policy-kernel"]).parse().ok().filter(|p| *p > 0)
    }

    /// SIGKILLs the kernel and waits until supervisord has started a new
    /// one that accepts on the socket. Returns when the kill happened (from
    /// `t0`), whether the new kernel had to replace the dead one's socket
    /// file, and how long until it listened.
    pub fn kill_kernel(&self, t0: Instant) -> (Duration, bool, Duration) {
        let old = self.kernel_pid().expect("kernel running under supervisord");
        let before = socket_inode(&self.kernel_socket);
        let _ = Command::new("kill").args(["-KILL", &old.to_string()]).status();
        let killed = Instant::now();
        let deadline = killed + Duration::from_secs(30);
        // Listening again on a new socket file: the dead kernel's file was
        // left behind (SIGKILL) and the new kernel removed and re-bound it.
        loop {
            let now = socket_inode(&self.kernel_socket);
            if now.is_some() && now != before && std::os::unix::net::UnixStream::connect(&self.kernel_socket).is_ok() {
                return (killed.duration_since(t0), before.is_some(), killed.elapsed());
            }
            assert!(Instant::now() < deadline, "supervisord did not restart the kernel");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Identity of a file: inode and change time (inodes are reused at once,
/// so the time tells a re-created socket from the old one).
pub fn socket_inode(path: &Path) -> Option<(u64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.ino(), m.ctime(), m.ctime_nsec()))
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.supervisord.signal("TERM");
        let deadline = Instant::now() + Duration::from_secs(15);
        while matches!(self.supervisord.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Resident memory of a process, bytes (0 when gone).
pub fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

/// Open file descriptors of a process (0 when gone).
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// MiB, for printing.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Samples a process' RSS every `every` in a thread until stopped; the
/// maximum seen.
pub struct RssWatch {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl RssWatch {
    pub fn start(pid: u32, every: Duration) -> Self {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut max = 0;
            while !s.load(std::sync::atomic::Ordering::Acquire) {
                max = max.max(rss_bytes(pid));
                std::thread::sleep(every);
            }
            max.max(rss_bytes(pid))
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops sampling; the largest RSS seen.
    pub fn max(mut self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or(0)
    }
}
