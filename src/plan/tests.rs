use super::*;
use crate::config::{AgentConfig, KernelConfig};
use crate::proto::{PolicyInfo, PolicyPhase};
use crate::registry::Discovered;
use crate::snapshot::Snapshot;

fn agent(name: &str, policies: &[&str], healthy: bool) -> Arc<AgentHandle> {
    let cfg: AgentConfig =
        serde_yaml::from_str(&format!("name: {name}\nsocket_path: /nonexistent/{name}.sock")).unwrap();
    let a = AgentHandle::new(cfg);
    a.set_discovered(Discovered {
        call_stream: false,
        agent_name: name.into(),
        agent_version: "1".into(),
        policies: policies
            .iter()
            .map(|p| {
                let info = PolicyInfo {
                    name: p.to_string(),
                    param_schema: vec!["k".into()],
                    supported_phases: if p.starts_with("resp") {
                        PolicyPhase::Response
                    } else {
                        PolicyPhase::RequestResponse
                    } as i32,
                    ..Default::default()
                };
                (p.to_string(), info)
            })
            .collect(),
    });
    a.set_healthy(healthy);
    a
}

fn snapshot(routes: &str, agents: Vec<Arc<AgentHandle>>) -> Snapshot {
    let agent_yaml: String = agents
        .iter()
        .map(|a| format!("    - name: {}\n      socket_path: /x/{}.sock\n", a.name(), a.name()))
        .collect();
    let text = format!("policy_kernel:\n  agents:\n{agent_yaml}  route_policies:\n{routes}");
    let cfg: KernelConfig = crate::config::parse(&text).unwrap();
    Snapshot::build(Arc::new(cfg), agents, 1)
}

fn chain(policies: &[&str]) -> String {
    let entries: String = policies.iter().map(|p| format!("        - policy: {p}\n")).collect();
    format!("    - route_name: r\n      request_policy_chain:\n{entries}")
}

fn names(plan: &Plan, s: &Snapshot) -> Vec<(String, usize, usize)> {
    plan.iter()
        .map(|g| (s.agents[g.agent].name().to_string(), g.policies.start, g.policies.end))
        .collect()
}

#[test]
fn consecutive_policies_are_grouped_per_agent() {
    let s = snapshot(
        &chain(&["auth1", "auth2", "rateLimit", "auth3"]),
        vec![
            agent("auth", &["auth1", "auth2", "auth3"], true),
            agent("rl", &["rateLimit"], true),
        ],
    );
    let (req, resp) = plan_route(&s.routes["r"], &s.agents, 0).unwrap();
    assert_eq!(
        names(&req, &s),
        vec![("auth".into(), 0, 2), ("rl".into(), 2, 3), ("auth".into(), 3, 4)]
    );
    assert!(resp.is_empty());
}

#[test]
fn longest_run_is_preferred_over_first_agent() {
    // "a" supports only p1; "b" supports p1 and p2: one call to b is better.
    let s = snapshot(
        &chain(&["p1", "p2"]),
        vec![agent("a", &["p1"], true), agent("b", &["p1", "p2"], true)],
    );
    for rr in 0..4 {
        let (req, _) = plan_route(&s.routes["r"], &s.agents, rr).unwrap();
        assert_eq!(names(&req, &s), vec![("b".into(), 0, 2)]);
    }
}

#[test]
fn equally_good_agents_take_turns() {
    let s = snapshot(&chain(&["p"]), vec![agent("a", &["p"], true), agent("b", &["p"], true)]);
    let picks: Vec<String> = (0..4)
        .map(|rr| {
            names(&plan_route(&s.routes["r"], &s.agents, rr).unwrap().0, &s)[0]
                .0
                .clone()
        })
        .collect();
    assert_eq!(picks, vec!["a", "b", "a", "b"]);
}

#[test]
fn unhealthy_agents_are_avoided() {
    let s = snapshot(
        &chain(&["p"]),
        vec![agent("a", &["p"], false), agent("b", &["p"], true)],
    );
    for rr in 0..3 {
        assert_eq!(
            names(&plan_route(&s.routes["r"], &s.agents, rr).unwrap().0, &s)[0].0,
            "b"
        );
    }
}

#[test]
fn preference_is_honoured_only_when_healthy_and_able() {
    let routes = "    - route_name: r\n      request_policy_chain:\n        - policy: p1\n        - policy: p2\n          agent: a\n";
    let s = snapshot(
        routes,
        vec![agent("a", &["p1", "p2"], true), agent("b", &["p1", "p2"], true)],
    );
    for rr in 0..3 {
        // p2 pinned to a; p1 then also goes to a (longest run), one call.
        assert_eq!(
            names(&plan_route(&s.routes["r"], &s.agents, rr).unwrap().0, &s),
            vec![("a".into(), 0, 2)]
        );
    }
    let s = snapshot(
        routes,
        vec![agent("a", &["p1", "p2"], false), agent("b", &["p1", "p2"], true)],
    );
    assert_eq!(
        names(&plan_route(&s.routes["r"], &s.agents, 0).unwrap().0, &s),
        vec![("b".into(), 0, 2)]
    );
    let s = snapshot(routes, vec![agent("a", &["p1"], true), agent("b", &["p1", "p2"], true)]);
    assert_eq!(
        names(&plan_route(&s.routes["r"], &s.agents, 0).unwrap().0, &s),
        vec![("b".into(), 0, 2)]
    );
}

#[test]
fn stage_one_unsupported_beats_stage_two_unhealthy() {
    let routes = "    - route_name: r\n      request_policy_chain:\n        - policy: p\n      response_policy_chain:\n        - policy: missing\n";
    let s = snapshot(routes, vec![agent("a", &["p"], false)]);
    assert_eq!(
        plan_route(&s.routes["r"], &s.agents, 0),
        Err(PlanError::NotSupported {
            phase: Phase::Response,
            policies: vec!["missing".into()]
        })
    );
}

#[test]
fn stage_two_names_phase_policies_and_agents() {
    let routes = "    - route_name: r\n      request_policy_chain:\n        - policy: auth\n      response_policy_chain:\n        - policy: transform\n";
    let s = snapshot(
        routes,
        vec![
            agent("auth-agent", &["auth"], true),
            agent("t1", &["transform"], false),
            agent("t2", &["transform"], false),
        ],
    );
    assert_eq!(
        plan_route(&s.routes["r"], &s.agents, 0),
        Err(PlanError::Unavailable {
            phase: Phase::Response,
            policies: vec!["transform".into()],
            agents: vec!["t1".into(), "t2".into()]
        })
    );
}

#[test]
fn phase_and_param_schema_restrict_candidates() {
    // "resp-only" is declared for the response phase only.
    let s = snapshot(&chain(&["resp-only"]), vec![agent("a", &["resp-only"], true)]);
    assert!(matches!(
        plan_route(&s.routes["r"], &s.agents, 0),
        Err(PlanError::NotSupported { .. })
    ));
    assert!(s.routes["r"].problems()[0].contains("another phase"));
    let routes =
        "    - route_name: r\n      request_policy_chain:\n        - policy: p\n          params: {k: 1, other: 2}\n";
    let s = snapshot(routes, vec![agent("a", &["p"], true)]);
    assert!(matches!(
        plan_route(&s.routes["r"], &s.agents, 0),
        Err(PlanError::NotSupported { .. })
    ));
    assert!(s.routes["r"].problems()[0].contains("\"other\""));
}

#[test]
fn strict_mode_check_sees_health_changes() {
    let s = snapshot(&chain(&["p"]), vec![agent("a", &["p"], true)]);
    let (plan, _) = plan_route(&s.routes["r"], &s.agents, 0).unwrap();
    assert!(plan_healthy(&plan, &s.agents));
    s.agents[0].set_healthy(false);
    assert!(!plan_healthy(&plan, &s.agents));
}

#[test]
fn a_missing_required_param_leaves_the_agent_out() {
    let a = agent("a", &["p"], true);
    a.set_discovered(Discovered {
        call_stream: false,
        agent_name: "a".into(),
        agent_version: "1".into(),
        policies: [(
            "p".to_string(),
            PolicyInfo {
                name: "p".into(),
                param_schema: vec!["k".into(), "opt".into()],
                required_params: vec!["k".into()],
                supported_phases: PolicyPhase::RequestResponse as i32,
                ..Default::default()
            },
        )]
        .into_iter()
        .collect(),
    });
    let missing = "    - route_name: r\n      request_policy_chain:\n        - policy: p\n          params: {opt: 1}\n";
    let s = snapshot(missing, vec![Arc::clone(&a)]);
    assert!(matches!(
        plan_route(&s.routes["r"], &s.agents, 0),
        Err(PlanError::NotSupported { .. })
    ));
    assert!(s.routes["r"].problems()[0].contains("required param \"k\""));
    let given = "    - route_name: r\n      request_policy_chain:\n        - policy: p\n          params: {k: 1}\n";
    let s = snapshot(given, vec![a]);
    assert!(plan_route(&s.routes["r"], &s.agents, 0).is_ok());
}
