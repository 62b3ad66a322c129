//! Asking a caller to connect, in the words its client reads:
//!
//! * an MCP 2026-07-28 request: an `input_required` result whose question
//!   (`io.policy-kernel/connect`) is a URL elicitation to the connect link,
//!   with the gateway's sealed `requestState` (as approvals ask), or -32021
//!   when the request did not declare URL elicitation;
//! * any other JSON-RPC request (MCP 2025-11-25): error `-32042`
//!   (URLElicitationRequired) naming the link, HTTP 200;
//! * anything else: 403 JSON with the link.
//!
//! The retry of a 2026 call carries the gateway's question and state back:
//! [`strip`] takes them out (the server's own state and answers put back)
//! before the body goes upstream.

use serde_json::json;

use crate::jsonrpc::{Envelope, Kind};
use crate::mcp::state::CONNECT_KEY;
use crate::rules::Caller;
use crate::tool::approve::{self, Modern, URL_ELICITATION_REQUIRED};
use policy_agents::{Deny, RequestContext};

/// The reason of every ask.
pub const REASON: &str = "upstream_credential_required";

/// The MCP methods that act on the user's behalf at the upstream: without
/// a credential they are asked to connect; the rest (the handshake,
/// `server/discover`, lists, notifications, pings) go on without any
/// credential (and without the caller's token). A body that is not
/// JSON-RPC always needs it.
const ACTING: &[&str] = &[
    "tools/call",
    "prompts/get",
    "resources/read",
    "resources/subscribe",
    "completion/complete",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "tasks/result",
];

/// Whether the request needs the upstream's credential.
pub fn needs_credential(env: Option<&Envelope>) -> bool {
    let Some(env) = env else {
        return true;
    };
    env.messages
        .iter()
        .any(|m| m.kind == Kind::Request && m.method.as_deref().is_some_and(|x| ACTING.contains(&x)))
}

/// A connect link given to a caller.
#[derive(Debug, Clone, Copy)]
pub struct Offer<'a> {
    /// The link's id.
    pub link: &'a str,
    /// Its URL.
    pub url: &'a str,
    /// Until when it may be opened (Unix ms).
    pub expires_ms: u64,
    /// The upstream to connect.
    pub upstream: &'a str,
}

/// The request as MCP 2026-07-28 reads it (`Ok(None)` for any other
/// body), with the body to forward when its retry carried the gateway's
/// own question or state (taken out, the server's put back); `Err` when
/// that state was forged, altered or issued for another call.
pub fn modern<'s>(
    ctx: &RequestContext<'_>,
    env: Option<&Envelope>,
    sealer: &'s crate::mcp::state::Sealer,
    caller: &Caller,
) -> Result<Option<Modern<'s>>, Deny> {
    match env {
        Some(env) => approve::modern(sealer, caller, ctx, env),
        None => Ok(None),
    }
}

/// The answer asking the caller to connect, with `offer`: for `modern`
/// (a 2026-07-28 request, as [`modern`] read it) or the JSON-RPC `env`.
pub fn ask(env: Option<&Envelope>, modern: Option<&Modern<'_>>, offer: Offer<'_>) -> Deny {
    let Offer {
        link,
        url,
        expires_ms,
        upstream,
    } = offer;
    let message = format!("Connect your {upstream} account to continue: open {url}");
    let data = json!({"reason": REASON, "upstream": upstream, "connect_url": url});
    if let Some(m) = modern {
        return approve::ask_for(
            m,
            CONNECT_KEY,
            &format!("connect:{link}"),
            expires_ms,
            url,
            &message,
            data,
        );
    }
    if let Some(env) = env {
        if let (false, [m]) = (env.batch, env.messages.as_slice()) {
            if let (Kind::Request, Some(id)) = (m.kind, &m.id) {
                let body = json!({"jsonrpc": "2.0", "id": id, "error": {
                    "code": URL_ELICITATION_REQUIRED,
                    "message": message,
                    "data": {"elicitations": [{"mode": "url", "elicitationId": link, "url": url, "message": message}],
                        "reason": REASON, "upstream": upstream, "connect_url": url},
                }});
                return Deny::json(200, &body).reason(REASON);
            }
        }
    }
    let body = json!({"error": message, "reason": REASON, "upstream": upstream, "connect_url": url});
    Deny::json(403, &body).reason(REASON)
}

/// The connect page's base URL for a request: param `connect_url`, or
/// `{scheme}://{authority}/connect`.
pub fn connect_base(given: Option<&str>, request: &policy_agents::RequestView<'_>) -> String {
    crate::pages::page_url(given, request, "/connect")
}
