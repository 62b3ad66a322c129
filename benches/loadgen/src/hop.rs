//! The floor's agent hop (`pk-floor --hop-agent`): one call per request to a
//! policy agent over its call stream (`rpc Calls`), and nothing else. It is
//! the floor plus one agent round trip, the limit below which no processor
//! that calls a separate agent process can go: the kernel's K1 minus this
//! is the kernel's own work (routing, the chain, merging, translating the
//! answer, the log line, metrics), and this minus the floor is the hop
//! itself (the agent's work, both sockets, the second process's wake-ups).
//!
//! It is built to cost as little as a correct forwarder can, with the
//! kernel's transport choices: one HTTP/2 connection over the same socket
//! type, driven with the h2 crate directly, one long-lived stream, each call
//! one DATA frame written straight from the borrowed Envoy headers into one
//! buffer (pseudo-headers into the call's method, path, scheme and
//! authority, the others into its header list, as the kernel sends them),
//! and each reply decoded and handed to its caller by id. It sends the
//! kernel's default deadline (the agent arms the same timer per call as for
//! the kernel's calls). There is no retry, cancellation, deadline timer or
//! tracing: a failed hop answers the request with an error status, which
//! the benchmark counts as a failure.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use envoy_types::pb::envoy::config::core::v3::HeaderMap;
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};
use prost::Message;
use tokio::sync::oneshot;

use policy_kernel::proto::{reply_frame::Reply, Policy, ReplyFrame};

const CALLS_PATH: &str = "http://agent/policy_kernel.agent.v1.PolicyAgent/Calls";
/// The kernel's flow-control windows for its agent connections.
const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
const CONNECTION_WINDOW: u32 = 5 * 1024 * 1024;
/// The kernel's default agent timeout, sent as each call's deadline.
const DEADLINE_MS: i64 = 500;

/// One agent's call stream.
pub struct Hop {
    send: Mutex<h2::SendStream<Bytes>>,
    waiting: Arc<Mutex<HashMap<u64, oneshot::Sender<bool>>>>,
    next_id: AtomicU64,
    /// `PolicyRequestPhase.policies`: the one policy, encoded once.
    policy: Bytes,
}

impl Hop {
    /// Connects to the agent at `socket` and opens its call stream; each call
    /// runs `policy` with `params`.
    pub async fn connect(socket: &Path, policy: &str, params: &[(String, String)]) -> anyhow::Result<Self> {
        let io = policy_net::UnixConn::connect(socket).await?;
        let (sender, connection) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .handshake(io)
            .await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                eprintln!("pk-floor: agent connection ended: {e}");
            }
        });
        let request = http::Request::post(CALLS_PATH)
            .header(http::header::CONTENT_TYPE, "application/grpc")
            .header(http::header::TE, "trailers")
            .body(())?;
        let (response, send) = sender.ready().await?.send_request(request, false)?;
        let policy = Policy {
            name: policy.to_string(),
            params: params.iter().cloned().collect(),
            on_failure: String::new(),
        };
        let mut encoded = BytesMut::new();
        prost::encoding::message::encode(2, &policy, &mut encoded);
        let waiting = Arc::new(Mutex::new(HashMap::new()));
        tokio::spawn(read_replies(response, Arc::clone(&waiting)));
        Ok(Hop {
            send: Mutex::new(send),
            waiting,
            next_id: AtomicU64::new(1),
            policy: encoded.freeze(),
        })
    }

    /// One call carrying `headers`; true when the agent answered it.
    pub async fn call(&self, headers: Option<&HeaderMap>) -> bool {
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

/// Reads replies and wakes their callers (false for an error reply); when
/// the stream ends, every caller still waiting gets false.
async fn read_replies(response: h2::client::ResponseFuture, waiting: Arc<Mutex<HashMap<u64, oneshot::Sender<bool>>>>) {
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
async fn read_body(mut body: h2::RecvStream, waiting: &Mutex<HashMap<u64, oneshot::Sender<bool>>>) -> String {
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
fn dispatch(buf: &mut BytesMut, waiting: &Mutex<HashMap<u64, oneshot::Sender<bool>>>) -> Result<(), String> {
    while buf.len() >= 5 {
        if buf[0] != 0 {
            return Err("compressed reply frame".to_string());
        }
        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
        if buf.len() < 5 + len {
            buf.reserve(5 + len - buf.len());
            break;
        }
        buf.advance(5);
        let frame = ReplyFrame::decode(buf.split_to(len).freeze()).map_err(|e| e.to_string())?;
        let ok = matches!(frame.reply, Some(Reply::Request(_)));
        let waiter = waiting.lock().map_err(|e| e.to_string())?.remove(&frame.id);
        if let Some(w) = waiter {
            let _ = w.send(ok);
        }
    }
    Ok(())
}

/// A header's value: its raw bytes as Envoy sends them, else its string.
fn value_of(h: &envoy_types::pb::envoy::config::core::v3::HeaderValue) -> &[u8] {
    if h.raw_value.is_empty() {
        h.value.as_bytes()
    } else {
        &h.raw_value
    }
}

fn bytes_len(field: u32, n: usize) -> usize {
    key_len(field) + encoded_len_varint(n as u64) + n
}

fn put_bytes(field: u32, b: &[u8], buf: &mut BytesMut) {
    if !b.is_empty() {
        encode_key(field, WireType::LengthDelimited, buf);
        encode_varint(b.len() as u64, buf);
        buf.put_slice(b);
    }
}

fn opt_len(field: u32, n: usize) -> usize {
    if n == 0 {
        0
    } else {
        bytes_len(field, n)
    }
}

/// `HeaderValue { key, value }` (or `raw_value` for a value that is not UTF-8).
fn header_len(key: &[u8], value: &[u8]) -> usize {
    let value_field = if std::str::from_utf8(value).is_ok() { 2 } else { 3 };
    bytes_len(1, opt_len(1, key.len()) + opt_len(value_field, value.len()))
}

/// The gRPC-framed `CallFrame { id, request: PolicyRequestPhase {
/// request_id, policies, request_data { headers, method, path, scheme,
/// authority }, deadline_ms } }`.
fn encode_call(id: u64, policy: &[u8], headers: Option<&HeaderMap>) -> Bytes {
    let list = headers.map(|h| h.headers.as_slice()).unwrap_or_default();
    let pseudo = |name: &str| list.iter().find(|h| h.key == name).map(value_of).unwrap_or_default();
    let (method, path, scheme, authority) = (
        pseudo(":method"),
        pseudo(":path"),
        pseudo(":scheme"),
        pseudo(":authority"),
    );
    let request_id = pseudo("x-request-id");
    let regular = || list.iter().filter(|h| !h.key.starts_with(':'));
    let http_headers_len: usize = regular().map(|h| header_len(h.key.as_bytes(), value_of(h))).sum();
    let data_len = bytes_len(1, http_headers_len)
        + opt_len(4, method.len())
        + opt_len(5, path.len())
        + opt_len(6, scheme.len())
        + opt_len(7, authority.len());
    let phase_len = opt_len(1, request_id.len())
        + policy.len()
        + bytes_len(3, data_len)
        + key_len(4)
        + encoded_len_varint(DEADLINE_MS as u64);
    let frame_len = key_len(1) + encoded_len_varint(id) + bytes_len(2, phase_len);
    let mut buf = BytesMut::with_capacity(5 + frame_len);
    buf.put_u8(0);
    buf.put_u32(frame_len as u32);
    prost::encoding::uint64::encode(1, &id, &mut buf);
    encode_key(2, WireType::LengthDelimited, &mut buf);
    encode_varint(phase_len as u64, &mut buf);
    put_bytes(1, request_id, &mut buf);
    buf.put_slice(policy);
    encode_key(3, WireType::LengthDelimited, &mut buf);
    encode_varint(data_len as u64, &mut buf);
    encode_key(1, WireType::LengthDelimited, &mut buf);
    encode_varint(http_headers_len as u64, &mut buf);
    for h in regular() {
        let (key, value) = (h.key.as_bytes(), value_of(h));
        let value_field = if std::str::from_utf8(value).is_ok() { 2 } else { 3 };
        encode_key(1, WireType::LengthDelimited, &mut buf);
        encode_varint(
            (opt_len(1, key.len()) + opt_len(value_field, value.len())) as u64,
            &mut buf,
        );
        put_bytes(1, key, &mut buf);
        put_bytes(value_field, value, &mut buf);
    }
    put_bytes(4, method, &mut buf);
    put_bytes(5, path, &mut buf);
    put_bytes(6, scheme, &mut buf);
    put_bytes(7, authority, &mut buf);
    prost::encoding::int64::encode(4, &DEADLINE_MS, &mut buf);
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::core::v3::HeaderValue;
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
        let mut encoded = BytesMut::new();
        prost::encoding::message::encode(2, &policy, &mut encoded);
        let headers = HeaderMap {
            headers: vec![
                header(":method", b"GET"),
                header(":path", b"/k1/hop?a=1"),
                header(":scheme", b"http"),
                header(":authority", b"example"),
                header("user-agent", b"h2load"),
                header("x-request-id", b"r-1"),
                header("x-odd", b"\xff"),
            ],
        };
        let mut frame = encode_call(7, &encoded, Some(&headers));
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
