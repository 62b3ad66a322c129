//! Socket handling: stale sockets, live sockets, symlinks, other files,
//! permissions, directory creation and cleanup.

mod common;

use std::os::unix::fs::{FileTypeExt, PermissionsExt};

use common::*;
use policy_agents::{proto, AgentError, SocketError};

async fn serve_once(path: &std::path::Path) -> Result<(), AgentError> {
    probe_agent()
        .build()
        .unwrap()
        .serve_unix_with_shutdown(path, async {})
        .await
}

#[tokio::test]
async fn stale_socket_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists(), "a stale socket file stays behind");
    let agent = TestAgent::start_at(probe_agent(), dir, path).await;
    let health = agent.client().await.health_check(proto::HealthCheckRequest {}).await;
    assert!(health.is_ok());
    agent.stop().await.unwrap();
}

#[tokio::test]
async fn live_socket_is_not_stolen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.sock");
    let _live = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let err = serve_once(&path).await.unwrap_err();
    assert!(matches!(err, AgentError::Socket(SocketError::InUse(_))), "{err}");
    assert!(path.exists());
}

#[tokio::test]
async fn symlink_is_refused_and_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("precious");
    std::fs::write(&target, "keep me").unwrap();
    let path = dir.path().join("agent.sock");
    std::os::unix::fs::symlink(&target, &path).unwrap();
    let err = serve_once(&path).await.unwrap_err();
    assert!(matches!(err, AgentError::Socket(SocketError::Symlink(_))), "{err}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");
    assert!(std::fs::symlink_metadata(&path).unwrap().file_type().is_symlink());
}

#[tokio::test]
async fn dangling_symlink_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.sock");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &path).unwrap();
    let err = serve_once(&path).await.unwrap_err();
    assert!(matches!(err, AgentError::Socket(SocketError::Symlink(_))), "{err}");
    assert!(!dir.path().join("nowhere").exists());
}

#[tokio::test]
async fn regular_file_is_not_removed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.sock");
    std::fs::write(&path, "data").unwrap();
    let err = serve_once(&path).await.unwrap_err();
    assert!(matches!(err, AgentError::Socket(SocketError::NotASocket(_))), "{err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "data");
}

#[tokio::test]
async fn socket_mode_is_0660_by_default_and_configurable() {
    let agent = TestAgent::start(probe_agent()).await;
    let meta = std::fs::symlink_metadata(&agent.path).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    agent.stop().await.unwrap();

    let agent = TestAgent::start(probe_agent().socket_mode(0o600)).await;
    let mode = std::fs::metadata(&agent.path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    agent.stop().await.unwrap();
}

#[tokio::test]
async fn missing_directory_is_created_and_socket_removed_on_exit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run/agents/agent.sock");
    let agent = TestAgent::start_at(probe_agent(), dir, path.clone()).await;
    let parent = std::fs::metadata(path.parent().unwrap()).unwrap();
    assert_eq!(parent.permissions().mode() & 0o777, 0o750);
    let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, [std::ffi::OsString::from("agent.sock")], "no temp files");
    let _dir = agent.stop_keep_dir().await;
    assert!(!path.exists(), "socket removed on exit");
}
