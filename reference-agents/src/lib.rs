//! # reference-agents
//!
//! The reference policies of policy-kernel and the agent binaries that serve
//! them, built on the `policy-agents` SDK. Each binary in `src/bin/` registers
//! one group's policies on an SDK [`Agent`](policy_agents::Agent) and chooses
//! its allocator (mimalloc).
//!
//! # Layout
//!
//! The policies, grouped by the agent that serves them:
//!
//! * [`auth`]: `apiKeyAuth`, `jwtValidation`, `roleCheck` (`auth-agent`).
//! * [`ratelimit`]: `rateLimit`, `tokenBasedRateLimit` (`ratelimit-agent`).
//! * [`guardrail`]: `addSecurityHeaders`, `promptInjectionGuard`,
//!   `piiRedaction`, `auditLog` (`guardrail-agent`).
//! * [`tool`]: `mcpToolAuthorization`, `mcpToolFilter`, `toolArgumentGuard`,
//!   `toolSchemaValidation` (`tool-agent`).
//! * [`planner`]: `planCritic`, `planCriticStream`, `untrustedInput`
//!   (`planner-agent`): planned tool calls of completions, checked with the
//!   tool agent's rules and argument guards; untrusted prompt text fenced off.
//! * [`text`]: helpers shared by policies that read chat-completion bodies.
//!
//! Binaries: `auth-agent`, `ratelimit-agent`, `guardrail-agent`,
//! `tool-agent`, `planner-agent`, and `example-agent` (the smallest useful
//! agent: `addHeader`, `delay`).

pub mod auth;
pub mod guardrail;
pub mod planner;
pub mod ratelimit;
pub mod text;
pub mod tool;

/// A JSON error body: `{"error": error, "reason": reason}`.
pub(crate) fn error_body(error: &str, reason: &str) -> serde_json::Value {
    serde_json::json!({ "error": error, "reason": reason })
}
