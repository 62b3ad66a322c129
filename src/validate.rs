//! `policy-kernel validate`: checks a configuration file and prints its route
//! table. With `--check-agents` it discovers the agents and shows the agent
//! each group would use; routes that cannot be served, and unreachable
//! agents, make it fail.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use crate::config::{self, KernelConfig};
use crate::plan::{plan_route, PlanError};
use crate::registry::{self, AgentHandle};
use crate::snapshot::{Phase, Snapshot};

/// Runs the check, writing the report to `out`; returns whether it passed.
pub async fn run(path: &Path, check_agents: bool, out: &mut impl Write) -> std::io::Result<bool> {
    let cfg = match config::load(path) {
        Ok(c) => c,
        Err(e) => {
            writeln!(out, "error: {e}")?;
            return Ok(false);
        }
    };
    writeln!(
        out,
        "configuration OK: {} ({} agents, {} routes)",
        path.display(),
        cfg.agents.len(),
        cfg.route_policies.len()
    )?;
    let server = &cfg.server;
    match (server.tcp_addr(), &server.socket_path) {
        (Some(a), _) => writeln!(
            out,
            "ext_proc TCP listener: {a}{}",
            if server.tls.is_some() {
                " (TLS, client certificates verified)"
            } else {
                ""
            }
        )?,
        (None, _) => writeln!(out, "ext_proc TCP listener: none")?,
    }
    if let Some(p) = &server.socket_path {
        writeln!(out, "ext_proc socket: {}", p.display())?;
    }
    if let Some(risk) = server.exposure_warning() {
        writeln!(out, "warning: {risk}")?;
    }
    if let Err(e) = crate::server::check_tls(server) {
        writeln!(out, "error: {e}")?;
        return Ok(false);
    }
    if check_agents {
        checked(cfg, out).await
    } else {
        unchecked(&cfg, out)?;
        Ok(true)
    }
}

fn unchecked(cfg: &KernelConfig, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out, "agents (not contacted; use --check-agents):")?;
    for a in &cfg.agents {
        writeln!(out, "  {:<24} {}", a.name, a.socket_path.display())?;
    }
    writeln!(out, "routes:")?;
    for r in &cfg.route_policies {
        writeln!(out, "  {}", r.route_name)?;
        for (phase, chain) in [
            ("request", &r.request_policy_chain),
            ("response", &r.response_policy_chain),
        ] {
            let entries: Vec<String> = chain
                .iter()
                .map(|e| match &e.agent {
                    Some(a) => format!("{} (prefers {a})", e.policy),
                    None => e.policy.clone(),
                })
                .collect();
            writeln!(
                out,
                "    {phase:<9} {}",
                if entries.is_empty() {
                    "-".into()
                } else {
                    entries.join(", ")
                }
            )?;
        }
    }
    Ok(())
}

async fn checked(cfg: KernelConfig, out: &mut impl Write) -> std::io::Result<bool> {
    let agents: Vec<Arc<AgentHandle>> = cfg.agents.iter().cloned().map(AgentHandle::new).collect();
    futures::future::join_all(agents.iter().map(|a| registry::health::round(a))).await;
    let mut ok = true;
    writeln!(out, "agents:")?;
    for a in &agents {
        let state = match (a.discovered(), a.is_healthy()) {
            (Some(d), true) => {
                let mut names: Vec<&str> = d.policies.keys().map(String::as_str).collect();
                names.sort_unstable();
                format!("healthy, version {}, policies: {}", d.agent_version, names.join(", "))
            }
            (Some(_), false) => {
                ok = false;
                "UNHEALTHY".to_string()
            }
            (None, _) => {
                ok = false;
                "UNREACHABLE".to_string()
            }
        };
        writeln!(
            out,
            "  {:<24} {:<40} {state}",
            a.name(),
            a.config.socket_path.display().to_string()
        )?;
    }
    let snap = Snapshot::build(Arc::new(cfg), agents, 1);
    writeln!(out, "routes:")?;
    let mut names: Vec<&String> = snap.routes.keys().collect();
    names.sort();
    for name in names {
        let route = &snap.routes[name];
        writeln!(out, "  {name}")?;
        match plan_route(route, &snap.agents, 0) {
            Ok((request, response)) => {
                for (phase, plan) in [(Phase::Request, request), (Phase::Response, response)] {
                    let chain = route.chain(phase);
                    let groups: Vec<String> = plan
                        .iter()
                        .map(|g| {
                            let policies: Vec<&str> = chain
                                .policies
                                .get(g.policies.clone())
                                .unwrap_or_default()
                                .iter()
                                .map(|p| p.proto.name.as_str())
                                .collect();
                            format!("[{}: {}]", snap.agents[g.agent].name(), policies.join(", "))
                        })
                        .collect();
                    let text = if groups.is_empty() {
                        "-".to_string()
                    } else {
                        groups.join(" -> ")
                    };
                    writeln!(out, "    {:<9} {text}", phase.as_str())?;
                }
            }
            Err(e) => {
                ok = false;
                let why = match e {
                    PlanError::NotSupported { phase, policies } => {
                        format!(
                            "INVALID ({} phase): not supported: {}",
                            phase.as_str(),
                            policies.join(", ")
                        )
                    }
                    PlanError::Unavailable {
                        phase,
                        policies,
                        agents,
                    } => format!(
                        "UNAVAILABLE ({} phase): {} (agents down: {})",
                        phase.as_str(),
                        policies.join(", "),
                        agents.join(", ")
                    ),
                };
                writeln!(out, "    {why}")?;
                for p in route.problems() {
                    writeln!(out, "      {p}")?;
                }
            }
        }
    }
    Ok(ok)
}
