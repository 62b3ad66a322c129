//! `planner-agent`: `planCritic` and `planCriticStream` govern the tool
//! calls a model plans (OpenAI `tool_calls`, Anthropic `tool_use`) before
//! the runtime runs them; `untrustedInput` fences off tool results in
//! prompts; `futilityGuard` halts sessions that go nowhere; `contextBudget`
//! (and `contextBudgetStream`) give token-budget verdicts per session.
//! Session state is in memory, or in Redis with `--redis-url` (shared by
//! every planner agent using the server).

use std::process::ExitCode;

// mimalloc: cheaper than glibc malloc for many small, short-lived gRPC buffers.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<ExitCode> {
    reference_agents::program::planner::main(std::env::args_os().collect())
}
