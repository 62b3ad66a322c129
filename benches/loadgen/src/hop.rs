//! The floor's agent hop (`pk-floor --hop-agent`): one call per request to a
//! policy agent over its call stream (`rpc Calls`), and nothing else. It is
//! the floor plus one agent round trip, the limit below which no processor
//! that calls a separate agent process can go: the kernel's K1 minus this
//! is the kernel's own work (routing, the chain, merging, translating the
//! answer, the log line, metrics), and this minus the floor is the hop
//! itself (the agent's work, both sockets, the second process's wake-ups).
//!
//! The call is the kernel's, made with the kernel's own parts: the request
//! context from Envoy's headers ([`request_ctx`]), the call written from it
//! ([`wire::request_call`]) with the kernel's default deadline (the agent
//! arms the same timer per call as for the kernel's calls), framed as the
//! kernel frames it ([`mux::encode_frame`]), on one HTTP/2 connection with
//! the kernel's settings ([`registry::h2_builder`]) over the same socket
//! type, driven with the h2 crate directly. Each reply is decoded and handed
//! to its caller by id. There is no retry, cancellation, deadline timer or
//! tracing: a failed hop answers the request with an error status, which
//! the benchmark counts as a failure.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use envoy_types::pb::envoy::service::ext_proc::v3::HttpHeaders;
use prost::Message;
use tokio::sync::oneshot;

use policy_kernel::aggregate::Metadata;
use policy_kernel::envoy::session::request_ctx;
use policy_kernel::proto::{reply_frame::Reply, Policy, ReplyFrame};
use policy_kernel::registry::{self, mux, AgentCall};
use policy_kernel::wire;

/// The kernel's default agent timeout, sent as each call's deadline.
const DEADLINE_MS: i64 = 500;

type Waiting = Mutex<HashMap<u64, oneshot::Sender<bool>>>;

/// One agent's call stream.
pub struct Hop {
    send: Mutex<h2::SendStream<Bytes>>,
    waiting: Arc<Waiting>,
    next_id: AtomicU64,
    /// The one policy each call runs, encoded once.
    policy: Bytes,
}

impl Hop {
    /// Connects to the agent at `socket` and opens its call stream; each call
    /// runs `policy` with `params`.
    pub async fn connect(socket: &Path, policy: &str, params: &[(String, String)]) -> anyhow::Result<Self> {
        let io = policy_net::UnixConn::connect(socket).await?;
        let (sender, connection) = registry::h2_builder().handshake(io).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                eprintln!("pk-floor: agent connection ended: {e}");
            }
        });
        let request = http::Request::post(format!("http://agent{}", mux::CALLS_PATH))
            .header(http::header::CONTENT_TYPE, "application/grpc")
            .header(http::header::TE, "trailers")
            .body(())?;
        let (response, send) = sender.ready().await?.send_request(request, false)?;
        let policy = wire::encode_policy(&Policy {
            name: policy.to_string(),
            params: params.iter().cloned().collect(),
            on_failure: String::new(),
        });
        let waiting = Arc::new(Mutex::new(HashMap::new()));
        tokio::spawn(read_replies(response, Arc::clone(&waiting)));
        Ok(Hop {
            send: Mutex::new(send),
            waiting,
            next_id: AtomicU64::new(1),
            policy,
        })
    }

    /// One call for the request of `headers`; true when the agent answered it.
    pub async fn call(&self, headers: HttpHeaders) -> bool {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = encode_call(id, &self.policy, headers);
        let (tx, rx) = oneshot::channel();
        match self.waiting.lock() {
            Ok(mut w) => w.insert(id, tx),
            Err(_) => return false,
        };
        let sent = match self.send.lock() {
            Ok(mut s) => s.send_data(frame, false).is_ok(),
            Err(_) => false,
        };
        if !sent {
            if let Ok(mut w) = self.waiting.lock() {
                w.remove(&id);
            }
            return false;
        }
        rx.await.unwrap_or(false)
    }
}

/// The framed `CallFrame` of call `id`: `policy` on the request of `headers`.
fn encode_call(id: u64, policy: &Bytes, headers: HttpHeaders) -> Bytes {
    let ctx = request_ctx(headers, &HashMap::new());
    let mut call = wire::request_call(&ctx.request_id, std::iter::once(policy), &ctx, &Metadata::new(), &[]);
    call.deadline_ms = DEADLINE_MS;
    mux::encode_frame(id, &AgentCall::Request(call), None)
}

/// Reads replies and wakes their callers (false for an error reply); when
/// the stream ends, every caller still waiting gets false.
async fn read_replies(response: h2::client::ResponseFuture, waiting: Arc<Waiting>) {
    let ended = match response.await {
        Ok(resp) if resp.status() == http::StatusCode::OK => read_body(resp.into_body(), &waiting).await,
        Ok(resp) => format!("the agent answered the stream with HTTP {}", resp.status()),
        Err(e) => e.to_string(),
    };
    eprintln!("pk-floor: agent call stream closed: {ended}");
    if let Ok(mut w) = waiting.lock() {
        w.clear();
    }
}

/// Dispatches the replies of `body` until it ends; why it ended.
async fn read_body(mut body: h2::RecvStream, waiting: &Waiting) -> String {
    let mut buf = BytesMut::new();
    while let Some(data) = body.data().await {
        let step = data.map_err(|e| e.to_string()).and_then(|data| {
            buf.extend_from_slice(&data);
            body.flow_control()
                .release_capacity(data.len())
                .map_err(|e| e.to_string())?;
            dispatch(&mut buf, waiting)
        });
        if let Err(why) = step {
            return why;
        }
    }
    "the agent ended the stream".to_string()
}

/// Hands every complete reply in `buf` to its caller.
fn dispatch(buf: &mut BytesMut, waiting: &Waiting) -> Result<(), String> {
    while let Some(message) = mux::next_message(buf)? {
        let frame = ReplyFrame::decode(message).map_err(|e| e.to_string())?;
        let ok = matches!(frame.reply, Some(Reply::Request(_)));
        let waiter = waiting.lock().map_err(|e| e.to_string())?.remove(&frame.id);
        if let Some(w) = waiter {
            let _ = w.send(ok);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Buf;
    use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue};
    use policy_kernel::proto::{call_frame::Call, CallFrame};

    fn header(key: &str, raw: &[u8]) -> HeaderValue {
        HeaderValue {
            key: key.to_string(),
            raw_value: raw.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn a_call_decodes_as_the_call_frame_an_agent_reads() {
        let policy = Policy {
            name: "addHeader".into(),
            params: [("name".to_string(), "x-hop".to_string())].into_iter().collect(),
            on_failure: String::new(),
        };
        let headers = HttpHeaders {
            headers: Some(HeaderMap {
                headers: vec![
                    header(":method", b"GET"),
                    header(":path", b"/k1/hop?a=1"),
                    header(":scheme", b"http"),
                    header(":authority", b"example"),
                    header("user-agent", b"h2load"),
                    header("x-request-id", b"r-1"),
                    header("x-odd", b"\xff"),
                ],
            }),
            ..Default::default()
        };
        let mut frame = encode_call(7, &wire::encode_policy(&policy), headers);
        assert_eq!(frame[0], 0);
        let len = u32::from_be_bytes([frame[1], frame[2], frame[3], frame[4]]) as usize;
        frame.advance(5);
        assert_eq!(frame.len(), len);
        let call = CallFrame::decode(frame).expect("decodes");
        assert_eq!(call.id, 7);
        let Some(Call::Request(phase)) = call.call else {
            panic!("not a request call: {call:?}");
        };
        assert_eq!(phase.request_id, "r-1");
        assert_eq!(phase.policies, vec![policy]);
        assert_eq!(phase.deadline_ms, DEADLINE_MS);
        let data = phase.request_data.expect("request data");
        assert_eq!((data.method.as_str(), data.path.as_str()), ("GET", "/k1/hop?a=1"));
        assert_eq!((data.scheme.as_str(), data.authority.as_str()), ("http", "example"));
        let list = data.headers.expect("headers").headers;
        let names: Vec<_> = list.iter().map(|h| h.key.as_str()).collect();
        assert_eq!(names, ["user-agent", "x-request-id", "x-odd"]);
        assert_eq!(list[0].value, "h2load");
        assert_eq!((list[2].value.as_str(), &list[2].raw_value[..]), ("", &b"\xff"[..]));
    }
}
