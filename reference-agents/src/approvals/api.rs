//! `approvals`: the approvals API and page, answered by the agent that
//! holds the pending requests (request phase, with the body).
//!
//! Put it on a route of its own (`/approvals` by default, param
//! `base_path`) behind the route's auth policies, which name the caller
//! (`sub`, `consumer`, `roles` metadata). Everything is answered here; the
//! route's upstream is never called.
//!
//! | request | answer |
//! |---|---|
//! | `GET {base}/page` | the page to decide on (anyone: it holds no data) |
//! | `GET {base}?state=&principal=&target=&route=` | `{"approvals": [...], "last_event_id": N}`: what the caller may see (as approver or requester) |
//! | `GET {base}/{id}` | one request, with its `ETag` |
//! | `POST {base}/{id}` | a decision: `{"grant": "allow_once" \| "allow_session" \| "allow_always" \| "allow_constrained" \| "deny", "reason"?, "alternative"?, "constraints"?, "ttl_s"?}`, optionally `If-Match` |
//! | `DELETE {base}/{id}/grant` | revokes the standing grant a decision gave |
//! | `GET {base}/events` (`Last-Event-ID` or `?after=`) | `text/event-stream`: the events after that id, answered at once with `retry: 1000` so the client asks again (EventSource reconnects by itself and resumes from the last id) |
//!
//! Errors are JSON `{"error": sentence, "reason": code}`: 401 without an
//! identity, 403 not an approver or one's own request, 404 unknown (or not
//! the caller's to see), 409 decided or expired, 412 stale `If-Match`,
//! 400 a bad body. A refused decision changes nothing.

use std::sync::Arc;

use serde_json::{json, Value};

use super::store::{DecideBody, Filter, Refused};
use super::Approvals;
use crate::rules::Caller;
use policy_agents::{describe, Deny, Params, Policy, PolicyError, RequestContext, RequestOutcome};

const NAME: &str = "approvals";
const KEYS: &[&str] = &["base_path"];
/// The page, served at `{base}/page`.
pub const PAGE: &str = include_str!("page.html");
/// Events answered per request at most.
const MAX_EVENTS: usize = 200;

/// The `approvals` policy.
#[derive(Debug)]
pub struct ApprovalsApi {
    approvals: Arc<Approvals>,
}

impl ApprovalsApi {
    /// The API over `approvals`.
    pub fn new(approvals: Arc<Approvals>) -> Self {
        ApprovalsApi { approvals }
    }
}

fn answer(status: u16, body: &Value) -> RequestOutcome {
    RequestOutcome::denied_with(
        Deny::json(status, body)
            .header("cache-control", "no-store")
            .reason(if status < 300 {
                "approvals_api"
            } else {
                "approvals_api_error"
            }),
    )
}

fn error(status: u16, reason: &str, message: &str) -> RequestOutcome {
    answer(status, &json!({"error": message, "reason": reason}))
}

fn refusal(r: Refused) -> RequestOutcome {
    error(r.status, r.reason, &r.message)
}

/// The base path of param `base_path`: absolute, no trailing `/`.
fn base(p: &Params) -> Result<String, PolicyError> {
    crate::pages::base_path(p, "/approvals", NAME)
}

fn identified(c: &Caller) -> bool {
    c.sub.is_some() || c.consumer.is_some()
}

impl Policy for ApprovalsApi {
    type Params = Params;
    describe! { name: NAME, params: KEYS, body: true }

    async fn on_request(&self, params: &Params, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let base = base(params)?;
        let req = &ctx.request;
        let full = req.path();
        let path = full.split_once('?').map_or(full, |(p, _)| p);
        let Some(rest) = path.strip_prefix(base.as_str()) else {
            return Ok(error(404, "not_found", "not an approvals API path"));
        };
        let rest = rest.trim_start_matches('/');
        let method = req.method();
        if rest == "page" {
            return Ok(match method {
                "GET" | "HEAD" => RequestOutcome::denied_with(crate::pages::page(
                    200,
                    PAGE,
                    crate::pages::CSP_SCRIPT,
                    "approvals_page",
                )),
                _ => error(405, "method_not_allowed", "the page is read with GET"),
            });
        }
        let caller = Caller::from_metadata(ctx.metadata);
        if !identified(&caller) {
            return Ok(error(
                401,
                "unauthenticated",
                "the approvals API needs an identity: put an auth policy (apiKeyAuth, jwtValidation) before `approvals` on this route",
            ));
        }
        let a = &self.approvals;
        let query = |name: &str| req.query_param(name).filter(|v| !v.is_empty());
        Ok(match (method, rest) {
            ("GET", "") => {
                let filter = Filter {
                    state: query("state"),
                    principal: query("principal"),
                    target: query("target"),
                    route: query("route"),
                };
                match a.list(&caller, &filter).await {
                    Ok((list, last)) => answer(200, &json!({"approvals": list, "last_event_id": last})),
                    Err(r) => refusal(r),
                }
            }
            ("GET", "events") => {
                let after = req
                    .header("last-event-id")
                    .or_else(|| query("after"))
                    .map(|v| v.trim().parse::<u64>());
                let after = match after {
                    None => None,
                    Some(Ok(n)) => Some(n),
                    Some(Err(_)) => {
                        return Ok(error(
                            400,
                            "bad_event_id",
                            "Last-Event-ID must be an event id (a number)",
                        ))
                    }
                };
                events(a, &caller, after).await
            }
            (_, "events") | (_, "") => error(405, "method_not_allowed", "use GET"),
            (m, id) => match id.split_once('/') {
                None if m == "GET" => match a.get(id, &caller).await {
                    Ok((v, etag)) => RequestOutcome::denied_with(
                        Deny::json(200, &v)
                            .header("etag", etag)
                            .header("cache-control", "no-store")
                            .reason("approvals_api"),
                    ),
                    Err(r) => refusal(r),
                },
                None if m == "POST" => {
                    let body = req.body().unwrap_or_default();
                    let decision: DecideBody = match serde_json::from_slice(body) {
                        Ok(d) => d,
                        Err(e) => return Ok(error(400, "bad_decision", &format!("bad decision body: {e}"))),
                    };
                    match a.decide(id, &caller, decision, req.header("if-match")).await {
                        Ok(v) => answer(200, &v),
                        Err(r) => refusal(r),
                    }
                }
                Some((id, "grant")) if m == "DELETE" => match a.revoke(id, &caller).await {
                    Ok(v) => answer(200, &v),
                    Err(r) => refusal(r),
                },
                _ => error(405, "method_not_allowed", "unknown approvals API operation"),
            },
        })
    }
}

/// The event stream's answer: the events after `after` (none given: only
/// the current position), then `retry`.
async fn events(a: &Approvals, caller: &Caller, after: Option<u64>) -> RequestOutcome {
    let mut out = String::from("retry: 1000\n\n");
    let (list_head, evs) = match after {
        None => match a.list(caller, &Filter::default()).await {
            Ok((_, last)) => (last, Some(Vec::new())),
            Err(r) => return refusal(r),
        },
        Some(n) => match a.events_after(n, caller).await {
            Ok(evs) => (n, evs),
            Err(r) => return refusal(r),
        },
    };
    match evs {
        None => {
            // Events were dropped since: tell the console to reload.
            let head = match a.list(caller, &Filter::default()).await {
                Ok((_, last)) => last,
                Err(r) => return refusal(r),
            };
            out.push_str(&format!("id: {head}\nevent: approval.reload\ndata: {{}}\n\n"));
        }
        Some(evs) if evs.is_empty() => {
            // Nothing new: keep the client's position.
            out.push_str(&format!("id: {list_head}\n: nothing new\n\n"));
        }
        Some(evs) => {
            for e in evs.iter().take(MAX_EVENTS) {
                out.push_str(&format!("id: {}\nevent: {}\ndata: {}\n\n", e.id, e.kind, e.data));
            }
        }
    }
    RequestOutcome::denied_with(
        Deny::new(200, out)
            .header("content-type", "text/event-stream")
            .header("cache-control", "no-store")
            .reason("approvals_events"),
    )
}
