//! The MCP stream relay (`tool-agent --mcp-stream-relay LISTEN=UPSTREAM`):
//! relays a session's GET stream from the MCP server, and adds
//! `notifications/elicitation/complete` to it when an approval of a call
//! made in that session is decided (MCP 2025-11-25, URL-mode elicitation:
//! the approval's id is the elicitation's).
//!
//! ext_proc cannot add an event to a stream on which the server sends
//! nothing, so Envoy routes the MCP endpoint's `GET` (after the route's
//! policies ran on it) to this relay instead of the server. The relay
//! opens the same `GET` on the server with the same headers (the session,
//! the credentials, `Last-Event-ID`), answers with the server's status,
//! headers and bytes as they come, unchanged, and writes a notice between
//! two of the server's events (never inside one) for each approval decided
//! whose call had the stream's `mcp-session-id` at the same endpoint
//! (authority and path; the path before a route's rewrite, from Envoy's
//! `x-envoy-original-path`). Notices carry no event id, so a client's
//! `Last-Event-ID` stays the server's.
//!
//! Anything else is relayed as it comes (a `405` of a server without GET
//! streams, an error); other methods get `405`: the relay is for GET
//! streams only. The server unreachable: `502`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use policy_agents::metrics::{self, prometheus::IntCounter, prometheus::IntGauge};
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;

use crate::approvals::notices::{Decided, Notices};

type Body = BoxBody<Bytes, std::io::Error>;

/// Where the relay listens and the MCP server it relays (flag
/// `--mcp-stream-relay LISTEN=UPSTREAM`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelaySpec {
    /// The address Envoy sends GET streams to.
    pub listen: SocketAddr,
    /// The server: `http://host:port` (no path: the request's is kept).
    pub upstream: String,
}

impl std::str::FromStr for RelaySpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (listen, upstream) = s
            .split_once('=')
            .ok_or_else(|| format!("{s:?}: expected LISTEN=UPSTREAM, e.g. 127.0.0.1:9470=http://127.0.0.1:8000"))?;
        let listen = listen
            .trim()
            .parse()
            .map_err(|e| format!("{listen:?}: not an address to listen on (host:port): {e}"))?;
        let url = url::Url::parse(upstream.trim()).map_err(|e| format!("{upstream:?}: not a URL: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(format!(
                "{upstream:?}: the MCP server must be an http:// or https:// URL with a host"
            ));
        }
        if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
            return Err(format!(
                "{upstream:?}: give the server's scheme, host and port only (the request's path is kept)"
            ));
        }
        let upstream = url.as_str().trim_end_matches('/').to_string();
        Ok(RelaySpec { listen, upstream })
    }
}

/// Headers that belong to one connection, never relayed (RFC 9110 §7.6.1).
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
];

fn streams_open() -> &'static IntGauge {
    static G: OnceLock<IntGauge> = OnceLock::new();
    G.get_or_init(|| {
        metrics::register(
            IntGauge::new(
                "policy_agent_mcp_relay_streams",
                "MCP GET streams the relay holds open now",
            )
            .expect("a valid gauge"),
        )
    })
}

fn notices_sent() -> &'static IntCounter {
    static C: OnceLock<IntCounter> = OnceLock::new();
    C.get_or_init(|| {
        metrics::register(
            IntCounter::new(
                "policy_agent_elicitation_complete_sent_total",
                "notifications/elicitation/complete written on relayed MCP streams",
            )
            .expect("a valid counter"),
        )
    })
}

/// The relay: binds `spec.listen` now, serves until the process ends;
/// returns the bound address.
pub async fn serve(spec: RelaySpec, notices: Arc<Notices>) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(spec.listen).await?;
    let bound = listener.local_addr()?;
    // Streams last as long as the client keeps them: no overall timeout.
    let client = reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(5))
        .no_proxy()
        .build()
        .map_err(std::io::Error::other)?;
    let relay = Arc::new(Relay {
        upstream: spec.upstream,
        client,
        notices,
    });
    streams_open();
    notices_sent();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let relay = relay.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| {
                    let relay = relay.clone();
                    async move { Ok::<_, Infallible>(relay.answer(req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(bound)
}

struct Relay {
    upstream: String,
    client: reqwest::Client,
    notices: Arc<Notices>,
}

impl Relay {
    async fn answer(&self, req: Request<hyper::body::Incoming>) -> Response<Body> {
        if req.method() != Method::GET {
            return error(
                StatusCode::METHOD_NOT_ALLOWED,
                "the MCP stream relay takes GET streams only: route other methods to the server",
            );
        }
        let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
        let mut headers = HeaderMap::new();
        for (name, value) in req.headers() {
            if !HOP_BY_HOP.contains(&name.as_str()) {
                headers.append(name.clone(), value.clone());
            }
        }
        let session = header(req.headers(), "mcp-session-id");
        // The path the client asked for, which the call's approval names:
        // Envoy's `x-envoy-original-path` when the route rewrote it.
        let asked = header(req.headers(), "x-envoy-original-path");
        let asked = asked
            .as_deref()
            .map_or(req.uri().path(), |p| p.split('?').next().unwrap_or(p));
        let endpoint = header(req.headers(), "host").map(|h| format!("{h}{asked}"));
        let sent = self
            .client
            .get(format!("{}{path}", self.upstream))
            .headers(headers)
            .send()
            .await;
        let up = match sent {
            Ok(up) => up,
            Err(e) => {
                tracing::warn!(upstream = %self.upstream, error = %e, "MCP stream relay: the server is unreachable");
                return error(
                    StatusCode::BAD_GATEWAY,
                    &format!("the MCP server {} is unreachable", self.upstream),
                );
            }
        };
        let mut resp = Response::builder().status(up.status().as_u16());
        let stream = up.status() == reqwest::StatusCode::OK
            && up
                .headers()
                .get(CONTENT_TYPE)
                .is_some_and(|v| policy_net::sse::is_event_stream(v.as_bytes()));
        for (name, value) in up.headers() {
            if !HOP_BY_HOP.contains(&name.as_str()) {
                resp = resp.header(name.as_str(), value.as_bytes());
            }
        }
        // Notices only on a session's event stream.
        let listen = match (stream, session, endpoint) {
            (true, Some(session), Some(endpoint)) => Some((self.notices.subscribe().await, session, endpoint)),
            _ => None,
        };
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(pump(up, tx, listen));
        let body = StreamBody::new(ReceiverStream::new(rx));
        resp.body(BodyExt::boxed(body)).unwrap_or_else(|_| {
            error(
                StatusCode::BAD_GATEWAY,
                "the MCP server answered headers that cannot be relayed",
            )
        })
    }
}

type Listen = (broadcast::Receiver<Arc<Decided>>, String, String);

/// Relays the server's body to `tx` as it comes, with a notice between two
/// events for each decision `listen` tells of in its session.
async fn pump(
    mut up: reqwest::Response,
    tx: mpsc::Sender<Result<Frame<Bytes>, std::io::Error>>,
    listen: Option<Listen>,
) {
    let _open = Open::new();
    let mut at = Boundary::default();
    let mut queued: Vec<Bytes> = Vec::new();
    let (mut rx, session, endpoint) = match listen {
        Some((rx, s, e)) => (Some(rx), s, e),
        None => (None, String::new(), String::new()),
    };
    loop {
        tokio::select! {
            _ = tx.closed() => return,
            chunk = up.chunk() => match chunk {
                Ok(Some(bytes)) => {
                    at.feed(&bytes);
                    if tx.send(Ok(Frame::data(bytes))).await.is_err() {
                        return;
                    }
                    if at.between_events() {
                        for n in queued.drain(..) {
                            if tx.send(Ok(Frame::data(n))).await.is_err() {
                                return;
                            }
                            notices_sent().inc();
                        }
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "MCP stream relay: the server's stream broke");
                    // An error, not an end: the client sees the stream break.
                    let _ = tx.send(Err(std::io::Error::other(e))).await;
                    return;
                }
            },
            decided = recv(&mut rx) => match decided {
                Ok(d) if d.session == session && d.endpoint == endpoint => {
                    let n = notice(&d.id);
                    if at.between_events() {
                        if tx.send(Ok(Frame::data(n))).await.is_err() {
                            return;
                        }
                        notices_sent().inc();
                    } else {
                        queued.push(n);
                    }
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(missed = n, "MCP stream relay: a slow stream missed completion notices");
                }
                Err(broadcast::error::RecvError::Closed) => rx = None,
            },
        }
    }
}

async fn recv(rx: &mut Option<broadcast::Receiver<Arc<Decided>>>) -> Result<Arc<Decided>, broadcast::error::RecvError> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// `notifications/elicitation/complete` for elicitation `id`, as one event.
fn notice(id: &str) -> Bytes {
    let msg = serde_json::json!({
        "jsonrpc": "2.0",
        "method": "notifications/elicitation/complete",
        "params": {"elicitationId": id},
    });
    policy_net::sse::event("message", &msg.to_string())
}

/// Counts a stream as open while it lives.
struct Open;

impl Open {
    fn new() -> Open {
        streams_open().inc();
        Open
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        streams_open().dec();
    }
}

/// Whether the bytes relayed so far end between two events (after an empty
/// line, or before anything), without holding any of them.
#[derive(Debug)]
struct Boundary {
    between: bool,
    line_empty: bool,
    after_cr: bool,
}

impl Default for Boundary {
    fn default() -> Self {
        Boundary {
            between: true,
            line_empty: true,
            after_cr: false,
        }
    }
}

impl Boundary {
    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if std::mem::take(&mut self.after_cr) && b == b'\n' {
                continue; // the rest of a CRLF
            }
            if b == b'\r' || b == b'\n' {
                if self.line_empty {
                    self.between = true;
                }
                self.line_empty = true;
                self.after_cr = b == b'\r';
            } else {
                self.line_empty = false;
                self.between = false;
            }
        }
    }

    fn between_events(&self) -> bool {
        self.between
    }
}

fn header(h: &HeaderMap, name: &'static str) -> Option<String> {
    h.get(HeaderName::from_static(name))
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(String::from)
}

fn error(status: StatusCode, message: &str) -> Response<Body> {
    let body = serde_json::json!({"error": message}).to_string();
    let mut r = Response::new(BodyExt::boxed(
        Full::new(Bytes::from(body)).map_err(|e: Infallible| match e {}),
    ));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

#[cfg(test)]
#[path = "stream_relay_tests.rs"]
mod tests;
