//! End-to-end: real HTTP requests through a real Envoy 1.40 to the kernel
//! binary, to `policy-test-agent` processes on Unix sockets, to an upstream
//! that echoes what it received.

mod support;

use std::time::{Duration, Instant};

use support::stack::StackBuilder;
use support::*;

/// Test agents `(name, script, extra agent config lines)` and the harness
/// stack; `routes` is the YAML list under `route_policies:`.
fn stack(agents: &[(&str, &str, &str)], routes: &str) -> StackBuilder {
    agents
        .iter()
        .fold(Stack::builder(), |b, (n, script, extra)| {
            b.test_agent_with(n, script, extra)
        })
        .config(&format!("  route_policies:\n{routes}"))
}

/// Calls the agents of `s` received, all together.
fn all_events(s: &Stack) -> usize {
    s.test_agents.iter().map(|(_, a)| a.events().len()).sum()
}

/// Policies that tag the request so the upstream shows which ran.
fn tagger(policies: &[&str]) -> String {
    let mut s = String::from("policies:\n");
    for p in policies {
        s.push_str(&format!(
            "  - name: {p}\n    request:\n      - append_header: {{name: x-ran, value: {p}}}\n"
        ));
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_scenarios_6_5() {
    let healthy = tagger(&["apiKeyAuth", "jwtValidation", "roleCheck", "auth"]);
    let rl = tagger(&["rateLimit"]);
    let down_transform = format!("not_serving: true\n{}", tagger(&["transform", "encrypt2"]));
    let down_auth = format!("not_serving: true\n{}", tagger(&["auth2"]));
    let routes = "    - route_name: users\n      request_policy_chain: [{policy: apiKeyAuth}, {policy: rateLimit}, {policy: jwtValidation}]\n    - route_name: admin\n      request_policy_chain: [{policy: jwtValidation}, {policy: roleCheck}]\n      response_policy_chain: [{policy: auditLog}]\n    - route_name: fail\n      request_policy_chain: [{policy: auth}, {policy: transform}]\n    - route_name: flaky\n      request_policy_chain: [{policy: auth2}, {policy: rateLimit}]\n";
    let s = stack(
        &[
            ("authagent", &healthy, ""),
            ("ratelimiter", &rl, ""),
            ("transformer", &down_transform, ""),
            ("authdown", &down_auth, ""),
        ],
        routes,
    )
    .unhealthy_agents()
    .start()
    .await;

    // Scenario 1: all supported and healthy: the whole chain runs, in order.
    let r = s.get("/users/1", &[]).await;
    assert_eq!(r.status, 200, "{}", s.diag_tail(40));
    assert_eq!(r.echo()["headers"]["x-ran"], "apiKeyAuth,rateLimit,jwtValidation");

    // Scenario 2: auditLog (response chain) supported by nobody: 500 before anything runs.
    let before = s.test_agent("authagent").events().len();
    let r = s.get("/admin/x", &[]).await;
    assert_eq!(r.status, 500);
    assert!(r.body.contains("POLICY_NOT_SUPPORTED"), "{}", r.body);
    assert_eq!(r.header("x-policy-error"), Some("configuration"));
    assert_eq!(
        s.test_agent("authagent").events().len(),
        before,
        "no policy may run on an invalid route"
    );

    // Scenario 3: transform's only agent is unhealthy: 503 with Retry-After.
    let r = s.get("/fail", &[]).await;
    assert_eq!(r.status, 503, "{}", s.diag_tail(40));
    assert!(r.body.contains("AGENT_UNAVAILABLE"));
    assert_eq!(r.header("retry-after"), Some("30"));

    // Scenario 4: every agent of auth2 unhealthy: 503.
    assert_eq!(s.get("/flaky", &[]).await.status, 503);

    // Scenario 5: unknown route: CONTINUE, no agent call.
    let calls: usize = all_events(&s);
    let r = s.get("/not-configured", &[]).await;
    assert_eq!(r.status, 200);
    assert!(r.echo()["headers"].get("x-ran").is_none());
    assert_eq!(all_events(&s), calls);
    assert!(s.kernel.log_has("Route not found - allowing request through"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_groups_propagate_context_in_order() {
    let agent1 = r#"policies:
  - name: first
    params: [roles]
    request:
      - set_header: {name: x-trace, value: agent1}
      - set_header: {name: x-a1, value: from-agent1}
      - set_header: {name: x-roles, value: "${param:roles}"}
      - set_metadata: {key: user, value: "42"}
  - name: last
    request:
      - set_header: {name: x-trace, value: "${header:x-trace},agent1"}
"#;
    let agent2 = r#"policies:
  - name: middle
    request:
      - set_header: {name: x-trace, value: "${header:x-trace},agent2"}
      - set_header: {name: x-seen-a1, value: "${header:x-a1}"}
      - set_header: {name: x-seen-user, value: "${meta:user}"}
"#;
    let routes = "    - route_name: chain\n      request_policy_chain:\n        - policy: first\n          params: {roles: [\"admin\"]}\n        - policy: middle\n        - policy: last\n";
    let s = stack(&[("agent1", agent1, ""), ("agent2", agent2, "")], routes)
        .start()
        .await;
    let r = s.get("/chain", &[("x-request-id", "rid-3groups")]).await;
    assert_eq!(r.status, 200, "{}", s.diag_tail(40));
    let e = r.echo();
    assert_eq!(e["headers"]["x-trace"], "agent1,agent2,agent1");
    assert_eq!(e["headers"]["x-seen-a1"], "from-agent1");
    assert_eq!(e["headers"]["x-seen-user"], "42");
    assert_eq!(e["headers"]["x-roles"], r#"["admin"]"#);
    // Two calls to agent1, one to agent2, with Envoy's request id.
    let a1 = s.test_agent("agent1").events();
    assert_eq!(
        a1,
        vec![
            "start first rid-3groups",
            "end first rid-3groups",
            "start last rid-3groups",
            "end last rid-3groups"
        ]
    );
    assert_eq!(
        s.test_agent("agent2").events(),
        vec!["start middle rid-3groups", "end middle rid-3groups"]
    );
    // The decision metadata reached Envoy's access log.
    let deadline = Instant::now() + Duration::from_secs(3);
    while !s.envoy.log().contains("\"user\":\"42\"") && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(s.envoy.log().contains("\"user\":\"42\""), "{}", s.diag_tail(40));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_deny_rewrite_and_response_changes() {
    let agent1 = r#"policies:
  - name: setUser
    request:
      - set_header: {name: x-user-id, value: "123"}
      - set_header: {name: x-tmp, value: "temp"}
  - name: gate
    rules:
      - when: {header_absent: x-token}
        request:
          - immediate: {status: 401, body: '{"error":"no token"}', headers: {content-type: application/json, www-authenticate: Bearer}, reason: authentication_failed}
    request:
      - set_header: {name: x-gate, value: passed}
  - name: rewrite
    request:
      - set_path: /moved/path
      - set_query_param: {name: user, value: "a b"}
      - remove_query_param: debug
      - set_method: POST
  - name: decorate
    phases: response
    response:
      - set_header: {name: x-resp, value: "status was ${status}"}
      - set_status: 418
      - set_metadata: {key: decorated, value: "yes"}
"#;
    let agent2 = r#"policies:
  - name: overrideUser
    request:
      - set_header: {name: x-user-id, value: "456"}
      - remove_header: x-tmp
  - name: after
    request:
      - set_header: {name: x-after, value: ran}
  - name: canary
    request:
      - set_header: {name: x-canary, value: "1"}
  - name: tag
    request:
      - set_metadata: {key: tagged, value: "req"}
  - name: plainResponse
    phases: response
    response:
      - set_header: {name: x-plain, value: "yes"}
"#;
    let routes = "    - route_name: conflict\n      request_policy_chain: [{policy: setUser}, {policy: overrideUser}, {policy: tag}]\n      response_policy_chain: [{policy: plainResponse}]\n    - route_name: deny\n      request_policy_chain: [{policy: gate}, {policy: after}]\n    - route_name: rewrite\n      request_policy_chain: [{policy: rewrite}]\n    - route_name: resp\n      request_policy_chain: [{policy: tag}]\n      response_policy_chain: [{policy: decorate}]\n    - route_name: users\n      request_policy_chain: [{policy: canary}]\n";
    let s = stack(&[("agent1", agent1, ""), ("agent2", agent2, "")], routes)
        .start()
        .await;

    // Last wins; a remove after a set removes.
    let r = s.get("/conflict", &[]).await;
    assert_eq!(r.status, 200, "{}", s.diag_tail(40));
    assert_eq!(r.echoed_header("x-user-id").as_deref(), Some("456"));
    assert_eq!(r.echoed_header("x-tmp"), None);
    assert_eq!(r.header("x-plain"), Some("yes"));

    // An immediate 401 stops the chain: agent2's policy never runs.
    let r = s.get("/deny", &[]).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.body, r#"{"error":"no token"}"#);
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    assert!(
        !s.test_agent("agent2").events().iter().any(|e| e.contains("after")),
        "chain did not stop"
    );
    let r = s.get("/deny", &[("x-token", "t")]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.echoed_header("x-after").as_deref(), Some("ran"));

    // Path, query and method rewrite, as the upstream saw them; Envoy routed
    // the request by its new path (route `moved`, not `rewrite`).
    let r = s.get("/rewrite/orig?keep=1&debug=true", &[]).await;
    assert_eq!(r.status, 200, "{}", s.diag_tail(40));
    assert_eq!(r.echo()["method"], "POST");
    assert_eq!(r.echo()["path"], "/moved/path?keep=1&user=a%20b");
    assert_eq!(
        r.echoed_header("x-routed-by").as_deref(),
        Some("moved"),
        "not re-routed"
    );

    // A header a policy set re-routes too: route `canary` matches on it.
    let r = s.get("/users/1", &[]).await;
    assert_eq!(r.status, 200, "{}", s.diag_tail(40));
    assert_eq!(r.echo()["path"], "/users/1");
    assert_eq!(
        r.echoed_header("x-routed-by").as_deref(),
        Some("canary"),
        "not re-routed by header"
    );

    // Response header and :status override.
    let r = s.get("/resp", &[("x-echo-status", "404")]).await;
    assert_eq!(r.status, 418, "{}", s.diag_tail(40));
    assert_eq!(r.header("x-resp"), Some("status was 404"));

    // Envoy merges each answer's dynamic metadata into the stream's: the
    // request phase's stays when the response phase changes nothing
    // (`conflict`) and when it adds to it (`resp`).
    for (path, keys) in [
        ("/conflict ", &[r#""route":"conflict""#, r#""tagged":"req""#][..]),
        (
            "/resp ",
            &[r#""route":"resp""#, r#""tagged":"req""#, r#""decorated":"yes""#][..],
        ),
    ] {
        let deadline = Instant::now() + Duration::from_secs(3);
        let line = loop {
            let log = s.envoy.log();
            let line = log.lines().find(|l| l.contains(path)).map(String::from);
            match line {
                Some(l) => break l,
                None if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(50)).await,
                None => panic!("no access log line for {path}: {}", s.diag_tail(40)),
            }
        };
        for key in keys {
            assert!(line.contains(key), "{key} missing from {line}");
        }
    }
}

/// A policy that needs the request body, records it, and replaces it.
const REQ_BODY: &str = r#"policies:
  - name: reqBody
    requires_body: true
    request:
      - set_header: {name: x-saw-body, value: "${body}"}
      - set_body: {body: "replaced request body", content_type: text/plain}
"#;

/// POSTs `{"original":true}` (JSON) on route `body`.
async fn post_original(s: &Stack) -> Got {
    let json = [("content-type", "application/json")];
    s.send("POST", "/body", &json, Some(r#"{"original":true}"#)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_are_buffered_only_when_needed_and_replaced() {
    let agent = REQ_BODY.to_string()
        + r#"  - name: respBody
    phases: response
    requires_body: true
    response:
      - set_body: {body: "new response body", content_type: text/plain}
  - name: headersOnly
    request:
      - set_header: {name: x-body-included, value: "${body_included}"}
"#;
    let routes = "    - route_name: body\n      request_policy_chain: [{policy: reqBody}]\n      response_policy_chain: [{policy: respBody}]\n    - route_name: users\n      request_policy_chain: [{policy: headersOnly}]\n";
    let s = stack(&[("bodyagent", &agent, "")], routes).start().await;

    let r = post_original(&s).await;
    assert_eq!(r.status, 200, "{}", s.diag_tail(40));
    assert_eq!(r.body, "new response body");
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(r.header("content-length"), Some("17"));
    // The upstream got the replaced request body; the agent saw the original.
    let r2 = s.send("POST", "/body", &[("x-echo-body", "unused")], Some("abc")).await;
    assert_eq!(r2.body, "new response body");
    let agent_events = s.test_agent("bodyagent").events();
    assert!(agent_events.iter().filter(|e| e.starts_with("end reqBody")).count() >= 2);

    // A header-only chain never asks Envoy for the body.
    let r = s.send("POST", "/users", &[], Some("some body")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.echoed_header("x-body-included").as_deref(), Some("false"));
    assert_eq!(r.echo()["body"], "some body");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_body_replacement_reaches_upstream() {
    // A rewrite decided on the body (answered to Envoy's body message)
    // re-routes the request too.
    let agent = REQ_BODY.to_string()
        + r#"  - name: moveOnBody
    requires_body: true
    request:
      - set_path: /moved/after-body
"#;
    let routes = "    - route_name: body\n      request_policy_chain: [{policy: reqBody}, {policy: moveOnBody}]\n";
    let s = stack(&[("bodyagent", &agent, "")], routes).start().await;
    let r = post_original(&s).await;
    assert_eq!(r.status, 200, "{}", s.diag_tail(40));
    let e = r.echo();
    assert_eq!(e["body"], "replaced request body");
    assert_eq!(e["headers"]["content-length"], "21");
    assert_eq!(e["headers"]["content-type"], "text/plain");
    assert_eq!(e["headers"]["x-saw-body"], r#"{"original":true}"#);
    assert_eq!(e["path"], "/moved/after-body");
    assert_eq!(e["headers"]["x-routed-by"], "moved", "not re-routed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_follow_fail_open_and_invalid_replies_fail_closed() {
    let slow = |name: &str| {
        format!("policies:\n  - name: {name}\n    delay_ms: 1500\n    request:\n      - set_header: {{name: x-slow, value: done}}\n")
    };
    let invalid = "policies:\n  - name: crlf\n    request:\n      - set_header: {name: x-evil, value: \"a\\r\\nx-injected: 1\"}\n  - name: wrongId\n    request_id: wrong\n    request:\n      - set_header: {name: x-a, value: b}\n";
    let routes = "    - route_name: slow\n      request_policy_chain: [{policy: slowOpen}]\n    - route_name: fail\n      request_policy_chain: [{policy: slowClosed}]\n    - route_name: flaky\n      request_policy_chain: [{policy: slowClosed, on_failure: continue}]\n    - route_name: invalid\n      request_policy_chain: [{policy: crlf}]\n    - route_name: users\n      request_policy_chain: [{policy: wrongId}]\n";
    let s = stack(
        &[
            (
                "openagent",
                &slow("slowOpen"),
                "      timeout_ms: 200\n      fail_open: true\n",
            ),
            ("closedagent", &slow("slowClosed"), "      timeout_ms: 200\n"),
            ("badagent", invalid, ""),
        ],
        routes,
    )
    .start()
    .await;
    // Fail-open: the request goes on without the policy's header, and the
    // kernel cancelled the call it gave up on.
    let r = s.get("/slow", &[("x-request-id", "slow-1")]).await;
    assert_eq!(r.status, 200, "{}", s.diag_tail(40));
    assert_eq!(r.echoed_header("x-slow"), None);
    // The cancellation reaches the agent after the answer left: wait for it.
    let cancelled = "cancel slowOpen slow-1".to_string();
    until(
        "the agent to see the call cancelled",
        Duration::from_secs(5),
        || async { s.test_agent("openagent").events().contains(&cancelled) },
    )
    .await;
    // Fail-closed: policy_failure_response.
    let r = s.get("/fail", &[]).await;
    assert_eq!(r.status, 500, "{}", s.diag_tail(40));
    assert!(r.body.contains("POLICY_EXECUTION_FAILED"), "{}", r.body);
    // on_failure: continue overrides the agent's fail-closed default.
    assert_eq!(s.get("/flaky", &[]).await.status, 200);
    // CR/LF in a header value: the kernel's failure response, never Envoy's own 500.
    let r = s.get("/invalid", &[]).await;
    assert_eq!(r.status, 500);
    assert!(r.body.contains("POLICY_EXECUTION_FAILED"), "{}", r.body);
    assert!(r.header("x-injected").is_none());
    // A reply for another request id is invalid too.
    let r = s.get("/users", &[]).await;
    assert_eq!(r.status, 500);
    assert!(r.body.contains("POLICY_EXECUTION_FAILED"));
    assert!(s.kernel.log_has("does not match"), "{}", s.diag_tail(40));
    // Envoy never had to fail a request on its own (the counters are read:
    // the streams started are counted).
    assert!(
        s.envoy.stat("http.ingress.ext_proc.streams_started") > 0,
        "{}",
        s.diag_tail(40)
    );
    assert_eq!(s.envoy.stat("http.ingress.ext_proc.streams_failed"), 0);
    assert!(!s.envoy.log().contains("ext_proc_error"), "{}", s.diag_tail(40));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_agent_gives_503_then_recovers() {
    let script = tagger(&["guard"]);
    let routes = "    - route_name: flaky\n      request_policy_chain: [{policy: guard}]\n";
    let mut s = stack(&[("victim", &script, "")], routes).start().await;
    assert_eq!(s.get("/flaky", &[]).await.status, 200, "{}", s.diag_tail(40));

    s.test_agent_mut("victim").kill();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    loop {
        let r = s.get("/flaky", &[]).await;
        seen.push(r.status);
        if r.status == 503 {
            assert!(r.body.contains("AGENT_UNAVAILABLE"));
            break;
        }
        // Before the health check notices, the call itself fails: fail-closed.
        assert!(
            r.status == 500 && r.body.contains("POLICY_EXECUTION_FAILED"),
            "unexpected {} {}",
            r.status,
            r.body
        );
        assert!(Instant::now() < deadline, "never saw 503: {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    s.test_agent_mut("victim").restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = s.get("/flaky", &[]).await;
        if r.status == 200 {
            assert_eq!(r.echoed_header("x-ran").as_deref(), Some("guard"));
            break;
        }
        assert_eq!(r.status, 503, "{}", r.body);
        assert!(Instant::now() < deadline, "agent never recovered: {}", s.diag_tail(40));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn circuit_breaker_opens_sheds_and_closes_after_a_probe() {
    let slow = "policies:\n  - name: guard\n    delay_ms: 1000\n    request:\n      - set_header: {name: x-guard, value: slow}\n";
    let routes = "    - route_name: flaky\n      request_policy_chain: [{policy: guard}]\n";
    // A passing health check ends an open circuit's cool-down (the next call
    // is the probe), so health checks here are slower than the test's steps.
    let extra = "      timeout_ms: 100\n      health_check_interval_ms: 2000\n      circuit_breaker: {failure_threshold: 3, cooldown_ms: 1500}\n";
    let mut s = stack(&[("breaker", slow, extra)], routes).start().await;
    let starts = |s: &Stack| {
        s.test_agent("breaker")
            .events()
            .iter()
            .filter(|e| e.starts_with("start"))
            .count()
    };

    // Three timeouts: fail-closed answers, the third opens the circuit.
    for _ in 0..3 {
        let r = s.get("/flaky", &[]).await;
        assert_eq!(r.status, 500, "{}", r.body);
        assert!(r.body.contains("POLICY_EXECUTION_FAILED"));
    }
    assert_eq!(
        s.kernel.metric(r#"policy_kernel_agent_circuit_state{agent="breaker"}"#),
        1.0,
        "{}",
        s.diag_tail(40)
    );
    // Open: the agent counts as unavailable; no call reaches it.
    let calls = starts(&s);
    let r = s.get("/flaky", &[]).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("AGENT_UNAVAILABLE"));
    assert_eq!(starts(&s), calls, "a call went through an open circuit");

    // The agent is fixed; after the cool-down one probe closes the circuit.
    let script = s.test_agent("breaker").script.clone();
    let fixed = std::fs::read_to_string(&script)
        .unwrap()
        .replace("delay_ms: 1000", "delay_ms: 0")
        .replace("value: slow", "value: fast");
    std::fs::write(&script, fixed).unwrap();
    s.test_agent_mut("breaker").kill();
    s.test_agent_mut("breaker").restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = s.get("/flaky", &[]).await;
        if r.status == 200 {
            assert_eq!(r.echoed_header("x-guard").as_deref(), Some("fast"));
            break;
        }
        assert!(r.status == 503 || r.status == 500, "{} {}", r.status, r.body);
        assert!(Instant::now() < deadline, "circuit never closed: {}", s.diag_tail(40));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        s.kernel.metric(r#"policy_kernel_agent_circuit_state{agent="breaker"}"#),
        0.0
    );
}

/// Envoy may reach the kernel over its TCP listener (`server.address` /
/// `server.port`, HTTP/2 without TLS) instead of the Unix socket: both phases
/// and a deny work the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_reaches_the_kernel_over_tcp() {
    let s = stack(
        &[(
            "tcp",
            r#"policies:
  - name: tag
    request:
      - set_header: {name: x-ran, value: tag}
  - name: stamp
    phases: response
    response:
      - set_header: {name: x-stamp, value: "status was ${status}"}
  - name: refuse
    request:
      - immediate: {status: 403, body: refused}
"#,
            "",
        )],
        "    - route_name: resp\n      request_policy_chain: [{policy: tag}]\n      response_policy_chain: [{policy: stamp}]\n    - route_name: deny\n      request_policy_chain: [{policy: refuse}]\n",
    )
    .envoy_tcp()
    .start()
    .await;
    let diag = || s.diag_tail(40);

    let r = s.get("/resp/x", &[]).await;
    assert_eq!(r.status, 200, "{}", diag());
    assert_eq!(r.echoed_header("x-ran").as_deref(), Some("tag"));
    assert_eq!(r.header("x-stamp"), Some("status was 200"), "{}", diag());

    let r = s.get("/deny", &[]).await;
    assert_eq!(r.status, 403, "{}", diag());
    assert_eq!(r.body, "refused");
}
