//! The policies of an agent, indexed by name.

use std::collections::HashMap;
use std::sync::Arc;

use crate::policy::DynPolicy;
use crate::proto;

/// The policies of an agent, by name.
pub(crate) struct Registry {
    policies: Vec<Arc<dyn DynPolicy>>,
    index: HashMap<String, usize>,
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
        Ok(Registry { policies, index })
    }

    pub(crate) fn get(&self, name: &str) -> Option<&dyn DynPolicy> {
        self.index.get(name).map(|&i| self.policies[i].as_ref())
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
