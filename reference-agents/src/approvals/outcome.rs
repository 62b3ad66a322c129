//! `approvalOutcome`: the server's answer to a call a grant let through,
//! in the journal (response phase, headers only: streamed replies pass as
//! they come).
//!
//! Put it in the response chain of a route whose `mcpToolAuthorization` or
//! `a2aAuthorization` has `approve` rules: when the request phase let the
//! call through with a grant (metadata `approval.id`, `approval.grant`), it
//! records `executed` with the status, so the journal tells a released call
//! that ran from one that never did.

use std::sync::Arc;

use super::Approvals;
use policy_agents::{describe, Params, Policy, PolicyError, ResponseContext, ResponseOutcome};

/// The `approvalOutcome` policy.
#[derive(Debug)]
pub struct ApprovalOutcome {
    approvals: Arc<Approvals>,
}

impl ApprovalOutcome {
    /// Journals into `approvals`' journal.
    pub fn new(approvals: Arc<Approvals>) -> Self {
        ApprovalOutcome { approvals }
    }
}

impl Policy for ApprovalOutcome {
    type Params = Params;
    describe! { name: "approvalOutcome", params: &[], phases: Response }

    async fn on_response(&self, _params: &Params, ctx: &ResponseContext<'_>) -> Result<ResponseOutcome, PolicyError> {
        if let (Some(id), Some(grant)) = (ctx.metadata.get("approval.id"), ctx.metadata.get("approval.grant")) {
            let route = ctx.metadata.get(super::binding::ROUTE_NAME).unwrap_or("-");
            self.approvals.executed(id, grant, ctx.response.status(), route).await?;
        }
        Ok(ResponseOutcome::proceed())
    }
}
