//! `planner-agent`: `planCritic` and `planCriticStream` govern the tool
//! calls a model plans (OpenAI `tool_calls`, Anthropic `tool_use`) before
//! the runtime runs them; `untrustedInput` fences off tool results in
//! prompts; `futilityGuard` halts sessions that go nowhere; `contextBudget`
//! (and `contextBudgetStream`) give token-budget verdicts per session.

use std::path::PathBuf;

use clap::Parser;
use policy_agents::cli::{init_tracing, ServeArgs};
use policy_agents::reference::planner::{
    ContextBudget, ContextBudgetStream, FutilityGuard, PlanCritic, PlanCriticStream, UntrustedInput,
};
use policy_agents::Agent;

// mimalloc: cheaper than glibc malloc for many small, short-lived gRPC buffers.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Flags of `planner-agent`.
#[derive(Parser)]
#[command(
    version,
    about = "Policy agent for planned tool calls: planCritic, planCriticStream, untrustedInput, futilityGuard, contextBudget, contextBudgetStream"
)]
struct Args {
    /// Unix socket to listen on.
    #[arg(long, default_value = "/var/run/policy-engine/agents/planner.sock")]
    socket: PathBuf,
    #[command(flatten)]
    serve: ServeArgs,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    args.serve.runtime()?.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    init_tracing(args.serve.log_json);
    let builder = Agent::builder("planner-agent", env!("CARGO_PKG_VERSION"))
        .policy(PlanCritic::new())
        .policy(PlanCriticStream::new())
        .policy(UntrustedInput::new())
        .policy(FutilityGuard::new())
        .policy(ContextBudget::new())
        .policy(ContextBudgetStream::new());
    args.serve.apply(builder).serve_unix(&args.socket).await?;
    Ok(())
}
