//! Discovery and health checking, one background task per agent.
//!
//! Until an agent has been discovered, and while it is unhealthy, the task
//! retries every `min(health_check_interval_ms, 1 s)`, so an agent that was
//! down at startup is picked up as soon as it answers, and one failed check
//! (a restart, a slow answer) takes the agent out for about a second rather
//! than a whole interval. A healthy agent is checked on the configured
//! interval. When an agent comes back after being unhealthy it is discovered
//! again, since a restarted agent may declare other policies.
//! Every change of declared policies is reported on `changed`, so that the
//! owner rebuilds the snapshot; health flips are atomic and need no rebuild.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use super::{AgentHandle, PolicyIndex};
use crate::proto::{health_check_response::Status, GetAgentConfigRequest, HealthCheckRequest};

/// What an agent said about itself.
#[derive(Debug, Clone, PartialEq)]
pub struct Discovered {
    /// The agent's own name.
    pub agent_name: String,
    /// The agent's version.
    pub agent_version: String,
    /// Declared policies by name.
    pub policies: PolicyIndex,
    /// Whether the agent serves the call stream (`rpc Calls`).
    pub call_stream: bool,
}

/// Asks the agent for its configuration, within `timeout`.
pub async fn discover(agent: &AgentHandle, timeout: Duration) -> Result<Discovered, String> {
    let mut client = agent.client();
    let mut req = tonic::Request::new(GetAgentConfigRequest {});
    req.set_timeout(timeout);
    let resp = tokio::time::timeout(timeout, client.get_agent_config(req))
        .await
        .map_err(|_| "discovery timed out".to_string())?
        .map_err(|s| format!("discovery failed: {}", s.message()))?
        .into_inner();
    Ok(Discovered {
        call_stream: resp.serves_call_stream,
        agent_name: resp.agent_name,
        agent_version: resp.agent_version,
        policies: resp
            .supported_policies
            .into_iter()
            .map(|p| (p.name.clone(), p))
            .collect(),
    })
}

/// One health check: healthy only if the call succeeds in time with SERVING.
pub async fn check(agent: &AgentHandle) -> Result<(), String> {
    let timeout = Duration::from_millis(agent.config.health_check_timeout_ms);
    let mut client = agent.client();
    let mut req = tonic::Request::new(HealthCheckRequest {});
    req.set_timeout(timeout);
    let resp = tokio::time::timeout(timeout, client.health_check(req))
        .await
        .map_err(|_| "health check timed out".to_string())?
        .map_err(|s| format!("health check failed: {}", s.message()))?
        .into_inner();
    match resp.status() {
        Status::Serving => Ok(()),
        other => Err(format!("agent reports {} {}", other.as_str_name(), resp.message)),
    }
}

/// Discovery timeout: discovery is not latency critical, so it gets the
/// larger of the call timeout and the health-check timeout.
fn discovery_timeout(agent: &AgentHandle) -> Duration {
    Duration::from_millis(agent.config.timeout_ms.max(agent.config.health_check_timeout_ms))
}

/// Runs one round: discovers when needed, then health-checks. Returns true
/// when the declared policies changed.
pub async fn round(agent: &AgentHandle) -> bool {
    round_with(agent, false).await
}

/// Like [`round`], but always rediscovers (configuration reload).
pub async fn rediscover(agent: &AgentHandle) -> bool {
    round_with(agent, true).await
}

async fn round_with(agent: &AgentHandle, force: bool) -> bool {
    let name = agent.name();
    let mut changed = false;
    if force || agent.discovered().is_none() || !agent.is_healthy() {
        match discover(agent, discovery_timeout(agent)).await {
            Ok(d) => {
                if d.agent_name != name {
                    tracing::info!(agent = name, reported = %d.agent_name, "agent reports another name");
                }
                // Logged when something is new: a first discovery, another
                // version or policies, or a reload. An unhealthy agent is
                // rediscovered every second, which is not news.
                let news = force || agent.discovered().is_none_or(|old| *old != d);
                let policies: Vec<&str> = d.policies.keys().map(String::as_str).collect();
                if news {
                    tracing::info!(agent = name, version = %d.agent_version, ?policies, "agent discovered");
                } else {
                    tracing::debug!(agent = name, version = %d.agent_version, ?policies, "agent discovered");
                }
                changed = agent.set_discovered(d);
            }
            Err(e) => {
                if agent.set_healthy(false) || agent.discovered().is_none() {
                    tracing::debug!(agent = name, error = %e, "agent not reachable");
                }
                return false;
            }
        }
    }
    let result = check(agent).await;
    let was = agent.set_healthy(result.is_ok());
    if result.is_ok() {
        agent.circuit.health_passed();
    }
    match (&result, was) {
        (Ok(()), false) => tracing::info!(agent = name, "agent healthy"),
        (Err(e), true) => tracing::warn!(agent = name, error = %e, "agent unhealthy"),
        _ => {}
    }
    changed
}

/// Spawns the watch task of `agent`, which its caller has just checked
/// (start-up and reload run a round first): the task's first round comes
/// one wait later, not at once a second time. It ends when the handle is
/// dropped.
pub fn spawn_watch(agent: &Arc<AgentHandle>, changed: Arc<Notify>) {
    let weak: Weak<AgentHandle> = Arc::downgrade(agent);
    tokio::spawn(async move {
        loop {
            let Some(agent) = weak.upgrade() else { break };
            let interval = Duration::from_millis(agent.config.health_check_interval_ms);
            let wait = if agent.discovered().is_none() || !agent.is_healthy() {
                interval.min(Duration::from_secs(1))
            } else {
                interval
            };
            drop(agent);
            tokio::time::sleep(wait).await;
            let Some(agent) = weak.upgrade() else { break };
            if round(&agent).await {
                changed.notify_one();
            }
        }
    });
}
