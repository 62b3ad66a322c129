//! Operating the kernel: metrics values, logs, health endpoints, graceful
//! drain, the validate command, and hot reload under load through Envoy.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ext_proc::v3::{processing_response::Response, ProcessingResponse};
use support::extproc::{self, Stream};
use support::*;

fn immediate_status(r: &ProcessingResponse) -> Option<i32> {
    match &r.response {
        Some(Response::ImmediateResponse(i)) => i.status.as_ref().map(|s| s.code),
        _ => None,
    }
}

async fn one(client: &mut extproc::Client, route: Option<&str>, headers: &[(&str, &str)]) -> ProcessingResponse {
    let mut s = Stream::open(client, None).await;
    let r = s.exchange(extproc::request_headers(route, headers)).await;
    if immediate_status(&r).is_none() {
        s.exchange(extproc::response_headers(200)).await;
    }
    r
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

const AGENTS: &str = r#"policies:
  - name: tag
    params: [secret]
    request:
      - set_header: {name: x-user-id, value: "1"}
  - name: gate
    rules:
      - when: {header_absent: x-token}
        request:
          - immediate: {status: 401, body: denied, reason: authentication_failed}
    request: [continue]
"#;
const OTHER: &str = r#"policies:
  - name: retag
    request:
      - set_header: {name: x-user-id, value: "2"}
  - name: slow
    delay_ms: 2000
    request: [continue]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_logs_and_endpoints_after_known_traffic() {
    let dir = workdir();
    let a1 = TestAgent::start(dir.path(), "a1", AGENTS);
    let a2 = TestAgent::start(dir.path(), "a2", OTHER);
    let routes = "    - route_name: m\n      request_policy_chain: [{policy: tag, params: {secret: param-secret-123}}, {policy: retag}]\n    - route_name: deny\n      request_policy_chain: [{policy: gate}]\n    - route_name: t\n      request_policy_chain: [{policy: slow}]\n";
    let body = format!(
        "  agents:\n{}{}  route_policies:\n{routes}",
        agent_entry("a1", &a1, ""),
        agent_entry("a2", &a2, "      timeout_ms: 100\n")
    );
    let kernel = KernelProc::start(dir.path(), &body);
    assert_eq!(kernel.admin_get("/healthz").0, 200);
    wait_for("readiness", Duration::from_secs(5), || {
        kernel.admin_get("/readyz").0 == 200
    });
    let mut client = extproc::connect(&kernel.socket).await;

    for _ in 0..5 {
        one(&mut client, Some("m"), &[("authorization", "Bearer secret-token-xyz")]).await;
    }
    for _ in 0..3 {
        assert_eq!(immediate_status(&one(&mut client, Some("deny"), &[]).await), Some(401));
    }
    for _ in 0..2 {
        one(&mut client, Some("nowhere"), &[]).await;
    }
    assert_eq!(immediate_status(&one(&mut client, Some("t"), &[]).await), Some(500));

    let m = |s: &str| kernel.metric(s);
    wait_for("streams to close", Duration::from_secs(5), || {
        m("policy_kernel_active_streams") == 0.0
    });
    assert_eq!(
        m(r#"policy_kernel_requests_total{agent="a1",route="m",status="ok"}"#),
        5.0
    );
    assert_eq!(
        m(r#"policy_kernel_requests_total{agent="a2",route="m",status="ok"}"#),
        5.0
    );
    assert_eq!(
        m(r#"policy_kernel_requests_total{agent="none",route="unknown",status="passthrough"}"#),
        2.0
    );
    assert_eq!(
        m(r#"policy_kernel_requests_total{agent="a2",route="t",status="timeout"}"#),
        1.0,
        "{}",
        kernel
            .admin_get("/metrics")
            .1
            .lines()
            .filter(|l| l.contains("route=\"t\""))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(
        m(r#"policy_kernel_immediate_responses_total{reason="authentication_failed",route="deny",status="401"}"#),
        3.0
    );
    assert_eq!(
        m(r#"policy_kernel_immediate_responses_total{reason="policy_execution_failed",route="t",status="500"}"#),
        1.0
    );
    assert_eq!(m(r#"policy_kernel_agent_timeouts_total{agent="a2"}"#), 1.0);
    assert_eq!(
        m(r#"policy_kernel_partial_chain_failures_total{failed_agent="a2",failure_type="timeout",route="t"}"#),
        1.0
    );
    assert_eq!(
        m(r#"policy_kernel_instruction_conflicts_total{conflict_type="header",route="m"}"#),
        5.0
    );
    assert_eq!(m(r#"policy_kernel_agent_calls_per_request_count{route="m"}"#), 5.0);
    assert_eq!(m(r#"policy_kernel_agent_calls_per_request_sum{route="m"}"#), 10.0);
    assert_eq!(
        m(r#"policy_kernel_chain_execution_duration_seconds_count{num_agents="2",route="m"}"#),
        5.0
    );
    assert_eq!(
        m(r#"policy_kernel_request_duration_seconds_count{agent="a1",route="m"}"#),
        5.0
    );
    assert_eq!(m(r#"policy_kernel_agent_health{agent="a1"}"#), 1.0);
    assert_eq!(m("policy_kernel_config_version"), 1.0);
    assert!(m("process_resident_memory_bytes") > 0.0);
    assert!(m("process_open_fds") > 0.0);

    // /config: versions, routes and health, never params values.
    let (status, config) = kernel.admin_get("/config");
    assert_eq!(status, 200);
    let json: serde_json::Value = serde_json::from_str(&config).expect("config json");
    assert_eq!(json["version"], 1);
    assert_eq!(json["agents"][0]["healthy"], true);
    assert!(
        config.contains("\"secret\"") && !config.contains("param-secret-123"),
        "{config}"
    );

    // Logs: JSON lines in the spec's shapes, no secrets.
    for message in [
        "Policy chain executed across multiple agents",
        "Request processed successfully",
        "Partial policy chain execution due to agent failure",
    ] {
        assert!(kernel.log_has(message), "no {message:?} line:\n{}", kernel.log());
    }
    let log = kernel.log();
    let lines: Vec<serde_json::Value> = log.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    assert_eq!(lines.len(), log.lines().count(), "every log line is JSON");
    let multi = lines
        .iter()
        .find(|l| l["message"] == "Policy chain executed across multiple agents")
        .expect("multi-agent log");
    assert_eq!(multi["component"], "kernel");
    assert_eq!(multi["route_name"], "m");
    assert_eq!(multi["metadata"]["agent_sequence"], serde_json::json!(["a1", "a2"]));
    assert_eq!(
        multi["metadata"]["policies_per_agent"]["a2"],
        serde_json::json!(["retag"])
    );
    let single = lines
        .iter()
        .find(|l| l["message"] == "Request processed successfully")
        .expect("single-agent log");
    assert_eq!(single["agent_name"], "a1");
    assert_eq!(single["metadata"]["policies_executed"], 1, "{single}");
    assert!(single["metadata"]["instructions_count"].is_u64(), "{single}");
    let partial = lines
        .iter()
        .find(|l| l["message"] == "Partial policy chain execution due to agent failure")
        .expect("partial log");
    assert_eq!(partial["level"], "warning");
    assert_eq!(partial["metadata"]["failed_at_agent"], "a2");
    assert_eq!(partial["metadata"]["on_failure_action"], "deny");
    assert!(lines
        .iter()
        .any(|l| l["message"] == "Route not found - allowing request through"));
    assert!(
        !log.contains("secret-token-xyz") && !log.contains("param-secret-123"),
        "secret in logs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_in_flight_streams_and_second_signal_exits() {
    let slow =
        "policies:\n  - name: slow\n    delay_ms: 800\n    request:\n      - set_header: {name: x-done, value: yes}\n";
    for second_signal in [false, true] {
        let dir = workdir();
        let agent = TestAgent::start(dir.path(), "slowpoke", slow);
        let body = format!(
            "  agents:\n{}  route_policies:\n    - route_name: s\n      request_policy_chain: [{{policy: slow}}]\n",
            agent_entry("slowpoke", &agent, "      timeout_ms: 3000\n")
        );
        let mut kernel = KernelProc::start_with(dir.path(), "    drain_timeout_ms: 5000\n", &body);
        let mut client = extproc::connect(&kernel.socket).await;
        let mut streams = Vec::new();
        for i in 0..3 {
            let s = Stream::open(&mut client, None).await;
            s.tx.send(extproc::request_headers(
                Some("s"),
                &[("x-request-id", &format!("d{i}"))],
            ))
            .await
            .unwrap();
            streams.push(s);
        }
        let started = || agent.events().iter().filter(|e| e.starts_with("start")).count();
        let deadline = Instant::now() + Duration::from_secs(10);
        while started() < 3 {
            assert!(
                Instant::now() < deadline,
                "second={second_signal} events={:?}\n{}",
                agent.events(),
                kernel.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        kernel.proc.signal("TERM");
        if second_signal {
            std::thread::sleep(Duration::from_millis(100));
            kernel.proc.signal("TERM");
            let status = kernel.proc.child.wait().expect("wait");
            assert_eq!(status.code(), Some(1), "second signal exits at once, non-zero");
            continue;
        }
        wait_for("readiness to drop", Duration::from_secs(2), || {
            kernel.admin_get("/readyz").0 != 200
        });
        let text = kernel.admin_get("/metrics").1;
        assert!(
            text.lines().any(|l| l == "policy_kernel_ready 0"),
            "the ready gauge follows /readyz:\n{text}"
        );
        for s in &mut streams {
            let r = s.rx.message().await.expect("answer").expect("answer");
            assert!(
                immediate_status(&r).is_none(),
                "in-flight request failed during drain: {r:?}"
            );
        }
        // Envoy ends each stream after its last message.
        drop(streams);
        let status = kernel.proc.child.wait().expect("wait");
        assert_eq!(status.code(), Some(0), "{}", kernel.log());
        assert!(!kernel.socket.exists(), "socket removed on exit");
    }
}

#[test]
fn validate_command_checks_files_and_agents() {
    let bin = env!("CARGO_BIN_EXE_policy-kernel");
    let run = |args: &[&str]| {
        let out = Command::new(bin).args(args).output().expect("run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (code, text) = run(&["--version"]);
    assert_eq!(code, Some(0));
    assert!(text.starts_with("policy-kernel "), "{text}");

    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/config/spec-example.yaml");
    let (code, text) = run(&["validate", &format!("--config={example}")]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("/api/v1/users") && text.contains("apiKeyAuth, rateLimit"),
        "{text}"
    );

    let dir = workdir();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "policy_kernel:\n  agents:\n    - name: a\n      socket_path: /x\n      timeout_ms: 9000\n",
    )
    .unwrap();
    let (code, text) = run(&["validate", "--config", bad.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    assert!(
        text.contains("agents[0].timeout_ms") && text.contains("line 5"),
        "{text}"
    );

    let agent = TestAgent::start(dir.path(), "v1", "policies:\n  - name: p1\n  - name: p2\n");
    let good = dir.path().join("good.yaml");
    let cfg = format!(
        "policy_kernel:\n  agents:\n{}  route_policies:\n    - route_name: ok\n      request_policy_chain: [{{policy: p1}}, {{policy: p2}}]\n",
        agent_entry("v1", &agent, "")
    );
    std::fs::write(&good, &cfg).unwrap();
    let (code, text) = run(&["validate", "--check-agents", "--config", good.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("[v1: p1, p2]"), "{text}");
    std::fs::write(&good, cfg.replace("{policy: p2}", "{policy: nope}")).unwrap();
    let (code, text) = run(&["validate", "--check-agents", "--config", good.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("not supported: nope"), "{text}");
}

/// The agent script for the reload test: two response policies, each adding
/// its own header.
const HEADERS: &str = r#"policies:
  - name: cfgA
    phases: response
    response:
      - set_header: {name: x-config-a, value: "1"}
  - name: cfgB
    phases: response
    response:
      - set_header: {name: x-config-b, value: "1"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_under_load_through_envoy() {
    let routes = |policy: &str| {
        format!("  route_policies:\n    - route_name: users\n      response_policy_chain: [{{policy: {policy}}}]\n")
    };
    // What is under test is the reload, not the agent: on a busy machine a
    // 100 ms health check or a 500 ms call can time out, and either would
    // take the agent out (503) for a moment.
    let s = Stack::builder()
        .test_agent_with(
            "hdr",
            HEADERS,
            "      health_check_timeout_ms: 2000
      timeout_ms: 5000
      circuit_breaker: {failure_threshold: 0}
",
        )
        .config(&routes("cfgA"))
        .start()
        .await;
    let (kernel, envoy) = (&s.kernel, &s.envoy);
    let config = |policy: &str| s.kernel_body(&routes(policy));
    let url = envoy.url("/users/reload");

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            let (mut total, mut failed, mut bad) = (0u32, Vec::new(), 0u32);
            while total < 5000 || !stop.load(std::sync::atomic::Ordering::Acquire) {
                let batch: Vec<_> = (0..16).map(|_| client.get(&url).send()).collect();
                for r in futures::future::join_all(batch).await {
                    total += 1;
                    match r {
                        Ok(r) if r.status() == 200 => {
                            let a = r.headers().get_all("x-config-a").iter().count();
                            let b = r.headers().get_all("x-config-b").iter().count();
                            if a + b != 1 {
                                bad += 1;
                            }
                        }
                        Ok(r) => failed.push(r.status().as_u16()),
                        Err(e) => failed.push(if e.is_timeout() { 1 } else { 0 }),
                    }
                }
                if total > 200_000 {
                    break;
                }
            }
            (total, failed, bad)
        })
    };

    let (mut valid, mut invalid) = (0.0, 0.0);
    for i in 0..12 {
        let before = kernel.metric(r#"policy_kernel_config_reload_total{status="success"}"#)
            + kernel.metric(r#"policy_kernel_config_reload_total{status="failure"}"#);
        match i % 3 {
            0 => {
                kernel.write_config(&config("cfgB"));
                valid += 1.0;
            }
            1 => {
                std::fs::write(&kernel.config, "policy_kernel:\n  bogus_key: [\n").unwrap();
                invalid += 1.0;
            }
            _ => {
                kernel.write_config(&config("cfgA"));
                valid += 1.0;
            }
        }
        kernel.proc.signal("HUP");
        let deadline = Instant::now() + Duration::from_secs(10);
        while kernel.metric(r#"policy_kernel_config_reload_total{status="success"}"#)
            + kernel.metric(r#"policy_kernel_config_reload_total{status="failure"}"#)
            <= before
        {
            assert!(Instant::now() < deadline, "reload {i} not processed:\n{}", kernel.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Release);
    let (total, failed, bad) = load.await.unwrap();
    assert!(total >= 5000, "only {total} requests");
    assert!(
        failed.is_empty(),
        "{} of {total} requests failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(10)]
    );
    assert_eq!(bad, 0, "responses without exactly one config's header");
    assert_eq!(
        kernel.metric(r#"policy_kernel_config_reload_total{status="success"}"#),
        valid
    );
    assert_eq!(
        kernel.metric(r#"policy_kernel_config_reload_total{status="failure"}"#),
        invalid
    );
    assert_eq!(kernel.metric("policy_kernel_config_version"), 1.0 + valid);
    assert!(kernel.log_has("configuration reload rejected"), "{}", kernel.log());
    // The counters are read (streams were started), and none failed.
    assert!(envoy.stat("http.ingress.ext_proc.streams_started") > 0);
    assert_eq!(envoy.stat("http.ingress.ext_proc.streams_failed"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_bursts_coalesce_and_reload_changes_the_log_level() {
    let dir = workdir();
    let agent = TestAgent::start(dir.path(), "burst", "policies:\n  - name: p\n");
    let body = |route: &str| {
        format!(
            "  agents:\n{}  route_policies:\n    - route_name: {route}\n      request_policy_chain: [{{policy: p}}]\n",
            agent_entry("burst", &agent, "")
        )
    };
    let kernel = KernelProc::start(dir.path(), &body("first"));
    let mut client = extproc::connect(&kernel.socket).await;
    one(&mut client, Some("nowhere"), &[]).await;
    one(&mut client, Some("first"), &[]).await;
    let unknown_lines = || kernel.log().matches("Route not found").count();
    let request_lines = || kernel.log().matches("Request processed successfully").count();
    let deadline = Instant::now() + Duration::from_secs(5);
    while unknown_lines() == 0 || request_lines() == 0 {
        assert!(Instant::now() < deadline, "info logs missing at level debug");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The final file: another route, and log level warn. Ten SIGHUPs at once.
    let text = std::fs::read_to_string(&kernel.config).unwrap();
    let last = text
        .replace("route_name: first", "route_name: last")
        .replace("log_level: debug", "log_level: warn");
    std::fs::write(&kernel.config, last).unwrap();
    let pid = kernel.proc.pid() as i32;
    for _ in 0..10 {
        // SAFETY: kill(2) on the kernel child this test owns.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !kernel.admin_get("/config").1.contains("\"route_name\":\"last\"") {
        assert!(
            Instant::now() < deadline,
            "latest contents never applied:\n{}",
            kernel.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reloads = kernel.metric(r#"policy_kernel_config_reload_total{status="success"}"#);
    assert!(
        (1.0..=3.0).contains(&reloads),
        "10 signals in a burst gave {reloads} reloads"
    );
    assert_eq!(kernel.metric("policy_kernel_config_version"), 1.0 + reloads);

    // Info events are gone at level warn, the request summary line too.
    let (before, requests_before) = (unknown_lines(), request_lines());
    one(&mut client, Some("nowhere-else"), &[]).await;
    one(&mut client, Some("last"), &[]).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(unknown_lines(), before, "info log emitted after the reload to warn");
    assert_eq!(request_lines(), requests_before, "request line written at level warn");
}

/// A reload applies routes at once, keeps the settings read at startup, and
/// names those in a warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_names_the_settings_it_cannot_apply() {
    let dir = workdir();
    let body = |rate: &str, route: &str| {
        format!("    tracing: {{sampling_rate: {rate}}}\n  route_policies:\n    - route_name: {route}\n")
    };
    let kernel = KernelProc::start(dir.path(), &body("0.5", "one"));
    kernel.write_config(&body("1.0", "two"));
    kernel.proc.signal("HUP");
    wait_for("the reload", Duration::from_secs(10), || {
        kernel.metric("policy_kernel_config_version") == 2.0
    });
    let (_, config) = kernel.admin_get("/config");
    assert!(config.contains("\"route_name\":\"two\""), "{config}");
    let warning = kernel
        .log()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["message"].as_str().is_some_and(|m| m.contains("next restart")))
        .unwrap_or_else(|| panic!("no warning:\n{}", kernel.log()));
    assert_eq!(warning["level"], "warning");
    assert_eq!(
        warning["fields"],
        serde_json::json!(["observability.tracing.sampling_rate"])
    );
}

/// A log reader that stops does not stop the kernel. With its standard
/// output on a pipe that nobody reads, requests are answered as before; when
/// the reader comes back, the held lines arrive whole and in order, then a
/// warning with the number dropped, which `/metrics` counts too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_log_reader_does_not_stall_requests() {
    use std::io::Read;
    use std::os::fd::{FromRawFd, OwnedFd};

    let dir = workdir();
    let a1 = TestAgent::start(dir.path(), "a1", AGENTS);
    // What is under test is the log output, not the agent: on a busy
    // machine 50 calls at once may pass the default 500 ms, and a few such
    // timeouts in a row would open the agent's circuit (503); a health
    // check past its default 100 ms would take the agent out (503) too.
    let body = format!(
        "  agents:\n{}  route_policies:\n    - route_name: m\n      request_policy_chain: [{{policy: tag, params: {{secret: s}}}}]\n",
        agent_entry(
            "a1",
            &a1,
            "      timeout_ms: 5000\n      health_check_timeout_ms: 2000\n      circuit_breaker: {failure_threshold: 0}\n"
        )
    );
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors pipe(2) returns.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors are fresh and owned from here on.
    let (mut reader, writer) = unsafe { (std::fs::File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let kernel = KernelProc::start_with_stdout(dir.path(), &body, writer.into());
    wait_for("readiness", Duration::from_secs(10), || {
        kernel.admin_get("/readyz").0 == 200
    });
    wait_for("the agent healthy", Duration::from_secs(10), || {
        kernel.admin_get("/config").1.contains("\"healthy\":true")
    });

    // Far more log than the pipe (64 KiB) and the kernel's backlog (1 MiB)
    // hold: each request logs at least one line of ~300 bytes (debug level).
    let client = extproc::connect(&kernel.socket).await;
    let requests = async {
        for _ in 0..100 {
            let batch = (0..50).map(|_| {
                let mut c = client.clone();
                async move { one(&mut c, Some("m"), &[]).await }
            });
            for r in futures::future::join_all(batch).await {
                assert!(immediate_status(&r).is_none(), "{r:?}");
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(120), requests)
        .await
        .expect("requests stalled while nobody read the log");
    let dropped = kernel.metric("policy_kernel_log_lines_dropped_total");
    assert!(dropped > 0.0, "the test must overflow the backlog");

    let text = tokio::task::spawn_blocking(move || {
        let mut text = String::new();
        let mut buf = vec![0; 1 << 16];
        let deadline = Instant::now() + Duration::from_secs(30);
        while !text.contains("log lines dropped") {
            assert!(Instant::now() < deadline, "no warning after {} bytes", text.len());
            let n = reader.read(&mut buf).expect("read");
            assert!(n > 0, "log closed");
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        text
    })
    .await
    .expect("reader");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("cut or garbled line ({e}): {l}")))
        .collect();
    let note = lines.last().expect("lines");
    assert_eq!(note["level"], "warning");
    // Lines dropped after the note (none: requests are over) would only add.
    assert_eq!(
        note["dropped"].as_f64(),
        Some(kernel.metric("policy_kernel_log_lines_dropped_total"))
    );
    assert!(
        lines
            .iter()
            .filter(|l| l["message"] == "Request processed successfully")
            .count()
            > 100,
        "the held lines came out"
    );
}
