//! `ratelimit-agent`: `rateLimit` and `tokenBasedRateLimit`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::ratelimit::{Backend, RateLimit, TokenBasedRateLimit};
use anyhow::Context;
use clap::Parser;
use policy_agents::cli::{init_tracing, ServeArgs};
use policy_agents::Agent;

/// Flags of `ratelimit-agent`.
#[derive(Parser)]
#[command(
    name = "ratelimit-agent",
    version,
    about = "Policy agent for rate limits: rateLimit, tokenBasedRateLimit"
)]
pub(crate) struct Args {
    /// Unix socket to listen on.
    #[arg(long, default_value = "/var/run/policy-engine/agents/ratelimit.sock")]
    socket: PathBuf,
    /// Keep limits in Redis (shared by every agent using it), for example
    /// `redis://127.0.0.1:6379/0` or `redis+unix:///run/redis.sock`.
    /// In memory when absent.
    #[arg(long, value_name = "URL")]
    redis_url: Option<String>,
    #[command(flatten)]
    serve: ServeArgs,
}

/// Runs `ratelimit-agent` with `args` (its name first).
pub fn main(args: Vec<OsString>) -> anyhow::Result<ExitCode> {
    let args = Args::parse_from(args);
    args.serve.runtime()?.block_on(run(args))?;
    Ok(ExitCode::SUCCESS)
}

async fn run(args: Args) -> anyhow::Result<()> {
    init_tracing(args.serve.log_json);
    let backend = match &args.redis_url {
        Some(url) => Backend::redis(url).await.context("connecting to --redis-url")?,
        None => Backend::memory(),
    };
    tracing::info!(redis = args.redis_url.is_some(), "rate-limit backend ready");
    let builder = Agent::builder("ratelimit-agent", env!("CARGO_PKG_VERSION"))
        .policy(RateLimit::new(backend.clone()))
        .policy(TokenBasedRateLimit::new(backend));
    args.serve.apply(builder).serve_unix(&args.socket).await?;
    Ok(())
}
