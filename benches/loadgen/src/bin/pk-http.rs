//! `pk-http`: paced open-loop HTTP/2 load (cleartext, prior knowledge) for
//! the end-to-end runs through Envoy at fixed rates.
//!
//! Why not `h2load --rps`: h2load submits the requests that fell due at each
//! tick of its rate timer together. Measured here at 1,000 req/s: bursts of
//! 10 requests every 10 ms. Through one Envoy worker that serialises their
//! ext_proc work on one core, the added latency it reports is mostly queueing
//! behind the rest of the burst. pk-http starts each request on its own
//! schedule, evenly spaced (a pacing thread sleeps to each start time; about
//! 0.1 ms precision), round-robin over `--connections` HTTP/2 connections.
//! Latency is measured from the scheduled start to the end of the response
//! body, so a stalled server is not hidden by a late start.
//!
//! Output is h2load's, so `benches/report.py h2load` reads both: the summary
//! lines (`finished in`, `requests:`, `status codes:`) on stdout, and with
//! `--log-file` one line per measured request: start (µs since the epoch),
//! status, duration (µs), tab-separated.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

#[derive(Debug, Parser)]
#[command(name = "pk-http", about = "paced open-loop HTTP/2 load (h2load-compatible output)")]
struct Cli {
    /// Target URL, http://HOST:PORT/path.
    url: http::Uri,
    /// Requests per second, evenly spaced.
    #[arg(long)]
    rate: f64,
    /// HTTP/2 connections; requests go round-robin over them.
    #[arg(long, default_value_t = 8)]
    connections: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Seconds of load before measuring (not counted).
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// POST this file as the body (else GET).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Per-request log (h2load's --log-file format), measured window only.
    #[arg(long)]
    log_file: Option<PathBuf>,
    /// A request without an answer after this many seconds is a timeout.
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
}

/// One measured request: start (µs since the epoch), status (0 = failed), µs.
type Record = (u128, u16, u128);

#[derive(Default)]
struct Tally {
    records: Vec<Record>,
    started: u64,
    errored: u64,
    timeouts: u64,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    anyhow::ensure!(cli.rate > 0.0, "--rate must be above 0");
    anyhow::ensure!(cli.connections > 0, "--connections must be at least 1");
    let authority = cli
        .url
        .authority()
        .ok_or_else(|| anyhow::anyhow!("the URL needs HOST:PORT"))?
        .clone();
    let body = match &cli.data {
        Some(p) => Some(Bytes::from(std::fs::read(p)?)),
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let mut senders = Vec::new();
    for _ in 0..cli.connections {
        let tcp = runtime.block_on(TcpStream::connect(authority.as_str()))?;
        tcp.set_nodelay(true)?;
        let (sender, conn) = runtime
            .block_on(hyper::client::conn::http2::Builder::new(TokioExecutor::new()).handshake(TokioIo::new(tcp)))?;
        runtime.spawn(async move {
            let _ = conn.await;
        });
        senders.push(sender);
    }

    let tally = Arc::new(Mutex::new(Tally::default()));
    let interval = Duration::from_secs_f64(1.0 / cli.rate);
    let begin = Instant::now() + Duration::from_millis(20);
    let measure_from = begin + Duration::from_secs_f64(cli.warmup);
    let end = measure_from + Duration::from_secs_f64(cli.duration);
    let epoch_at_begin = SystemTime::now().duration_since(UNIX_EPOCH)?.as_micros() + 20_000;
    let timeout = Duration::from_secs_f64(cli.timeout);
    let mut tasks = Vec::new();
    let mut n: u32 = 0;
    loop {
        let due = begin + interval * n;
        if due >= end {
            break;
        }
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        let measured = due >= measure_from;
        let mut sender: SendRequest<Full<Bytes>> = senders[n as usize % senders.len()].clone();
        let mut req = http::Request::builder()
            .uri(cli.url.clone())
            .method(if body.is_some() { "POST" } else { "GET" });
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        let req = req.body(Full::new(body.clone().unwrap_or_default()))?;
        let tally = Arc::clone(&tally);
        let start_us = epoch_at_begin + (due - begin).as_micros();
        tasks.push(runtime.spawn(async move {
            let outcome = tokio::time::timeout(timeout, async {
                let response = sender.send_request(req).await?;
                let status = response.status().as_u16();
                response.into_body().collect().await?;
                Ok::<_, hyper::Error>(status)
            })
            .await;
            let took = due.elapsed().as_micros();
            if !measured {
                return;
            }
            let Ok(mut t) = tally.lock() else { return };
            t.started += 1;
            match outcome {
                Ok(Ok(status)) => t.records.push((start_us, status, took)),
                Ok(Err(_)) => t.errored += 1,
                Err(_) => t.timeouts += 1,
            }
        }));
        n += 1;
    }
    runtime.block_on(async {
        for t in tasks {
            let _ = t.await;
        }
    });
    let finished = begin.elapsed().as_secs_f64();

    let t = tally.lock().map_err(|_| anyhow::anyhow!("tally poisoned"))?;
    let done = t.records.len() as u64;
    let class = |lo: u16| t.records.iter().filter(|r| r.1 >= lo && r.1 < lo + 100).count();
    let succeeded = class(200) + class(300);
    let failed = done as usize - succeeded;
    println!(
        "finished in {finished:.2}s, {:.2} req/s, paced over {} connections",
        done as f64 / cli.duration,
        cli.connections
    );
    println!(
        "requests: {} total, {} started, {} done, {} succeeded, {} failed, {} errored, {} timeout",
        t.started, t.started, done, succeeded, failed, t.errored, t.timeouts
    );
    println!(
        "status codes: {} 2xx, {} 3xx, {} 4xx, {} 5xx",
        class(200),
        class(300),
        class(400),
        class(500)
    );
    if let Some(path) = &cli.log_file {
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        for (start, status, took) in &t.records {
            writeln!(f, "{start}\t{status}\t{took}")?;
        }
        f.flush()?;
    }
    Ok(())
}
