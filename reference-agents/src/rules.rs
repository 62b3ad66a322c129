//! Authorization rules: an ordered list, first match wins, default deny.
//!
//! A rule (one JSON object of the `rules` param):
//!
//! | field | meaning |
//! |---|---|
//! | `name` | shown in metadata `mcp.rule` and in denials (default `rules[i]`) |
//! | `effect` | `allow`, `deny` or `approve` (required): `approve` lets the call through only with a person's grant ([`crate::approvals`]) |
//! | `approval` | with `approve` only, and required there: who may approve, how long a request waits, which grants ([`crate::approvals::ApprovalRule`]) |
//! | `methods` | method names or globs (default `["tools/call"]`; for the A2A policies `["SendMessage", "SendStreamingMessage"]`) |
//! | `tools` | tool names, prompt names or resource URIs, or globs; unset = any. A rule with `tools` never matches a method without a target (`tools/list`) |
//! | `skills` | the same field under the name the A2A policies use: agent skill ids, or globs |
//! | `when.roles_any` | the caller holds at least one of these roles |
//! | `when.roles_all` | the caller holds all of these roles |
//! | `when.scopes` | the caller's scope holds all of these |
//! | `when.consumers` | the API-key consumer is one of these |
//! | `when.subs` | the JWT `sub` is one of these |
//!
//! The caller comes from the metadata that `apiKeyAuth` (`consumer`) and
//! `jwtValidation` (`sub`, `roles` comma-separated, `scope` space-separated)
//! set earlier in the chain; the kernel carries it into the response phase.

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::Deserialize;

use crate::approvals::ApprovalRule;
use policy_agents::{Metadata, ParamError};

/// `allow`, `deny` or `approve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    /// Let the call through.
    Allow,
    /// Refuse it.
    Deny,
    /// Let it through only with a person's grant (the rule's `approval`).
    Approve,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CallerSpec {
    #[serde(default)]
    roles_any: Vec<String>,
    #[serde(default)]
    roles_all: Vec<String>,
    #[serde(default)]
    scopes: Vec<String>,
    #[serde(default)]
    consumers: Vec<String>,
    #[serde(default)]
    subs: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleSpec {
    name: Option<String>,
    effect: Effect,
    methods: Option<Vec<String>>,
    /// `skills` for the A2A policies: the same field under its own name.
    #[serde(alias = "skills")]
    tools: Option<Vec<String>>,
    #[serde(default)]
    when: CallerSpec,
    approval: Option<serde_json::Value>,
}

/// One compiled rule.
#[derive(Debug)]
pub struct Rule {
    name: String,
    effect: Effect,
    methods: GlobSet,
    tools: Option<GlobSet>,
    when: CallerSpec,
    approval: Option<ApprovalRule>,
}

/// The rules of a route, in order.
#[derive(Debug)]
pub struct Rules {
    rules: Vec<Rule>,
}

/// Who calls, as earlier policies recorded it in metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    /// Roles (`roles`, comma-separated).
    pub roles: Vec<String>,
    /// Scopes (`scope`, space-separated).
    pub scopes: Vec<String>,
    /// API-key consumer (`consumer`).
    pub consumer: Option<String>,
    /// JWT subject (`sub`).
    pub sub: Option<String>,
}

impl Caller {
    /// Reads the caller from metadata.
    pub fn from_metadata(md: &Metadata) -> Self {
        let split = |key: &str, sep: char| -> Vec<String> {
            md.get(key)
                .unwrap_or_default()
                .split(sep)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        };
        let one = |key: &str| md.get(key).map(str::trim).filter(|s| !s.is_empty()).map(String::from);
        Caller {
            roles: split("roles", ','),
            scopes: split("scope", ' '),
            consumer: one("consumer"),
            sub: one("sub"),
        }
    }
}

/// A decision and the rule that made it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision<'r> {
    /// Allowed or not (an `approve` rule: not without a grant).
    pub allowed: bool,
    /// The matching rule's name, or `default_deny`.
    pub rule: &'r str,
    /// The matching `approve` rule's approval terms.
    pub approval: Option<&'r ApprovalRule>,
}

/// What an `approve` decision needs: its rule's name and approval terms.
#[derive(Debug, Clone, Copy)]
pub struct ApprovalNeed<'r> {
    /// The rule's name.
    pub rule: &'r str,
    /// Its `approval`.
    pub terms: &'r ApprovalRule,
}

impl<'r> Decision<'r> {
    /// Allowed, or allowed with a person's grant: what listings show.
    pub fn callable(&self) -> bool {
        self.allowed || self.approval.is_some()
    }

    /// The approval this decision needs, when an `approve` rule made it.
    pub fn approval_need(&self) -> Option<ApprovalNeed<'r>> {
        self.approval.map(|terms| ApprovalNeed { rule: self.rule, terms })
    }
}

/// The rule name used when no rule matched.
pub const DEFAULT_DENY: &str = "default_deny";

fn globs(param: &str, field: &str, patterns: &[String]) -> Result<GlobSet, ParamError> {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        let glob = Glob::new(p).map_err(|e| ParamError::invalid(param, p, format!("{field}: bad glob: {e}")))?;
        b.add(glob);
    }
    b.build()
        .map_err(|e| ParamError::invalid(param, field, format!("bad globs: {e}")))
}

impl CallerSpec {
    fn matches(&self, c: &Caller) -> bool {
        let has_role = |r: &String| c.roles.contains(r);
        (self.roles_any.is_empty() || self.roles_any.iter().any(has_role))
            && self.roles_all.iter().all(has_role)
            && self.scopes.iter().all(|s| c.scopes.contains(s))
            && (self.consumers.is_empty() || c.consumer.as_ref().is_some_and(|x| self.consumers.contains(x)))
            && (self.subs.is_empty() || c.sub.as_ref().is_some_and(|x| self.subs.contains(x)))
    }
}

impl Rules {
    /// Parses the JSON list in param `param`. Errors name the param, the
    /// rule's index and the field; values other than the rule's own text
    /// are not echoed.
    pub fn parse(param: &str, raw: &str) -> Result<Rules, ParamError> {
        Rules::parse_with_default(param, raw, &["tools/call"])
    }

    /// As [`Rules::parse`], with `default_methods` for rules without
    /// `methods` (the A2A policies: the sending methods).
    pub fn parse_with_default(param: &str, raw: &str, default_methods: &[&str]) -> Result<Rules, ParamError> {
        let raws: Vec<serde_json::Value> = serde_json::from_str(raw.trim())
            .map_err(|e| ParamError::invalid(param, "(rules)", format!("expected a JSON list of rules: {e}")))?;
        let mut rules = Vec::with_capacity(raws.len());
        for (i, raw) in raws.into_iter().enumerate() {
            let spec: RuleSpec = serde_json::from_value(raw.clone()).map_err(|e| {
                ParamError::invalid(
                    param,
                    "(rules)",
                    format!("expected a JSON list of rules: rule {i}: {e}"),
                )
            })?;
            let name = spec.name.clone().unwrap_or_else(|| format!("rules[{i}]"));
            let methods = spec
                .methods
                .unwrap_or_else(|| default_methods.iter().map(|m| m.to_string()).collect());
            if methods.is_empty() {
                return Err(ParamError::invalid(
                    param,
                    &name,
                    "methods is empty: the rule would never match",
                ));
            }
            let tools = match &spec.tools {
                Some(t) if t.is_empty() => {
                    return Err(ParamError::invalid(
                        param,
                        &name,
                        "tools is empty: the rule would never match",
                    ))
                }
                Some(t) => Some(globs(param, "tools", t)?),
                None => None,
            };
            let approval = match (spec.effect, spec.approval) {
                (Effect::Approve, Some(a)) => {
                    let mut terms = ApprovalRule::parse(param, &name, a)?;
                    // What the rule matches and asks, as written (its name
                    // left out); the effective methods when it names none.
                    // Where requests are announced is not what was approved.
                    let mut asked = raw.get("approval").cloned();
                    if let Some(serde_json::Value::Object(m)) = asked.as_mut() {
                        m.remove("notify");
                    }
                    terms.digest = crate::approvals::binding::digest(&serde_json::json!({
                        "methods": methods,
                        "tools": raw.get("tools").or_else(|| raw.get("skills")),
                        "when": raw.get("when"),
                        "approval": asked,
                    }));
                    Some(terms)
                }
                (Effect::Approve, None) => {
                    return Err(ParamError::invalid(
                        param,
                        &name,
                        "effect approve needs `approval` (at least its approvers)",
                    ))
                }
                (_, Some(_)) => {
                    return Err(ParamError::invalid(
                        param,
                        &name,
                        "`approval` is only for effect approve",
                    ))
                }
                (_, None) => None,
            };
            rules.push(Rule {
                approval,
                name,
                effect: spec.effect,
                methods: globs(param, "methods", &methods)?,
                tools,
                when: spec.when,
            });
        }
        Ok(Rules { rules })
    }

    /// The number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// True when there is no rule (everything governed is denied).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Decides a call of `method` on `target` (tool name, prompt name or
    /// resource URI, already stripped of a gateway prefix) by `caller`.
    pub fn decide(&self, method: &str, target: Option<&str>, caller: &Caller) -> Decision<'_> {
        for rule in &self.rules {
            if !rule.methods.is_match(method) {
                continue;
            }
            match (&rule.tools, target) {
                (Some(tools), Some(t)) if !tools.is_match(t) => continue,
                (Some(_), None) => continue,
                _ => {}
            }
            if !rule.when.matches(caller) {
                continue;
            }
            return Decision {
                allowed: rule.effect == Effect::Allow,
                rule: &rule.name,
                approval: rule.approval.as_ref(),
            };
        }
        Decision {
            allowed: false,
            rule: DEFAULT_DENY,
            approval: None,
        }
    }
}

impl Rules {
    /// The scopes that would let `caller` make a call the rules refuse: those
    /// of the first `allow` rule for this method and target whose other
    /// conditions the caller meets and whose `when.scopes` it lacks. `None`
    /// when no such rule comes before the rule that decided (more scope
    /// would not help), or when the call is allowed.
    pub fn scopes_needed(&self, method: &str, target: Option<&str>, caller: &Caller) -> Option<&[String]> {
        for rule in &self.rules {
            if !rule.methods.is_match(method) {
                continue;
            }
            match (&rule.tools, target) {
                (Some(tools), Some(t)) if !tools.is_match(t) => continue,
                (Some(_), None) => continue,
                _ => {}
            }
            if rule.when.matches(caller) {
                return None;
            }
            let with_scopes = Caller {
                scopes: rule.when.scopes.clone(),
                ..caller.clone()
            };
            if rule.effect != Effect::Deny && !rule.when.scopes.is_empty() && rule.when.matches(&with_scopes) {
                return Some(&rule.when.scopes);
            }
        }
        None
    }
}

/// Strips a gateway prefix: with separator `__`, `github__read_file` is
/// `read_file`; a name without the separator is unchanged.
pub fn strip_prefix<'a>(name: &'a str, separator: Option<&str>) -> &'a str {
    match separator {
        Some(sep) if !sep.is_empty() => name.split_once(sep).map_or(name, |(_, rest)| rest),
        _ => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(roles: &[&str], scopes: &[&str], consumer: Option<&str>, sub: Option<&str>) -> Caller {
        Caller {
            roles: roles.iter().map(|s| s.to_string()).collect(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            consumer: consumer.map(String::from),
            sub: sub.map(String::from),
        }
    }

    const RULES: &str = r#"[
        {"name": "no-delete", "effect": "deny", "tools": ["delete_*"]},
        {"name": "admins", "effect": "allow", "tools": ["*"], "when": {"roles_any": ["admin"]}},
        {"name": "readers", "effect": "allow", "tools": ["read_file", "search"], "when": {"roles_all": ["reader", "staff"], "scopes": ["files:read"]}},
        {"name": "bot", "effect": "allow", "tools": ["search"], "when": {"consumers": ["ci-bot"]}},
        {"name": "alice", "effect": "allow", "methods": ["prompts/get"], "when": {"subs": ["alice"]}},
        {"name": "listing", "effect": "allow", "methods": ["*/list"]}
    ]"#;

    #[test]
    fn first_match_wins_and_the_default_denies() {
        let rules = Rules::parse("rules", RULES).unwrap();
        let admin = caller(&["admin"], &[], None, None);
        let d = rules.decide("tools/call", Some("delete_repo"), &admin);
        assert_eq!((d.allowed, d.rule), (false, "no-delete"));
        let d = rules.decide("tools/call", Some("anything"), &admin);
        assert_eq!((d.allowed, d.rule), (true, "admins"));
        let nobody = Caller::default();
        let d = rules.decide("tools/call", Some("read_file"), &nobody);
        assert_eq!((d.allowed, d.rule), (false, DEFAULT_DENY));
        // tools/list has no target: rules with `tools` are skipped.
        assert_eq!(rules.decide("tools/list", None, &nobody).rule, "listing");
        assert!(!rules.decide("resources/read", Some("file:///x"), &admin).allowed);
    }

    #[test]
    fn caller_conditions() {
        let rules = Rules::parse("rules", RULES).unwrap();
        let reader = caller(&["reader", "staff"], &["files:read", "x"], None, None);
        assert!(rules.decide("tools/call", Some("read_file"), &reader).allowed);
        let no_scope = caller(&["reader", "staff"], &["x"], None, None);
        assert!(!rules.decide("tools/call", Some("read_file"), &no_scope).allowed);
        assert_eq!(
            rules.scopes_needed("tools/call", Some("read_file"), &no_scope),
            Some(&["files:read".to_string()][..])
        );
        let with_scope = caller(&["reader", "staff"], &["files:read"], None, None);
        assert_eq!(rules.scopes_needed("tools/call", Some("read_file"), &with_scope), None);
        let no_role = caller(&["staff"], &[], None, None);
        assert_eq!(rules.scopes_needed("tools/call", Some("read_file"), &no_role), None);
        let one_role = caller(&["reader"], &["files:read"], None, None);
        assert!(!rules.decide("tools/call", Some("read_file"), &one_role).allowed);
        let bot = caller(&[], &[], Some("ci-bot"), None);
        assert!(rules.decide("tools/call", Some("search"), &bot).allowed);
        assert!(!rules.decide("tools/call", Some("read_file"), &bot).allowed);
        let other_bot = caller(&[], &[], Some("other"), None);
        assert!(!rules.decide("tools/call", Some("search"), &other_bot).allowed);
        let alice = caller(&[], &[], None, Some("alice"));
        assert!(rules.decide("prompts/get", Some("summary"), &alice).allowed);
        assert!(!rules.decide("prompts/get", Some("summary"), &bot).allowed);
    }

    #[test]
    fn callers_come_from_the_auth_agents_metadata() {
        let mut md = Metadata::new();
        md.insert("roles", "admin, ops,");
        md.insert("scope", "files:read  files:write");
        md.insert("consumer", "alice");
        md.insert("sub", "u1");
        let c = Caller::from_metadata(&md);
        assert_eq!(
            c,
            caller(
                &["admin", "ops"],
                &["files:read", "files:write"],
                Some("alice"),
                Some("u1")
            )
        );
        assert_eq!(Caller::from_metadata(&Metadata::new()), Caller::default());
    }

    #[test]
    fn malformed_rules_name_the_param_and_the_rule() {
        for bad in [
            "not json",
            "{}",
            r#"[{"effect": "maybe"}]"#,
            r#"[{"effect": "allow", "tool": ["x"]}]"#,
            r#"[{"effect": "allow", "tools": []}]"#,
            r#"[{"effect": "allow", "methods": []}]"#,
            r#"[{"effect": "allow", "tools": ["a[b"]}]"#,
            r#"[{"effect": "allow", "when": {"role": ["x"]}}]"#,
        ] {
            let err = Rules::parse("rules", bad).unwrap_err().to_string();
            assert!(err.contains("`rules`"), "{bad}: {err}");
        }
        assert!(Rules::parse("rules", "[]").unwrap().is_empty());
    }

    #[test]
    fn prefixes_are_stripped_at_the_first_separator() {
        assert_eq!(strip_prefix("github__read_file", Some("__")), "read_file");
        assert_eq!(strip_prefix("read_file", Some("__")), "read_file");
        assert_eq!(strip_prefix("a__b__c", Some("__")), "b__c");
        assert_eq!(strip_prefix("a__b", None), "a__b");
        assert_eq!(strip_prefix("a__b", Some("")), "a__b");
    }
}
