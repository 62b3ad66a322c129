//! The `policy-kernel` binary: parses flags and wires the library together.
//!
//! - `policy-kernel --config=PATH` serves ext_proc until SIGTERM/SIGINT, then
//!   drains (a second signal exits at once); SIGHUP reloads the file.
//! - `policy-kernel validate --config=PATH [--check-agents]` checks a file and
//!   prints its route table, like `nginx -t`.
//! - `policy-kernel supervise --config=PATH` owns the listening sockets and
//!   runs the kernel as child generations; `policy-kernel upgrade` (or
//!   SIGUSR2 to it) replaces the serving generation without failing a
//!   request (`policy_kernel::upgrade`).
//! - `policy-kernel config (--addr HOST:PORT | --socket PATH) SUBCOMMAND`
//!   talks to a running kernel's management API; the token comes from
//!   `--token-file` or the `POLICY_KERNEL_TOKEN` environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use policy_kernel::management::{self, client};
use policy_kernel::upgrade::{self, control, inherit::Inherited};
use policy_kernel::{admin::Admin, config, kernel::Kernel, reload, server, telemetry, validate};
use tokio::signal::unix::{signal, SignalKind};

// mimalloc: the request path allocates many small, short-lived buffers (gRPC
// frames, protobuf messages); glibc malloc spent about 18% of the kernel's
// CPU on them (benches/RESULTS.md, "mimalloc").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Envoy ext_proc sidecar that runs route policy chains on policy agents.
#[derive(Debug, Parser)]
#[command(name = "policy-kernel", version)]
struct Cli {
    /// Path of the kernel configuration (YAML).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check the configuration, print the route table, exit non-zero on errors.
    Validate {
        /// Also contact the agents and plan every route against them.
        #[arg(long)]
        check_agents: bool,
    },
    /// Own the listening sockets and run the kernel as child generations
    /// (upgrades and restarts that fail no request).
    Supervise,
    /// Ask `supervise` to start a new generation and drain the serving one;
    /// prints the result, exits non-zero when the upgrade did not happen.
    Upgrade {
        /// The control socket (default: from --config,
        /// `server.generations.control_socket`).
        #[arg(long)]
        control_socket: Option<PathBuf>,
    },
    /// Read or change the routes of a running kernel through its management API.
    Config {
        /// `HOST:PORT` of `management.listen`.
        #[arg(long)]
        addr: Option<String>,
        /// Path of `management.socket`.
        #[arg(long)]
        socket: Option<PathBuf>,
        /// File holding the bearer token (else `POLICY_KERNEL_TOKEN`).
        #[arg(long)]
        token_file: Option<PathBuf>,
        /// Version for If-Match on writes (default: the current one, read first).
        #[arg(long)]
        if_match: Option<u64>,
        #[command(subcommand)]
        action: ConfigAction,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigAction {
    /// Print the version and the effective configuration.
    Get,
    /// Create or replace the route in FILE (YAML or JSON).
    PutRoute {
        /// The route file.
        file: PathBuf,
    },
    /// Remove a route.
    DeleteRoute {
        /// The route name.
        name: String,
    },
    /// Dry-run a route file, or a kernel file's routes; nothing changes.
    Validate {
        /// The file.
        file: PathBuf,
    },
    /// List the stored versions.
    Versions,
    /// Restore the routes of version N.
    Rollback {
        /// The version.
        version: u64,
    },
    /// Show the routes that differ between versions N and M.
    Diff {
        /// The older version.
        from: u64,
        /// The newer version.
        to: u64,
    },
}

fn token(file: Option<&std::path::Path>) -> anyhow::Result<String> {
    let token = match file {
        Some(f) => std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?,
        None => std::env::var("POLICY_KERNEL_TOKEN").context("give --token-file or set POLICY_KERNEL_TOKEN")?,
    };
    Ok(token.trim().to_string())
}

fn config_command(
    addr: Option<String>,
    socket: Option<PathBuf>,
    token_file: Option<PathBuf>,
    if_match: Option<u64>,
    action: ConfigAction,
) -> anyhow::Result<bool> {
    let client = client::Client {
        addr,
        socket,
        token: token(token_file.as_deref())?,
    };
    let command = match action {
        ConfigAction::Get => client::Command::Get,
        ConfigAction::PutRoute { file } => client::Command::PutRoute(file),
        ConfigAction::DeleteRoute { name } => client::Command::DeleteRoute(name),
        ConfigAction::Validate { file } => client::Command::Validate(file),
        ConfigAction::Versions => client::Command::Versions,
        ConfigAction::Rollback { version } => client::Command::Rollback(version),
        ConfigAction::Diff { from, to } => client::Command::Diff(from, to),
    };
    let (text, ok) = runtime(1)?.block_on(client::run(&client, command, if_match))?;
    if ok {
        println!("{text}");
    } else {
        eprintln!("{text}");
    }
    Ok(ok)
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Some(Command::Config {
        addr,
        socket,
        token_file,
        if_match,
        action,
    }) = cli.command
    {
        let ok = config_command(addr, socket, token_file, if_match, action)?;
        std::process::exit(if ok { 0 } else { 1 });
    }
    if let Some(Command::Upgrade { control_socket }) = &cli.command {
        let ok = control::command(control_socket.clone(), cli.config.as_deref())?;
        std::process::exit(if ok { 0 } else { 1 });
    }
    let path = cli.config.context("--config=PATH is required")?;
    match cli.command {
        Some(Command::Supervise) => upgrade::parent::run(&path),
        Some(Command::Upgrade { .. }) => Ok(()),
        Some(Command::Validate { check_agents }) => {
            let ok = runtime(0)?.block_on(validate::run(&path, check_agents, &mut std::io::stdout()))?;
            std::process::exit(if ok { 0 } else { 1 });
        }
        Some(Command::Config { .. }) => Ok(()),
        None => {
            // Started by `supervise`: the listening sockets are inherited.
            let inherited = Inherited::take()?;
            let cfg = config::load(&path)?;
            runtime(cfg.server.worker_threads)?.block_on(serve(path, cfg, inherited))
        }
    }
}

/// The async runtime: `server.worker_threads` threads (0: one per CPU the
/// process may use); one thread, or one CPU, runs a current-thread runtime.
fn runtime(threads: u16) -> std::io::Result<tokio::runtime::Runtime> {
    policy_net::runtime::build(threads.into(), "policy-kernel")
}

async fn serve(path: PathBuf, mut cfg: config::KernelConfig, mut inherited: Option<Inherited>) -> anyhow::Result<()> {
    // Before anything is bound: a SIGHUP sent as soon as the kernel answers
    // must reload it, not end it.
    let hup = reload::hangup().context("installing the SIGHUP handler")?;
    telemetry::init_logging(&cfg.observability.log_level);
    telemetry::tracing::init(&cfg.observability.tracing)?;
    let addr = cfg.server.tcp_addr();
    // Unreadable TLS files stop the start before anything is bound.
    server::check_tls(&cfg.server)?;
    if let Some(risk) = cfg.server.exposure_warning() {
        tracing::warn!(risk = %risk, "ext_proc TCP listener without TLS on a non-loopback address");
    }
    let metrics_addr: SocketAddr = format!(
        "{}:{}",
        cfg.observability.metrics_address, cfg.observability.metrics_port
    )
    .parse()
    .context("observability.metrics_address")?;
    let metrics_on = cfg.observability.metrics_port != 0;
    let drain = Duration::from_millis(cfg.server.drain_timeout_ms);
    let socket = cfg.server.socket_path.clone();
    let listeners = match inherited.as_mut() {
        Some(i) => server::Listeners::inherited(i.sockets.ext_proc_unix.take(), i.sockets.ext_proc_tcp.take())?,
        None => server::Listeners::bind(addr, socket.as_deref()).await?,
    };
    let owns_socket_file = listeners.owns_socket_file();
    let bound = listeners.local_addr()?;
    let prepared = management::Prepared::load(&mut cfg).await?;
    let kernel = Kernel::start(cfg).await;
    let admin = Admin::new(kernel.clone());
    let management = match prepared {
        Some(p) => {
            let m = p.start(kernel.clone(), path.clone()).await;
            if let Some(status) = m.store_status() {
                admin.set_store_status(status);
            }
            let bound = m.spawn_listeners().await?;
            if let Some(addr) = bound.tcp {
                tracing::info!(address = %addr, "management API listening");
            }
            if let Some(path) = &bound.socket {
                tracing::info!(socket = %path.display(), "management API listening");
            }
            Some(m)
        }
        None => None,
    };
    if let Some(l) = inherited.as_mut().and_then(|i| i.sockets.metrics.take()) {
        let at = admin.clone().spawn_on(l).context("the inherited metrics listener")?;
        tracing::info!(address = %at, "metrics and health endpoints");
    } else if metrics_on {
        let at = admin
            .clone()
            .spawn(metrics_addr)
            .await
            .context("binding the metrics port")?;
        tracing::info!(address = %at, "metrics and health endpoints");
    }
    reload::spawn_sighup(hup, kernel.clone(), path, management.clone())?;

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let draining = std::sync::Arc::new(tokio::sync::Notify::new());
    spawn_signals(stop_tx, draining.clone(), admin.clone())?;
    // A generation started by `supervise` waits (briefly) for its agents
    // before it takes connections; the one it replaces serves meanwhile.
    let ready = match inherited.as_mut() {
        Some(i) => {
            let down = upgrade::inherit::wait_for_agents(&kernel, upgrade::inherit::AGENT_WAIT).await;
            if !down.is_empty() {
                tracing::warn!(agents = ?down, "agents not healthy: this generation serves without them");
            }
            Some(i)
        }
        None => None,
    };
    // `address` is the TCP listener's, or "none" (socket only).
    let address = bound.map(|a| a.to_string()).unwrap_or_else(|| "none".into());
    let tls = kernel.snapshot().config.server.tls.is_some();
    tracing::info!(address = %address, tls, socket = ?socket, generation = upgrade::generation(), "policy kernel serving ext_proc");
    admin.set_ready(true);
    if let Some(i) = ready {
        i.notify_ready();
    }
    let served = server::serve(kernel, listeners, async {
        let _ = stop_rx.await;
    });
    tokio::select! {
        result = served => result?,
        _ = async { draining.notified().await; tokio::time::sleep(drain).await } => {
            tracing::warn!(drain_timeout_ms = drain.as_millis() as u64, "drain timeout: exiting with streams in flight");
        }
    }
    if let Some(path) = socket.as_ref().filter(|_| owns_socket_file) {
        let _ = std::fs::remove_file(path);
    }
    // A generation leaves the management socket: the next generation has
    // bound its own at that path (a stale one is replaced at start).
    if let Some(path) = management
        .as_ref()
        .and_then(|m| m.config().socket.clone())
        .filter(|_| owns_socket_file)
    {
        let _ = std::fs::remove_file(path);
    }
    // Exports the spans still buffered. The exporter's gRPC client runs on
    // this runtime and the flush blocks until it is done, so the flush runs
    // on the blocking pool: blocking this thread, which runs the main future,
    // kept the export from finishing on both runtimes until the flush timed
    // out after 5 s and dropped the spans (tests/otlp_export.rs).
    if let Err(e) = tokio::task::spawn_blocking(telemetry::tracing::shutdown).await {
        tracing::warn!(error = %e, "tracing shutdown did not finish");
    }
    tracing::info!("policy kernel stopped");
    // Log lines held back while stdout was not being read get a last chance.
    telemetry::stdout::output().flush(Duration::from_secs(1));
    Ok(())
}

/// First SIGTERM/SIGINT: stop accepting streams and drain. Second: exit now.
fn spawn_signals(
    stop: tokio::sync::oneshot::Sender<()>,
    draining: std::sync::Arc<tokio::sync::Notify>,
    admin: Admin,
) -> std::io::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    // SIGUSR2 asks `supervise` for an upgrade; sent to a kernel process by
    // mistake it must not kill it (its default action).
    let mut usr2 = signal(SignalKind::user_defined2())?;
    tokio::spawn(async move {
        while usr2.recv().await.is_some() {
            tracing::warn!("SIGUSR2 ignored: upgrades are made by `policy-kernel supervise` (send it SIGUSR2, or run `policy-kernel upgrade`)");
        }
    });
    tokio::spawn(async move {
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        tracing::info!("shutting down: draining in-flight streams");
        admin.set_ready(false);
        draining.notify_one();
        let _ = stop.send(());
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        tracing::warn!("second signal: exiting now");
        std::process::exit(1);
    });
    Ok(())
}
