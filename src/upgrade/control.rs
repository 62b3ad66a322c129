//! The control socket of `policy-kernel supervise` and the `upgrade`
//! command that uses it. One line each way: the command sends `upgrade`,
//! the parent answers `ok: ...` once the new generation serves, or
//! `error: ...` (the running generation then keeps serving).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

/// The one request the socket takes.
pub const UPGRADE: &str = "upgrade";

/// Binds the control socket with mode 0600 (only the kernel's user may ask
/// for an upgrade). A stale socket is replaced; a live one, or another kind
/// of file, is an error.
pub async fn bind(path: &Path) -> anyhow::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    crate::server::clear_stale_socket(path)
        .await
        .with_context(|| format!("control socket {}", path.display()))?;
    let listener =
        UnixListener::bind(path).with_context(|| format!("binding the control socket {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("control socket {}", path.display()))?;
    Ok(listener)
}

/// Reads one request line from a control connection (at most 256 bytes,
/// within 5 s).
pub async fn read_request(conn: &mut UnixStream) -> Result<String, String> {
    let mut line = String::new();
    let mut reader = BufReader::new(tokio::io::AsyncReadExt::take(&mut *conn, 256));
    match tokio::time::timeout(Duration::from_secs(5), reader.read_line(&mut line)).await {
        Ok(Ok(_)) => Ok(line.trim().to_string()),
        Ok(Err(e)) => Err(format!("reading the request: {e}")),
        Err(_) => Err("no request line within 5 s".into()),
    }
}

/// Writes the answer line.
pub async fn reply(conn: &mut UnixStream, result: &Result<String, String>) {
    let line = match result {
        Ok(text) => format!("ok: {text}\n"),
        Err(text) => format!("error: {text}\n"),
    };
    let _ = conn.write_all(line.as_bytes()).await;
    let _ = conn.shutdown().await;
}

/// The `upgrade` command: asks the parent at `socket` for a new generation
/// and waits for its answer (at most `wait`). Returns the answer and
/// whether it is a success.
pub async fn request_upgrade(socket: &Path, wait: Duration) -> anyhow::Result<(String, bool)> {
    let mut conn = UnixStream::connect(socket).await.with_context(|| {
        format!(
            "connecting to the control socket {} (is `policy-kernel supervise` running?)",
            socket.display()
        )
    })?;
    conn.write_all(format!("{UPGRADE}\n").as_bytes()).await?;
    let mut line = String::new();
    tokio::time::timeout(wait, BufReader::new(conn).read_line(&mut line))
        .await
        .with_context(|| format!("no answer within {} ms", wait.as_millis()))??;
    let line = line.trim().to_string();
    if line.is_empty() {
        anyhow::bail!("the supervising process closed the connection without an answer");
    }
    let ok = line.starts_with("ok:");
    Ok((line, ok))
}

/// `policy-kernel upgrade`: the control socket is `socket`
/// (`--control-socket`), or the one the configuration at `config` names.
/// Prints the parent's answer; returns whether the upgrade happened.
pub fn command(socket: Option<PathBuf>, config: Option<&Path>) -> anyhow::Result<bool> {
    let (socket, wait) = match (socket, config) {
        (Some(s), _) => (s, Duration::from_secs(600)),
        (None, Some(p)) => {
            let cfg = crate::config::load(p)?;
            let g = &cfg.server.generations;
            let s = g
                .control_socket(cfg.server.socket_path.as_deref())
                .context("server.generations.control_socket is not set and there is no server.socket_path")?;
            (s, Duration::from_millis(g.ready_timeout_ms) + Duration::from_secs(10))
        }
        (None, None) => anyhow::bail!("give --control-socket=PATH or --config=PATH"),
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (text, ok) = rt.block_on(request_upgrade(&socket, wait))?;
    if ok {
        println!("{text}");
    } else {
        eprintln!("{text}");
    }
    Ok(ok)
}
