//! `planCritic` on buffered responses: the policy, its outcomes and metadata.
//!
//! The response phase reads the completion (JSON, 2xx, no content-encoding)
//! and the request (the tools it declared: list the policy in the route's
//! request chain too, so the kernel buffers the request body, or set
//! `allowed_tools`). Findings are answered by `on_violation`:
//! * `block`: 403 with a JSON error naming the first refused call and its check;
//! * `strip`: the refused calls are removed, the rest kept;
//! * `flag`: the response passes with header `flag_header`.
//!
//! Every decision sets metadata `plan.decision` (`pass`, `block`, `strip`,
//! `flag`, `unreadable`), `plan.calls`; refusals add `plan.refused`,
//! `plan.check`, `plan.tool` (and `plan.stripped` on strip), and
//! `plan.approval_id` when a call waits for (or was denied by) a person
//! ([`super::approve`]).

use std::sync::Arc;

use serde_json::{json, Value};

use super::approve::{resolve_all, ApprovalCx};
use super::calls::{declared_tools, planned_calls, strip, Declared, Location};
use super::critic::{CriticConfig, Finding, OnViolation, PlanContext, SchemaCache, KEYS};
use crate::param_cache::ParamCache;
use crate::rules::Caller;
use crate::tool::metadata_text;
use policy_agents::{
    describe, Deny, ParamError, Params, Policy, PolicyError, RequestContext, RequestOutcome, ResponseContext,
    ResponseOutcome,
};

pub(crate) const NAME: &str = "planCritic";

/// The `planCritic` policy.
#[derive(Debug)]
pub struct PlanCritic {
    pub(crate) cache: ParamCache<CriticConfig>,
    pub(crate) schemas: SchemaCache,
    approvals: Option<Arc<crate::approvals::Approvals>>,
}

impl Default for PlanCritic {
    fn default() -> Self {
        PlanCritic::new()
    }
}

impl PlanCritic {
    /// A policy with empty caches.
    pub fn new() -> Self {
        PlanCritic {
            cache: ParamCache::new(KEYS),
            schemas: SchemaCache::default(),
            approvals: None,
        }
    }

    /// A policy whose `approve` rules ask `approvals` (without: calls they
    /// govern stay refused).
    pub fn with_approvals(approvals: Arc<crate::approvals::Approvals>) -> Self {
        PlanCritic {
            approvals: Some(approvals),
            ..PlanCritic::new()
        }
    }

    pub(crate) fn config(&self, params: &Params) -> Result<std::sync::Arc<CriticConfig>, PolicyError> {
        self.cache
            .get(params, CriticConfig::parse)
            .map_err(|e| config_error(&e))
    }
}

/// A policy failure for bad params of `planCritic`.
pub(crate) fn config_error(e: &ParamError) -> PolicyError {
    config_error_named(NAME, e)
}

/// A policy failure for bad params of `policy`: the error names the param,
/// not its value.
pub(crate) fn config_error_named(policy: &str, e: &ParamError) -> PolicyError {
    let param = match e {
        ParamError::Missing(name) | ParamError::Invalid { name, .. } => name.as_str(),
    };
    PolicyError::new(format!("{policy}: {e}")).with_deny(
        Deny::json(
            500,
            &crate::error_body(
                &format!("policy {policy} is misconfigured: param `{param}`"),
                "policy_misconfigured",
            ),
        )
        .reason("policy_misconfigured"),
    )
}

/// The tools the request declared, when its body was buffered and is JSON.
pub(crate) fn request_tools(body: Option<&[u8]>) -> Option<Declared> {
    serde_json::from_slice::<Value>(body?)
        .ok()
        .as_ref()
        .and_then(declared_tools)
}

/// The JSON body of a block.
pub(crate) fn block_body(findings: &[Finding]) -> Value {
    let call = |f: &Finding| {
        json!({"index": f.index, "id": f.id, "tool": f.tool, "check": f.check, "detail": f.detail,
            "approval_id": f.approval})
    };
    let first = findings.first();
    json!({
        "error": match first {
            Some(f) => format!("planned tool call {} (`{}`) refused: {}", f.index, f.tool, f.check),
            None => "planned tool call refused".to_string(),
        },
        "reason": "plan_rejected",
        "call": first.map(call),
        "refused": findings.iter().map(call).collect::<Vec<_>>(),
    })
}

/// The flag header's value: `check:tool` per refused call.
pub(crate) fn flag_value(findings: &[Finding]) -> String {
    let mut out = String::new();
    for f in findings {
        let item = format!("{}:{}", f.check, metadata_text(&f.tool).replace(',', "?"));
        if out.len() + item.len() + 1 > 512 {
            break;
        }
        if !out.is_empty() {
            out.push(',');
        }
        out.push_str(&item);
    }
    out
}

/// Metadata of a decision with findings.
pub(crate) fn with_findings<T>(out: T, set: impl Fn(T, &str, String) -> T, decision: &str, findings: &[Finding]) -> T {
    let out = set(out, "plan.decision", decision.to_string());
    let Some(first) = findings.first() else {
        return out;
    };
    let out = set(out, "plan.refused", findings.len().to_string());
    let out = set(out, "plan.check", first.check.to_string());
    let out = match findings.iter().find_map(|f| f.approval.as_ref()) {
        Some(id) => set(out, "plan.approval_id", id.clone()),
        None => out,
    };
    set(out, "plan.tool", metadata_text(&first.tool))
}

fn meta(out: ResponseOutcome, k: &str, v: String) -> ResponseOutcome {
    out.set_metadata(k, v)
}

impl PlanCritic {
    async fn decide(
        &self,
        cfg: &CriticConfig,
        params: &Params,
        ctx: &ResponseContext<'_>,
    ) -> Result<ResponseOutcome, PolicyError> {
        let status = ctx.response.status();
        if !(200..300).contains(&status) {
            return Ok(ResponseOutcome::proceed());
        }
        let Some(body) = ctx.response.body() else {
            return Err(PolicyError::new(format!(
                "{NAME}: the response body was not included (the policy requires it)"
            )));
        };
        let json_type = ctx
            .response
            .header("content-type")
            .is_some_and(|t| t.to_ascii_lowercase().contains("json"));
        if !json_type || body.is_empty() {
            return Ok(ResponseOutcome::proceed());
        }
        if ctx
            .response
            .header("content-encoding")
            .is_some_and(|e| !e.eq_ignore_ascii_case("identity"))
        {
            return Ok(ResponseOutcome::proceed()
                .set_metadata("plan.decision", "unreadable")
                .set_metadata("plan.error", "content-encoding"));
        }
        let mut doc: Value = match serde_json::from_slice(body) {
            Ok(d) => d,
            Err(e) => {
                return Ok(ResponseOutcome::proceed()
                    .set_metadata("plan.decision", "unreadable")
                    .set_metadata("plan.error", metadata_text(&format!("response is not JSON: {e}"))))
            }
        };
        let calls = planned_calls(&doc);
        if calls.is_empty() {
            return Ok(ResponseOutcome::proceed()
                .set_metadata("plan.decision", "pass")
                .set_metadata("plan.calls", "0"));
        }
        let declared = request_tools(ctx.request.body());
        let caller = Caller::from_metadata(ctx.metadata);
        let cx = PlanContext {
            declared: declared.as_ref(),
            caller: &caller,
        };
        let findings = cfg.check_plan(&calls, cx, &self.schemas);
        let page = crate::approvals::page_url(params, &ctx.request);
        let acx = ApprovalCx {
            approvals: self.approvals.as_deref(),
            metadata: ctx.metadata,
            request: ctx.request,
            caller: &caller,
            page: &page,
        };
        let findings = resolve_all(cfg, &acx, findings, &calls).await;
        let out = ResponseOutcome::proceed().set_metadata("plan.calls", calls.len().to_string());
        if findings.is_empty() {
            return Ok(out.set_metadata("plan.decision", "pass"));
        }
        for f in &findings {
            tracing::info!(policy = NAME, request_id = %ctx.call.request_id, call = f.index, tool = %metadata_text(&f.tool), check = f.check, outcome = cfg.on_violation.as_str(), "planned tool call refused");
        }
        Ok(match cfg.on_violation {
            OnViolation::Block => with_findings(
                ResponseOutcome::denied_with(Deny::json(403, &block_body(&findings)).reason("plan_rejected")),
                meta,
                "block",
                &findings,
            ),
            OnViolation::Flag => with_findings(
                out.set_header(cfg.flag_header.clone(), flag_value(&findings)),
                meta,
                "flag",
                &findings,
            ),
            OnViolation::Strip => {
                let locations: Vec<Location> = findings
                    .iter()
                    .filter_map(|f| calls.get(f.index).map(|c| c.location))
                    .collect();
                let removed = strip(&mut doc, &locations);
                let body = serde_json::to_vec(&doc)
                    .map_err(|e| PolicyError::new(format!("{NAME}: cannot write the stripped body: {e}")))?;
                with_findings(out.set_body(body), meta, "strip", &findings)
                    .set_metadata("plan.stripped", removed.to_string())
            }
        })
    }
}

impl Policy for PlanCritic {
    type Params = Params;
    describe! { name: NAME, params: KEYS, phases: Both, body: true }

    /// The request phase only makes the kernel buffer the request body, for
    /// the declared tools; it checks the params early.
    async fn on_request(&self, params: &Params, _ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        self.config(params)?;
        Ok(RequestOutcome::proceed())
    }

    async fn on_response(&self, params: &Params, ctx: &ResponseContext<'_>) -> Result<ResponseOutcome, PolicyError> {
        let cfg = self.config(params)?;
        self.decide(&cfg, params, ctx).await
    }
}

#[cfg(test)]
#[path = "plan_critic_tests.rs"]
mod tests;
