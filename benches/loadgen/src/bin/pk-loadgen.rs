//! `pk-loadgen`: a direct ext_proc load generator. It opens `Process`
//! streams to an ext_proc server exactly as Envoy does (see
//! `pk_loadgen::msgs`) and reports streams/s, per-stream latency of the whole
//! exchange, and the CPU time and memory of the process under test.
//!
//! Two modes:
//! - closed loop (`--rate 0`, the default): `--concurrency` streams always in
//!   flight, each starting when the previous one ends (maximum throughput);
//! - fixed rate (`--rate N`): N streams/s on a fixed schedule (open loop: a
//!   stream starts when due, whatever the others are doing), at most
//!   `--concurrency` in flight. Latency is measured from the moment the
//!   stream starts, or from its scheduled start when it had to wait for one
//!   of the `--concurrency` slots, so a stalled server is not hidden by the
//!   generator waiting for it. The timer's own lateness (tokio timers tick in
//!   milliseconds) is not counted; how late streams started is reported.
//!
//! Output: one human line on stderr, one JSON line on stdout (also appended
//! to `--json-out`). Exit status 0, or 1 with `--fail-on-error` when any
//! stream failed or none completed, or with `--forbid-mode-override` when
//! any answer asked Envoy to buffer a body.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_client::ExternalProcessorClient;
use hdrhistogram::Histogram;
use pk_loadgen::exchange::{run_stream, Bodies, Observed, StreamError};
use pk_loadgen::msgs::{request_id, RequestShape};
use pk_loadgen::procstat;
use pk_loadgen::target::{connect, Target};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tonic::transport::Channel;

#[derive(Debug, Parser)]
#[command(name = "pk-loadgen", about = "ext_proc load generator (streams like Envoy's)")]
struct Cli {
    /// The ext_proc server: unix:/path/to.sock (or /path) or HOST:PORT.
    #[arg(long)]
    target: Target,
    /// `xds.route_name` attribute sent with the request headers.
    #[arg(long)]
    route: Option<String>,
    /// Streams per second; 0 runs a closed loop.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Streams in flight (closed loop), or at most in flight (fixed rate).
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Seconds of load before measuring (not counted).
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// HTTP/2 connections; streams are spread over them (Envoy: one per worker).
    #[arg(long, default_value_t = 1)]
    connections: usize,
    /// Runtime worker threads of the generator.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Request body bytes: >0 sends a POST whose JSON body goes out if an
    /// answer asks for it (BUFFERED mode_override).
    #[arg(long, default_value_t = 0)]
    request_body: usize,
    /// Response body bytes, sent if an answer asks for it.
    #[arg(long, default_value_t = 1024)]
    response_body: usize,
    /// PID of the process under test: its CPU per stream and memory are reported.
    #[arg(long)]
    pid: Option<u32>,
    /// More processes to account for, as NAME=PID (e.g. agent1=1234); repeatable.
    #[arg(long = "aux-pid", value_parser = parse_aux)]
    aux_pids: Vec<(String, u32)>,
    /// Scenario label copied into the result.
    #[arg(long, default_value = "run")]
    label: String,
    /// A stream taking longer fails with `timeout`.
    #[arg(long, default_value_t = 5000)]
    stream_timeout_ms: u64,
    /// Exit 1 when a stream failed or none completed.
    #[arg(long)]
    fail_on_error: bool,
    /// Exit 1 when any answer's `mode_override` asked for a body (a
    /// header-only route must never make Envoy buffer one).
    #[arg(long)]
    forbid_mode_override: bool,
    /// Also append the JSON line to this file.
    #[arg(long)]
    json_out: Option<std::path::PathBuf>,
}

fn parse_aux(s: &str) -> Result<(String, u32), String> {
    let (name, pid) = s.split_once('=').ok_or("expected NAME=PID")?;
    Ok((name.to_string(), pid.parse().map_err(|e| format!("{e}"))?))
}

/// Results of the measured window.
struct Stats {
    hist: Histogram<u64>,
    ok: u64,
    errors: BTreeMap<&'static str, u64>,
    mode_override: u64,
    request_bodies: u64,
    response_bodies: u64,
    mutated: u64,
    messages: u64,
}

impl Stats {
    fn new() -> Self {
        Self {
            hist: Histogram::new_with_bounds(1, 120_000_000, 3).expect("histogram bounds"),
            ok: 0,
            errors: BTreeMap::new(),
            mode_override: 0,
            request_bodies: 0,
            response_bodies: 0,
            mutated: 0,
            messages: 0,
        }
    }

    fn record(&mut self, latency: Duration, result: &Result<Observed, StreamError>) {
        match result {
            Ok(o) => {
                self.ok += 1;
                let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX).max(1);
                self.hist.saturating_record(us);
                self.mode_override += u64::from(o.mode_override);
                self.request_bodies += u64::from(o.request_body_sent);
                self.response_bodies += u64::from(o.response_body_sent);
                self.mutated += u64::from(o.mutated);
                self.messages += u64::from(o.messages);
            }
            Err(e) => *self.errors.entry(e.kind()).or_default() += 1,
        }
    }

    fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }
}

/// Shared state of a run.
struct Run {
    clients: Vec<ExternalProcessorClient<Channel>>,
    shape: RequestShape,
    bodies: Bodies,
    timeout: Duration,
    measure_from: Instant,
    stats: Mutex<Stats>,
    salt: u32,
}

impl Run {
    /// Runs stream number `n`, which was due at `due`; records it when it was
    /// due inside the measured window, with its latency counted from `from`.
    async fn stream(&self, n: u64, due: Instant, from: Instant) {
        let mut client = self.clients[(n as usize) % self.clients.len()].clone();
        let id = request_id(self.salt, n);
        let result =
            match tokio::time::timeout(self.timeout, run_stream(&mut client, &self.shape, &self.bodies, &id)).await {
                Ok(r) => r,
                Err(_) => Err(StreamError::Timeout),
            };
        if due >= self.measure_from {
            let latency = from.elapsed();
            self.stats
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .record(latency, &result);
        }
    }
}

struct CpuMark {
    target: Option<u64>,
    target_switches: Option<u64>,
    aux: Vec<Option<u64>>,
    aux_switches: Vec<Option<u64>>,
    me: Option<u64>,
    machine: Option<u64>,
}

fn mark(pid: Option<u32>, aux: &[(String, u32)]) -> CpuMark {
    CpuMark {
        target: pid.and_then(|p| procstat::cpu_us(&p.to_string())),
        target_switches: pid.and_then(|p| procstat::context_switches(&p.to_string())),
        aux: aux.iter().map(|(_, p)| procstat::cpu_us(&p.to_string())).collect(),
        aux_switches: aux
            .iter()
            .map(|(_, p)| procstat::context_switches(&p.to_string()))
            .collect(),
        me: procstat::cpu_us("self"),
        machine: procstat::machine_busy_us(),
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    anyhow::ensure!(cli.concurrency > 0, "--concurrency must be > 0");
    anyhow::ensure!(cli.connections > 0, "--connections must be > 0");
    anyhow::ensure!(
        cli.duration > 0.0 && cli.duration <= 3600.0,
        "--duration must be in (0, 3600]"
    );
    anyhow::ensure!(cli.warmup >= 0.0 && cli.warmup <= 600.0, "--warmup must be in [0, 600]");
    anyhow::ensure!(cli.rate >= 0.0 && cli.rate <= 1e6, "--rate must be in [0, 1e6]");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.threads.max(1))
        .enable_all()
        .build()?;
    let failed = rt.block_on(run(cli))?;
    std::process::exit(i32::from(failed));
}

async fn run(cli: Cli) -> anyhow::Result<bool> {
    let mut clients = Vec::with_capacity(cli.connections);
    for _ in 0..cli.connections {
        clients.push(connect(&cli.target).await?);
    }
    let shape = RequestShape {
        route: cli.route.clone(),
        request_body: cli.request_body,
        response_body: cli.response_body,
    };
    let start = Instant::now();
    let warmup = Duration::from_secs_f64(cli.warmup);
    let window = Duration::from_secs_f64(cli.duration);
    let measure_from = start + warmup;
    let end = measure_from + window;
    let run = Arc::new(Run {
        clients,
        bodies: Bodies::for_shape(&shape),
        shape,
        timeout: Duration::from_millis(cli.stream_timeout_ms),
        measure_from,
        stats: Mutex::new(Stats::new()),
        salt: std::process::id(),
    });

    // The CPU window opens when measuring starts.
    let marker = {
        let (pid, aux) = (cli.pid, cli.aux_pids.clone());
        tokio::spawn(async move {
            tokio::time::sleep_until(measure_from).await;
            mark(pid, &aux)
        })
    };

    let mut tasks = tokio::task::JoinSet::new();
    // Fixed rate: how late streams started after their scheduled time.
    let mut late = Histogram::<u64>::new_with_bounds(1, 120_000_000, 3).expect("histogram bounds");
    let mut waited_for_slot: u64 = 0;
    if cli.rate > 0.0 {
        // Fixed schedule; every due stream is started, at most
        // `concurrency` in flight (later ones wait, their wait counted).
        let permits = Arc::new(Semaphore::new(cli.concurrency));
        let interval = 1.0 / cli.rate;
        let mut n: u64 = 0;
        loop {
            let due = start + Duration::from_secs_f64(n as f64 * interval);
            if due >= end {
                break;
            }
            if due > Instant::now() {
                tokio::time::sleep_until(due).await;
            }
            let (permit, from) = match Arc::clone(&permits).try_acquire_owned() {
                Ok(p) => (p, Instant::now()),
                Err(_) => {
                    // Every slot busy: the wait is the server's doing.
                    let Ok(p) = Arc::clone(&permits).acquire_owned().await else {
                        break;
                    };
                    if due >= measure_from {
                        waited_for_slot += 1;
                    }
                    (p, due)
                }
            };
            if due >= measure_from {
                let lag = Instant::now().saturating_duration_since(due).as_micros();
                late.saturating_record(u64::try_from(lag).unwrap_or(u64::MAX).max(1));
            }
            let r = Arc::clone(&run);
            tasks.spawn(async move {
                r.stream(n, due, from).await;
                drop(permit);
            });
            n += 1;
            // Reap finished tasks so the set stays small.
            while tasks.try_join_next().is_some() {}
        }
    } else {
        let workers = cli.concurrency as u64;
        for w in 0..workers {
            let r = Arc::clone(&run);
            tasks.spawn(async move {
                let mut k: u64 = 0;
                loop {
                    let due = Instant::now();
                    if due >= end {
                        break;
                    }
                    r.stream(k * workers + w, due, due).await;
                    k += 1;
                }
            });
        }
    }
    // Drain: every stream is bounded by its timeout.
    while tasks.join_next().await.is_some() {}
    let drained = Instant::now();
    let after = mark(cli.pid, &cli.aux_pids);
    let before = marker.await.unwrap_or_else(|_| mark(cli.pid, &cli.aux_pids));
    let wall_us = drained.saturating_duration_since(measure_from).as_micros().max(1) as f64;

    let stats = run.stats.lock().unwrap_or_else(|e| e.into_inner());
    let total = stats.ok + stats.error_count();
    let per_stream = |b: Option<u64>, a: Option<u64>| match (b, a) {
        (Some(b), Some(a)) if total > 0 => Some((a.saturating_sub(b)) as f64 / total as f64),
        _ => None,
    };
    let util = |b: Option<u64>, a: Option<u64>| match (b, a) {
        (Some(b), Some(a)) => Some(a.saturating_sub(b) as f64 / wall_us),
        _ => None,
    };
    let q = |p: f64| {
        if stats.ok > 0 {
            stats.hist.value_at_quantile(p)
        } else {
            0
        }
    };
    let sps = stats.ok as f64 / window.as_secs_f64();
    let target_pid = cli.pid.map(|p| p.to_string());
    let aux: serde_json::Map<String, serde_json::Value> = cli
        .aux_pids
        .iter()
        .enumerate()
        .map(|(i, (name, pid))| {
            let pid = pid.to_string();
            (
                name.clone(),
                serde_json::json!({
                    "cpu_us_per_stream": per_stream(before.aux[i], after.aux[i]),
                    "context_switches_per_stream": per_stream(before.aux_switches[i], after.aux_switches[i]),
                    "cpu_util": util(before.aux[i], after.aux[i]),
                    "peak_rss_kib": procstat::peak_rss_kib(&pid),
                }),
            )
        })
        .collect();
    let result = serde_json::json!({
        "label": cli.label,
        "mode": if cli.rate > 0.0 { "fixed_rate" } else { "closed_loop" },
        "rate": cli.rate,
        "concurrency": cli.concurrency,
        "connections": cli.connections,
        "route": cli.route,
        "request_body": cli.request_body,
        "response_body": cli.response_body,
        "duration_s": cli.duration,
        "streams": stats.ok,
        "errors": stats.error_count(),
        "error_kinds": stats.errors,
        "streams_per_s": (sps * 10.0).round() / 10.0,
        "p50_us": q(0.50),
        "p90_us": q(0.90),
        "p99_us": q(0.99),
        "p999_us": q(0.999),
        "max_us": if stats.ok > 0 { stats.hist.max() } else { 0 },
        "mean_us": if stats.ok > 0 { stats.hist.mean().round() } else { 0.0 },
        "cpu_us_per_stream": per_stream(before.target, after.target),
        "context_switches_per_stream": per_stream(before.target_switches, after.target_switches),
        "cpu_util": util(before.target, after.target),
        "peak_rss_kib": target_pid.as_deref().and_then(procstat::peak_rss_kib),
        "rss_kib": target_pid.as_deref().and_then(procstat::rss_kib),
        "aux": aux,
        "loadgen_cpu_util": util(before.me, after.me),
        // Busy cores of the whole machine over the window: with the target's,
        // the aux processes' and the generator's own share subtracted, what
        // other work on the machine took (noise).
        "machine_cpu_util": util(before.machine, after.machine),
        "other_cpu_util": util(before.machine, after.machine).map(|m| {
            let known = util(before.target, after.target).unwrap_or(0.0)
                + (0..cli.aux_pids.len())
                    .map(|i| util(before.aux[i], after.aux[i]).unwrap_or(0.0))
                    .sum::<f64>()
                + util(before.me, after.me).unwrap_or(0.0);
            ((m - known).max(0.0) * 1000.0).round() / 1000.0
        }),
        "start_lateness_p99_us": if !late.is_empty() { Some(late.value_at_quantile(0.99)) } else { None },
        "start_lateness_max_us": if !late.is_empty() { Some(late.max()) } else { None },
        "streams_that_waited_for_a_slot": waited_for_slot,
        "streams_with_mode_override": stats.mode_override,
        "request_bodies_sent": stats.request_bodies,
        "response_bodies_sent": stats.response_bodies,
        "streams_mutated": stats.mutated,
        "messages_per_stream": if stats.ok > 0 { stats.messages as f64 / stats.ok as f64 } else { 0.0 },
    });
    let fmt_opt = |v: Option<f64>, unit: &str| v.map(|v| format!("{v:.1}{unit}")).unwrap_or_else(|| "n/a".into());
    eprintln!(
        "{}: {} streams ({:.0}/s), {} errors {:?}; latency p50 {} µs p99 {} µs p99.9 {} µs; target CPU {} per stream ({}), peak RSS {} KiB; mode_override on {} streams; loadgen CPU {}",
        cli.label,
        stats.ok,
        sps,
        stats.error_count(),
        stats.errors,
        q(0.5),
        q(0.99),
        q(0.999),
        fmt_opt(per_stream(before.target, after.target), " µs"),
        fmt_opt(util(before.target, after.target).map(|u| u * 100.0), "% of a core"),
        target_pid
            .as_deref()
            .and_then(procstat::peak_rss_kib)
            .map(|v| v.to_string())
            .unwrap_or_else(|| "n/a".into()),
        stats.mode_override,
        fmt_opt(util(before.me, after.me).map(|u| u * 100.0), "%"),
    );
    let line = result.to_string();
    println!("{line}");
    if let Some(path) = &cli.json_out {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        writeln!(f, "{line}")?;
    }
    let failed = cli.fail_on_error && (stats.ok == 0 || stats.error_count() > 0);
    if cli.forbid_mode_override && stats.mode_override > 0 {
        eprintln!(
            "{}: {} streams were asked for a body (mode_override) on a header-only route",
            cli.label, stats.mode_override
        );
        return Ok(true);
    }
    Ok(failed)
}
