//! MCP tool-call governance, the policies of `tool-agent`.
//!
//! MCP's streamable HTTP transport POSTs each JSON-RPC 2.0 message (or a
//! batch) to one endpoint; replies come as `application/json` or as a
//! `text/event-stream`. These policies read those bodies:
//!
//! * [`McpToolAuthorization`] (`mcpToolAuthorization`, request): ordered
//!   rules, first match wins, default deny, on the method, the tool (prompt,
//!   resource) and the caller that `apiKeyAuth` / `jwtValidation` recorded.
//! * [`McpToolFilter`] (`mcpToolFilter`, response): `tools/list` replies
//!   show only the tools the same rules let the caller call.
//! * [`ToolArgumentGuard`] (`toolArgumentGuard`, request): path, command and
//!   URL arguments (SSRF rules always), argument size.
//! * [`ToolSchemaValidation`] (`toolSchemaValidation`, both): arguments
//!   against the tools' JSON Schemas, from a file or learned from
//!   `tools/list` replies.
//! * [`McpServerRequestGuard`] (`mcpServerRequestGuard`, both): the
//!   requests the server sends the client (sampling, elicitation, roots),
//!   per caller, and the client's answers to them, in both revisions (the
//!   2026-07-28 `inputRequests` of results and the retry's
//!   `inputResponses`); see `server_requests` and `input_requests`.
//! * [`McpTaskOwnership`] (`mcpTaskOwnership`, both): a task (the tasks
//!   extension) is its creator's only; see `tasks`.
//!
//! The response policies stream event streams: an SSE reply (a POST's, or
//! a session's GET stream) passes one event at a time, so progress,
//! server requests and `notifications/tools/list_changed` reach the client
//! as the server sends them. JSON replies are buffered and read whole.
//!
//! One file per concern: `args` (the guard), [`urls`] (SSRF), [`paths`]
//! (paths and commands), `deny` (denial rendering and body handling),
//! `reply` (JSON and SSE replies), [`events`] (one SSE event of a streamed
//! reply), `schema`, `filter`, `authorize`, `approve` (approvals, both
//! revisions), `server_requests` and `server_checks` (server-to-client
//! requests), `input_requests` (the questions of both revisions read
//! through [`crate::mcp::shapes`], and the 2026-07-28 retry check). The
//! layers they share with other agents are at the crate's root:
//! [`jsonrpc`](crate::jsonrpc) (parsing), [`rules`](crate::rules),
//! [`param_cache`](crate::param_cache) (parsed params).

pub(crate) mod approve;
mod args;
mod authorize;
pub(crate) mod deny;
pub mod events;
mod filter;
mod input_requests;
mod metrics;
pub mod paths;
mod reply;
mod schema;
mod server_checks;
mod server_requests;
pub mod stream_relay;
mod tasks;
pub mod urls;

/// A name from a request body as a metadata value: control characters
/// replaced by `?` (the kernel refuses CR, LF and NUL in values, which would
/// fail the call instead of recording the decision), at most 128 characters.
pub(crate) fn metadata_text(name: &str) -> String {
    name.chars()
        .take(128)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

pub use approve::{UrlElicitation, URL_ELICITATION_REQUIRED};
pub use args::{check_call, GuardConfig, ToolArgumentGuard, Violation};
pub use authorize::{authorize, authorize_approved, Approved, AuthzConfig, McpToolAuthorization, ALWAYS_ALLOWED};
pub use deny::{Refusal, Style, INSUFFICIENT_SCOPE};
pub use filter::{filter_message, McpToolFilter};
pub use reply::{refuse_encoded, Format};
pub use schema::{ToolSchemaValidation, MAX_LEARNED};
pub use server_checks::{looks_secret, Verdict};
pub use server_requests::{McpServerRequestGuard, REFUSED};
pub use tasks::McpTaskOwnership;
