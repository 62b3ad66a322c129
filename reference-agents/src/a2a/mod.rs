//! Agent-to-agent (A2A) governance, policies of `tool-agent`: delegation
//! between agents checked like tool calls.
//!
//! * [`A2aAuthorization`] (`a2aAuthorization`, request): which caller may
//!   send to which skill, and call which method; ordered rules, first match
//!   wins, default deny (the rule engine of the MCP policies, with
//!   `skills`).
//! * [`A2aTaskOwnership`] (`a2aTaskOwnership`, both phases): a task is its
//!   creator's. Task ids are learned from the agent's replies (JSON or
//!   streamed, event by event) and kept in the session store (memory, or
//!   Redis with `tool-agent --redis-url`); calls on another principal's
//!   task are answered as for an unknown task; task lists show the
//!   caller's own.
//! * [`A2aCardFilter`] (`a2aCardFilter`, response): the agent card and the
//!   extended card list only the skills the caller may use, and name the
//!   gateway instead of the agent's own address (`public_url`).
//! * [`A2aUrlGuard`] (`a2aUrlGuard`, request): push-notification URLs and
//!   file parts by URL through the SSRF and host rules of
//!   `toolArgumentGuard`.
//!
//! Text parts of messages and artifacts reach `promptInjectionGuard` and
//! `piiRedaction` (guardrail-agent) through [`parts`].
//!
//! Both bindings the official SDKs use over HTTP are understood (JSON-RPC,
//! with the A2A 1.0 and 0.3 method names, and HTTP+JSON), and refusals take
//! each binding's error form ([`errors`]). Decisions go to metadata
//! (`a2a.*`), hence Envoy's access log and `auditLog`'s journal.
//!
//! One file per concern: [`call`] (reading a request), [`errors`],
//! `authorize`, `tasks` (ownership), `replies` (task ids and lists in
//! replies), `card`, `urls`, [`parts`]. The rule engine, JSON-RPC parsing,
//! SSE events and the session store are the crate's shared layers.

mod approve;
mod authorize;
pub mod call;
mod card;
pub mod errors;
pub mod parts;
mod replies;
pub mod shapes;
mod tasks;
mod urls;

pub use authorize::A2aAuthorization;
pub use card::A2aCardFilter;
pub use tasks::A2aTaskOwnership;
pub use urls::A2aUrlGuard;

use policy_agents::{Metadata, ParamError, Params};

use crate::tool::metadata_text;
use crate::tool::Style;

/// The methods of rules that name none: the sending ones.
pub const SEND_METHODS: &[&str] = &["SendMessage", "SendStreamingMessage"];

/// The principal of a call: the JWT `sub` (`sub:<sub>`) or else the
/// API-key consumer (`consumer:<name>`) that the auth policies recorded.
pub fn principal(md: &Metadata) -> Option<String> {
    let one = |k: &str| md.get(k).map(str::trim).filter(|s| !s.is_empty());
    one("sub")
        .map(|s| format!("sub:{s}"))
        .or_else(|| one("consumer").map(|c| format!("consumer:{c}")))
}

/// Param `denial`: `jsonrpc_error` (the default: HTTP 200, the JSON-RPC
/// binding's convention) or `http_403`. HTTP+JSON calls always get their
/// own statuses.
fn denial(p: &Params) -> Result<Style, ParamError> {
    match p.get("denial").map(str::trim) {
        None | Some("") | Some("jsonrpc_error") => Ok(Style::JsonRpcError),
        Some("http_403") => Ok(Style::Http403),
        Some(other) => Err(ParamError::invalid(
            "denial",
            other,
            "expected jsonrpc_error or http_403",
        )),
    }
}

/// Param `unknown_fields`: `refuse` (the default) refuses a call carrying
/// a member its protocol version does not define in a governed place (the
/// params, a message, a part, a file, a send's configuration, a push
/// config); `ignore` leaves such members out, as the reference server does
/// ([`shapes`]). True when strict.
fn unknown_fields(p: &Params) -> Result<bool, ParamError> {
    match p.get("unknown_fields").map(str::trim) {
        None | Some("") | Some("refuse") => Ok(true),
        Some("ignore") => Ok(false),
        Some(other) => Err(ParamError::invalid(
            "unknown_fields",
            other,
            "expected refuse or ignore",
        )),
    }
}
