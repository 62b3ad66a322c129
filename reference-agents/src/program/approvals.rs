//! The approvals' flags, shared by the agents whose policies hold calls for
//! a person (`tool-agent`, `planner-agent`), and their start-up.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;

use crate::approvals::{Approvals, Limits};
use crate::guardrail::{Journal, JournalOptions};

/// Flags of the approvals.
#[derive(Args, Debug)]
pub(crate) struct ApprovalArgs {
    /// Record approval requests, decisions, expiries and releases in this
    /// hash-chained journal (verify it with `guardrail-agent verify-audit`).
    #[arg(long)]
    approvals_journal: Option<PathBuf>,
    /// Calls waiting for approval per principal, at most (with
    /// `--redis-url`: across every agent using it).
    #[arg(long, default_value_t = Limits::default().per_principal)]
    approvals_per_principal: usize,
    /// Calls waiting for approval in all, at most (with `--redis-url`: in
    /// the shared store; each agent applies its own bound when it adds one).
    #[arg(long, default_value_t = Limits::default().total)]
    approvals_total: usize,
}

impl ApprovalArgs {
    /// The approvals: in Redis at `redis_url` when given (shared by every
    /// agent using it), else in memory; journaled when asked; their series
    /// registered and the preview's PII patterns compiled now, not on the
    /// first call that needs them.
    pub(crate) async fn open(&self, redis_url: Option<&str>) -> anyhow::Result<Arc<Approvals>> {
        let limits = Limits {
            per_principal: self.approvals_per_principal.max(1),
            total: self.approvals_total.max(1),
        };
        let approvals = match redis_url {
            Some(url) => Approvals::redis(url, limits)
                .await
                .context("connecting to --redis-url for the approvals")?,
            None => Approvals::memory(limits),
        };
        if let Some(path) = &self.approvals_journal {
            let journal = Journal::open(path, JournalOptions::default())
                .await
                .with_context(|| format!("opening --approvals-journal {}", path.display()))?;
            approvals.set_journal(journal);
        }
        crate::approvals::metrics::register_all();
        crate::guardrail::Redactor::shared()?;
        Ok(approvals)
    }
}
