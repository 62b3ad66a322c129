//! `example-agent`: the smallest useful agent, and the one the README shows.
//!
//! * `addHeader` (`name`, `value`): sets a header in the request or response phase.
//! * `delay` (`ms`): waits before letting the request through (for timeout and
//!   drain tests of the kernel and of the SDK).
//! * `pathAllowList` (`prefixes`): refuses a request whose path starts with
//!   none of the prefixes; its outcome depends on the path alone, so it
//!   declares it cacheable and the kernel answers repeats itself.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use policy_agents::cli::{init_tracing, ServeArgs};
use policy_agents::{
    Agent, Cacheable, FromParams, ParamError, Params, Phases, Policy, PolicyError, RequestContext, RequestOutcome,
    ResponseContext, ResponseOutcome,
};

// mimalloc, as the reference agents choose: cheaper than glibc malloc for
// the many small, short-lived buffers of each call (benches/RESULTS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Sets a header.
struct AddHeader;

/// `addHeader` parameters.
struct HeaderParams {
    name: String,
    value: String,
}

impl FromParams for HeaderParams {
    fn from_params(p: &Params) -> Result<Self, ParamError> {
        Ok(HeaderParams {
            name: p.required("name")?.to_string(),
            value: p.get("value").unwrap_or_default().to_string(),
        })
    }
}

impl Policy for AddHeader {
    type Params = HeaderParams;
    fn name(&self) -> &str {
        "addHeader"
    }
    fn version(&self) -> &str {
        env!("CARGO_PKG_VERSION")
    }
    fn param_schema(&self) -> &[&str] {
        &["name", "value"]
    }
    fn phases(&self) -> Phases {
        Phases::Both
    }
    async fn on_request(&self, p: &HeaderParams, _: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        Ok(RequestOutcome::proceed().set_header(&p.name, &p.value))
    }
    async fn on_response(&self, p: &HeaderParams, _: &ResponseContext<'_>) -> Result<ResponseOutcome, PolicyError> {
        Ok(ResponseOutcome::proceed().set_header(&p.name, &p.value))
    }
}

/// Waits `ms` milliseconds.
struct Delay;

impl Policy for Delay {
    type Params = Params;
    fn name(&self) -> &str {
        "delay"
    }
    fn version(&self) -> &str {
        env!("CARGO_PKG_VERSION")
    }
    fn param_schema(&self) -> &[&str] {
        &["ms"]
    }
    async fn on_request(&self, p: &Params, _: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        tokio::time::sleep(Duration::from_millis(p.parse_or("ms", 0u64)?)).await;
        Ok(RequestOutcome::proceed())
    }
}

/// Lets through paths that start with one of `prefixes`.
struct PathAllowList;

impl Policy for PathAllowList {
    type Params = Params;
    fn name(&self) -> &str {
        "pathAllowList"
    }
    fn version(&self) -> &str {
        env!("CARGO_PKG_VERSION")
    }
    fn param_schema(&self) -> &[&str] {
        &["prefixes"]
    }
    fn required_params(&self) -> &[&str] {
        &["prefixes"]
    }
    /// The outcome is a function of the params (always part of the key)
    /// and the path.
    fn cache(&self) -> Option<Cacheable> {
        Some(Cacheable::for_at_most(Duration::from_secs(60)).header(":path"))
    }
    async fn on_request(&self, p: &Params, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let prefixes = p.list("prefixes")?;
        let path = ctx.request.path();
        if prefixes.iter().any(|prefix| path.starts_with(prefix.as_str())) {
            Ok(RequestOutcome::proceed())
        } else {
            Ok(RequestOutcome::deny(403, "path not allowed"))
        }
    }
}

/// Flags of `example-agent`.
#[derive(Parser)]
#[command(version, about = "Example policy agent: addHeader, delay and pathAllowList")]
struct Args {
    /// Unix socket to listen on.
    #[arg(long, default_value = "/var/run/policy-engine/agents/example.sock")]
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
    let builder = Agent::builder("example-agent", env!("CARGO_PKG_VERSION"))
        .policy(AddHeader)
        .policy(Delay)
        .policy(PathAllowList);
    args.serve.apply(builder).serve_unix(&args.socket).await?;
    Ok(())
}
