//! # reference-agents
//!
//! The reference policies of policy-kernel and the agent binaries that serve
//! them, built on the `policy-agents` SDK. Each agent program in [`program`]
//! registers one group's policies on an SDK [`Agent`](policy_agents::Agent);
//! the binaries in `src/bin/` run them and choose the allocator (mimalloc).
//!
//! # Layout
//!
//! The policies, grouped by the agent that serves them:
//!
//! * [`auth`]: `apiKeyAuth`, `jwtValidation`, `tokenIntrospection`,
//!   `oauthProtectedResource`, `roleCheck`, `tokenExchange` (`auth-agent`;
//!   `tokenExchange` swaps the caller's token for one issued for the
//!   upstream, RFC 8693).
//! * [`ratelimit`]: `rateLimit`, `tokenBasedRateLimit` (`ratelimit-agent`).
//! * [`guardrail`]: `addSecurityHeaders`, `promptInjectionGuard`,
//!   `piiRedaction`, `auditLog` (`guardrail-agent`); `guardrail::learned` is
//!   the learned prompt-injection detector and its trainer.
//! * [`tool`]: `mcpToolAuthorization`, `mcpToolFilter`, `toolArgumentGuard`,
//!   `toolSchemaValidation`, `mcpServerRequestGuard`, `mcpTaskOwnership`
//!   (`tool-agent`), for both MCP revisions (read through [`mcp`]);
//!   `tool::stream_relay` relays MCP sessions' GET streams with the
//!   approvals' completion notices added (`--mcp-stream-relay`).
//! * [`a2a`]: `a2aAuthorization`, `a2aTaskOwnership`, `a2aCardFilter`,
//!   `a2aUrlGuard` (`tool-agent`): agent-to-agent delegation, on the same
//!   rules, JSON-RPC parsing, SSE events and session store as the MCP
//!   policies; `a2a::shapes` reads each protocol version's and binding's
//!   field names the way the server behind reads them.
//! * [`planner`]: `planCritic`, `planCriticStream`, `untrustedInput`
//!   (`planner-agent`): planned tool calls of completions, checked with the
//!   tool agent's rules and argument guards; untrusted prompt text fenced off.
//! * [`credentials`]: `upstreamCredential`, `upstreamCredentialOutcome`,
//!   `upstreamConnect`, `upstreamConnections` (`tool-agent`): the user's own
//!   upstream credential instead of the caller's token, given with consent
//!   on the connect page, sealed at rest, refreshed, evicted, revoked.
//! * [`approvals`]: `approvals` (`tool-agent`, `planner-agent`): the API and
//!   page where people decide the calls that `approve` rules hold, the
//!   pending requests and grants those rules check (bound to the exact call,
//!   standing grants to the rule), `approvals::notices`, the decisions as
//!   they are made, and `approvals::notify`, requests and decisions
//!   announced to webhooks, Slack and Teams (signed, retried, off the path).
//!
//! The layers they share, one copy each:
//!
//! * [`rules`]: the rule engine (ordered rules, first match wins, default
//!   deny, on methods, targets and the caller that the auth policies
//!   recorded; effects `allow`, `deny`, `approve`): MCP tools, A2A skills,
//!   planned tool calls.
//! * [`jsonrpc`]: JSON-RPC 2.0 bodies (one message or a batch), parsed
//!   strictly.
//! * [`mcp`]: MCP as both revisions (2025-11-25, 2026-07-28) put it on the
//!   wire: `mcp::shapes`, the one reader of calls and replies (server
//!   questions in either form, `input_required` results, tasks);
//!   `mcp::headers`, the 2026 routing headers (-32020); `mcp::state`, the
//!   gateway's own sealed `requestState`.
//! * [`normalize`]: folding text to the plain form detectors read
//!   (NFKC, confusables, invisible characters, leetspeak, embedded
//!   encodings), with offsets back into the original.
//! * [`text`]: the text a body gives the model or agent behind it (chat
//!   documents read as the model reads them; any other JSON whole), for the
//!   guardrails and token estimates.
//! * [`param_cache`]: parsed params kept per distinct raw value.
//! * [`secret`]: secrets named in params (an environment variable or a
//!   file), read when used.
//! * [`pages`]: the pages agents serve themselves (approvals, connect,
//!   connections): one set of security headers, HTML escaping.
//! * [`sessions`]: state kept across requests (planner sessions, MCP
//!   server requests, A2A task owners), in memory or in Redis.
//!
//! The programs:
//!
//! * [`program`]: each agent's flags and start-up (`program::auth`, …), and
//!   the dispatch of `reference-agents`, the five agents in one binary.
//!
//! Binaries: `auth-agent`, `ratelimit-agent`, `guardrail-agent`,
//! `tool-agent`, `planner-agent`; `reference-agents` (all five:
//! `reference-agents auth --socket=…`, what `make run` and the container
//! start); and `example-agent` (the smallest useful agent: `addHeader`,
//! `delay`).

pub mod a2a;
pub mod approvals;
pub mod auth;
pub mod credentials;
pub mod guardrail;
pub mod jsonrpc;
pub mod mcp;
pub mod normalize;
pub mod pages;
pub mod param_cache;
pub mod planner;
pub mod program;
pub mod ratelimit;
pub mod rules;
pub mod secret;
pub mod sessions;
pub mod text;
pub mod tool;

/// A JSON error body: `{"error": error, "reason": reason}`.
pub(crate) fn error_body(error: &str, reason: &str) -> serde_json::Value {
    serde_json::json!({ "error": error, "reason": reason })
}
