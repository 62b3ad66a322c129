//! The SDK over a real Unix socket: discovery, health, ordered execution,
//! metadata passing, deny, skip, on_failure, trace context.

mod common;

use common::*;
use policy_agents::proto::{self, health_check_response::Status as Health};
use policy_agents::Agent;

#[tokio::test]
async fn discovery_lists_registered_policies() {
    let agent = TestAgent::start(probe_agent()).await;
    let config = agent.config().await;
    assert_eq!(config.agent_name, "probe-agent");
    assert_eq!(config.agent_version, "1.2.3");
    let names: Vec<_> = config.supported_policies.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["first", "second", "third", "body"]);
    let first = &config.supported_policies[0];
    assert_eq!(first.version, "9.9.9");
    assert_eq!(first.param_schema, ["action", "header", "read", "set", "sleep_ms"]);
    assert_eq!(first.supported_phases, proto::PolicyPhase::RequestResponse as i32);
    assert!(!first.requires_body);
    assert!(config.supported_policies[3].requires_body);
    agent.stop().await.unwrap();
}

#[tokio::test]
async fn duplicate_policy_names_are_refused() {
    let built = Agent::builder("dup", "1").policy(Probe("a")).policy(Probe("a")).build();
    assert!(matches!(built, Err(policy_agents::AgentError::DuplicatePolicy(n)) if n == "a"));
}

#[tokio::test]
async fn health_is_serving() {
    let agent = TestAgent::start(probe_agent()).await;
    let health = agent
        .client()
        .await
        .health_check(proto::HealthCheckRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(health.status, Health::Serving as i32);
    agent.stop().await.unwrap();
}

#[tokio::test]
async fn policies_run_in_order_and_pass_metadata() {
    let agent = TestAgent::start(probe_agent()).await;
    let call = request_call(
        "req-1",
        vec![
            policy("first", &[("set", "user=alice")], ""),
            policy("second", &[("read", "user")], ""),
            policy("third", &[("read", "from_kernel")], ""),
        ],
    );
    let mut call = call;
    call.policy_metadata.insert("from_kernel".into(), "k".into());
    let reply = agent
        .client()
        .await
        .execute_policy_request(call)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reply.request_id, "req-1");
    assert_eq!(
        set_headers(&reply),
        [
            ("x-first".to_string(), "first".to_string()),
            ("x-second".into(), "second".into()),
            ("x-read-second".into(), "alice".into()),
            ("x-third".into(), "third".into()),
            ("x-read-third".into(), "k".into()),
        ]
    );
    assert_eq!(reply.policy_metadata.get("user").map(String::as_str), Some("alice"));
    use proto::request_instruction::Instruction as I;
    assert!(reply.instructions.iter().any(|i| matches!(&i.instruction,
        Some(I::SetMetadata(m)) if m.key == "user" && m.value == "alice")));
    agent.stop().await.unwrap();
}

#[tokio::test]
async fn deny_stops_the_chain() {
    let agent = TestAgent::start(probe_agent()).await;
    let call = request_call(
        "req-2",
        vec![
            policy("first", &[], ""),
            policy("second", &[("action", "deny")], ""),
            policy("third", &[], ""),
        ],
    );
    let reply = agent
        .client()
        .await
        .execute_policy_request(call)
        .await
        .unwrap()
        .into_inner();
    let deny = immediate(&reply).expect("immediate response");
    assert_eq!(deny.status_code, 403);
    assert_eq!(&deny.body[..], b"denied");
    assert_eq!(deny.reason, "test");
    assert_eq!(deny.headers[0].key, "x-why");
    let headers = set_headers(&reply);
    assert_eq!(headers, [("x-first".to_string(), "first".to_string())]);
    agent.stop().await.unwrap();
}

#[tokio::test]
async fn skip_remaining_keeps_changes_and_stops() {
    let agent = TestAgent::start(probe_agent()).await;
    let call = request_call(
        "r",
        vec![policy("first", &[("action", "skip")], ""), policy("second", &[], "")],
    );
    let reply = agent
        .client()
        .await
        .execute_policy_request(call)
        .await
        .unwrap()
        .into_inner();
    assert!(skipped(&reply));
    assert_eq!(set_headers(&reply), [("x-first".to_string(), "first".to_string())]);
    agent.stop().await.unwrap();
}

#[tokio::test]
async fn on_failure_deny_is_the_default_and_answers_500() {
    let agent = TestAgent::start(probe_agent()).await;
    let mut client = agent.client().await;
    for mode in ["", "deny", "bogus"] {
        let call = request_call(
            "r",
            vec![policy("first", &[("action", "fail")], mode), policy("second", &[], "")],
        );
        let reply = client.execute_policy_request(call).await.unwrap().into_inner();
        let deny = immediate(&reply).expect("deny on failure");
        assert_eq!(deny.status_code, 500, "mode {mode:?}");
        assert!(String::from_utf8_lossy(&deny.body).contains("first"));
        assert!(set_headers(&reply).is_empty());
    }
    agent.stop().await.unwrap();
}

#[tokio::test]
async fn on_failure_deny_uses_the_policys_own_denial() {
    let agent = TestAgent::start(probe_agent()).await;
    let call = request_call("r", vec![policy("first", &[("action", "fail_deny")], "deny")]);
    let reply = agent
        .client()
        .await
        .execute_policy_request(call)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(immediate(&reply).map(|d| d.status_code), Some(418));
    agent.stop().await.unwrap();
}

#[tokio::test]
async fn on_failure_continue_runs_the_next_policy() {
    let agent = TestAgent::start(probe_agent()).await;
    let call = request_call(
        "r",
        vec![
            policy("first", &[("action", "fail")], "continue"),
            policy("second", &[], ""),
        ],
    );
    let reply = agent
        .client()
        .await
        .execute_policy_request(call)
        .await
        .unwrap()
        .into_inner();
    assert!(immediate(&reply).is_none());
    assert_eq!(set_headers(&reply), [("x-second".to_string(), "second".to_string())]);
    agent.stop().await.unwrap();
}

#[tokio::test]
async fn on_failure_skip_remaining_stops_without_denying() {
    let agent = TestAgent::start(probe_agent()).await;
    let call = request_call(
        "r",
        vec![
            policy("first", &[], ""),
            policy("second", &[("action", "fail")], "skip_remaining"),
            policy("third", &[], ""),
        ],
    );
    let reply = agent
        .client()
        .await
        .execute_policy_request(call)
        .await
        .unwrap()
        .into_inner();
    assert!(immediate(&reply).is_none());
    assert!(skipped(&reply));
    assert_eq!(set_headers(&reply), [("x-first".to_string(), "first".to_string())]);
    agent.stop().await.unwrap();
}

#[tokio::test]
async fn bad_params_unknown_policies_and_bad_instructions_are_failures() {
    let agent = TestAgent::start(probe_agent()).await;
    let mut client = agent.client().await;
    let cases = [
        policy("first", &[("sleep_ms", "soon")], ""),
        policy("nope", &[], ""),
        policy("first", &[("action", "bad_header")], ""),
    ];
    for case in cases {
        let reply = client
            .execute_policy_request(request_call("r", vec![case]))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(immediate(&reply).map(|d| d.status_code), Some(500));
        assert!(set_headers(&reply).is_empty());
    }
    agent.stop().await.unwrap();
}

#[tokio::test]
async fn traceparent_reaches_the_hooks() {
    let agent = TestAgent::start(probe_agent()).await;
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut request = tonic::Request::new(request_call("r", vec![policy("first", &[], "")]));
    request.metadata_mut().insert("traceparent", tp.parse().unwrap());
    let reply = agent
        .client()
        .await
        .execute_policy_request(request)
        .await
        .unwrap()
        .into_inner();
    assert!(set_headers(&reply).contains(&("x-traceparent".to_string(), tp.to_string())));
    agent.stop().await.unwrap();
}

#[tokio::test]
async fn response_phase_runs_and_denies() {
    use proto::response_instruction::Instruction as I;
    let agent = TestAgent::start(probe_agent()).await;
    let call = proto::PolicyResponsePhase {
        request_id: "resp-1".into(),
        policies: vec![
            policy("first", &[], ""),
            policy("second", &[("action", "deny")], ""),
            policy("third", &[], ""),
        ],
        request_data: None,
        response_data: Some(proto::ResponseData {
            status_code: 201,
            ..Default::default()
        }),
        deadline_ms: 1000,
        policy_metadata: Default::default(),
    };
    let reply = agent
        .client()
        .await
        .execute_policy_response(call)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reply.request_id, "resp-1");
    let kinds: Vec<String> = reply
        .instructions
        .iter()
        .map(|i| match &i.instruction {
            Some(I::SetHeader(h)) => format!("header {}={}", h.name, h.value),
            Some(I::SetStatusCode(s)) => format!("status {}", s.status_code),
            Some(I::SetBody(b)) => format!("body {}", String::from_utf8_lossy(&b.body)),
            Some(I::SkipRemainingPolicies(_)) => "skip".into(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(kinds, ["header x-first=201", "status 502", "body replaced", "skip"]);
    agent.stop().await.unwrap();
}
