//! `tool-agent`: `mcpToolAuthorization`, `mcpToolFilter`,
//! `toolArgumentGuard` and `toolSchemaValidation` for MCP servers behind Envoy.

use std::path::PathBuf;

use clap::Parser;
use policy_agents::cli::{init_tracing, ServeArgs};
use policy_agents::Agent;
use reference_agents::tool::{McpToolAuthorization, McpToolFilter, ToolArgumentGuard, ToolSchemaValidation};

// mimalloc: cheaper than glibc malloc for many small, short-lived gRPC buffers.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Flags of `tool-agent`.
#[derive(Parser)]
#[command(
    version,
    about = "Policy agent for MCP tool calls: mcpToolAuthorization, mcpToolFilter, toolArgumentGuard, toolSchemaValidation"
)]
struct Args {
    /// Unix socket to listen on.
    #[arg(long, default_value = "/var/run/policy-engine/agents/tool.sock")]
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
    let builder = Agent::builder("tool-agent", env!("CARGO_PKG_VERSION"))
        .policy(McpToolAuthorization::new())
        .policy(McpToolFilter::new())
        .policy(ToolArgumentGuard::new())
        .policy(ToolSchemaValidation::new());
    args.serve.apply(builder).serve_unix(&args.socket).await?;
    Ok(())
}
