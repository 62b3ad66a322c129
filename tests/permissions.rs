//! Socket permissions, tested as unprivileged users (root connects to any
//! socket, so a root test would prove nothing). Needs root to create the two
//! test users and drop to them with `setpriv`; CI runs as root.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const KERNEL_USER: &str = "pk-kernel";
const OTHER_USER: &str = "pk-other";

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0"))
        .unwrap_or(false)
}

fn ensure_user(name: &str) {
    let exists = Command::new("id")
        .arg(name)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !exists {
        let status = Command::new("useradd")
            .args(["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name])
            .status()
            .expect("useradd");
        assert!(status.success(), "useradd {name} failed");
    }
}

fn as_user(user: &str, program: &str) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid", user, "--regid", user, "--clear-groups", "--"])
        .arg(program);
    cmd
}

/// Connects to `socket` as `user`: `Ok(())`, or `Err(errno)` of the failure.
fn connect_as(user: &str, socket: &Path) -> Result<(), i32> {
    let script = format!(
        "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect({:?})\nexcept OSError as e:\n    sys.exit(100 + e.errno)",
        socket.to_str().unwrap()
    );
    // The system python: other users cannot run the one under /root.
    let status = as_user(user, "/usr/bin/python3")
        .args(["-c", &script])
        .status()
        .expect("python3");
    match status.code() {
        Some(0) => Ok(()),
        Some(c) if c > 100 => Err(c - 100),
        other => panic!("the connect probe itself failed as {user}: {other:?}"),
    }
}

fn chown(path: &Path, user: &str) {
    assert!(Command::new("chown")
        .arg(format!("{user}:{user}"))
        .arg(path)
        .status()
        .expect("chown")
        .success());
}

/// A kernel child killed on drop, so a failed assertion leaves nothing running.
struct Kernel(Child);

impl Drop for Kernel {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_kernel(dir: &Path, socket: &Path) -> Child {
    let config = dir.join("kernel.yaml");
    std::fs::write(
        &config,
        format!(
            "policy_kernel:\n  server:\n    port: 0\n    socket_path: {}\n  observability:\n    metrics_port: 0\n",
            socket.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    as_user(KERNEL_USER, env!("CARGO_BIN_EXE_policy-kernel"))
        .arg(format!("--config={}", config.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kernel")
}

#[test]
fn kernel_socket_is_private_to_its_user_and_group() {
    if !is_root() {
        eprintln!("NOT RUN: needs root to create the test users {KERNEL_USER} and {OTHER_USER} (CI runs as root)");
        return;
    }
    ensure_user(KERNEL_USER);
    ensure_user(OTHER_USER);
    let base = tempfile::Builder::new().prefix("pkperm").tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    chown(base.path(), KERNEL_USER);

    // The kernel creates the missing socket directory 0750 and the socket 0660.
    let socket = base.path().join("sockets/kernel.sock");
    let mut kernel = Kernel(start_kernel(base.path(), &socket));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        if let Ok(Some(status)) = kernel.0.try_wait() {
            panic!("kernel exited {status}");
        }
        assert!(Instant::now() < deadline, "no socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    let dir_meta = std::fs::metadata(socket.parent().unwrap()).unwrap();
    let sock_meta = std::fs::metadata(&socket).unwrap();
    assert_eq!(dir_meta.mode() & 0o7777, 0o750, "socket directory mode");
    assert_eq!(sock_meta.mode() & 0o7777, 0o660, "socket mode");
    assert_eq!(
        connect_as(KERNEL_USER, &socket),
        Ok(()),
        "the kernel's own user must connect"
    );
    assert_eq!(connect_as(OTHER_USER, &socket), Err(13), "another user must get EACCES");
    drop(kernel);

    // A world-writable socket directory is refused.
    let open = base.path().join("open");
    std::fs::create_dir(&open).unwrap();
    chown(&open, KERNEL_USER);
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let refused = start_kernel(base.path(), &open.join("kernel.sock"));
    let out = refused.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "kernel started with a world-writable socket directory"
    );
    assert!(text.contains("world-writable"), "{text}");
    assert!(!open.join("kernel.sock").exists());
}
