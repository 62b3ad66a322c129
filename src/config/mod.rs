//! The kernel's YAML configuration: serde types that mirror the file, their
//! defaults, and the structural validation that refuses a bad file.
//!
//! Structural errors (YAML syntax, unknown keys, wrong types, duplicate names,
//! out-of-range values) are [`ConfigError`]s naming the field and, where it can
//! be found, the line. Problems that depend on the agents (an unsupported
//! policy, params outside a policy's schema) are not errors here: the snapshot
//! marks such routes invalid and the rest is served.

mod decision_cache;
mod generations;
mod management;
mod params;
mod responses;
mod store;
mod types;

use std::path::Path;

pub use decision_cache::DecisionCacheConfig;
pub use generations::GenerationsConfig;
pub use management::ManagementConfig;
pub use params::encode_params;
pub use responses::ResponseConfig;
pub use store::{EtcdConfig, EtcdTls, StoreConfig};
pub use types::*;

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// YAML syntax, unknown key or wrong type; serde_yaml's message names the
    /// field path and the line.
    #[error("invalid config: {0}")]
    Yaml(#[from] serde_yaml::Error),
    /// A field has a value the kernel cannot use.
    #[error("invalid config: {field}: {reason}{}", line.map(|l| format!(" (line {l})")).unwrap_or_default())]
    Invalid {
        /// Dotted path of the field, e.g. `policy_kernel.agents[1].name`.
        field: String,
        /// What is wrong with it.
        reason: String,
        /// 1-based line of the offending value, when it could be located.
        line: Option<usize>,
    },
}

/// Reads and validates the configuration file at `path`.
pub fn load(path: &Path) -> Result<KernelConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse(&text)
}

/// Parses and validates configuration text.
pub fn parse(text: &str) -> Result<KernelConfig, ConfigError> {
    let file: ConfigFile = serde_yaml::from_str(text)?;
    let config = file.policy_kernel;
    config.validate(text)?;
    Ok(config)
}

/// A [`ConfigError::Invalid`]: `field` is the field's dotted path.
fn invalid(field: impl Into<String>, reason: impl Into<String>, line: Option<usize>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        reason: reason.into(),
        line,
    }
}

/// Finds the 1-based line of the `nth` (0-based) line that sets `key` to
/// `value`, for error messages about values serde cannot locate.
pub(crate) fn find_line(text: &str, key: &str, value: &str, nth: usize) -> Option<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            let line = line.trim_start().trim_start_matches("- ").trim_start();
            line.strip_prefix(key)
                .and_then(|rest| rest.trim_start().strip_prefix(':'))
                .map(|v| {
                    let v = v.split(" #").next().unwrap_or("").trim();
                    v.trim_matches(|c| c == '"' || c == '\'') == value
                })
                .unwrap_or(false)
        })
        .nth(nth)
        .map(|(i, _)| i + 1)
}

#[cfg(test)]
mod tests;
