//! `tool-agent`: `mcpToolAuthorization`, `mcpToolFilter`,
//! `toolArgumentGuard`, `toolSchemaValidation`, `mcpServerRequestGuard` and
//! `mcpTaskOwnership`
//! for MCP servers behind Envoy; `a2aAuthorization`, `a2aTaskOwnership`,
//! `a2aCardFilter` and `a2aUrlGuard` for A2A agents.
//!
//! The ids of the requests servers sent clients (for
//! `mcpServerRequestGuard`'s `check_client_responses`) and the owners of
//! A2A tasks are kept in memory, or in Redis with `--redis-url` (shared by
//! every tool agent using it).
//!
//! Approvals (`approve` rules, and the `approvals` API and page that decide
//! them) are kept in this agent's memory, or in Redis with `--redis-url`
//! (every tool agent using it sees the same pending requests and grants:
//! a call may wait on one agent and be decided on another);
//! `--approvals-journal` records every request, decision, expiry and
//! release this agent makes in a hash-chained journal.
//!
//! Users' upstream credentials (`upstreamCredential`, the connect page
//! `upstreamConnect`, `upstreamConnections`) are kept sealed in memory, or
//! in Redis with `--redis-url` (then `--credentials-key-file` or
//! `POLICY_AGENT_CREDENTIALS_KEY` gives the key every agent shares).
//!
//! `--mcp-stream-relay LISTEN=UPSTREAM` relays MCP sessions' GET streams
//! from the server and adds `notifications/elicitation/complete` when an
//! approval of a call in the session is decided
//! ([`crate::tool::stream_relay`]).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use super::approvals::ApprovalArgs;
use crate::a2a::{A2aAuthorization, A2aCardFilter, A2aTaskOwnership, A2aUrlGuard};
use crate::approvals::{api::ApprovalsApi, notices::Notices, outcome::ApprovalOutcome};
use crate::credentials::connect::UpstreamConnect;
use crate::credentials::connections::UpstreamConnections;
use crate::credentials::policy::{UpstreamCredential, UpstreamCredentialOutcome};
use crate::credentials::{store::Store, vault::Vault, Credentials};
use crate::sessions::SessionStore;
use crate::tool::stream_relay::{self, RelaySpec};
use crate::tool::{
    McpServerRequestGuard, McpTaskOwnership, McpToolAuthorization, McpToolFilter, ToolArgumentGuard,
    ToolSchemaValidation,
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
    about = "Policy agent for MCP tool calls and A2A delegation: mcpToolAuthorization, mcpToolFilter, toolArgumentGuard, toolSchemaValidation, mcpServerRequestGuard, mcpTaskOwnership, a2aAuthorization, a2aTaskOwnership, a2aCardFilter, a2aUrlGuard"
)]
pub(crate) struct Args {
    /// Unix socket to listen on.
    #[arg(long, default_value = "/var/run/policy-engine/agents/tool.sock")]
    socket: PathBuf,
    /// Keep the server requests awaiting an answer, the A2A task owners and
    /// the approvals (pending requests, grants, events) in Redis
    /// (`redis://127.0.0.1:6379/0` or `redis+unix:///run/redis.sock`)
    /// instead of in memory, shared by every tool agent using it. When Redis
    /// fails, calls that need approval fail (503 `session_store_unavailable`
    /// under `on_failure: deny`) and the approvals API answers 503.
    #[arg(long)]
    redis_url: Option<String>,
    #[command(flatten)]
    approvals: ApprovalArgs,
    /// The key (256 bits: 64 hex digits or base64) that seals users'
    /// upstream credentials at rest; else the environment variable
    /// POLICY_AGENT_CREDENTIALS_KEY; else a random key of this agent's (its
    /// credentials then die with it; with --redis-url, upstreamCredential
    /// refuses to store).
    #[arg(long)]
    credentials_key_file: Option<PathBuf>,
    /// Relay MCP sessions' GET streams: listen on LISTEN (host:port) for
    /// the GETs Envoy routes here, open each on the MCP server UPSTREAM
    /// (`http://host:port`), and add `notifications/elicitation/complete`
    /// to a session's stream when an approval of a call in it is decided.
    #[arg(long, value_name = "LISTEN=UPSTREAM")]
    mcp_stream_relay: Option<RelaySpec>,
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
    let approvals = args.approvals.open(args.redis_url.as_deref()).await?;
    if let Some(spec) = args.mcp_stream_relay.clone() {
        let listen = spec.listen;
        let bound = stream_relay::serve(spec, Notices::new(approvals.clone()))
            .await
            .with_context(|| format!("--mcp-stream-relay: listening on {listen}"))?;
        tracing::info!(%bound, "MCP stream relay listening");
    }
    let credentials = open_credentials(&args, &approvals).await?;
    let builder = Agent::builder("tool-agent", env!("CARGO_PKG_VERSION"))
        .policy(McpToolAuthorization::with_approvals(approvals.clone()))
        .policy(ApprovalsApi::new(approvals.clone()))
        .policy(ApprovalOutcome::new(approvals.clone()))
        .policy(McpToolFilter::new())
        .policy(ToolArgumentGuard::new())
        .policy(ToolSchemaValidation::new())
        .policy(McpServerRequestGuard::new(store.clone()))
        .policy(McpTaskOwnership::new(store.clone()))
        .policy(A2aAuthorization::with_approvals(approvals))
        .policy(A2aTaskOwnership::new(store))
        .policy(A2aCardFilter::default())
        .policy(A2aUrlGuard::default())
        .policy(UpstreamCredential::new(credentials.clone()))
        .policy(UpstreamCredentialOutcome::new(credentials.clone()))
        .policy(UpstreamConnect::new(credentials.clone()))
        .policy(UpstreamConnections::new(credentials));
    args.serve.apply(builder).serve_unix(&args.socket).await?;
    Ok(())
}

/// Users' upstream credentials: in Redis with `--redis-url`, else in memory;
/// sealed with the key of `--credentials-key-file` or the environment.
async fn open_credentials(
    args: &Args,
    approvals: &crate::approvals::Approvals,
) -> anyhow::Result<std::sync::Arc<Credentials>> {
    let vault = Vault::open_key(args.credentials_key_file.as_deref()).map_err(anyhow::Error::msg)?;
    let store = match &args.redis_url {
        Some(url) => Store::redis(url)
            .await
            .context("connecting to --redis-url for the upstream credentials")?,
        None => Store::memory(),
    };
    if store.shared() && !vault.durable {
        tracing::warn!("--redis-url without --credentials-key-file or POLICY_AGENT_CREDENTIALS_KEY: upstreamCredential will refuse to store credentials");
    }
    crate::credentials::metrics::register_all();
    Credentials::new(store, vault, approvals.sealer().clone()).map_err(anyhow::Error::msg)
}
