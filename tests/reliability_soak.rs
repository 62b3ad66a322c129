//! Reliability suite, soak: `make soak` (`SOAK_MINUTES`, default 30) at
//! 100 rps through Envoy with reloads and agent restarts; `#[ignore]`d
//! otherwise. See `tests/reliability.rs`.

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use support::chaos::*;
use support::load::*;

// ======================================================================
// 8. Soak (make soak)
// ======================================================================

const TAGGER: &str = r#"policies:
  - name: tag
    params: [v]
    request: [{set_header: {name: x-seen, value: "${param:v}"}}]
"#;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "30-minute soak: make soak (SOAK_MINUTES=N)"]
async fn soak() {
    let _one = exclusive().await;
    let mut r = Report::new("8_soak");
    let minutes = env_u64("SOAK_MINUTES", 30);
    let reload_every = Duration::from_secs(env_u64("SOAK_RELOAD_S", 60));
    let restart_every = Duration::from_secs(env_u64("SOAK_RESTART_S", 300));
    let rate = env_u64("SOAK_RPS", 100) as f64;
    let sample_every = Duration::from_secs(10);
    let run_for = Duration::from_secs(minutes * 60);
    let csv_path = PathBuf::from(
        std::env::var("SOAK_CSV").unwrap_or_else(|_| format!("{}/target/chaos/soak.csv", env!("CARGO_MANIFEST_DIR"))),
    );
    r.fig(
        "setup",
        format!("{minutes} min at {rate} rps (gate+tag chain, 1/3 without token), SIGHUP reload every {}s, gate agent SIGKILL+restart every {}s, kernel RSS and fds sampled every 10 s",
            reload_every.as_secs(), restart_every.as_secs()),
    );
    let routes = |v: u64| {
        format!("  route_policies:\n    - route_name: gate\n      request_policy_chain: [{{policy: gate, on_failure: deny}}, {{policy: tag, params: {{v: \"{v}\"}}}}]\n")
    };
    let mut s = suite(&["gate"])
        .test_agent_with(
            "gate",
            GATE,
            "      health_check_interval_ms: 500\n      circuit_breaker: {failure_threshold: 5, cooldown_ms: 1000}\n",
        )
        .test_agent_with("tagger", TAGGER, "      health_check_interval_ms: 500\n")
        .config(&routes(0))
        .start()
        .await;
    warm(&s, "/gate/warm").await;
    let pid = s.kernel.proc.pid();
    let kernel_config = s.kernel.config.clone();
    // The chaos thread: samples, reloads, restarts; writes the CSV.
    let t0 = Instant::now();
    let rendered: Vec<String> = (0..2).map(|v| s.kernel_body(&routes(v))).collect();
    let full_text = |body: &str| {
        let current = std::fs::read_to_string(&kernel_config).expect("config");
        let head = current.split("  agents:\n").next().unwrap_or("").to_string();
        format!("{head}{body}")
    };
    let texts: Vec<String> = rendered.iter().map(|b| full_text(b)).collect();
    let gate = s.take_test_agent("gate");
    let kernel_pid = pid;
    let cfg_path = kernel_config.clone();
    let chaos = std::thread::spawn(move || {
        let mut gate = gate;
        let mut rows = vec!["t_s,rss_bytes,open_fds,event".to_string()];
        let mut next_sample = Duration::ZERO;
        let mut next_reload = reload_every;
        let mut next_restart = restart_every;
        let mut reloads = 0u64;
        let mut restarts = 0u64;
        let sample = |rows: &mut Vec<String>, event: &str| {
            rows.push(format!(
                "{:.1},{},{},{event}",
                t0.elapsed().as_secs_f64(),
                rss_bytes(kernel_pid),
                open_fds(kernel_pid)
            ));
        };
        while t0.elapsed() < run_for {
            let now = t0.elapsed();
            if now >= next_reload {
                reloads += 1;
                std::fs::write(&cfg_path, &texts[(reloads % 2) as usize]).expect("write config");
                let _ = std::process::Command::new("kill")
                    .args(["-HUP", &kernel_pid.to_string()])
                    .status();
                next_reload += reload_every;
                sample(&mut rows, "reload");
            }
            if now >= next_restart {
                gate.kill();
                std::thread::sleep(Duration::from_secs(2));
                gate.restart();
                restarts += 1;
                next_restart += restart_every;
                sample(&mut rows, "restart");
            }
            if now >= next_sample {
                sample(&mut rows, "");
                next_sample += sample_every;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        rows.push(format!(
            "{:.1},{},{},end",
            t0.elapsed().as_secs_f64(),
            rss_bytes(kernel_pid),
            open_fds(kernel_pid)
        ));
        (gate, rows, reloads, restarts)
    });
    let total = (rate * run_for.as_secs_f64()) as usize;
    let answers = open_loop(&s.client, &s.base, rate, total, t0, gate_request).await;
    let (_gate, rows, reloads, restarts) = tokio::task::spawn_blocking(move || chaos.join().expect("chaos"))
        .await
        .expect("join");
    if let Some(dir) = csv_path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    std::fs::write(&csv_path, rows.join("\n") + "\n").expect("write csv");

    // Samples after a warm-up (the first 10%, at least 60 s).
    let warm = (run_for.as_secs_f64() * 0.1).max(60.0);
    let samples: Vec<(f64, f64, f64)> = rows
        .iter()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Some((
                f.first()?.parse().ok()?,
                f.get(1)?.parse().ok()?,
                f.get(2)?.parse().ok()?,
            ))
        })
        .collect();
    let steady: Vec<&(f64, f64, f64)> = samples.iter().filter(|s| s.0 >= warm).collect();
    let rss_slope = slope(&steady.iter().map(|s| (s.0, s.1)).collect::<Vec<_>>()); // bytes/s
    let per_10min = rss_slope * 600.0 / (1024.0 * 1024.0);
    let fds: Vec<f64> = steady.iter().map(|s| s.2).collect();
    let (fd_min, fd_max) = (
        fds.iter().copied().fold(f64::MAX, f64::min),
        fds.iter().copied().fold(0.0, f64::max),
    );
    let (fd_first, fd_last) = (fds.first().copied().unwrap_or(0.0), fds.last().copied().unwrap_or(0.0));
    let causes = by_cause(&answers);
    r.fig("requests", format!("{} {}", answers.len(), causes_text(&causes)));
    r.fig("reloads", reloads);
    r.fig("agent_restarts", restarts);
    r.fig("samples", format!("{} (CSV {})", samples.len(), csv_path.display()));
    r.fig(
        "rss_mib",
        format!(
            "start={:.1} after_warmup={:.1} end={:.1} slope={per_10min:+.3} MiB/10min",
            mib(samples.first().map(|s| s.1).unwrap_or(0.0) as u64),
            mib(steady.first().map(|s| s.1).unwrap_or(0.0) as u64),
            mib(samples.last().map(|s| s.1).unwrap_or(0.0) as u64)
        ),
    );
    r.fig(
        "open_fds",
        format!("after_warmup={fd_first} end={fd_last} min={fd_min} max={fd_max}"),
    );
    r.check(
        "rss_growth_below_1MiB_per_10min",
        per_10min < 1.0,
        format!("{per_10min:.3} MiB/10min"),
    );
    r.check(
        "fds_flat",
        fd_last <= fd_first + 2.0 && fd_max - fd_min <= 6.0,
        format!("first {fd_first} last {fd_last} range {fd_min}..{fd_max}"),
    );
    let deny_ok = denied_let_through(&answers);
    r.check("no_denied_request_answered_200", deny_ok == 0, deny_ok);
    r.check(
        "every_request_answered_with_known_cause",
        causes.keys().all(|c| {
            matches!(
                c,
                Cause::Upstream | Cause::AgentDenied | Cause::PolicyFailure | Cause::AgentUnavailable
            )
        }),
        causes_text(&causes),
    );
    r.check(
        "reloads_applied",
        s.kernel
            .metric(r#"policy_kernel_config_reload_total{status="success"}"#) as u64
            == reloads,
        format!(
            "{} of {reloads}",
            s.kernel
                .metric(r#"policy_kernel_config_reload_total{status="success"}"#)
        ),
    );
    r.finish();
}
