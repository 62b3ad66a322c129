//! The policies of an agent, indexed by name.

use std::collections::HashMap;
use std::sync::Arc;

use crate::call_policy::{Resolved, Seen};
use crate::policy::DynPolicy;
use crate::proto;

/// The policies of an agent, by name.
pub(crate) struct Registry {
    policies: Vec<Arc<dyn DynPolicy>>,
    index: HashMap<String, usize>,
    /// The policies of calls, decoded once each.
    seen: Seen,
}

impl Registry {
    /// Indexes the policies; `Err(name)` when a name is registered twice.
    pub(crate) fn new(policies: Vec<Arc<dyn DynPolicy>>) -> Result<Self, String> {
        let mut index = HashMap::new();
        for (i, p) in policies.iter().enumerate() {
            if index.insert(p.name().to_string(), i).is_some() {
                return Err(p.name().to_string());
            }
        }
        Ok(Registry {
            policies,
            index,
            seen: Seen::default(),
        })
    }

    /// The policies of a call, decoded (each distinct one once); a policy
    /// that does not decode fails the call.
    pub(crate) fn resolve(&self, policies: &[proto::Policy]) -> Result<Vec<Arc<Resolved>>, tonic::Status> {
        policies
            .iter()
            .map(|p| {
                self.seen.resolve(p, |name| self.index.get(name).copied()).map_err(|e| {
                    tracing::warn!(error = %e, "a policy of a call does not decode: the call fails (INVALID_ARGUMENT)");
                    tonic::Status::invalid_argument(format!("a policy of the call does not decode: {e}"))
                })
            })
            .collect()
    }

    /// The agent's policy a call's policy names, if it has it.
    pub(crate) fn policy(&self, p: &Resolved) -> Option<&dyn DynPolicy> {
        p.index.and_then(|i| self.policies.get(i)).map(|p| p.as_ref())
    }

    /// `PolicyInfo` of every policy, in registration order.
    pub(crate) fn infos(&self) -> Vec<proto::PolicyInfo> {
        self.policies.iter().map(|p| p.info()).collect()
    }

    /// Runs every policy's shutdown hook.
    pub(crate) async fn shutdown(&self) {
        for p in &self.policies {
            p.shutdown().await;
        }
    }
}
