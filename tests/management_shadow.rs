//! Shadow-mode routes through a real Envoy: the chain runs on the real
//! agent, but every request goes through unchanged; the would-be decision
//! is counted, logged and put in the dynamic metadata (Envoy's access log
//! shows it). A route switched to shadow through the management API
//! behaves the same.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::management;
use support::*;

const GUARD: &str = r#"policies:
  - name: denyAll
    phases: request
    request: [{immediate: {status: 403, body: "blocked", reason: guard}}]
  - name: tagIt
    phases: request
    request:
      - set_header: {name: x-shadow-tag, value: "1"}
"#;

const ROUTES: &str = r#"  route_policies:
    - route_name: deny
      mode: shadow
      request_policy_chain:
        - policy: denyAll
    - route_name: users
      mode: shadow
      request_policy_chain:
        - policy: tagIt
    - route_name: fail
      mode: shadow
      request_policy_chain:
        - policy: ghost
    - route_name: admin
      request_policy_chain:
        - policy: denyAll
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_routes_let_every_request_through_and_record_the_would_be_decision() {
    let (s, api) = management::start(Stack::builder().test_agent("guard", GUARD), ROUTES).await;
    let (kernel, envoy, guard) = (&s.kernel, &s.envoy, s.test_agent("guard"));
    let diag = || s.diag();

    // Enforced, the chain denies.
    let got = s.get("/admin", &[]).await;
    assert_eq!(got.status, 403, "{}", diag());

    for _ in 0..5 {
        let got = s.get("/deny", &[]).await;
        assert_eq!(got.status, 200, "{}", diag());
        assert_eq!(got.echo()["path"], "/deny");
    }
    let got = s.get("/users", &[]).await;
    assert_eq!(got.status, 200);
    assert_eq!(
        got.echoed_header("x-shadow-tag"),
        None,
        "no mutation reaches the upstream"
    );
    // A policy no agent supports: 500 when enforced, nothing in shadow.
    let got = s.get("/fail", &[]).await;
    assert_eq!(got.status, 200, "{}", diag());

    // The chain really ran on the agent.
    let calls = guard
        .events()
        .iter()
        .filter(|e| e.starts_with("start") && e.contains("denyAll"))
        .count();
    assert_eq!(calls, 6, "1 enforced + 5 shadow: {:?}", guard.events());

    let m = |route: &str, decision: &str| {
        kernel.metric(&format!(
            r#"policy_kernel_shadow_decisions_total{{decision="{decision}",route="{route}"}}"#
        ))
    };
    until("shadow decisions counted", Duration::from_secs(5), || async {
        m("deny", "deny") == 5.0
    })
    .await;
    assert_eq!(m("users", "modify"), 1.0);
    assert_eq!(m("fail", "deny"), 1.0);
    assert_eq!(m("admin", "deny"), 0.0, "enforced routes are not shadow decisions");

    let logged: Vec<Value> = kernel
        .log()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["message"] == "shadow route: the chain's decision was not applied")
        .collect();
    let denials = logged
        .iter()
        .filter(|l| l["route"] == "deny" && l["decision"] == "deny")
        .count();
    assert_eq!(denials, 5, "{}", diag());
    assert!(
        logged.iter().any(|l| l["route"] == "deny" && l["status"] == 403),
        "{logged:?}"
    );
    assert!(
        logged.iter().any(|l| l["route"] == "fail" && l["status"] == 500),
        "{logged:?}"
    );

    // Envoy got the decision as dynamic metadata (its access log shows it).
    until("access log written", Duration::from_secs(5), || async {
        envoy
            .log()
            .lines()
            .any(|l| l.contains("ACCESS GET /deny 200") && l.contains("\"shadow_decision\":\"deny\""))
    })
    .await;
    assert!(
        envoy
            .log()
            .lines()
            .any(|l| l.contains("ACCESS GET /deny 200") && l.contains("\"shadow_status\":\"403\"")),
        "{}",
        envoy.log()
    );

    // Through the API: the enforced route becomes a shadow one.
    let (status, body) = api
        .put(&json!({"route_name": "admin", "mode": "shadow", "request_policy_chain": [{"policy": "denyAll"}]}))
        .await;
    assert_eq!(status, 200, "{body}");
    let got = s.get("/admin", &[]).await;
    assert_eq!(got.status, 200, "{}", diag());
    until("counted", Duration::from_secs(5), || async {
        m("admin", "deny") == 1.0
    })
    .await;
}
