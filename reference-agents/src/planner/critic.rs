//! The checks of `planCritic` on planned tool calls, and its params.
//!
//! One call is checked in this order; the first failing check is reported:
//!
//! | check | when |
//! |---|---|
//! | `unknown_tool` | the name is not in `allowed_tools` (globs), or, without that param, not among the tools the request declared |
//! | `rule_denied` | `rules` (the rules of `mcpToolAuthorization`, method `tools/call`) do not allow the tool for the caller |
//! | `arguments_too_large` | the arguments' JSON text is larger than [`MAX_ARGUMENTS_BYTES`] |
//! | `invalid_arguments` | the arguments are not JSON (or too deeply nested to read) or not an object |
//! | `schema_mismatch` | the arguments fail the JSON Schema the request declared for the tool |
//! | `argument_refused` | `constraints` / `max_arg_bytes` (the argument guards of `toolArgumentGuard`) refuse an argument |
//! | `step_limit` | the call is past the first `max_calls` calls of the response |

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use globset::{Glob, GlobSet, GlobSetBuilder};
use jsonschema::Validator;
use serde_json::Value;

use super::calls::{Arguments, Declared, PlannedCall};
use crate::rules::{strip_prefix, Caller, Rules};
use crate::tool::{check_call, GuardConfig};
use policy_agents::{ParamError, Params};

/// The largest arguments text of one call that is read at all.
pub const MAX_ARGUMENTS_BYTES: usize = 1024 * 1024;

/// Compiled declared schemas kept at most (by schema text).
const MAX_SCHEMAS: usize = 512;

/// What happens to a plan with a refused call (param `on_violation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnViolation {
    /// Refuse the whole response (403), or end the stream with an error event.
    Block,
    /// Remove the refused calls and keep the rest.
    Strip,
    /// Let the plan through with a header and metadata.
    Flag,
}

impl OnViolation {
    /// The name used in metadata.
    pub fn as_str(self) -> &'static str {
        match self {
            OnViolation::Block => "block",
            OnViolation::Strip => "strip",
            OnViolation::Flag => "flag",
        }
    }
}

/// Parsed params of `planCritic`.
#[derive(Debug)]
pub struct CriticConfig {
    allowed: Option<GlobSet>,
    /// Param `max_calls`.
    pub max_calls: Option<usize>,
    check_schemas: bool,
    rules: Option<Rules>,
    guard: Option<GuardConfig>,
    prefix_separator: Option<String>,
    /// Param `on_violation`.
    pub on_violation: OnViolation,
    /// Param `flag_header`.
    pub flag_header: String,
}

/// The param names of `planCritic`.
pub const KEYS: &[&str] = &[
    "allowed_tools",
    "max_calls",
    "check_schemas",
    "rules",
    "constraints",
    "max_arg_bytes",
    "tool_prefix_separator",
    "on_violation",
    "flag_header",
    "approval_page",
];

impl CriticConfig {
    /// Parses the params; errors name the param.
    pub fn parse(p: &Params) -> Result<Self, ParamError> {
        let allowed = match p.get("allowed_tools") {
            None => None,
            Some(_) => {
                let mut b = GlobSetBuilder::new();
                for t in p.list("allowed_tools")? {
                    b.add(
                        Glob::new(&t)
                            .map_err(|e| ParamError::invalid("allowed_tools", &t, format!("bad glob: {e}")))?,
                    );
                }
                Some(
                    b.build()
                        .map_err(|e| ParamError::invalid("allowed_tools", "(list)", e.to_string()))?,
                )
            }
        };
        let max_calls: Option<usize> = p.parse("max_calls")?;
        if max_calls == Some(0) {
            return Err(ParamError::invalid("max_calls", "0", "must be at least 1"));
        }
        let rules = match p.get("rules").filter(|s| !s.trim().is_empty()) {
            Some(raw) => Some(Rules::parse("rules", raw)?),
            None => None,
        };
        let has_guard = ["constraints", "max_arg_bytes"]
            .iter()
            .any(|k| p.get(k).is_some_and(|v| !v.trim().is_empty()));
        let guard = if has_guard { Some(GuardConfig::parse(p)?) } else { None };
        let on_violation = match p.get("on_violation").map(str::trim) {
            None | Some("") | Some("block") => OnViolation::Block,
            Some("strip") => OnViolation::Strip,
            Some("flag") => OnViolation::Flag,
            Some(other) => {
                return Err(ParamError::invalid(
                    "on_violation",
                    other,
                    "expected block, strip or flag",
                ))
            }
        };
        let flag_header = p
            .get("flag_header")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .unwrap_or("x-plan-violation")
            .to_ascii_lowercase();
        if !flag_header
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(ParamError::invalid("flag_header", &flag_header, "not a header name"));
        }
        Ok(CriticConfig {
            allowed,
            max_calls,
            check_schemas: p.bool_or("check_schemas", true)?,
            rules,
            guard,
            prefix_separator: p
                .get("tool_prefix_separator")
                .filter(|s| !s.trim().is_empty())
                .map(String::from),
            on_violation,
            flag_header,
        })
    }
}

/// A refused call: which one, and the check it failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The call's position in the plan.
    pub index: usize,
    /// The call id, if the model gave one.
    pub id: Option<String>,
    /// The tool name.
    pub tool: String,
    /// The check (`unknown_tool`, `schema_mismatch`, ...).
    pub check: &'static str,
    /// What failed, without argument values (a JSON pointer, a rule name).
    pub detail: String,
    /// The approval the call waits for (or that denied it), if any.
    pub approval: Option<String>,
}

/// Compiled declared schemas, shared by the calls of a policy.
#[derive(Default)]
pub struct SchemaCache {
    map: Mutex<HashMap<String, Arc<Validator>>>,
}

impl std::fmt::Debug for SchemaCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchemaCache").finish_non_exhaustive()
    }
}

impl SchemaCache {
    /// The validator of `schema`; `None` when it does not compile.
    fn get(&self, schema: &Value) -> Option<Arc<Validator>> {
        let key = schema.to_string();
        if let Some(v) = self.map.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Some(Arc::clone(v));
        }
        let v = match jsonschema::validator_for(schema) {
            Ok(v) => Arc::new(v),
            Err(e) => {
                tracing::warn!(error = %e, "declared tool schema does not compile: arguments not validated");
                return None;
            }
        };
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_SCHEMAS {
            map.clear();
        }
        map.insert(key, Arc::clone(&v));
        Some(v)
    }
}

/// What a plan is checked against besides the params.
#[derive(Debug, Clone, Copy)]
pub struct PlanContext<'a> {
    /// The tools the request declared, if it declared any.
    pub declared: Option<&'a Declared>,
    /// The caller, from the auth agents' metadata.
    pub caller: &'a Caller,
}

pub(crate) fn parse_arguments(args: &Arguments) -> Result<Option<Value>, (&'static str, String)> {
    match args {
        Arguments::Missing => Ok(None),
        Arguments::TooLarge => Err(("arguments_too_large", "over the streamed arguments limit".into())),
        Arguments::NotUtf8 => Err(("invalid_arguments", "not valid UTF-8".into())),
        Arguments::Text(t) if t.len() > MAX_ARGUMENTS_BYTES => Err((
            "arguments_too_large",
            format!("{} bytes, at most {MAX_ARGUMENTS_BYTES}", t.len()),
        )),
        Arguments::Text(t) if t.trim().is_empty() => Ok(None),
        Arguments::Text(t) => serde_json::from_str::<Value>(t)
            .map(Some)
            .map_err(|e| ("invalid_arguments", format!("not JSON: {e}"))),
        Arguments::Value(v) => Ok(Some(v.clone())),
    }
}

impl CriticConfig {
    /// Checks one call (not the step limit): the first failing check.
    pub fn check(&self, call: &PlannedCall, cx: PlanContext<'_>, schemas: &SchemaCache) -> Option<Finding> {
        let finding = |check: &'static str, detail: String| Finding {
            index: call.index,
            id: call.id.clone(),
            tool: call.name.clone(),
            check,
            detail,
            approval: None,
        };
        let tool = strip_prefix(&call.name, self.prefix_separator.as_deref());
        let known = match (&self.allowed, cx.declared) {
            (Some(globs), _) => globs.is_match(tool) || globs.is_match(&call.name),
            (None, Some(declared)) => declared.contains_key(&call.name),
            (None, None) => false,
        };
        if call.name.is_empty() || !known {
            let why = if self.allowed.is_some() {
                "not in allowed_tools"
            } else {
                "not declared by the request"
            };
            return Some(finding("unknown_tool", why.into()));
        }
        // An `approve` rule's call is checked like an allowed one; if it
        // passes every check it needs a grant (see `planner::approve`).
        let mut needs_approval = None;
        if let Some(rules) = &self.rules {
            let d = rules.decide("tools/call", Some(tool), cx.caller);
            if d.approval.is_some() {
                needs_approval = Some(d.rule);
            } else if !d.allowed {
                return Some(finding("rule_denied", format!("rule {}", d.rule)));
            }
        }
        let args = match parse_arguments(&call.arguments) {
            Ok(a) => a,
            Err((check, detail)) => return Some(finding(check, detail)),
        };
        if let Some(a) = &args {
            if !a.is_object() {
                return Some(finding("invalid_arguments", "not a JSON object".into()));
            }
        }
        if self.check_schemas {
            let schema = cx.declared.and_then(|d| d.get(&call.name)).and_then(Option::as_ref);
            if let Some(validator) = schema.and_then(|s| schemas.get(s)) {
                let empty = Value::Object(serde_json::Map::new());
                let first = validator
                    .iter_errors(args.as_ref().unwrap_or(&empty))
                    .next()
                    .map(|err| {
                        (
                            err.instance_path().as_str().to_string(),
                            err.schema_path().as_str().to_string(),
                        )
                    });
                if let Some((at, schema_path)) = first {
                    let at = if at.is_empty() { "(root)".to_string() } else { at };
                    return Some(finding("schema_mismatch", format!("at {at} (schema {schema_path})")));
                }
            }
        }
        if let Some(guard) = &self.guard {
            if let Err(v) = check_call(guard, tool, args.as_ref()) {
                return Some(finding("argument_refused", format!("argument {}: {}", v.arg, v.rule)));
            }
        }
        needs_approval.map(|rule| finding(super::approve::REQUIRED, format!("rule {rule}")))
    }

    /// A planned call's tool name, without the gateway prefix.
    pub fn tool_name<'n>(&self, name: &'n str) -> &'n str {
        strip_prefix(name, self.prefix_separator.as_deref())
    }

    /// The approval an `approve` rule needs for `tool` by `caller`.
    pub fn approval_need(&self, tool: &str, caller: &Caller) -> Option<crate::rules::ApprovalNeed<'_>> {
        self.rules
            .as_ref()
            .and_then(|r| r.decide("tools/call", Some(tool), caller).approval_need())
    }

    /// Checks a whole plan: the findings, one per refused call, in order.
    pub fn check_plan(&self, calls: &[PlannedCall], cx: PlanContext<'_>, schemas: &SchemaCache) -> Vec<Finding> {
        calls
            .iter()
            .filter_map(|c| {
                self.check(c, cx, schemas).or_else(|| {
                    self.step_limited(c.index).then(|| Finding {
                        index: c.index,
                        id: c.id.clone(),
                        tool: c.name.clone(),
                        check: "step_limit",
                        detail: format!("more than {} calls", self.max_calls.unwrap_or_default()),
                        approval: None,
                    })
                })
            })
            .collect()
    }

    /// True when a call at `index` is past `max_calls`.
    pub fn step_limited(&self, index: usize) -> bool {
        self.max_calls.is_some_and(|m| index >= m)
    }
}

#[cfg(test)]
#[path = "critic_tests.rs"]
mod tests;
