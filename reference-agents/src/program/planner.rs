//! `planner-agent`: `planCritic` and `planCriticStream` govern the tool
//! calls a model plans (OpenAI `tool_calls`, Anthropic `tool_use`) before
//! the runtime runs them; `untrustedInput` fences off tool results in
//! prompts; `futilityGuard` halts sessions that go nowhere; `contextBudget`
//! (and `contextBudgetStream`) give token-budget verdicts per session.
//! Session state is in memory, or in Redis with `--redis-url` (shared by
//! every planner agent using the server). Planned calls under an `approve`
//! rule wait for a person: this agent keeps their approvals and serves the
//! `approvals` API and page for them (`--approvals-journal` records them).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use super::approvals::ApprovalArgs;
use crate::approvals::api::ApprovalsApi;
use crate::planner::{
    ContextBudget, ContextBudgetStream, FutilityGuard, PlanCritic, PlanCriticStream, SessionStore, UntrustedInput,
};
use anyhow::Context;
use clap::Parser;
use policy_agents::cli::{init_tracing, ServeArgs};
use policy_agents::Agent;

/// Flags of `planner-agent`.
#[derive(Parser)]
#[command(
    name = "planner-agent",
    version,
    about = "Policy agent for planned tool calls: planCritic, planCriticStream, untrustedInput, futilityGuard, contextBudget, contextBudgetStream"
)]
pub(crate) struct Args {
    /// Unix socket to listen on.
    #[arg(long, default_value = "/var/run/policy-engine/agents/planner.sock")]
    socket: PathBuf,
    /// Keep session state (futilityGuard, contextBudget, contextBudgetStream)
    /// and the approvals of planned calls in Redis, shared by every planner
    /// agent using it, for example
    /// `redis://127.0.0.1:6379/0` or `redis+unix:///run/redis.sock`.
    /// In memory when absent.
    #[arg(long, value_name = "URL")]
    redis_url: Option<String>,
    #[command(flatten)]
    approvals: ApprovalArgs,
    #[command(flatten)]
    serve: ServeArgs,
}

/// Runs `planner-agent` with `args` (its name first).
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
    tracing::info!(redis = args.redis_url.is_some(), "session store ready");
    let approvals = args.approvals.open(args.redis_url.as_deref()).await?;
    let builder = Agent::builder("planner-agent", env!("CARGO_PKG_VERSION"))
        .policy(PlanCritic::with_approvals(approvals.clone()))
        .policy(PlanCriticStream::with_approvals(approvals.clone()))
        .policy(ApprovalsApi::new(approvals))
        .policy(UntrustedInput::new())
        .policy(FutilityGuard::with_store(store.clone()))
        .policy(ContextBudget::with_store(store.clone()))
        .policy(ContextBudgetStream::with_store(store));
    args.serve.apply(builder).serve_unix(&args.socket).await?;
    Ok(())
}
