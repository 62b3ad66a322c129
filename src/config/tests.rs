use super::*;

const FULL: &str = r#"
policy_kernel:
  server:
    address: "0.0.0.0"
    port: 9001
    max_concurrent_streams: 1000
  agents:
    - name: "default-agent"
      socket_path: "/var/run/policy-engine/agents/default.sock"
      timeout_ms: 500
      retry:
        max_attempts: 3
        backoff_ms: 100
      health_check_interval_ms: 5000
  route_policies:
    - route_name: "/api/v1/users"
      request_policy_chain:
        - policy: "apiKeyAuth"
          params:
            header_name: "X-API-Key"
            required: true
      response_policy_chain:
        - policy: "addSecurityHeaders"
          params:
            headers: |
              X-Content-Type-Options: "nosniff"
  policy_not_supported_response:
    status_code: 500
    body: '{"error": "Policy configuration error", "code": "POLICY_NOT_SUPPORTED"}'
    headers:
      Content-Type: "application/json"
  observability:
    metrics_port: 9090
    log_level: "info"
    tracing:
      enabled: true
      sampling_rate: 0.01
"#;

fn err(text: &str) -> String {
    parse(text).unwrap_err().to_string()
}

#[test]
fn spec_example_parses_with_defaults() {
    let c = parse(FULL).unwrap();
    assert_eq!(c.agents[0].retry.max_attempts, 3);
    assert!(!c.agents[0].fail_open);
    assert_eq!(c.agents[0].health_check_timeout_ms, 100);
    assert_eq!(c.agent_unavailable_response.status_code, 503);
    assert_eq!(c.agent_unavailable_response.headers["Retry-After"], "30");
    assert_eq!(c.policy_failure_response.status_code, 500);
    assert!(c.policy_failure_response.body.contains("POLICY_EXECUTION_FAILED"));
    assert_eq!(c.response_phase_validation, PhaseValidation::Permissive);
    assert_eq!(c.server.phase_timeout_ms, 2000);
}

#[test]
fn minimal_config_takes_all_defaults() {
    let c = parse("policy_kernel: {}").unwrap();
    assert_eq!(c.server.address, "127.0.0.1");
    assert_eq!(c.server.port, None);
    assert_eq!(c.server.tcp_addr(), Some("127.0.0.1:9001".parse().unwrap()));
    assert_eq!(c.server.max_concurrent_streams, 1000);
    assert_eq!(c.server.worker_threads, 0);
    assert_eq!(c.server.max_request_body_bytes, 1024 * 1024);
    assert_eq!(c.payload_too_large_response.status_code, 413);
    assert!(c.payload_too_large_response.body.contains("PAYLOAD_TOO_LARGE"));
    assert_eq!(c.observability.metrics_port, 9090);
    assert_eq!(c.observability.metrics_address, "127.0.0.1");
    assert_eq!(c.policy_not_supported_response.status_code, 500);
    let agent = parse("policy_kernel:\n  agents:\n    - name: a\n      socket_path: /tmp/a.sock\n").unwrap();
    assert_eq!(agent.agents[0].timeout_ms, 500);
    assert_eq!(agent.agents[0].retry.max_attempts, 1);
    assert_eq!(agent.agents[0].health_check_interval_ms, 5000);
}

#[test]
fn unknown_key_names_field_and_line() {
    let e = err("policy_kernel:\n  server:\n    port: 9001\n    prot: 1\n");
    assert!(e.contains("unknown field `prot`"), "{e}");
    assert!(e.contains("line 4"), "{e}");
}

#[test]
fn wrong_type_and_syntax_errors_name_the_line() {
    let e = err("policy_kernel:\n  server:\n    port: \"abc\"\n");
    assert!(e.contains("line 3"), "{e}");
    let e = err("policy_kernel:\n  server: [unclosed\n");
    assert!(e.contains("line"), "{e}");
    assert!(err("other: 1").contains("unknown field `other`"));
}

#[test]
fn duplicate_names_are_refused_with_line() {
    let e =
        err("policy_kernel:\n  agents:\n    - name: a\n      socket_path: /x\n    - name: a\n      socket_path: /y\n");
    assert!(
        e.contains("agents[1].name") && e.contains("duplicate agent name") && e.contains("line 5"),
        "{e}"
    );
    let e = err("policy_kernel:\n  route_policies:\n    - route_name: r\n    - route_name: \"r\"\n");
    assert!(
        e.contains("route_policies[1].route_name") && e.contains("line 4"),
        "{e}"
    );
}

#[test]
fn ranges_and_references_are_checked() {
    let agent = |extra: &str| format!("policy_kernel:\n  agents:\n    - name: a\n      socket_path: /x\n{extra}");
    let e = err(&agent("      timeout_ms: 5001\n"));
    assert!(e.contains("agents[0].timeout_ms") && e.contains("line 5"), "{e}");
    assert!(parse(&agent("      timeout_ms: 5000\n")).is_ok());
    assert!(err(&agent("      retry: {max_attempts: 0}\n")).contains("retry.max_attempts"));
    let e = err(&agent("  route_policies:\n    - route_name: r\n      request_policy_chain:\n        - policy: p\n          agent: nope\n"));
    assert!(
        e.contains("request_policy_chain[0].agent") && e.contains("\"nope\""),
        "{e}"
    );
    let e = err(&agent("  route_policies:\n    - route_name: r\n      request_policy_chain:\n        - policy: p\n          on_failure: explode\n"));
    assert!(e.contains("on_failure") || e.contains("unknown variant"), "{e}");
    assert!(err("policy_kernel:\n  response_phase_validation: loose\n").contains("unknown variant"));
    assert!(err("policy_kernel:\n  observability: {log_level: loud}\n").contains("log_level"));
    assert!(err("policy_kernel:\n  server: {address: nowhere}\n").contains("server.address"));
    assert!(err("policy_kernel:\n  server: {worker_threads: 257}\n").contains("server.worker_threads"));
    assert!(err("policy_kernel:\n  server: {max_request_body_bytes: 0}\n").contains("server.max_request_body_bytes"));
    assert!(err("policy_kernel:\n  server: {max_request_body_bytes: 16777216}\n").contains("max_request_body_bytes"));
    assert_eq!(
        parse("policy_kernel:\n  server: {worker_threads: 1}\n")
            .unwrap()
            .server
            .worker_threads,
        1
    );
}

#[test]
fn configured_responses_are_checked() {
    let e = err("policy_kernel:\n  agent_unavailable_response:\n    status_code: 99\n");
    assert!(e.contains("agent_unavailable_response.status_code"), "{e}");
    let e =
        err("policy_kernel:\n  policy_failure_response:\n    status_code: 500\n    headers: {\"X-A\": \"a\\r\\nb\"}\n");
    assert!(e.contains("policy_failure_response.headers.X-A"), "{e}");
}

#[test]
fn every_file_under_config_parses() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            count += 1;
        }
    }
    assert!(count > 0, "no config files found in {}", dir.display());
}

#[test]
fn container_config_serves_the_same_agents_and_routes() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let local = load(&dir.join("kernel-config.yaml")).unwrap();
    let container = load(&dir.join("container.yaml")).unwrap();
    assert_eq!(format!("{:?}", local.agents), format!("{:?}", container.agents));
    assert_eq!(
        format!("{:?}", local.route_policies),
        format!("{:?}", container.route_policies)
    );
    assert_eq!(container.observability.metrics_address, "0.0.0.0");
    // What ships serves ext_proc on the socket only: no TCP listener.
    for (name, cfg) in [("container.yaml", &container), ("kernel-config.yaml", &local)] {
        assert!(cfg.server.socket_path.is_some(), "{name}");
        assert_eq!(cfg.server.tcp_addr(), None, "{name} opens a TCP ext_proc listener");
    }
}

#[test]
fn a_tcp_listener_opens_only_when_asked_for_or_without_a_socket() {
    let server = |yaml: &str| parse(&format!("policy_kernel:\n  server: {yaml}\n")).unwrap().server;
    // No socket: the spec's default listener.
    assert_eq!(server("{}").tcp_addr(), Some("127.0.0.1:9001".parse().unwrap()));
    // A socket alone: no TCP.
    assert_eq!(server("{socket_path: /tmp/k.sock}").tcp_addr(), None);
    // A socket and a port: both.
    assert_eq!(
        server("{socket_path: /tmp/k.sock, port: 0, address: 0.0.0.0}").tcp_addr(),
        Some("0.0.0.0:0".parse().unwrap())
    );
}

#[test]
fn a_non_loopback_tcp_listener_without_tls_names_the_risk() {
    let server = |yaml: &str| parse(&format!("policy_kernel:\n  server: {yaml}\n")).unwrap().server;
    let risk = server("{address: 0.0.0.0, port: 9001}").exposure_warning().unwrap();
    assert!(risk.contains("0.0.0.0:9001") && risk.contains("without TLS"), "{risk}");
    assert!(risk.contains("API keys") && risk.contains("audit journal"), "{risk}");
    assert!(server("{address: 10.1.2.3}").exposure_warning().is_some());
    for quiet in [
        "{address: 127.0.0.1, port: 9001}",
        "{address: \"::1\", port: 9001}",
        "{socket_path: /tmp/k.sock}",
        "{address: 0.0.0.0, port: 9001, tls: {cert_path: c, key_path: k, client_ca_path: ca}}",
    ] {
        assert_eq!(server(quiet).exposure_warning(), None, "{quiet}");
    }
}

#[test]
fn tls_and_peer_uids_need_the_listener_they_protect() {
    let e = err(
        "policy_kernel:\n  server: {socket_path: /tmp/k.sock, tls: {cert_path: c, key_path: k, client_ca_path: ca}}\n",
    );
    assert!(
        e.contains("policy_kernel.server.tls") && e.contains("server.port"),
        "{e}"
    );
    let e = err("policy_kernel:\n  server: {tls: {cert_path: c, key_path: k}}\n");
    assert!(e.contains("client_ca_path"), "{e}");
    let e = err("policy_kernel:\n  server: {allowed_peer_uids: [1000]}\n");
    assert!(
        e.contains("policy_kernel.server.allowed_peer_uids") && e.contains("socket_path"),
        "{e}"
    );
    let e = err("policy_kernel:\n  server: {socket_path: /tmp/k.sock, allowed_peer_uids: []}\n");
    assert!(e.contains("at least one uid"), "{e}");
}

#[test]
fn reloads_name_the_settings_that_wait_for_a_restart() {
    let base = "policy_kernel:\n  server: {port: 9001}\n  observability: {tracing: {sampling_rate: 0.5}}\n  route_policies:\n    - route_name: a\n";
    let old = parse(base).unwrap();
    assert!(old.restart_only_changes(&parse(base).unwrap()).is_empty());
    // Routes, log level and agents apply at reload: not named.
    let applied = parse("policy_kernel:\n  server: {port: 9001, phase_timeout_ms: 100}\n  observability: {log_level: debug, tracing: {sampling_rate: 0.5}}\n  route_policies:\n    - route_name: b\n").unwrap();
    assert!(old.restart_only_changes(&applied).is_empty());
    let next = parse(
        "policy_kernel:\n  server: {port: 9002, max_concurrent_streams: 10, drain_timeout_ms: 1}\n  observability: {metrics_address: 0.0.0.0, tracing: {sampling_rate: 1.0, otlp_endpoint: \"http://127.0.0.1:4317\"}}\n",
    )
    .unwrap();
    assert_eq!(
        old.restart_only_changes(&next),
        [
            "server.port",
            "server.max_concurrent_streams",
            "server.drain_timeout_ms",
            "observability.metrics_address",
            "observability.tracing.sampling_rate",
            "observability.tracing.otlp_endpoint"
        ]
    );
}

#[test]
fn otlp_endpoints_must_be_plain_http_urls() {
    let cfg = |e: &str| format!("policy_kernel:\n  observability:\n    tracing:\n      otlp_endpoint: \"{e}\"\n");
    for ok in ["http://127.0.0.1:4317", "http://collector:4317", "http://[::1]:4317"] {
        assert!(parse(&cfg(ok)).is_ok(), "{ok}");
    }
    for (bad, why) in [
        ("127.0.0.1:4317", "does not start with http://"),
        ("https://collector:4317", "https is not supported"),
        ("not a url", "is not a URL"),
        ("grpc://collector:4317", "does not start with http://"),
    ] {
        let e = err(&cfg(bad));
        assert!(e.contains("observability.tracing.otlp_endpoint"), "{e}");
        assert!(e.contains(why), "{bad}: {e}");
        assert!(e.contains("line 4"), "{bad}: {e}");
    }
}

#[test]
fn generations_defaults_and_refusals() {
    let base = "policy_kernel:\n  server:\n    socket_path: /run/pk/kernel.sock\n";
    let cfg = parse(base).expect("defaults");
    let g = &cfg.server.generations;
    assert_eq!(g.ready_timeout_ms, 30_000);
    assert_eq!(g.header, None);
    assert_eq!(
        g.control_socket(cfg.server.socket_path.as_deref()),
        Some(std::path::PathBuf::from("/run/pk/kernel.sock.control"))
    );
    let with = |lines: &str| parse(&format!("{base}    generations:\n{lines}"));
    let cfg =
        with("      header: x-policy-kernel-generation\n      control_socket: /run/pk/ctl.sock\n").expect("valid");
    assert_eq!(
        cfg.server.generations.header.as_deref(),
        Some("x-policy-kernel-generation")
    );
    assert_eq!(
        cfg.server.generations.control_socket(None),
        Some(std::path::PathBuf::from("/run/pk/ctl.sock"))
    );
    for (lines, field) in [
        ("      header: X-Gen\n", "generations.header"),
        ("      header: \"bad header\"\n", "generations.header"),
        ("      header: \":status\"\n", "generations.header"),
        ("      ready_timeout_ms: 10\n", "generations.ready_timeout_ms"),
        ("      control_socket: \"\"\n", "generations.control_socket"),
    ] {
        let err = with(lines).expect_err(lines).to_string();
        assert!(err.contains(field), "{lines}: {err}");
    }
    assert!(with("      surprise: 1\n").is_err(), "unknown keys are refused");
}
