//! `guardrail-agent`: `addSecurityHeaders`, `promptInjectionGuard`,
//! `piiRedaction` and `auditLog`; `guardrail-agent verify-audit PATH` checks
//! an audit journal's hash chain.

use std::process::ExitCode;

// mimalloc: cheaper than glibc malloc for many small, short-lived gRPC buffers.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<ExitCode> {
    reference_agents::program::guardrail::main(std::env::args_os().collect())
}
