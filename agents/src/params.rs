//! Policy parameters: the raw string map the kernel sends, typed accessors over
//! it, and [`FromParams`] to turn it into a policy's own parameter type.

use std::collections::HashMap;
use std::str::FromStr;

/// Why a parameter could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    /// A required parameter is absent or empty.
    #[error("missing required parameter `{0}`")]
    Missing(String),
    /// A parameter is present but its value does not parse.
    #[error("parameter `{name}`: invalid value {value:?}: {reason}")]
    Invalid {
        /// The parameter name.
        name: String,
        /// The value as received.
        value: String,
        /// Why it was refused.
        reason: String,
    },
}

impl ParamError {
    /// Builds an [`ParamError::Invalid`] for `name` = `value`.
    pub fn invalid(name: &str, value: &str, reason: impl Into<String>) -> Self {
        ParamError::Invalid {
            name: name.to_string(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

/// The parameters of one policy in one call, as the kernel sent them.
///
/// The kernel sends YAML scalars in their string form (`"100"`, `"true"`) and
/// YAML lists and maps as compact JSON (`["admin","ops"]`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params {
    map: HashMap<String, String>,
}

impl Params {
    /// Wraps a raw parameter map.
    pub fn new(map: HashMap<String, String>) -> Self {
        Params { map }
    }

    /// The raw value of `name`, if present.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.map.get(name).map(String::as_str)
    }

    /// Iterates over all `(name, value)` pairs (in no particular order).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.map.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The value of `name`, or [`ParamError::Missing`] when absent or blank.
    pub fn required(&self, name: &str) -> Result<&str, ParamError> {
        match self.get(name).map(str::trim) {
            Some(v) if !v.is_empty() => Ok(v),
            _ => Err(ParamError::Missing(name.to_string())),
        }
    }

    /// Parses `name` with [`FromStr`]; `Ok(None)` when absent or blank.
    pub fn parse<T>(&self, name: &str) -> Result<Option<T>, ParamError>
    where
        T: FromStr,
        T::Err: std::fmt::Display,
    {
        match self.get(name).map(str::trim) {
            None | Some("") => Ok(None),
            Some(v) => v
                .parse()
                .map(Some)
                .map_err(|e: T::Err| ParamError::invalid(name, v, e.to_string())),
        }
    }

    /// Parses `name` with [`FromStr`], or returns `default` when absent.
    pub fn parse_or<T>(&self, name: &str, default: T) -> Result<T, ParamError>
    where
        T: FromStr,
        T::Err: std::fmt::Display,
    {
        Ok(self.parse(name)?.unwrap_or(default))
    }

    /// Reads a boolean (`true/false`, `yes/no`, `on/off`, `1/0`), or `default`.
    pub fn bool_or(&self, name: &str, default: bool) -> Result<bool, ParamError> {
        match self.get(name).map(str::trim) {
            None | Some("") => Ok(default),
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "true" | "yes" | "on" | "1" => Ok(true),
                "false" | "no" | "off" | "0" => Ok(false),
                _ => Err(ParamError::invalid(name, v, "expected true or false")),
            },
        }
    }

    /// Reads a list: a JSON array (`["admin","ops"]`, how the kernel encodes
    /// YAML lists) or a comma-separated string (`admin, ops`). Items are
    /// trimmed and empty items dropped; an absent parameter is an empty list.
    pub fn list(&self, name: &str) -> Result<Vec<String>, ParamError> {
        match self.get(name) {
            None => Ok(Vec::new()),
            Some(v) => parse_list(v).map_err(|reason| ParamError::invalid(name, v, reason)),
        }
    }
}

impl From<HashMap<String, String>> for Params {
    fn from(map: HashMap<String, String>) -> Self {
        Params::new(map)
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Params {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Params::new(iter.into_iter().map(|(k, v)| (k.into(), v.into())).collect())
    }
}

/// Parses a JSON array of scalars or a comma-separated string into items.
pub fn parse_list(raw: &str) -> Result<Vec<String>, String> {
    let trimmed = raw.trim();
    if trimmed.starts_with('[') {
        let items: Vec<serde_json::Value> = serde_json::from_str(trimmed).map_err(|e| format!("bad JSON list: {e}"))?;
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            let s = match item {
                serde_json::Value::String(s) => s,
                serde_json::Value::Number(n) => n.to_string(),
                serde_json::Value::Bool(b) => b.to_string(),
                other => return Err(format!("list items must be scalars, got {other}")),
            };
            let s = s.trim();
            if !s.is_empty() {
                out.push(s.to_string());
            }
        }
        return Ok(out);
    }
    Ok(trimmed
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect())
}

/// Turns the raw [`Params`] of a call into a policy's typed parameters.
///
/// Called once per policy per call, before the hook runs. An error is a
/// failure of the policy, handled by its `on_failure`.
pub trait FromParams: Sized {
    /// Parses and validates the parameters.
    fn from_params(params: &Params) -> Result<Self, ParamError>;
}

impl FromParams for () {
    fn from_params(_: &Params) -> Result<Self, ParamError> {
        Ok(())
    }
}

impl FromParams for Params {
    fn from_params(params: &Params) -> Result<Self, ParamError> {
        Ok(params.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pairs: &[(&str, &str)]) -> Params {
        pairs.iter().copied().collect()
    }

    #[test]
    fn lists_accept_json_and_commas() {
        let params = p(&[("a", r#"["admin","ops"]"#), ("b", "admin, ops,"), ("c", "x")]);
        assert_eq!(params.list("a").unwrap(), vec!["admin", "ops"]);
        assert_eq!(params.list("b").unwrap(), vec!["admin", "ops"]);
        assert_eq!(params.list("c").unwrap(), vec!["x"]);
        assert!(params.list("missing").unwrap().is_empty());
        assert!(p(&[("a", "[1, {}]")]).list("a").is_err());
    }

    #[test]
    fn scalars_parse_with_defaults_and_errors() {
        let params = p(&[("n", "100"), ("b", "TRUE"), ("bad", "x")]);
        assert_eq!(params.parse_or::<u32>("n", 1).unwrap(), 100);
        assert_eq!(params.parse_or::<u32>("none", 7).unwrap(), 7);
        assert!(params.bool_or("b", false).unwrap());
        assert!(params.bool_or("bad", false).is_err());
        assert!(matches!(params.parse::<u32>("bad"), Err(ParamError::Invalid { .. })));
        assert_eq!(params.required("none"), Err(ParamError::Missing("none".into())));
    }

    proptest::proptest! {
        /// A YAML list sent as JSON and the same list written with commas
        /// read the same.
        #[test]
        fn json_and_comma_lists_agree(items in proptest::collection::vec("[a-zA-Z0-9_:.-]{1,12}", 0..6)) {
            let json = serde_json::to_string(&items).unwrap();
            let commas = items.join(", ");
            proptest::prop_assert_eq!(parse_list(&json).unwrap(), items.clone());
            proptest::prop_assert_eq!(parse_list(&commas).unwrap(), items);
        }
    }
}
