//! `allow_constrained`: the approver narrows the call. A path argument
//! limited to a prefix, an argument overridden: a call passes only within
//! the limits, and is rewritten to the overridden values.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The limits of a constrained grant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Constraints {
    /// Argument name → the prefix its (string) value must lie under.
    #[serde(default)]
    pub path_prefix: BTreeMap<String, String>,
    /// Argument name → the value the call is given.
    #[serde(default, rename = "override")]
    pub overrides: BTreeMap<String, Value>,
}

impl Constraints {
    /// Refuses limits that limit nothing or could not hold.
    pub fn validate(&self) -> Result<(), String> {
        if self.path_prefix.is_empty() && self.overrides.is_empty() {
            return Err("constraints limit nothing: give path_prefix or override".into());
        }
        for (arg, prefix) in &self.path_prefix {
            if arg.is_empty() || prefix.is_empty() {
                return Err("path_prefix needs an argument name and a prefix".into());
            }
            if has_dot_dot(prefix) {
                return Err(format!("path_prefix of `{arg}` holds a `..` segment"));
            }
        }
        if self.overrides.keys().any(String::is_empty) {
            return Err("override needs argument names".into());
        }
        Ok(())
    }

    /// The call's arguments within the limits: `Some(rewritten)` (overrides
    /// applied; unchanged when there is none) or `None` when a path argument
    /// lies outside its prefix (missing, not a string, `..`, or elsewhere).
    pub fn apply(&self, args: &Value) -> Option<Value> {
        for (arg, prefix) in &self.path_prefix {
            let v = args.get(arg)?.as_str()?;
            if !under(v, prefix) {
                return None;
            }
        }
        if self.overrides.is_empty() {
            return Some(args.clone());
        }
        let mut out = match args {
            Value::Object(m) => m.clone(),
            Value::Null => serde_json::Map::new(),
            _ => return None,
        };
        for (k, v) in &self.overrides {
            out.insert(k.clone(), v.clone());
        }
        Some(Value::Object(out))
    }
}

fn has_dot_dot(p: &str) -> bool {
    p.split(['/', '\\']).any(|seg| seg == "..")
}

/// Whether `path` lies under `prefix`: no `..` segment, no NUL, and equal to
/// the prefix or continuing it at a `/` (`/tmp` covers `/tmp/a`, not
/// `/tmpfoo`; `/tmp/` covers `/tmp/a`).
pub fn under(path: &str, prefix: &str) -> bool {
    if path.contains('\0') || has_dot_dot(path) {
        return false;
    }
    match path.strip_prefix(prefix) {
        Some("") => true,
        Some(rest) => prefix.ends_with('/') || rest.starts_with('/'),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prefixes_hold_at_segment_boundaries() {
        assert!(under("/tmp/a", "/tmp"));
        assert!(under("/tmp/a", "/tmp/"));
        assert!(under("/tmp", "/tmp"));
        assert!(!under("/tmpfoo", "/tmp"));
        assert!(!under("/tmp/../etc/passwd", "/tmp/"));
        assert!(!under("/etc/passwd", "/tmp/"));
        assert!(!under("/tmp/a\0", "/tmp/"));
    }

    #[test]
    fn a_call_passes_only_within_its_limits_and_is_rewritten() {
        let c: Constraints =
            serde_json::from_value(json!({"path_prefix": {"path": "/srv/reports/"}, "override": {"dry_run": true}}))
                .unwrap();
        c.validate().unwrap();
        assert_eq!(
            c.apply(&json!({"path": "/srv/reports/q3.csv", "dry_run": false})),
            Some(json!({"path": "/srv/reports/q3.csv", "dry_run": true}))
        );
        assert_eq!(c.apply(&json!({"path": "/etc/shadow"})), None);
        assert_eq!(c.apply(&json!({"path": 7})), None);
        assert_eq!(c.apply(&json!({})), None);
        assert!(Constraints::default().validate().is_err());
        let dots: Constraints = serde_json::from_value(json!({"path_prefix": {"p": "/a/../"}})).unwrap();
        assert!(dots.validate().is_err());
        assert!(serde_json::from_value::<Constraints>(json!({"paths": {}})).is_err());
    }
}
