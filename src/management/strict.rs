//! Strict validation of routes changed through the management API (spec
//! §4.4): a route is refused when one of its policies is supported by no
//! discovered agent, when a referenced or needed agent is unavailable or
//! unhealthy, or when its params fail the agent's `param_schema` (unknown
//! names, required ones missing). Startup and SIGHUP stay permissive (§4.2).

use std::sync::Arc;

use serde::Serialize;

use crate::config::{encode_params, ChainEntry, RoutePolicy};
use crate::proto::PolicyPhase;
use crate::registry::AgentHandle;
use crate::snapshot::Phase;

/// Why one chain entry cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rejection {
    /// The route.
    pub route: String,
    /// `request` or `response`.
    pub phase: &'static str,
    /// Index of the entry in its chain (0-based).
    pub index: usize,
    /// The policy.
    pub policy: String,
    /// What is wrong.
    pub reason: String,
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "route {:?}, {} chain [{}], policy {:?}: {}",
            self.route, self.phase, self.index, self.policy, self.reason
        )
    }
}

fn allows(phase: Phase, declared: PolicyPhase) -> bool {
    matches!(
        (phase, declared),
        (_, PolicyPhase::RequestResponse)
            | (Phase::Request, PolicyPhase::Request)
            | (Phase::Response, PolicyPhase::Response)
    )
}

/// Every problem of `route` against `agents` as they are now; empty when
/// the route can be served.
pub fn check_route(route: &RoutePolicy, agents: &[Arc<AgentHandle>]) -> Vec<Rejection> {
    let mut out = Vec::new();
    for (phase, chain) in [
        (Phase::Request, &route.request_policy_chain),
        (Phase::Response, &route.response_policy_chain),
    ] {
        for (index, entry) in chain.iter().enumerate() {
            if let Err(reason) = check_entry(entry, phase, agents) {
                out.push(Rejection {
                    route: route.route_name.clone(),
                    phase: phase.as_str(),
                    index,
                    policy: entry.policy.clone(),
                    reason,
                });
            }
        }
    }
    out
}

fn check_entry(entry: &ChainEntry, phase: Phase, agents: &[Arc<AgentHandle>]) -> Result<(), String> {
    let params = encode_params(&entry.params).map_err(|(name, reason)| format!("param {name:?}: {reason}"))?;
    if entry.policy.starts_with(crate::snapshot::RESERVED_POLICY_PREFIX) {
        return Err(format!(
            "policy names starting with {:?} are the kernel's own: no agent runs them",
            crate::snapshot::RESERVED_POLICY_PREFIX
        ));
    }
    if let Some(name) = &entry.agent {
        let Some(agent) = agents.iter().find(|a| a.name() == name) else {
            return Err(format!("agent {name:?} is not configured"));
        };
        if agent.discovered().is_none() || !agent.is_healthy() {
            return Err(format!("agent {name:?} is unavailable or unhealthy"));
        }
        if agent.policy(&entry.policy).is_none() {
            return Err(format!("agent {name:?} does not support the policy"));
        }
    }
    let supporting: Vec<&Arc<AgentHandle>> = agents.iter().filter(|a| a.policy(&entry.policy).is_some()).collect();
    if supporting.is_empty() {
        return Err("no discovered agent supports this policy".into());
    }
    let mut problems = Vec::new();
    let mut unhealthy = Vec::new();
    for a in supporting {
        let Some(info) = a.policy(&entry.policy) else { continue };
        if !allows(phase, info.supported_phases()) {
            problems.push(format!("agent {:?} declares it for another phase", a.name()));
            continue;
        }
        let unknown: Vec<&String> = params.keys().filter(|k| !info.param_schema.contains(k)).collect();
        if !unknown.is_empty() {
            problems.push(format!(
                "agent {:?}: unknown params {unknown:?} (its param_schema: {:?})",
                a.name(),
                info.param_schema
            ));
            continue;
        }
        let missing: Vec<&String> = info
            .required_params
            .iter()
            .filter(|k| !params.contains_key(*k))
            .collect();
        if !missing.is_empty() {
            problems.push(format!("agent {:?}: required params missing {missing:?}", a.name()));
            continue;
        }
        if !a.is_healthy() {
            unhealthy.push(a.name().to_string());
            continue;
        }
        return Ok(());
    }
    if !unhealthy.is_empty() {
        problems.push(format!("agents {unhealthy:?} support it but are unhealthy"));
    }
    Err(problems.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AgentConfig;
    use crate::proto::PolicyInfo;
    use crate::registry::Discovered;

    fn agent(name: &str, info: PolicyInfo, healthy: bool) -> Arc<AgentHandle> {
        let cfg: AgentConfig =
            serde_yaml::from_str(&format!("name: {name}\nsocket_path: /nonexistent/{name}.sock")).unwrap();
        let a = AgentHandle::new(cfg);
        a.set_discovered(Discovered {
            call_stream: false,
            agent_name: name.into(),
            agent_version: "1".into(),
            policies: [(info.name.clone(), info)].into_iter().collect(),
        });
        a.set_healthy(healthy);
        a
    }

    fn info(phases: PolicyPhase) -> PolicyInfo {
        PolicyInfo {
            name: "p".into(),
            param_schema: vec!["k".into(), "opt".into()],
            required_params: vec!["k".into()],
            supported_phases: phases as i32,
            ..Default::default()
        }
    }

    fn route(yaml: &str) -> RoutePolicy {
        serde_yaml::from_str(&format!("route_name: /r\n{yaml}")).unwrap()
    }

    fn reasons(r: &RoutePolicy, agents: &[Arc<AgentHandle>]) -> Vec<String> {
        check_route(r, agents).into_iter().map(|e| e.reason).collect()
    }

    #[test]
    fn each_kind_of_problem_is_named() {
        let a = [agent("a", info(PolicyPhase::Request), true)];
        let ok = route("request_policy_chain: [{policy: p, params: {k: 1}}]");
        assert!(check_route(&ok, &a).is_empty());
        let r = route("request_policy_chain: [{policy: p, params: {k: 1}}, {policy: q}]");
        let e = check_route(&r, &a);
        assert_eq!((e[0].index, e[0].phase, e[0].policy.as_str()), (1, "request", "q"));
        assert!(e[0].reason.contains("no discovered agent"), "{e:?}");
        let r = route("request_policy_chain: [{policy: p, params: {k: 1, x: 2}}]");
        assert!(reasons(&r, &a)[0].contains("unknown params [\"x\"]"));
        let r = route("request_policy_chain: [{policy: p, params: {opt: 2}}]");
        assert!(reasons(&r, &a)[0].contains("required params missing [\"k\"]"));
        let r = route("response_policy_chain: [{policy: p, params: {k: 1}}]");
        let e = check_route(&r, &a);
        assert_eq!(e[0].phase, "response");
        assert!(e[0].reason.contains("another phase"), "{e:?}");
        let r = route("request_policy_chain: [{policy: p, params: {k: 1}, agent: b}]");
        assert!(reasons(&r, &a)[0].contains("\"b\" is not configured"));
    }

    #[test]
    fn unhealthy_agents_do_not_count() {
        let sick = [agent("a", info(PolicyPhase::RequestResponse), false)];
        let r = route("request_policy_chain: [{policy: p, params: {k: 1}}]");
        assert!(reasons(&r, &sick)[0].contains("unhealthy"));
        let mixed = [
            agent("a", info(PolicyPhase::RequestResponse), false),
            agent("b", info(PolicyPhase::RequestResponse), true),
        ];
        assert!(check_route(&r, &mixed).is_empty(), "another healthy agent serves it");
        let r = route("request_policy_chain: [{policy: p, params: {k: 1}, agent: a}]");
        assert!(reasons(&r, &mixed)[0].contains("\"a\" is unavailable or unhealthy"));
    }
}
