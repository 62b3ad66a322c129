//! `tool-agent`: `mcpToolAuthorization`, `mcpToolFilter`,
//! `toolArgumentGuard`, `toolSchemaValidation` and `mcpServerRequestGuard`
//! for MCP servers behind Envoy; `a2aAuthorization`, `a2aTaskOwnership`,
//! `a2aCardFilter` and `a2aUrlGuard` for A2A agents.
//!
//! The ids of the requests servers sent clients (for
//! `mcpServerRequestGuard`'s `check_client_responses`) and the owners of
//! A2A tasks are kept in memory, or in Redis with `--redis-url` (shared by
//! every tool agent using it).

use std::process::ExitCode;

// mimalloc: cheaper than glibc malloc for many small, short-lived gRPC buffers.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<ExitCode> {
    reference_agents::program::tool::main(std::env::args_os().collect())
}
