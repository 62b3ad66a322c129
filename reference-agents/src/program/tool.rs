//! `tool-agent`: `mcpToolAuthorization`, `mcpToolFilter`,
//! `toolArgumentGuard`, `toolSchemaValidation` and `mcpServerRequestGuard`
//! for MCP servers behind Envoy; `a2aAuthorization`, `a2aTaskOwnership`,
//! `a2aCardFilter` and `a2aUrlGuard` for A2A agents.
//!
//! The ids of the requests servers sent clients (for
//! `mcpServerRequestGuard`'s `check_client_responses`) and the owners of
//! A2A tasks are kept in memory, or in Redis with `--redis-url` (shared by
//! every tool agent using it).
//!
//! Approvals (`approve` rules, and the `approvals` API and page that decide
//! them) are kept in this agent's memory; `--approvals-journal` records
//! every request, decision, expiry and release in a hash-chained journal.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::a2a::{A2aAuthorization, A2aCardFilter, A2aTaskOwnership, A2aUrlGuard};
use crate::approvals::{api::ApprovalsApi, Approvals, Limits};
use crate::guardrail::{Journal, JournalOptions};
use crate::sessions::SessionStore;
use crate::tool::{
    McpServerRequestGuard, McpToolAuthorization, McpToolFilter, ToolArgumentGuard, ToolSchemaValidation,
};
use anyhow::Context;
use clap::Parser;
use policy_agents::cli::{init_tracing, ServeArgs};
use policy_agents::Agent;

/// Flags of `tool-agent`.
#[derive(Parser)]
#[command(
    name = "tool-agent",
    version,
    about = "Policy agent for MCP tool calls and A2A delegation: mcpToolAuthorization, mcpToolFilter, toolArgumentGuard, toolSchemaValidation, mcpServerRequestGuard, a2aAuthorization, a2aTaskOwnership, a2aCardFilter, a2aUrlGuard"
)]
pub(crate) struct Args {
    /// Unix socket to listen on.
    #[arg(long, default_value = "/var/run/policy-engine/agents/tool.sock")]
    socket: PathBuf,
    /// Keep the server requests awaiting an answer and the A2A task owners in Redis
    /// (`redis://127.0.0.1:6379/0` or `redis+unix:///run/redis.sock`)
    /// instead of in memory.
    #[arg(long)]
    redis_url: Option<String>,
    /// Record approval requests, decisions, expiries and releases in this
    /// hash-chained journal (verify it with `guardrail-agent verify-audit`).
    #[arg(long)]
    approvals_journal: Option<PathBuf>,
    /// Calls waiting for approval per principal, at most.
    #[arg(long, default_value_t = Limits::default().per_principal)]
    approvals_per_principal: usize,
    /// Calls waiting for approval in all, at most.
    #[arg(long, default_value_t = Limits::default().total)]
    approvals_total: usize,
    #[command(flatten)]
    serve: ServeArgs,
}

/// Runs `tool-agent` with `args` (its name first).
pub fn main(args: Vec<OsString>) -> anyhow::Result<ExitCode> {
    let args = Args::parse_from(args);
    args.serve.runtime()?.block_on(run(args))?;
    Ok(ExitCode::SUCCESS)
}

async fn run(args: Args) -> anyhow::Result<()> {
    init_tracing(args.serve.log_json);
    let store = match &args.redis_url {
        Some(url) => SessionStore::redis(url).await.context("connecting to --redis-url")?,
        None => SessionStore::memory(),
    };
    let approvals = Approvals::memory(Limits {
        per_principal: args.approvals_per_principal.max(1),
        total: args.approvals_total.max(1),
    });
    if let Some(path) = &args.approvals_journal {
        let journal = Journal::open(path, JournalOptions::default())
            .await
            .with_context(|| format!("opening --approvals-journal {}", path.display()))?;
        approvals.set_journal(journal);
    }
    crate::approvals::metrics::register_all();
    // The approvals' previews are redacted with the guardrails' PII
    // patterns: compile them now, not on the first call that needs one.
    crate::guardrail::Redactor::shared()?;
    let builder = Agent::builder("tool-agent", env!("CARGO_PKG_VERSION"))
        .policy(McpToolAuthorization::with_approvals(approvals.clone()))
        .policy(ApprovalsApi::new(approvals.clone()))
        .policy(McpToolFilter::new())
        .policy(ToolArgumentGuard::new())
        .policy(ToolSchemaValidation::new())
        .policy(McpServerRequestGuard::new(store.clone()))
        .policy(A2aAuthorization::with_approvals(approvals))
        .policy(A2aTaskOwnership::new(store))
        .policy(A2aCardFilter::default())
        .policy(A2aUrlGuard::default());
    args.serve.apply(builder).serve_unix(&args.socket).await?;
    Ok(())
}
