//! `decision_cache:`: the kernel's cache of agent outcomes, for policies
//! whose agents declare them cacheable (see [`crate::decisions`]).

use serde::Deserialize;

use super::ConfigError;

/// `decision_cache:`. Every field is optional.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DecisionCacheConfig {
    /// Whether outcomes that agents declare cacheable are kept (default
    /// true). A route can turn it off with its own `decision_cache: false`.
    pub enabled: bool,
    /// Most entries kept, 1-10000000 (default 100000). Read at start.
    pub max_entries: u64,
    /// Most bytes kept (keys, instructions and metadata), 4096-4294967295
    /// (default 67108864, 64 MiB). Read at start.
    pub max_bytes: u64,
    /// Cap on any entry's lifetime, whatever an agent declares, in ms,
    /// 0-86400000 (default 300000). 0 keeps nothing.
    pub max_age_ms: u64,
}

impl Default for DecisionCacheConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_entries: 100_000,
            max_bytes: 64 * 1024 * 1024,
            max_age_ms: 300_000,
        }
    }
}

impl DecisionCacheConfig {
    pub(super) fn validate(&self, f: &str) -> Result<(), ConfigError> {
        let invalid = |field: &str, reason: &str| super::invalid(format!("{f}.{field}"), reason, None);
        if !(1..=10_000_000).contains(&self.max_entries) {
            return Err(invalid("max_entries", "must be 1-10000000"));
        }
        if !(4096..=u64::from(u32::MAX)).contains(&self.max_bytes) {
            return Err(invalid("max_bytes", "must be 4096-4294967295"));
        }
        if self.max_age_ms > 86_400_000 {
            return Err(invalid("max_age_ms", "must be 0-86400000"));
        }
        Ok(())
    }
}
