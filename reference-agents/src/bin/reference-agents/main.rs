//! `reference-agents`: any of the five reference agents in one binary,
//! `reference-agents auth --socket=…` (or `ratelimit`, `guardrail`, `tool`,
//! `planner`), or through a link named after the agent (`auth-agent`).
//! Each program is the same as its own binary; one build gives all five
//! (what `make run` builds: benches/RESULTS.md).

use std::process::ExitCode;

// mimalloc: cheaper than glibc malloc for many small, short-lived gRPC buffers.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<ExitCode> {
    reference_agents::program::dispatch(std::env::args_os().collect())
}
