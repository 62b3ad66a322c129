//! The reference policies, grouped by the agent that serves them.
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
