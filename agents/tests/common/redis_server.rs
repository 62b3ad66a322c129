//! A private `redis-server` (Debian's) on a Unix socket in a temp dir, for
//! tests; killed by its pid when stopped or dropped. Shared by the agents'
//! tests and the workspace's end-to-end tests (`tests/support/mod.rs`
//! includes this file). Without `redis-server` on PATH it panics, asking
//! for `apt-get install redis-server`.

use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running (or stopped) redis-server.
pub struct Redis {
    child: Option<Child>,
    /// `redis+unix://<socket>`.
    pub url: String,
    socket: PathBuf,
    dir: tempfile::TempDir,
}

impl Redis {
    /// Starts a server with no persistence; returns once it accepts connections.
    pub fn start() -> Redis {
        if Command::new("redis-server").arg("--version").output().is_err() {
            panic!("redis-server is not on PATH; install it with `apt-get install redis-server`");
        }
        let dir = tempfile::Builder::new()
            .prefix("redis")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let socket = dir.path().join("redis.sock");
        let mut redis = Redis {
            child: None,
            url: format!("redis+unix://{}", socket.display()),
            socket,
            dir,
        };
        redis.restart();
        redis
    }

    /// Starts the server again on the same socket (empty: nothing is saved).
    pub fn restart(&mut self) {
        self.stop();
        let child = Command::new("redis-server")
            .args([
                "--port",
                "0",
                "--save",
                "",
                "--appendonly",
                "no",
                "--unixsocketperm",
                "700",
            ])
            .arg("--unixsocket")
            .arg(&self.socket)
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while UnixStream::connect(&self.socket).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not listen on {}",
                self.socket.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server (by its pid) and waits for it; its socket is gone after.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(&self.socket);
    }

    /// The output of `redis-cli ARGS` against this server, trimmed.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .arg("-s")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}
