//! `auth-agent`: `apiKeyAuth`, `jwtValidation`, `tokenIntrospection`,
//! `oauthProtectedResource`, `roleCheck` and `tokenExchange`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::auth::{
    ApiKeyAuth, ApiKeyStore, JwtValidation, OauthProtectedResource, RoleCheck, TokenExchange, TokenIntrospection,
};
use anyhow::Context;
use clap::Parser;
use policy_agents::cli::{init_tracing, ServeArgs};
use policy_agents::Agent;

/// Flags of `auth-agent`.
#[derive(Parser)]
#[command(
    name = "auth-agent",
    version,
    about = "Policy agent for authentication: apiKeyAuth, jwtValidation, tokenIntrospection, oauthProtectedResource, roleCheck, tokenExchange"
)]
pub(crate) struct Args {
    /// Unix socket to listen on.
    #[arg(long, default_value = "/var/run/policy-engine/agents/auth.sock")]
    socket: PathBuf,
    /// File of API keys: one `<hex sha256 of the key> [consumer]` per line.
    /// Without it, apiKeyAuth knows no key and refuses every one.
    #[arg(long, value_name = "FILE")]
    api_keys: Option<PathBuf>,
    /// tokenIntrospection: tokens not in the cache introspected per second
    /// by all routes together, as a burst of as many (each route also has
    /// its own max_introspections_per_s); beyond, refused without a call.
    #[arg(long, value_name = "N", default_value_t = crate::auth::INTROSPECTIONS_PER_S,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    introspections_per_s: u32,
    #[command(flatten)]
    serve: ServeArgs,
}

/// Runs `auth-agent` with `args` (its name first).
pub fn main(args: Vec<OsString>) -> anyhow::Result<ExitCode> {
    let args = Args::parse_from(args);
    args.serve.runtime()?.block_on(run(args))?;
    Ok(ExitCode::SUCCESS)
}

async fn run(args: Args) -> anyhow::Result<()> {
    init_tracing(args.serve.log_json);
    let keys = match &args.api_keys {
        Some(path) => ApiKeyStore::load(path).context("loading --api-keys")?,
        None => {
            tracing::warn!("no --api-keys file: apiKeyAuth will refuse every key");
            ApiKeyStore::default()
        }
    };
    tracing::info!(keys = keys.len(), "API keys loaded");
    crate::auth::metrics::register_all();
    let builder = Agent::builder("auth-agent", env!("CARGO_PKG_VERSION"))
        .policy(ApiKeyAuth::new(keys))
        .policy(JwtValidation::new())
        .policy(TokenIntrospection::with_total_per_s(args.introspections_per_s))
        .policy(OauthProtectedResource::new())
        .policy(RoleCheck)
        .policy(TokenExchange::new());
    args.serve.apply(builder).serve_unix(&args.socket).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_introspection_bound_is_a_flag() {
        let parse = |extra: &[&str]| {
            let mut line = vec!["auth-agent", "--socket=/s"];
            line.extend_from_slice(extra);
            Args::try_parse_from(line).map(|a| a.introspections_per_s)
        };
        assert_eq!(parse(&[]).ok(), Some(100));
        assert_eq!(parse(&["--introspections-per-s", "20"]).ok(), Some(20));
        assert!(parse(&["--introspections-per-s", "0"]).is_err());
    }
}
