//! `toolArgumentGuard`: constraints on the arguments of `tools/call`, per tool.
//!
//! Param `constraints`: a JSON list; every constraint whose `tools` (names
//! or globs) match the called tool applies:
//!
//! | field | meaning |
//! |---|---|
//! | `tools` | tool names or globs (required) |
//! | `path_args` + `allowed_paths` | these arguments are absolute paths under one of the prefixes |
//! | `command_args` + `allowed_commands` | these arguments are command lines (or argv lists) of one of the binaries |
//! | `url_args` + `allowed_hosts`, `allowed_ports` | these arguments are URLs; SSRF rules always, hosts if listed |
//! | `max_arg_bytes` | largest argument, as JSON |
//!
//! An argument that is a list is checked item by item; a constrained
//! argument that is not a string (or list of strings) is refused. Param
//! `max_arg_bytes` limits every argument of every tool. A refusal names the
//! argument and the rule, never the value.

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::Deserialize;
use serde_json::{json, Value};

use super::authorize::prefix_separator;
use super::deny::{self, config_error, Incoming, Refusal, Style};
use super::paths::{check_command, check_path, normalise};
use super::urls::{check_url, HostPattern};
use crate::jsonrpc::{Envelope, DENIED};
use crate::param_cache::ParamCache;
use crate::rules::strip_prefix;
use policy_agents::{describe, ParamError, Params, Policy, PolicyError, RequestContext, RequestOutcome};

const NAME: &str = "toolArgumentGuard";
const KEYS: &[&str] = &["constraints", "max_arg_bytes", "denial", "tool_prefix_separator"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConstraintSpec {
    tools: Vec<String>,
    #[serde(default)]
    path_args: Vec<String>,
    #[serde(default)]
    allowed_paths: Vec<String>,
    #[serde(default)]
    command_args: Vec<String>,
    #[serde(default)]
    allowed_commands: Vec<String>,
    #[serde(default)]
    url_args: Vec<String>,
    #[serde(default)]
    allowed_hosts: Vec<String>,
    #[serde(default)]
    allowed_ports: Vec<u16>,
    max_arg_bytes: Option<usize>,
}

#[derive(Debug)]
struct Constraint {
    tools: GlobSet,
    path_args: Vec<String>,
    allowed_paths: Vec<String>,
    command_args: Vec<String>,
    allowed_commands: Vec<String>,
    url_args: Vec<String>,
    allowed_hosts: Vec<HostPattern>,
    allowed_ports: Vec<u16>,
    max_arg_bytes: Option<usize>,
}

/// Parsed params of `toolArgumentGuard`.
#[derive(Debug)]
pub struct GuardConfig {
    constraints: Vec<Constraint>,
    max_arg_bytes: Option<usize>,
    denial: Style,
    prefix_separator: Option<String>,
}

/// A refused argument: its name and the rule it broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The argument's name (`arguments` when the arguments are not an object).
    pub arg: String,
    /// The rule (`path_not_allowed`, `private_address`, ...).
    pub rule: &'static str,
}

fn constraint(i: usize, spec: ConstraintSpec) -> Result<Constraint, ParamError> {
    let bad = |why: String| ParamError::invalid("constraints", &format!("constraints[{i}]"), why);
    if spec.tools.is_empty() {
        return Err(bad("tools is empty".into()));
    }
    let mut b = GlobSetBuilder::new();
    for t in &spec.tools {
        b.add(Glob::new(t).map_err(|e| bad(format!("tools: bad glob: {e}")))?);
    }
    if !spec.path_args.is_empty() && spec.allowed_paths.is_empty() {
        return Err(bad("path_args needs allowed_paths".into()));
    }
    if !spec.command_args.is_empty() && spec.allowed_commands.is_empty() {
        return Err(bad("command_args needs allowed_commands".into()));
    }
    let mut allowed_paths = Vec::new();
    for p in &spec.allowed_paths {
        allowed_paths.push(normalise(p).map_err(|v| bad(format!("allowed_paths: {p:?}: {}", v.rule())))?);
    }
    let mut allowed_hosts = Vec::new();
    for h in &spec.allowed_hosts {
        allowed_hosts.push(HostPattern::parse(h).ok_or_else(|| bad(format!("allowed_hosts: bad host pattern {h:?}")))?);
    }
    if spec.max_arg_bytes == Some(0) {
        return Err(bad("max_arg_bytes must be at least 1".into()));
    }
    Ok(Constraint {
        tools: b.build().map_err(|e| bad(format!("tools: {e}")))?,
        path_args: spec.path_args,
        allowed_paths,
        command_args: spec.command_args,
        allowed_commands: spec.allowed_commands,
        url_args: spec.url_args,
        allowed_hosts,
        allowed_ports: spec.allowed_ports,
        max_arg_bytes: spec.max_arg_bytes,
    })
}

impl GuardConfig {
    /// Parses `constraints` (a JSON list), `max_arg_bytes`, `denial`,
    /// `tool_prefix_separator`; at least one of the first two.
    pub fn parse(p: &Params) -> Result<Self, ParamError> {
        let mut constraints = Vec::new();
        if let Some(raw) = p.get("constraints").filter(|s| !s.trim().is_empty()) {
            let specs: Vec<ConstraintSpec> = serde_json::from_str(raw.trim()).map_err(|e| {
                ParamError::invalid("constraints", "(constraints)", format!("expected a JSON list: {e}"))
            })?;
            for (i, spec) in specs.into_iter().enumerate() {
                constraints.push(constraint(i, spec)?);
            }
        }
        let max_arg_bytes: Option<usize> = p.parse("max_arg_bytes")?;
        if max_arg_bytes == Some(0) {
            return Err(ParamError::invalid("max_arg_bytes", "0", "must be at least 1"));
        }
        if constraints.is_empty() && max_arg_bytes.is_none() {
            return Err(ParamError::Missing("constraints or max_arg_bytes".into()));
        }
        Ok(GuardConfig {
            constraints,
            max_arg_bytes,
            denial: Style::parse(p, "denial")?,
            prefix_separator: prefix_separator(p),
        })
    }
}

/// The strings of an argument: itself, or the items of a list.
fn strings(v: &Value) -> Option<Vec<&str>> {
    match v {
        Value::String(s) => Some(vec![s.as_str()]),
        Value::Array(items) => items.iter().map(Value::as_str).collect(),
        _ => None,
    }
}

/// Checks the arguments of one call of `tool` (already stripped of its prefix).
pub fn check_call(cfg: &GuardConfig, tool: &str, args: Option<&Value>) -> Result<(), Violation> {
    let violation = |arg: &str, rule: &'static str| Violation {
        arg: arg.to_string(),
        rule,
    };
    let args = match args {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(map)) => map,
        Some(_) => return Err(violation("arguments", "not_an_object")),
    };
    let applying: Vec<&Constraint> = cfg.constraints.iter().filter(|c| c.tools.is_match(tool)).collect();
    let limits = applying.iter().filter_map(|c| c.max_arg_bytes).chain(cfg.max_arg_bytes);
    if let Some(max) = limits.min() {
        for (name, value) in args {
            if serde_json::to_string(value).map_or(true, |s| s.len() > max) {
                return Err(violation(name, "argument_too_large"));
            }
        }
    }
    for c in applying {
        for name in &c.path_args {
            let Some(v) = args.get(name) else { continue };
            let items = strings(v).ok_or_else(|| violation(name, "not_a_string"))?;
            for item in items {
                check_path(item, &c.allowed_paths).map_err(|e| violation(name, e.rule()))?;
            }
        }
        for name in &c.url_args {
            let Some(v) = args.get(name) else { continue };
            let items = strings(v).ok_or_else(|| violation(name, "not_a_string"))?;
            for item in items {
                check_url(item, &c.allowed_hosts, &c.allowed_ports).map_err(|e| violation(name, e.rule()))?;
            }
        }
        for name in &c.command_args {
            let Some(v) = args.get(name) else { continue };
            let words = strings(v).ok_or_else(|| violation(name, "not_a_string"))?;
            check_command(&words, &c.allowed_commands).map_err(|e| violation(name, e.rule()))?;
        }
    }
    Ok(())
}

/// Checks every `tools/call` of a body: the outcome and its metadata.
pub fn guard(cfg: &GuardConfig, env: &Envelope) -> RequestOutcome {
    let mut refusals = Vec::new();
    for (i, m) in env.messages.iter().enumerate() {
        if m.method.as_deref() != Some("tools/call") {
            continue;
        }
        let Ok(Some(name)) = m.target() else { continue };
        let tool = strip_prefix(name, cfg.prefix_separator.as_deref());
        if let Err(v) = check_call(cfg, tool, m.tool_arguments()) {
            refusals.push(Refusal {
                index: i,
                code: DENIED,
                message: format!("argument `{}` of tool `{name}` refused: {}", v.arg, v.rule),
                data: json!({"argument": v.arg, "rule": v.rule}),
            });
        }
    }
    match refusals.first() {
        None => RequestOutcome::proceed().set_metadata("mcp.args", "ok"),
        Some(r) => {
            let rule = format!(
                "argument:{}:{}",
                super::metadata_text(r.data["argument"].as_str().unwrap_or("-")),
                r.data["rule"].as_str().unwrap_or("-")
            );
            RequestOutcome::denied_with(deny::render(cfg.denial, None, env, &refusals, "argument_refused"))
                .set_metadata("mcp.args", r.data["rule"].as_str().unwrap_or("-").to_string())
                .set_metadata("mcp.decision", "deny")
                .set_metadata("mcp.rule", rule)
        }
    }
}

/// The `toolArgumentGuard` policy.
#[derive(Debug)]
pub struct ToolArgumentGuard {
    cache: ParamCache<GuardConfig>,
}

impl Default for ToolArgumentGuard {
    fn default() -> Self {
        ToolArgumentGuard::new()
    }
}

impl ToolArgumentGuard {
    /// A policy with an empty params cache.
    pub fn new() -> Self {
        ToolArgumentGuard {
            cache: ParamCache::new(KEYS),
        }
    }
}

impl Policy for ToolArgumentGuard {
    type Params = Params;
    describe! { name: NAME, params: KEYS, body: true }

    async fn on_request(&self, params: &Params, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let cfg = self
            .cache
            .get(params, GuardConfig::parse)
            .map_err(|e| config_error(NAME, &e))?;
        match deny::incoming(NAME, ctx)? {
            Incoming::NotPost => Ok(RequestOutcome::proceed()),
            Incoming::Bad(d) => Ok(RequestOutcome::denied_with(d)
                .set_metadata("mcp.decision", "deny")
                .set_metadata("mcp.rule", "invalid_jsonrpc")),
            Incoming::Messages(env) => Ok(guard(&cfg, &env)),
        }
    }
}

#[cfg(test)]
#[path = "args_tests.rs"]
mod tests;
