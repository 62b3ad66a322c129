//! The `policy-kernel` binary: parses flags, loads the config, serves.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use policy_kernel::{config, kernel::Kernel, server, telemetry};

/// Envoy ext_proc sidecar that runs route policy chains on policy agents.
#[derive(Debug, Parser)]
#[command(name = "policy-kernel", version)]
struct Cli {
    /// Path of the kernel configuration (YAML).
    #[arg(long)]
    config: PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let cfg = config::load(&cli.config)?;
    telemetry::init_logging(&cfg.observability.log_level);
    let addr: SocketAddr = format!("{}:{}", cfg.server.address, cfg.server.port)
        .parse()
        .context("server.address")?;
    let socket = cfg.server.socket_path.clone();
    let listeners = server::Listeners::bind(addr, socket.as_deref()).await?;
    let bound = listeners.local_addr()?;
    let kernel = Kernel::start(cfg).await;
    tracing::info!(address = %bound, socket = ?socket, "policy kernel serving ext_proc");
    server::serve(kernel, listeners, shutdown_signal()).await?;
    tracing::info!("policy kernel stopped");
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
