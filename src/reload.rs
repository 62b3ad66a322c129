//! Configuration reload (spec §11): SIGHUP re-reads the file and applies it
//! through [`Kernel::apply`], the one entry point a future management API
//! will also use (with [`ApplyMode::Strict`]).
//!
//! A file that does not load (YAML, unknown keys, structural errors) is
//! rejected: the old configuration stays in force, the error is logged and
//! `policy_kernel_config_reload_total{status="failure"}` counts it. SIGHUPs
//! that arrive while a reload runs coalesce into one more reload, which
//! reads the file's latest contents.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::Notify;

use crate::config;
use crate::kernel::{ApplyMode, Kernel};
use crate::telemetry::metrics::metrics;

/// Reloads `path` into `kernel` once; returns the new version.
pub async fn reload_file(kernel: &Arc<Kernel>, path: &std::path::Path) -> Option<u64> {
    let result = match config::load(path) {
        Ok(cfg) => kernel
            .apply(cfg, ApplyMode::Permissive)
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    match result {
        Ok(version) => {
            metrics().reloads.with_label_values(&["success"]).inc();
            tracing::info!(version, path = %path.display(), "configuration reloaded");
            Some(version)
        }
        Err(error) => {
            metrics().reloads.with_label_values(&["failure"]).inc();
            tracing::error!(%error, path = %path.display(), "configuration reload rejected; the previous configuration stays in force");
            None
        }
    }
}

/// The SIGHUP handler, installed now: call it before anything is bound, so
/// that a SIGHUP sent once the kernel is reachable reloads it (kept until
/// [`spawn_sighup`] runs) instead of ending it (the signal's default).
pub fn hangup() -> std::io::Result<Signal> {
    signal(SignalKind::hangup())
}

/// Spawns the SIGHUP listener (on `hup`, from [`hangup`]) and the reload
/// worker. With the management API on, a reload goes through it: the file,
/// with the persisted API changes on top.
pub fn spawn_sighup(
    mut hup: Signal,
    kernel: Arc<Kernel>,
    path: PathBuf,
    management: Option<Arc<crate::management::Management>>,
) -> std::io::Result<()> {
    let pending = Arc::new(Notify::new());
    let worker = Arc::clone(&pending);
    tokio::spawn(async move {
        loop {
            worker.notified().await;
            match &management {
                Some(m) => m.reload_file().await,
                None => reload_file(&kernel, &path).await,
            };
        }
    });
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            // At most one stored permit: a burst becomes one more reload.
            pending.notify_one();
        }
    });
    Ok(())
}
