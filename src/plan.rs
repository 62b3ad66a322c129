//! Two-stage validation and execution planning (spec §6.2, §6.4, §6.5).
//!
//! Stage 1: every policy of both chains has at least one agent that supports
//! it (healthy or not), else `policy_not_supported_response`. Stage 2: each
//! has a healthy one, else `agent_unavailable_response`. Then each chain is
//! split into groups of consecutive policies run by one agent: at each point
//! the healthy agent covering the longest run of policies is taken (an entry's
//! `agent` preference is honoured when that agent is healthy and supports the
//! policy), and ties are broken round-robin to spread load.

use std::ops::Range;
use std::sync::Arc;

use crate::registry::AgentHandle;
use crate::snapshot::{Chain, CompiledPolicy, Phase, Route};

/// One agent call: `policies` (indices into the chain) run on `agent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Agent index in the snapshot.
    pub agent: usize,
    /// Chain positions of the group's policies.
    pub policies: Range<usize>,
}

/// An execution plan for one phase.
pub type Plan = Vec<Group>;

/// Why a route cannot run now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanError {
    /// No agent supports these policies (configuration error, 500).
    NotSupported {
        /// The phase whose chain failed first.
        phase: Phase,
        /// Unsupported policy names.
        policies: Vec<String>,
    },
    /// Supported, but every supporting agent is unhealthy (503).
    Unavailable {
        /// The phase whose chain failed first.
        phase: Phase,
        /// Policies with no healthy agent.
        policies: Vec<String>,
        /// The unhealthy agents that support them.
        agents: Vec<String>,
    },
}

/// Healthy and not behind an open circuit.
fn healthy(agents: &[Arc<AgentHandle>], i: usize) -> bool {
    agents.get(i).is_some_and(|a| a.is_available())
}

fn stage1(chain: &Chain) -> Vec<String> {
    chain
        .policies
        .iter()
        .filter(|p| p.candidates.is_empty())
        .map(|p| p.proto.name.clone())
        .collect()
}

fn stage2(chain: &Chain, agents: &[Arc<AgentHandle>]) -> (Vec<String>, Vec<String>) {
    let mut policies = Vec::new();
    let mut names = Vec::new();
    for p in &chain.policies {
        if !p.candidates.iter().any(|&a| healthy(agents, a)) {
            policies.push(p.proto.name.clone());
            for &a in &p.candidates {
                let n = agents[a].name().to_string();
                if !names.contains(&n) {
                    names.push(n);
                }
            }
        }
    }
    (policies, names)
}

/// Validates both chains of `route`, then plans both. `rr` spreads load.
pub fn plan_route(route: &Route, agents: &[Arc<AgentHandle>], rr: usize) -> Result<(Plan, Plan), PlanError> {
    for phase in [Phase::Request, Phase::Response] {
        let policies = stage1(route.chain(phase));
        if !policies.is_empty() {
            return Err(PlanError::NotSupported { phase, policies });
        }
    }
    for phase in [Phase::Request, Phase::Response] {
        let (policies, names) = stage2(route.chain(phase), agents);
        if !policies.is_empty() {
            return Err(PlanError::Unavailable {
                phase,
                policies,
                agents: names,
            });
        }
    }
    Ok((
        plan_chain(&route.request, agents, rr),
        plan_chain(&route.response, agents, rr),
    ))
}

/// The agent an entry is pinned to: its preference, when healthy and able.
fn pinned(p: &CompiledPolicy, agents: &[Arc<AgentHandle>]) -> Option<usize> {
    p.preferred.filter(|a| p.candidates.contains(a) && healthy(agents, *a))
}

/// How many policies from `start` on agent `a` can run in one call.
fn run_len(policies: &[CompiledPolicy], start: usize, a: usize, agents: &[Arc<AgentHandle>]) -> usize {
    policies[start..]
        .iter()
        .take_while(|p| p.candidates.contains(&a) && pinned(p, agents).is_none_or(|x| x == a))
        .count()
}

/// Plans a validated chain (every policy has a healthy candidate).
pub fn plan_chain(chain: &Chain, agents: &[Arc<AgentHandle>], rr: usize) -> Plan {
    let policies = &chain.policies;
    let mut plan = Vec::new();
    let mut i = 0;
    while i < policies.len() {
        let p = &policies[i];
        let choices: Vec<usize> = match pinned(p, agents) {
            Some(a) => vec![a],
            None => p.candidates.iter().copied().filter(|&a| healthy(agents, a)).collect(),
        };
        let runs: Vec<(usize, usize)> = choices.iter().map(|&a| (a, run_len(policies, i, a, agents))).collect();
        let best = runs.iter().map(|&(_, n)| n).max().unwrap_or(0);
        let tied: Vec<usize> = runs.iter().filter(|&&(_, n)| n == best).map(|&(a, _)| a).collect();
        let Some(&agent) = tied.get(rr % tied.len().max(1)) else {
            // Unreachable after validation; stop planning rather than loop.
            break;
        };
        let len = best.max(1);
        plan.push(Group {
            agent,
            policies: i..i + len,
        });
        i += len;
    }
    plan
}

/// Strict mode: true when every agent of `plan` is still healthy.
pub fn plan_healthy(plan: &Plan, agents: &[Arc<AgentHandle>]) -> bool {
    plan.iter().all(|g| healthy(agents, g.agent))
}

#[cfg(test)]
mod tests;
