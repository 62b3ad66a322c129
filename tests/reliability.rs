//! Reliability ("chaos") suite: the kernel binary, `policy-test-agent`
//! processes and a real Envoy (configured like `deploy/envoy.yaml`) under
//! load while agents and the kernel are killed, agents slow down, streams
//! are abused, limits are hit; plus a soak.
//!
//! `cargo test --test reliability` (and `reliability_overload`,
//! `reliability_limits`, `reliability_soak`) runs the short (CI) version of each test,
//! under a minute each. `CHAOS_FULL=1` (what `make chaos` sets) runs the
//! full versions; `soak` is `#[ignore]`d and run by `make soak`
//! (`SOAK_MINUTES`, default 30). Every test prints its figures
//! (`[chaos] ...` lines, `--nocapture`) and, under `CHAOS_RESULTS=DIR`,
//! writes them to `DIR/<test>.json`; RELIABILITY.md records the full runs.
//!
//! Only behaviour is asserted (counts, statuses, causes, bounded-ness with
//! generous limits); speeds are reported, never asserted, except where the
//! full version checks a threshold the issue sets (e.g. active streams back
//! to 0 within 1 s).

mod support;

use std::time::{Duration, Instant};

use support::chaos::*;
use support::load::*;
use support::*;

// ======================================================================
// 1. Agent kill/restart under load
// ======================================================================

/// What the agent killer did, as offsets from the load's start.
#[derive(Debug, Clone, Copy)]
struct Cycle {
    kill: Duration,
    restart: Duration,
    ready: Duration,
}

struct KillRun {
    answers: Vec<Answer>,
    cycles: Vec<Cycle>,
    stack: Stack,
    agent: TestAgent,
}

/// A gate route, `total` requests at `rate`; the agent is SIGKILLed at
/// every multiple of `period` and restarted `down` later.
async fn kill_agent_run(
    agent_extra: &str,
    health_ms: u64,
    total: usize,
    rate: f64,
    period: Duration,
    down: Duration,
    max_kills: u32,
) -> KillRun {
    let health = format!("      health_check_interval_ms: {health_ms}\n{agent_extra}");
    let mut stack = suite(&["gate"])
        .test_agent_with("gate", GATE, &health)
        .config(GATE_ROUTE)
        .start()
        .await;
    warm(&stack, "/gate/warm").await;
    let agent = stack.take_test_agent("gate");
    let run_for = Duration::from_secs_f64(total as f64 / rate);
    let t0 = Instant::now();
    let killer = std::thread::spawn(move || {
        let mut agent = agent;
        let mut cycles = Vec::new();
        let mut k = 1;
        while k <= max_kills && period * k + down + Duration::from_secs(1) < run_for {
            std::thread::sleep((t0 + period * k).saturating_duration_since(Instant::now()));
            agent.kill();
            let kill = t0.elapsed();
            std::thread::sleep(down);
            let restart = t0.elapsed();
            agent.restart();
            cycles.push(Cycle {
                kill,
                restart,
                ready: t0.elapsed(),
            });
            k += 1;
        }
        (agent, cycles)
    });
    let answers = open_loop(&stack.client, &stack.base, rate, total, t0, gate_request).await;
    let (agent, cycles) = tokio::task::spawn_blocking(move || killer.join().expect("killer"))
        .await
        .expect("join");
    KillRun {
        answers,
        cycles,
        stack,
        agent,
    }
}

/// Figures and checks of a kill run; returns the restart-to-first-success times.
fn judge_kill_run(r: &mut Report, run: &KillRun, prefix: &str) -> Vec<Option<Duration>> {
    let a = &run.answers;
    let causes = by_cause(a);
    r.fig(&format!("{prefix}requests"), a.len());
    r.fig(&format!("{prefix}answers_by_cause"), causes_text(&causes));
    let (details, missing) = details_of(&run.stack.envoy, a);
    r.fig(&format!("{prefix}envoy_details_non2xx"), &details);
    let no_answer = a.iter().filter(|x| x.cause == Cause::NoAnswer).count();
    let deny_ok = denied_let_through(a);
    let allowed = [
        Cause::Upstream,
        Cause::AgentDenied,
        Cause::PolicyFailure,
        Cause::AgentUnavailable,
    ];
    let unexpected: Vec<&Answer> = a.iter().filter(|x| !allowed.contains(&x.cause)).collect();
    let inconsistent = a.iter().filter(|x| !gate_answer_consistent(x)).count();
    r.check(
        &format!("{prefix}no_request_unanswered"),
        no_answer == 0,
        format!("{no_answer} without answer"),
    );
    r.check(
        &format!("{prefix}no_denied_request_answered_200"),
        deny_ok == 0,
        format!("{deny_ok} let through"),
    );
    r.check(
        &format!("{prefix}every_non2xx_is_configured_with_known_cause"),
        unexpected.is_empty() && inconsistent == 0 && missing == 0,
        format!(
            "{} unexpected (first: {:?}), {inconsistent} inconsistent, {missing} missing from the access log",
            unexpected.len(),
            unexpected.first()
        ),
    );
    let mut recoveries = Vec::new();
    for (n, c) in run.cycles.iter().enumerate() {
        let next_kill = run.cycles.get(n + 1).map(|c| c.kill).unwrap_or(Duration::MAX);
        let first_ok = a
            .iter()
            .filter(|x| x.kind == ALLOW && x.cause == Cause::Upstream && x.sent >= c.restart && x.sent < next_kill)
            .map(|x| x.done())
            .min();
        let until = first_ok.unwrap_or(next_kill);
        let failed: Vec<&Answer> = a
            .iter()
            .filter(|x| {
                x.sent >= c.kill.saturating_sub(Duration::from_millis(50))
                    && x.sent < until
                    && matches!(x.cause, Cause::PolicyFailure | Cause::AgentUnavailable)
            })
            .collect();
        let last_fail = first_ok;
        let rec = first_ok.map(|t| t.saturating_sub(c.restart));
        r.fig(
            &format!("{prefix}cycle{}", n + 1),
            format!(
                "kill@{}ms restart@{}ms (agent listening after {}ms) failed={} (500={} 503={}) outage(kill->first success)={}ms restart_to_first_success={}",
                c.kill.as_millis(),
                c.restart.as_millis(),
                (c.ready - c.restart).as_millis(),
                failed.len(),
                failed.iter().filter(|x| x.cause == Cause::PolicyFailure).count(),
                failed.iter().filter(|x| x.cause == Cause::AgentUnavailable).count(),
                last_fail.map(|t| t.saturating_sub(c.kill).as_millis().to_string()).unwrap_or("-".into()),
                rec.map(|d| format!("{}ms", d.as_millis())).unwrap_or("never".into()),
            ),
        );
        recoveries.push(rec);
    }
    recoveries
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_kill_restart_under_load() {
    let _one = exclusive().await;
    let mut r = Report::new("1_agent_kill_restart");
    let (total, rate, period, down) = pick(
        (3000, 200.0, Duration::from_secs(4), Duration::from_secs(1)),
        (20_000, 500.0, Duration::from_secs(10), Duration::from_secs(2)),
    );
    let extra = "      circuit_breaker: {failure_threshold: 5, cooldown_ms: 1000}\n";
    r.fig(
        "setup",
        format!(
            "{total} requests at {rate} rps through Envoy, 1/3 without token; agent SIGKILLed every {}s, restarted {}s later; health_check_interval_ms=500, circuit_breaker {{5, cooldown 1000ms}}, on_failure: deny",
            period.as_secs(),
            down.as_secs()
        ),
    );
    let run = kill_agent_run(extra, 500, total, rate, period, down, u32::MAX).await;
    let rec = judge_kill_run(&mut r, &run, "");
    r.check("agent_was_killed", !run.cycles.is_empty(), "no kill cycle");
    r.check(
        "recovered_after_every_restart",
        rec.iter().all(|x| x.is_some()),
        format!("{rec:?}"),
    );
    let known: Vec<u128> = rec.iter().flatten().map(|d| d.as_millis()).collect();
    r.fig(
        "restart_to_first_success_ms",
        format!("{known:?} (max {})", known.iter().max().copied().unwrap_or(0)),
    );
    let starts = run.agent.events().iter().filter(|e| e.starts_with("start")).count();
    r.fig("agent_calls_started_all_processes", starts);
    r.fig(
        "kernel_metrics",
        format!(
            "calls ok={} unavailable={} error={} circuit_state={}",
            run.stack
                .kernel
                .metric(r#"policy_kernel_requests_total{agent="gate",route="gate",status="ok"}"#),
            run.stack
                .kernel
                .metric(r#"policy_kernel_requests_total{agent="gate",route="gate",status="unavailable"}"#),
            run.stack
                .kernel
                .metric(r#"policy_kernel_requests_total{agent="gate",route="gate",status="error"}"#),
            run.stack
                .kernel
                .metric(r#"policy_kernel_agent_circuit_state{agent="gate"}"#),
        ),
    );
    drop(run);

    if full() {
        // The same with the shipped defaults (health every 5 s, circuit
        // cool-down 30 s): one kill, 2 s down, 45 s of traffic.
        let run = kill_agent_run("", 5000, 9000, 200.0, Duration::from_secs(5), Duration::from_secs(2), 1).await;
        let rec = judge_kill_run(&mut r, &run, "defaults_");
        r.fig(
            "defaults_restart_to_first_success_ms",
            rec.first()
                .copied()
                .flatten()
                .map(|d| d.as_millis().to_string())
                .unwrap_or("never (within the run)".into()),
        );
    }
    r.finish();
}

// ======================================================================
// 2. Kernel SIGKILL under load
// ======================================================================

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_sigkill_under_load() {
    let _one = exclusive().await;
    let mut r = Report::new("2_kernel_sigkill");
    let (total, rate, kills) = kill_schedule();
    r.fig(
        "setup",
        format!("{total} requests at {rate} rps through Envoy (gate route, fail closed); kernel SIGKILLed at {kills:?} and started again at once on the same config (as supervisord autorestart does)"),
    );
    let mut stack = suite(&["gate"])
        .test_agent_with("gate", GATE, "      health_check_interval_ms: 500\n")
        .config(GATE_ROUTE)
        .start()
        .await;
    warm(&stack, "/gate/warm").await;
    let envoy_pid = stack.envoy.proc.pid();
    // Who restarts the kernel: supervisord (CHAOS_SUPERVISORD=1, `make
    // chaos`), else the harness itself, at once, as supervisord would.
    let supervised = supervisord_bin().map(|bin| Supervised::take_over(&bin, &stack.dir, &mut stack.kernel));
    r.fig(
        "restarted_by",
        if supervised.is_some() {
            "supervisord (chaos/supervisord-kernel.conf, autorestart=true)"
        } else {
            "the harness, at once (set CHAOS_SUPERVISORD=1 for supervisord)"
        },
    );
    warm(&stack, "/gate/warm2").await;
    let t0 = Instant::now();

    // The kernel (or supervisord) moves into the killer thread and back.
    let placeholder = stack.kernel.take();
    let killer = std::thread::spawn(move || {
        let mut k = placeholder;
        let mut events = Vec::new();
        for at in kills {
            std::thread::sleep((t0 + at).saturating_duration_since(Instant::now()));
            let (killed, stale, took) = match &supervised {
                Some(sup) => sup.kill_kernel(t0),
                None => {
                    let before = socket_inode(&k.socket);
                    k.proc.kill(); // SIGKILL, reaped
                    let killed = t0.elapsed();
                    // What a restart finds: the socket file left behind, nobody on it.
                    let left = std::fs::symlink_metadata(&k.socket).is_ok()
                        && std::os::unix::net::UnixStream::connect(&k.socket).is_err();
                    let took = restart_kernel(&mut k);
                    let replaced = socket_inode(&k.socket) != before;
                    (killed, left && replaced, took)
                }
            };
            events.push((killed, stale, took, t0.elapsed()));
        }
        (k, events, supervised)
    });
    let answers = open_loop(&stack.client, &stack.base, rate, total, t0, gate_request).await;
    let (kernel, events, supervised) = tokio::task::spawn_blocking(move || killer.join().expect("killer"))
        .await
        .expect("join");
    let _ = std::mem::replace(&mut stack.kernel, kernel);

    let causes = by_cause(&answers);
    r.fig("answers_by_cause", causes_text(&causes));
    let (details, missing) = details_of(&stack.envoy, &answers);
    r.fig("envoy_details_non2xx", &details);
    let no_answer = causes.get(&Cause::NoAnswer).copied().unwrap_or(0);
    let deny_ok = denied_let_through(&answers);
    let allowed = [
        Cause::Upstream,
        Cause::AgentDenied,
        Cause::EnvoyExtProcError,
        Cause::PolicyFailure,
        Cause::AgentUnavailable,
    ];
    let unexpected: Vec<&Answer> = answers.iter().filter(|x| !allowed.contains(&x.cause)).collect();
    r.check("no_request_unanswered", no_answer == 0, format!("{no_answer}"));
    r.check("no_denied_request_answered_200", deny_ok == 0, format!("{deny_ok}"));
    r.check(
        "every_non2xx_has_known_cause",
        unexpected.is_empty() && missing == 0 && answers.iter().all(gate_answer_consistent),
        format!(
            "{} unexpected, first {:?}; {missing} not in access log",
            unexpected.len(),
            unexpected.first()
        ),
    );
    let mut windows = Vec::new();
    for (n, (killed, stale, took, ready)) in events.iter().enumerate() {
        let next = events.get(n + 1).map(|e| e.0).unwrap_or(Duration::MAX);
        let in_cycle = |x: &&Answer| x.sent >= killed.saturating_sub(Duration::from_millis(100)) && x.sent < next;
        let first_ok = answers
            .iter()
            .filter(in_cycle)
            .filter(|x| x.cause == Cause::Upstream && x.sent >= *killed)
            .map(|x| x.done())
            .min();
        let until = first_ok.unwrap_or(next);
        let failed: Vec<&Answer> = answers
            .iter()
            .filter(in_cycle)
            .filter(|x| x.cause == Cause::EnvoyExtProcError && x.sent < until)
            .collect();
        let outage = first_ok.map(|t| t.saturating_sub(*killed));
        let fail_span = match (
            failed.iter().map(|x| x.sent).min(),
            failed.iter().map(|x| x.done()).max(),
        ) {
            (Some(a), Some(b)) => b.saturating_sub(a).as_millis().to_string(),
            _ => "0".into(),
        };
        r.fig(
            &format!("kill{}", n + 1),
            format!(
                "kill@{}ms stale_socket_left_and_replaced={stale} kernel_listening_after={}ms envoy_500s={} failed_span={fail_span}ms outage(kill->first 200)={}",
                killed.as_millis(),
                took.as_millis(),
                failed.len(),
                outage.map(|d| format!("{}ms", d.as_millis())).unwrap_or("never".into()),
            ),
        );
        let _ = ready;
        r.check(
            &format!("kill{}_stale_socket_cleaned_at_start", n + 1),
            *stale,
            "no stale socket was left",
        );
        windows.push(outage);
    }
    let known: Vec<u128> = windows.iter().flatten().map(|d| d.as_millis()).collect();
    r.fig("outage_window_ms", format!("{known:?}"));
    r.check(
        "recovered_after_every_restart",
        windows.iter().all(|w| w.is_some()),
        format!("{windows:?}"),
    );
    let alive = envoy_alive(&mut stack.envoy) && stack.envoy.proc.pid() == envoy_pid;
    r.check("envoy_survived", alive, format!("same pid {envoy_pid}, ready: {alive}"));
    let after = hit(&stack.client, &stack.base, 0, gate_request(1), Instant::now()).await;
    r.check("serving_after", after.cause == Cause::Upstream, format!("{after:?}"));
    drop(supervised);
    r.finish();
}

// ======================================================================
// 3. Agent latency injection
// ======================================================================

const LAT: &str = r#"policies:
  - name: lat0
    request: [{set_header: {name: x-lat, value: done}}]
  - name: lat50
    delay_ms: 50
    request: [{set_header: {name: x-lat, value: done}}]
  - name: lat250
    delay_ms: 250
    request: [{set_header: {name: x-lat, value: done}}]
  - name: lat1s
    delay_ms: 1000
    request: [{set_header: {name: x-lat, value: done}}]
"#;

const LAT_LONG: &str = r#"policies:
  - name: lat3s
    delay_ms: 3000
    request: [{set_header: {name: x-lat, value: done}}]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_latency_injection() {
    let _one = exclusive().await;
    let mut r = Report::new("3_agent_latency");
    let (rate, per) = pick((100.0, 400), (250.0, 5000));
    let envoy_timeout = deployed_message_timeout_ms();
    let phase_timeout = 2000;
    r.fig(
        "setup",
        format!("{per} requests per scenario at {rate} rps; agent timeout_ms=500, server.phase_timeout_ms={phase_timeout}, Envoy message_timeout={envoy_timeout}ms (deploy/envoy.yaml); slow calls: on_failure continue (1 s) / deny (3 s)"),
    );
    r.check(
        "deployed_envoy_message_timeout_above_phase_timeout",
        envoy_timeout > phase_timeout,
        format!("{envoy_timeout} <= {phase_timeout}"),
    );
    let routes = "  route_policies:\n    - route_name: lat0\n      request_policy_chain: [{policy: lat0}]\n    - route_name: lat50\n      request_policy_chain: [{policy: lat50}]\n    - route_name: lat250\n      request_policy_chain: [{policy: lat250}]\n    - route_name: latslow\n      request_policy_chain: [{policy: lat1s, on_failure: continue}]\n    - route_name: phase\n      request_policy_chain: [{policy: lat3s, on_failure: deny}]\n";
    let s = suite(&["lat0", "lat50", "lat250", "latslow", "phase", "free"])
        .test_agent_with(
            "lat",
            LAT,
            "      health_check_interval_ms: 1000\n      timeout_ms: 500\n",
        )
        .test_agent_with(
            "latlong",
            LAT_LONG,
            "      health_check_interval_ms: 1000\n      timeout_ms: 5000\n",
        )
        .server(&format!("    phase_timeout_ms: {phase_timeout}\n"))
        .config(routes)
        .start()
        .await;
    warm(&s, "/lat0/warm").await;

    let mut all = Vec::new();
    let run = |name: &'static str, make: Box<dyn Fn(usize) -> Req>| {
        let s = &s;
        async move {
            let answers = open_loop(&s.client, &s.base, rate, per, Instant::now(), make).await;
            (name, answers)
        }
    };
    // Baseline: a route without policies (Envoy -> kernel -> CONTINUE, no agent call).
    all.push(run("baseline", Box::new(|i| Req::get(format!("/free/{i}"), 0))).await);
    all.push(run("delay_0ms", Box::new(|i| Req::get(format!("/lat0/{i}"), 0))).await);
    all.push(run("delay_50ms", Box::new(|i| Req::get(format!("/lat50/{i}"), 0))).await);
    all.push(run("delay_250ms", Box::new(|i| Req::get(format!("/lat250/{i}"), 0))).await);
    // 0 ms, with 1% of the calls taking 1 s (past the agent's 500 ms timeout).
    all.push(
        run(
            "delay_0ms_plus_1pct_1s",
            Box::new(|i| {
                if i % 100 == 50 {
                    Req::get(format!("/latslow/{i}"), 1)
                } else {
                    Req::get(format!("/lat0/{i}"), 0)
                }
            }),
        )
        .await,
    );
    // A call longer than the whole phase budget (agent timeout 5 s, phase 2 s):
    // the phase deadline fires before Envoy's message timeout.
    let mut phase = Vec::new();
    for i in 0..3u64 {
        phase.push(
            hit(
                &s.client,
                &s.base,
                900_000 + i,
                Req::get(format!("/phase/{i}"), 2),
                Instant::now(),
            )
            .await,
        );
    }

    let base = Lat::of(&all[0].1);
    let mut no_504 = true;
    let mut bad = Vec::new();
    for (name, answers) in &all {
        let l = Lat::of(answers.iter().filter(|a| a.kind == 0));
        let c = by_cause(answers);
        if c.contains_key(&Cause::EnvoyTimeout) {
            no_504 = false;
        }
        if answers.iter().any(|a| a.cause != Cause::Upstream) {
            bad.push(format!("{name}: {}", causes_text(&c)));
        }
        let added = |a: Duration, b: Duration| format!("{:+.1}", (a.as_secs_f64() - b.as_secs_f64()) * 1000.0);
        r.fig(
            name,
            format!(
                "{l}; added vs baseline: p50 {}ms p99 {}ms; {}",
                added(l.p50, base.p50),
                added(l.p99, base.p99),
                causes_text(&c)
            ),
        );
    }
    let mix = &all[4].1;
    let slow: Vec<&Answer> = mix.iter().filter(|a| a.kind == 1).collect();
    let l_all = Lat::of(mix.iter());
    r.fig(
        "delay_0ms_plus_1pct_1s_all_requests",
        format!(
            "{l_all}; p99.9={}ms",
            ms(percentile(&mix.iter().map(|a| a.latency).collect::<Vec<_>>(), 99.9))
        ),
    );
    r.fig(
        "slow_calls_answered",
        format!("{} {}", slow.len(), Lat::of(slow.iter().copied())),
    );
    let skipped = slow
        .iter()
        .filter(|a| a.cause == Cause::Upstream && a.tag("x-lat").is_none())
        .count();
    let timeouts = s.kernel.metric(
        r#"policy_kernel_partial_chain_failures_total{failed_agent="lat",failure_type="timeout",route="latslow"}"#,
    );
    r.fig("kernel_timeouts_on_latslow", timeouts);
    r.check(
        "slow_calls_cut_by_kernel_deadline_and_on_failure_continue",
        skipped == slow.len() && timeouts as usize == slow.len(),
        format!(
            "{skipped} of {} continued without the policy; kernel counted {timeouts} timeouts",
            slow.len()
        ),
    );
    for a in &phase {
        if a.cause == Cause::EnvoyTimeout {
            no_504 = false;
        }
    }
    r.fig(
        "phase_budget_3s_call",
        format!("{} {}", causes_text(&by_cause(&phase)), Lat::of(phase.iter())),
    );
    r.check(
        "phase_deadline_applies_on_failure_deny",
        phase.iter().all(|a| a.cause == Cause::PolicyFailure),
        causes_text(&by_cause(&phase)),
    );
    r.check("no_envoy_504", no_504, "Envoy answered 504");
    r.check("every_request_answered_by_upstream", bad.is_empty(), bad.join("; "));
    let (details, _) = details_of(&s.envoy, &phase);
    r.fig("envoy_details_phase_budget", details);
    r.finish();
}
