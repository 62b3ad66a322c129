//! `mcpToolAuthorization`: who may call which tool, prompt or resource.
//!
//! Request phase, with the body. Each message of the body (a batch is
//! decided message by message, and refused whole when any message is
//! refused) is decided by its method:
//! * `initialize`, `server/discover`, `ping`, `notifications/*` and
//!   responses (to the server's own requests): always allowed;
//! * `tools/call`, `prompts/get` (target: `params.name`) and
//!   `resources/read` (target: `params.uri`): the first rule matching the
//!   method, the target and the caller;
//! * any other method (`tools/list`, `completion/complete`, ...): the first
//!   rule matching the method and the caller (rules with `tools` never match).
//!
//! No matching rule: denied (`default_deny`). Every decision sets metadata
//! `mcp.method`, `mcp.tool`, `mcp.decision` and `mcp.rule`; a single
//! request also `mcp.request_id` (its id as JSON text), which the streaming
//! response policies use to answer it when they refuse a server request on
//! its stream.
//!
//! An `http_403` denial carries `WWW-Authenticate: Bearer
//! error="insufficient_scope"`, with `scope="..."` naming the scopes of the
//! first `allow` rule the caller would meet but for its scopes (MCP's scope
//! challenge, so a client can ask for them), and `resource_metadata="..."`
//! when that param is set.

use std::sync::Arc;

use super::approve::{self, UrlElicitation};
use super::deny::{self, config_error, Incoming, Refusal, Style};
use crate::approvals::{Approvals, Check};
use crate::auth::bearer_challenge;
use crate::jsonrpc::{classify, Envelope, Kind, MethodClass, DENIED};
use crate::param_cache::ParamCache;
use crate::rules::{strip_prefix, ApprovalNeed, Caller, Rules};
use policy_agents::{describe, Deny, Params, Policy, PolicyError, RequestContext, RequestOutcome};

const NAME: &str = "mcpToolAuthorization";
const KEYS: &[&str] = &[
    "rules",
    "denial",
    "tool_prefix_separator",
    "resource_metadata",
    "approval_page",
    "url_elicitation",
];

/// The rule name of always-allowed messages.
pub const ALWAYS_ALLOWED: &str = "always_allowed";

/// Parsed params of `mcpToolAuthorization` (and `mcpToolFilter`).
#[derive(Debug)]
pub struct AuthzConfig {
    /// The rules.
    pub rules: Rules,
    /// How denials are answered.
    pub denial: Style,
    /// The gateway prefix separator, if any.
    pub prefix_separator: Option<String>,
    /// Named in the 403's challenge (RFC 9728), if set.
    pub resource_metadata: Option<String>,
    /// Whether calls waiting for approval are answered `-32042`.
    pub url_elicitation: UrlElicitation,
}

impl AuthzConfig {
    /// Parses `rules` (required), `denial`, `tool_prefix_separator`,
    /// `resource_metadata`.
    pub fn parse(p: &Params) -> Result<Self, policy_agents::ParamError> {
        Ok(AuthzConfig {
            rules: Rules::parse("rules", p.required("rules")?)?,
            denial: Style::parse(p, "denial")?,
            prefix_separator: prefix_separator(p),
            resource_metadata: crate::auth::public_url("resource_metadata", p)?,
            url_elicitation: UrlElicitation::parse(p)?,
        })
    }
}

/// Param `tool_prefix_separator`, when set and not blank.
pub fn prefix_separator(p: &Params) -> Option<String> {
    p.get("tool_prefix_separator")
        .filter(|s| !s.trim().is_empty())
        .map(String::from)
}

/// The scopes that would let the caller make a refused call (see
/// [`Rules::scopes_needed`]).
fn scopes_needed<'r>(
    cfg: &'r AuthzConfig,
    caller: &Caller,
    method: &str,
    target: Option<&str>,
) -> Option<&'r [String]> {
    let t = match classify(method) {
        MethodClass::Open => return None,
        MethodClass::Targeted(_) => target.map(|t| strip_prefix(t, cfg.prefix_separator.as_deref())),
        MethodClass::Plain => None,
    };
    cfg.rules.scopes_needed(method, t, caller)
}

/// The 403's challenge: `insufficient_scope`, with the scopes that would
/// allow the refused calls (MCP authorization, "scope challenge") and the
/// resource metadata URL when known.
fn challenge(cfg: &AuthzConfig, needed: &[String]) -> String {
    let scope = (!needed.is_empty()).then(|| needed.join(" "));
    bearer_challenge(
        Some("insufficient_scope"),
        scope.as_deref(),
        cfg.resource_metadata.as_deref(),
    )
}

/// The decision on one message: allowed, by which rule, and the approval
/// an `approve` rule needs.
fn decide<'r>(
    cfg: &'r AuthzConfig,
    caller: &Caller,
    method: &str,
    target: Option<&str>,
) -> (bool, &'r str, Option<ApprovalNeed<'r>>) {
    match classify(method) {
        MethodClass::Open => (true, ALWAYS_ALLOWED, None),
        MethodClass::Targeted(_) => {
            let t = target.map(|t| strip_prefix(t, cfg.prefix_separator.as_deref()));
            let d = cfg.rules.decide(method, t, caller);
            (d.allowed, d.rule, d.approval_need())
        }
        MethodClass::Plain => {
            let d = cfg.rules.decide(method, None, caller);
            (d.allowed, d.rule, d.approval_need())
        }
    }
}

/// The approval need of message `m`, and the target it binds (the
/// stripped tool name, or the method when there is none).
fn need_of<'r>(
    cfg: &'r AuthzConfig,
    caller: &Caller,
    m: &crate::jsonrpc::Message,
) -> Option<(ApprovalNeed<'r>, String)> {
    let method = m.method.as_deref()?;
    if m.kind != Kind::Request {
        return None;
    }
    let target = m.target().ok().flatten();
    let (_, _, need) = decide(cfg, caller, method, target);
    let t = target.map_or(method, |t| strip_prefix(t, cfg.prefix_separator.as_deref()));
    need.map(|n| (n, t.to_string()))
}

/// What the approvals said of the body's messages, by index, and where to
/// send the people who decide.
#[derive(Debug, Default)]
pub struct Approved<'a> {
    /// One entry per message: the check of those an `approve` rule governs.
    pub checks: Vec<Option<Check>>,
    /// The approval page's URL.
    pub page: String,
    /// The request body (for a constrained grant's rewrite).
    pub body: Option<&'a [u8]>,
    /// The body to forward instead of the request's: a 2026-07-28 retry
    /// with the gateway's own question and state taken out.
    pub stripped: Option<&'a [u8]>,
    /// A single 2026-07-28 request: held calls are asked by an
    /// `input_required` result, not -32042.
    pub modern: Option<&'a approve::Modern<'a>>,
}

/// Joins up to 512 bytes of names for a batch's metadata.
fn joined<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::new();
    for n in names {
        if out.len() + n.len() + 1 > 512 {
            break;
        }
        if !out.is_empty() {
            out.push(',');
        }
        out.push_str(n);
    }
    if out.is_empty() {
        "-".to_string()
    } else {
        out
    }
}

/// Decides a whole body: the outcome and its metadata. Calls that an
/// `approve` rule governs are refused (no approvals were consulted): see
/// [`authorize_approved`].
pub fn authorize(cfg: &AuthzConfig, caller: &Caller, env: &Envelope) -> RequestOutcome {
    authorize_approved(cfg, caller, env, &Approved::default())
}

/// [`authorize`], with what the approvals said of the messages that
/// `approve` rules govern.
pub fn authorize_approved(
    cfg: &AuthzConfig,
    caller: &Caller,
    env: &Envelope,
    approved: &Approved<'_>,
) -> RequestOutcome {
    let mut refusals = Vec::new();
    let mut needed: Vec<String> = Vec::new();
    let mut first_rule: Option<&str> = None;
    // Refusals of the approvals' own (answered 200, or 429), and grants.
    let mut approval_status: Option<u16> = None;
    let mut plain_refusal = false;
    let mut granted: Vec<(usize, &Check)> = Vec::new();
    for (i, m) in env.messages.iter().enumerate() {
        let (mut allowed, rule, need) = match (m.kind, m.method.as_deref()) {
            (Kind::Response, _) | (_, None) => (true, ALWAYS_ALLOWED, None),
            (_, Some(method)) => decide(cfg, caller, method, m.target().ok().flatten()),
        };
        if rule != ALWAYS_ALLOWED && first_rule.is_none() {
            first_rule = Some(rule);
        }
        if need.is_some() && m.kind == Kind::Request {
            let what = m
                .target()
                .ok()
                .flatten()
                .map_or(m.method.as_deref().unwrap_or("-"), |t| {
                    strip_prefix(t, cfg.prefix_separator.as_deref())
                });
            match approved.checks.get(i).and_then(Option::as_ref) {
                Some(check @ Check::Granted { .. }) => {
                    granted.push((i, check));
                    allowed = true;
                }
                Some(check) => {
                    let ui = cfg.url_elicitation;
                    if let Some((r, status)) = approve::refusal(i, m, check, rule, what, &approved.page, ui) {
                        approval_status = Some(approval_status.map_or(status, |s| s.max(status)));
                        refusals.push(r);
                        continue;
                    }
                }
                None => {}
            }
        }
        if !allowed {
            plain_refusal = true;
            if let Some(method) = m.method.as_deref() {
                for s in scopes_needed(cfg, caller, method, m.target().ok().flatten()).unwrap_or_default() {
                    if !needed.contains(s) {
                        needed.push(s.clone());
                    }
                }
            }
            let what = m.target().ok().flatten().unwrap_or(m.method.as_deref().unwrap_or("-"));
            refusals.push(Refusal {
                index: i,
                code: DENIED,
                message: format!("{} denied by policy", m.method.as_deref().unwrap_or("call")),
                data: serde_json::json!({"rule": rule, "target": what}),
            });
        }
    }
    let (method, tool) = match env.messages.as_slice() {
        [m] if !env.batch => (
            super::metadata_text(m.method.as_deref().unwrap_or("response")),
            m.target().ok().flatten().unwrap_or("-").to_string(),
        ),
        _ => (
            "batch".to_string(),
            joined(env.messages.iter().filter_map(|m| m.target().ok().flatten())),
        ),
    };
    refusals.sort_by_key(|r| r.index);
    let rule = match refusals.first() {
        Some(r) => r.data["rule"].as_str().unwrap_or("-").to_string(),
        None => first_rule.unwrap_or(ALWAYS_ALLOWED).to_string(),
    };
    let approval_reason = refusals
        .first()
        .and_then(|r| r.data.get("reason"))
        .and_then(|r| r.as_str())
        .filter(|r| r.starts_with("approval_"));
    let decision = match (refusals.is_empty(), approval_reason) {
        (true, _) => "allow",
        (false, Some("approval_required")) => "approve",
        (false, _) => "deny",
    };
    let mut out = if refusals.is_empty() {
        let mut out = RequestOutcome::proceed();
        if let Some(b) = approved.stripped {
            out = out.set_body(b.to_vec());
        }
        for (i, check) in &granted {
            if let Check::Granted { args: Some(args), .. } = check {
                match approved.body.and_then(|b| approve::rewrite(b, env.batch, *i, args)) {
                    Some(body) => out = out.set_body(body),
                    None => {
                        return RequestOutcome::denied_with(deny::render(
                            Style::JsonRpcError,
                            None,
                            env,
                            &[Refusal {
                                index: *i,
                                code: DENIED,
                                message: "the call could not be put in its approved form".into(),
                                data: serde_json::json!({"reason": "approval_rewrite_failed", "rule": rule}),
                            }],
                            "approval_rewrite_failed",
                        ))
                    }
                }
            }
        }
        out
    } else if let (Some(d), false) = (modern_ask(cfg, env, approved, &refusals), plain_refusal) {
        RequestOutcome::denied_with(d)
    } else if let (Some(status), false) = (approval_status, plain_refusal) {
        let mut d = deny::render(
            Style::JsonRpcError,
            None,
            env,
            &refusals,
            approval_reason.unwrap_or("approval_required"),
        );
        d.status = status;
        RequestOutcome::denied_with(d)
    } else {
        let challenge = challenge(cfg, &needed);
        RequestOutcome::denied_with(deny::render(
            cfg.denial,
            Some(&challenge),
            env,
            &refusals,
            "tool_denied",
        ))
    };
    if let Some((_, Check::Granted { approval, grant, .. })) = granted.first() {
        out = out
            .set_metadata("approval.id", approval.clone())
            .set_metadata("approval.grant", grant.as_str());
    } else if let Some(id) = refusals
        .first()
        .and_then(|r| r.data.get("approval_id"))
        .and_then(|v| v.as_str())
    {
        out = out.set_metadata("approval.id", id.to_string());
    }
    let out = out
        .set_metadata("mcp.method", method)
        .set_metadata("mcp.tool", super::metadata_text(&tool))
        .set_metadata("mcp.decision", decision)
        .set_metadata("mcp.rule", rule);
    match env.messages.as_slice() {
        _ if env.batch => out.set_metadata("mcp.batch_size", env.messages.len().to_string()),
        [m] if m.kind == Kind::Request => match m.id.as_ref().and_then(super::events::id_text) {
            Some(id) => out.set_metadata(super::events::PENDING_ID, id),
            None => out,
        },
        _ => out,
    }
}

/// The answer to a single 2026-07-28 call that waits for approval: the
/// `input_required` result of [`approve::ask`] (unless param
/// `url_elicitation: never`).
fn modern_ask(cfg: &AuthzConfig, env: &Envelope, approved: &Approved<'_>, refusals: &[Refusal]) -> Option<Deny> {
    let m = approved
        .modern
        .filter(|_| !env.batch && cfg.url_elicitation != UrlElicitation::Never)?;
    let Some(Check::Pending { id, expires_ms, .. }) = approved.checks.first().and_then(Option::as_ref) else {
        return None;
    };
    let r = refusals.first()?;
    let url = r.data["approval_url"].as_str()?;
    let message = r.data["elicitations"][0]["message"]
        .as_str()
        .unwrap_or("Approve the call");
    Some(approve::ask(m, id, *expires_ms, url, message))
}

/// The `mcpToolAuthorization` policy.
#[derive(Debug)]
pub struct McpToolAuthorization {
    cache: ParamCache<AuthzConfig>,
    approvals: Option<Arc<Approvals>>,
}

impl Default for McpToolAuthorization {
    fn default() -> Self {
        McpToolAuthorization::new()
    }
}

impl McpToolAuthorization {
    /// A policy with an empty params cache.
    pub fn new() -> Self {
        McpToolAuthorization {
            cache: ParamCache::new(KEYS),
            approvals: None,
        }
    }

    /// A policy whose `approve` rules ask `approvals` (without: calls they
    /// govern fail, closed).
    pub fn with_approvals(approvals: Arc<Approvals>) -> Self {
        McpToolAuthorization {
            cache: ParamCache::new(KEYS),
            approvals: Some(approvals),
        }
    }
}

impl Policy for McpToolAuthorization {
    type Params = Params;
    describe! { name: NAME, params: KEYS, body: true }

    async fn on_request(&self, params: &Params, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let cfg = self
            .cache
            .get(params, AuthzConfig::parse)
            .map_err(|e| config_error(NAME, &e))?;
        let env = match deny::incoming(NAME, ctx)? {
            Incoming::NotPost => {
                return Ok(RequestOutcome::proceed()
                    .set_metadata("mcp.method", "-")
                    .set_metadata("mcp.tool", "-")
                    .set_metadata("mcp.decision", "allow")
                    .set_metadata("mcp.rule", "not_a_post"))
            }
            Incoming::Bad(deny) => {
                // `invalid_jsonrpc`, or `header_mismatch` (-32020).
                let rule = deny.reason.clone();
                return Ok(RequestOutcome::denied_with(deny)
                    .set_metadata("mcp.method", "-")
                    .set_metadata("mcp.tool", "-")
                    .set_metadata("mcp.decision", "deny")
                    .set_metadata("mcp.rule", rule));
            }
            Incoming::Messages(env) => env,
        };
        let caller = Caller::from_metadata(ctx.metadata);
        let modern = match self.approvals.as_deref() {
            Some(a) => match approve::modern(a.sealer(), &caller, ctx, &env) {
                Ok(m) => m,
                Err(d) => {
                    return Ok(RequestOutcome::denied_with(d)
                        .set_metadata("mcp.decision", "deny")
                        .set_metadata("mcp.rule", "invalid_request_state"))
                }
            },
            None => None,
        };
        let mut approved = Approved {
            stripped: modern.as_ref().and_then(|m| m.stripped.as_deref()),
            modern: modern.as_ref(),
            ..Approved::default()
        };
        for m in &env.messages {
            let check = match need_of(&cfg, &caller, m) {
                Some((need, target)) => {
                    Some(approve::check(self.approvals.as_deref(), &need, &caller, ctx, m, &target).await?)
                }
                None => None,
            };
            approved.checks.push(check);
        }
        if approved.checks.iter().any(Option::is_some) {
            approved.page = crate::approvals::page_url(params, &ctx.request);
            approved.body = approved.stripped.or(ctx.request.body());
        }
        Ok(authorize_approved(&cfg, &caller, &env, &approved))
    }
}

#[cfg(test)]
#[path = "authorize_tests.rs"]
mod tests;
