//! The management API's Unix socket: created 0600 (0660 with `socket_gid`),
//! and served only to the kernel's uid and `allowed_uids` (SO_PEERCRED).
//! The clients are `curl` run as two unprivileged users (`setpriv`), both
//! in the socket's group, only one of them allowed.

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;
use std::time::Duration;

use support::management::{section, READ};
use support::*;

const GID: u32 = 4242;

/// `curl` on the socket as `uid`/`gid`: (curl's exit code, status line and body).
fn curl_as(uid: u32, gid: u32, socket: &std::path::Path) -> (i32, String) {
    let out = Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg("--clear-groups")
        .args(["curl", "-s", "-w", "\n%{http_code}", "--unix-socket"])
        .arg(socket)
        .args([
            "-H",
            &format!("Authorization: Bearer {READ}"),
            "http://kernel/v1/config",
        ])
        .output()
        .expect("run setpriv curl (needs root, setpriv and curl)");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_allowed_uids_are_served_on_the_socket() {
    let dir = workdir();
    // The unprivileged clients must reach the socket inside the directory.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let socket = dir.path().join("mgmt.sock");
    let mgmt = section(
        dir.path(),
        &format!(
            "    socket: {}\n    socket_gid: {GID}\n    allowed_uids: [65534]\n",
            socket.display()
        ),
    );
    let kernel = KernelProc::start(dir.path(), &mgmt);
    wait_socket(&socket, Duration::from_secs(10));
    let meta = std::fs::metadata(&socket).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    assert_eq!(meta.gid(), GID);

    let (code, out) = curl_as(65534, GID, &socket);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.ends_with("\n200") && out.contains("\"version\""),
        "allowed uid: {out}"
    );

    let (code, out) = curl_as(65533, GID, &socket);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.ends_with("\n403") && out.contains("uid_not_allowed"),
        "other uid: {out}"
    );
    assert!(kernel.log_has("peer uid not allowed"), "{}", kernel.log());

    // Outside the socket's group the file mode already stops the client.
    let (code, out) = curl_as(65534, 65534, &socket);
    assert_eq!(code, 7, "connect refused by the file mode: {out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_socket_is_0600_without_a_group() {
    let dir = workdir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let socket = dir.path().join("mgmt.sock");
    let mgmt = section(
        dir.path(),
        &format!("    socket: {}\n    allowed_uids: [65534]\n", socket.display()),
    );
    let _kernel = KernelProc::start(dir.path(), &mgmt);
    wait_socket(&socket, Duration::from_secs(10));
    assert_eq!(std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777, 0o600);
    let (code, out) = curl_as(65534, 65534, &socket);
    assert_eq!(code, 7, "{out}");
}
