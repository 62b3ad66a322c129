//! Where a secret the agents use is read from (a client secret, a private
//! key, an actor token): an environment variable or a file, named in the
//! params and read when it is used, never logged. Serializable: a connect
//! link carries the names through a shared store, never the values.

use policy_agents::{ParamError, Params};
use serde::{Deserialize, Serialize};

/// A named secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Secret {
    /// An environment variable of the agent.
    Env(String),
    /// A file the agent can read.
    File(String),
}

impl Secret {
    /// One of params `env` / `file`, exactly; `None` when neither is set.
    pub fn parse(p: &Params, env: &str, file: &str) -> Result<Option<Secret>, ParamError> {
        let get = |name| p.get(name).map(str::trim).filter(|s| !s.is_empty());
        match (get(env), get(file)) {
            (Some(_), Some(_)) => Err(ParamError::invalid(env, "", format!("give {env} or {file}, not both"))),
            (Some(e), None) => Ok(Some(Secret::Env(e.to_string()))),
            (None, Some(f)) => Ok(Some(Secret::File(f.to_string()))),
            (None, None) => Ok(None),
        }
    }

    /// The value, trimmed; why not (naming the variable or file, never a
    /// value).
    pub fn read(&self) -> Result<String, String> {
        let value = match self {
            Secret::Env(name) => std::env::var(name).map_err(|_| format!("environment variable {name} is not set"))?,
            Secret::File(path) => std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))?,
        };
        let value = value.trim().to_string();
        if value.is_empty() {
            return Err(match self {
                Secret::Env(name) => format!("environment variable {name} is empty"),
                Secret::File(path) => format!("{path} is empty"),
            });
        }
        Ok(value)
    }
}
