//! `ratelimit-agent`: `rateLimit` and `tokenBasedRateLimit`.

use std::process::ExitCode;

// mimalloc: cheaper than glibc malloc for many small, short-lived gRPC buffers.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<ExitCode> {
    reference_agents::program::ratelimit::main(std::env::args_os().collect())
}
