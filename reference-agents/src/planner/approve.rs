//! `approve` rules on planned tool calls: a call that passes every other
//! check but falls under an `approve` rule ([`REQUIRED`]) is checked
//! against the planner agent's approvals. A grant lets it through; a call
//! waiting for a decision, or denied by an approver, is refused like the
//! other critics' verdicts (stripped, blocked or flagged), with the
//! approval's id in `plan.approval_id` and in the refusal, so the agent
//! runtime can pause (`awaiting_approval`) and re-plan the call once a
//! person decided.

use serde_json::Value;

use super::calls::PlannedCall;
use super::critic::{parse_arguments, CriticConfig, Finding};
use crate::approvals::{Approvals, CallBinding, Check};
use crate::rules::Caller;
use policy_agents::{Metadata, RequestView};

/// The check of a call that needs a grant (before the approvals answer).
pub const REQUIRED: &str = "approval_required";

/// What resolving a call's approval needs from the call's context.
pub(crate) struct ApprovalCx<'a> {
    /// The agent's approvals (none: such calls stay refused).
    pub approvals: Option<&'a Approvals>,
    /// The call's metadata (caller, route).
    pub metadata: &'a Metadata,
    /// The request.
    pub request: RequestView<'a>,
    /// The caller.
    pub caller: &'a Caller,
    /// The approval page.
    pub page: &'a str,
}

/// The finding `f` on `call` once the approvals answered: `None` when a
/// grant lets the call through, else the finding with the approval's id.
/// When the approvals cannot answer, the call stays refused
/// (`approval_unavailable`).
pub(crate) async fn resolve(
    cfg: &CriticConfig,
    cx: &ApprovalCx<'_>,
    f: Finding,
    call: &PlannedCall,
) -> Option<Finding> {
    if f.check != REQUIRED {
        return Some(f);
    }
    let Some(approvals) = cx.approvals else {
        return Some(Finding {
            detail: "no approvals kept by this agent".into(),
            ..f
        });
    };
    let tool = cfg.tool_name(&call.name);
    let Some(need) = cfg.approval_need(tool, cx.caller) else {
        return Some(f);
    };
    let args = parse_arguments(&call.arguments).ok().flatten().unwrap_or(Value::Null);
    let binding = CallBinding::new(cx.caller, cx.metadata, &cx.request, "tools/call", tool, &args, None);
    let check = match approvals.check(binding, &args, need.rule, need.terms).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, tool, "planned call needs approval, and the approvals cannot answer");
            return Some(Finding {
                check: "approval_unavailable",
                detail: "the approvals cannot answer".into(),
                ..f
            });
        }
    };
    match check {
        Check::Granted { .. } => None,
        Check::Pending { id, .. } => Some(Finding {
            detail: format!("waiting for approval {id}: {}#id={id}", cx.page),
            approval: Some(id),
            ..f
        }),
        Check::Denied { id, reason, .. } => Some(Finding {
            check: "approval_denied",
            detail: reason.unwrap_or_else(|| "denied by an approver".into()),
            approval: Some(id),
            ..f
        }),
        Check::Limited(scope) => Some(Finding {
            check: "approval_limit",
            detail: format!("too many calls wait for approval ({scope})"),
            ..f
        }),
    }
}

/// [`resolve`] for each finding of a whole plan.
pub(crate) async fn resolve_all(
    cfg: &CriticConfig,
    cx: &ApprovalCx<'_>,
    findings: Vec<Finding>,
    calls: &[PlannedCall],
) -> Vec<Finding> {
    let mut out = Vec::with_capacity(findings.len());
    for f in findings {
        match calls.get(f.index) {
            Some(call) => out.extend(resolve(cfg, cx, f, call).await),
            None => out.push(f),
        }
    }
    out
}
