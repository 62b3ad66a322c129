//! MCP as both revisions put it on the wire: 2025-11-25 (sessions, server
//! requests on event streams) and 2026-07-28 (no sessions; a server asks
//! the user or the model by answering a call with `input_required`, and
//! the client retries with `inputResponses` and the echoed `requestState`).
//!
//! * [`shapes`]: the one reader of MCP messages the tool agent's policies
//!   decide on: a call with its revision, the client capabilities it
//!   declares and its retry fields; a reply's items (a server question, in
//!   either revision's form, a complete result, an `input_required`
//!   result, a task). What it cannot read the way the SDKs do is an error,
//!   which the policies refuse.
//! * [`headers`]: the routing headers of 2026-07-28 (`Mcp-Method`,
//!   `Mcp-Name`, `MCP-Protocol-Version`) checked against the body
//!   (-32020 `HeaderMismatch`).
//! * [`state`]: the gateway's own `requestState`, sealed (HMAC-SHA256) and
//!   bound to what it was issued for, wrapping the server's state.

pub mod headers;
pub mod shapes;
pub mod state;

/// JSON-RPC error `HeaderMismatch` (MCP 2026-07-28): a routing header
/// disagrees with the body, or one the revision requires is missing.
pub const HEADER_MISMATCH: i64 = -32020;
/// JSON-RPC error `MissingClientCapability` (MCP 2026-07-28).
pub const MISSING_CAPABILITY: i64 = -32021;
