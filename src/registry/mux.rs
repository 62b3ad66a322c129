//! The kernel's side of the call stream (`rpc Calls`), for agents that
//! declare `serves_call_stream`: policy calls go as [`CallFrame`]s on one
//! long-lived HTTP/2 stream of the agent's connection, tagged with an id,
//! and replies are matched to their callers by id, in whatever order they
//! come. A call then costs one DATA frame each way, instead of a stream of
//! its own (HEADERS with HPACK, DATA and trailers each way, stream set-up
//! and tear-down on both sides).
//!
//! What holds as for unary calls:
//! - **Deadlines** travel in the call (`deadline_ms`), and the kernel still
//!   bounds the wait itself: a call with no reply by its deadline fails as
//!   a timeout and is cancelled on the stream. One timer per stream does
//!   this ([`expire_calls`]), armed at the earliest deadline in flight: a
//!   timer per call cost the kernel about 2,400 instructions more per call
//!   than this, and a wake-up of its runtime's driver (a system call)
//!   (benches/RESULTS.md, 2026-11-27).
//! - **Cancellation**: a caller that stops waiting (Envoy reset the stream,
//!   or the deadline passed) sends a cancel frame, and the agent aborts the
//!   call's work.
//! - **Retries**: a call is "not sent" only when its frame was refused by
//!   the connection, so that only those are retried; a stream that ends
//!   with calls in flight fails them as sent (their outcome is unknown) and
//!   the next call opens a new stream (on a new connection if need be).
//! - **No head-of-line blocking**: the agent runs each call on a task of its
//!   own and answers when ready; calls over [`MAX_STREAMED_CALL`] bytes go
//!   unary, on a stream (and a flow-control window) of their own, so a
//!   large body never holds back small calls behind it.
//!
//! Writers share the stream's send half behind a mutex held for one
//! `send_data` (a queue push: h2's own state is behind a mutex as well),
//! and the table of calls in flight behind another, held for an insert or
//! a remove (and by the timer, for a pass over the table when it fires);
//! neither is held across an await.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwapOption;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::encoding;
use prost::Message;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use super::call::{AgentCall, AgentReply};
use super::client::{Connection, TransportError};
use crate::proto::{reply_frame::Reply, ReplyFrame};

/// Calls larger than this (encoded) go unary: 64 KiB.
pub const MAX_STREAMED_CALL: usize = 64 * 1024;

/// gRPC path of the call stream.
pub const CALLS_PATH: &str = "/policy_kernel.agent.v1.PolicyAgent/Calls";

type Waiter = oneshot::Sender<Result<AgentReply, tonic::Status>>;

/// The calls in flight on one stream.
#[derive(Default)]
struct Pending {
    /// Each call's waiter and deadline, by id.
    calls: HashMap<u64, (Waiter, Instant)>,
    /// The deadline the stream's timer is armed for; `None` while it waits
    /// for a call. Never later than any deadline in `calls`.
    armed: Option<Instant>,
}

/// One open call stream.
struct Session {
    send: Mutex<h2::SendStream<Bytes>>,
    pending: Mutex<Pending>,
    closed: AtomicBool,
    /// Wakes the timer: a call with an earlier deadline, or the stream's end.
    rearm: Notify,
}

impl Session {
    /// Marks the stream closed and fails every call still waiting: their
    /// frames were sent, so their outcome is unknown.
    fn close(&self, why: &str) {
        self.closed.store(true, Ordering::Release);
        self.rearm.notify_one();
        let waiting: Vec<Waiter> = match self.pending.lock() {
            Ok(mut p) => p.calls.drain().map(|(_, (w, _))| w).collect(),
            Err(_) => return,
        };
        for w in waiting {
            let _ = w.send(Err(tonic::Status::unavailable(format!(
                "agent call stream closed: {why}"
            ))));
        }
    }

    fn take(&self, id: u64) -> Option<Waiter> {
        self.pending.lock().ok()?.calls.remove(&id).map(|(w, _)| w)
    }

    /// Queues one encoded frame. On `Err` nothing was queued.
    fn write(&self, frame: Bytes) -> Result<(), h2::Error> {
        match self.send.lock() {
            Ok(mut s) => s.send_data(frame, false),
            Err(_) => Err(h2::Error::from(h2::Reason::INTERNAL_ERROR)),
        }
    }
}

/// The call stream of one agent, shared by every call to it; opened on
/// first use and again after it ends.
pub struct CallStream {
    connection: Arc<Connection>,
    session: ArcSwapOption<Session>,
    opening: tokio::sync::Mutex<()>,
    next_id: AtomicU64,
}

impl std::fmt::Debug for CallStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallStream").finish_non_exhaustive()
    }
}

/// Cancels a call whose caller stopped waiting for it.
struct CancelOnDrop<'a> {
    session: &'a Session,
    id: u64,
    armed: bool,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed && self.session.take(self.id).is_some() && !self.session.closed.load(Ordering::Acquire) {
            let sent = self.session.write(cancel_frame(self.id)).is_ok();
            tracing::debug!(call_id = self.id, sent, "agent call cancelled on the call stream");
        }
    }
}

impl CallStream {
    /// The call stream over `connection` (opened at the first call).
    pub(super) fn new(connection: Arc<Connection>) -> Self {
        CallStream {
            connection,
            session: ArcSwapOption::empty(),
            opening: tokio::sync::Mutex::new(()),
            next_id: AtomicU64::new(1),
        }
    }

    /// The connection's epoch (see [`Connection::epoch`]).
    pub(super) fn epoch(&self) -> u64 {
        self.connection.epoch()
    }

    fn current(&self) -> Option<Arc<Session>> {
        self.session.load_full().filter(|s| !s.closed.load(Ordering::Acquire))
    }

    /// The open stream, or a new one.
    async fn session(&self) -> Result<Arc<Session>, TransportError> {
        if let Some(s) = self.current() {
            return Ok(s);
        }
        let _one_at_a_time = self.opening.lock().await;
        if let Some(s) = self.current() {
            return Ok(s);
        }
        let (open, _) = self.connection.get().await?;
        let request = http::Request::post(format!("http://agent{CALLS_PATH}"))
            .header(http::header::CONTENT_TYPE, "application/grpc")
            .header(http::header::TE, "trailers")
            .body(())
            .map_err(|e| TransportError::Encode(tonic::Status::internal(e.to_string())))?;
        let mut sender = open.sender.clone().ready().await.map_err(TransportError::Closed)?;
        let (response, send) = sender.send_request(request, false).map_err(TransportError::Closed)?;
        let session = Arc::new(Session {
            send: Mutex::new(send),
            pending: Mutex::new(Pending::default()),
            closed: AtomicBool::new(false),
            rearm: Notify::new(),
        });
        tokio::spawn(read_replies(Arc::clone(&session), response));
        tokio::spawn(expire_calls(Arc::clone(&session)));
        self.session.store(Some(Arc::clone(&session)));
        Ok(session)
    }

    /// Sends `call` on the stream and waits for its reply, until
    /// `deadline` at most (then DEADLINE_EXCEEDED, and the call is
    /// cancelled on the stream). Errors are gRPC statuses as a unary call
    /// gives them; a frame the connection refused carries a "not sent"
    /// [`TransportError`]. `sent` counts the call once its frame is handed
    /// to the connection.
    pub async fn call(
        &self,
        call: AgentCall,
        deadline: Instant,
        trace: Option<&opentelemetry::Context>,
        sent: &prometheus::IntCounter,
    ) -> Result<AgentReply, tonic::Status> {
        let session = match self.current() {
            Some(s) => s,
            // Opening the stream (connecting, perhaps) is bounded too.
            None => tokio::time::timeout_at(deadline, self.session())
                .await
                .map_err(|_| deadline_passed())?
                .map_err(not_sent)?,
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = encode_frame(id, &call, trace);
        let kind = kind_of(&call);
        drop(call);
        let (tx, rx) = oneshot::channel();
        let earliest = match session.pending.lock() {
            Ok(mut p) => {
                p.calls.insert(id, (tx, deadline));
                let earliest = p.armed.is_none_or(|at| deadline < at);
                if earliest {
                    p.armed = Some(deadline);
                }
                earliest
            }
            Err(_) => return Err(tonic::Status::internal("agent call table poisoned")),
        };
        if earliest {
            session.rearm.notify_one();
        }
        if let Err(e) = session.write(frame) {
            session.take(id);
            session.close("the connection refused a call");
            return Err(not_sent(TransportError::Closed(e)));
        }
        sent.inc();
        let mut guard = CancelOnDrop {
            session: &session,
            id,
            armed: true,
        };
        let result = rx.await;
        guard.armed = false;
        let reply = result.map_err(|_| tonic::Status::unavailable("agent call stream closed"))??;
        if kind_of_reply(&reply) != kind {
            return Err(tonic::Status::internal(
                "agent answered a call with a reply of another kind",
            ));
        }
        Ok(reply)
    }
}

fn kind_of(call: &AgentCall) -> u8 {
    match call {
        AgentCall::Request(_) => 0,
        AgentCall::Response(_) => 1,
        AgentCall::Chunk(_) => 2,
    }
}

fn kind_of_reply(reply: &AgentReply) -> u8 {
    match reply {
        AgentReply::Request(_) => 0,
        AgentReply::Response(_) => 1,
        AgentReply::Chunk(_) => 2,
    }
}

/// A status that [`TransportError::is_not_sent`] recognises.
fn not_sent(e: TransportError) -> tonic::Status {
    let mut status = tonic::Status::unavailable(e.to_string());
    status.set_source(Arc::new(e));
    status
}

/// One CallFrame with its gRPC message prefix.
pub fn encode_frame(id: u64, call: &AgentCall, trace: Option<&opentelemetry::Context>) -> Bytes {
    let (traceparent, tracestate) = trace.map(trace_headers).unwrap_or_default();
    let mut len = encoding::uint64::encoded_len(1, &id);
    len += match call {
        AgentCall::Request(r) => encoding::message::encoded_len(2, r),
        AgentCall::Response(r) => encoding::message::encoded_len(3, r),
        AgentCall::Chunk(c) => encoding::message::encoded_len(4, c),
    };
    if !traceparent.is_empty() {
        len += encoding::string::encoded_len(6, &traceparent);
    }
    if !tracestate.is_empty() {
        len += encoding::string::encoded_len(7, &tracestate);
    }
    let mut buf = BytesMut::with_capacity(5 + len);
    buf.put_u8(0);
    buf.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
    encoding::uint64::encode(1, &id, &mut buf);
    match call {
        AgentCall::Request(r) => encoding::message::encode(2, r, &mut buf),
        AgentCall::Response(r) => encoding::message::encode(3, r, &mut buf),
        AgentCall::Chunk(c) => encoding::message::encode(4, c, &mut buf),
    }
    if !traceparent.is_empty() {
        encoding::string::encode(6, &traceparent, &mut buf);
    }
    if !tracestate.is_empty() {
        encoding::string::encode(7, &tracestate, &mut buf);
    }
    buf.freeze()
}

fn cancel_frame(id: u64) -> Bytes {
    let frame = crate::proto::CallFrame {
        id,
        call: Some(crate::proto::call_frame::Call::Cancel(crate::proto::CancelCall {})),
        ..Default::default()
    };
    let len = frame.encoded_len();
    let mut buf = BytesMut::with_capacity(5 + len);
    buf.put_u8(0);
    buf.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
    // Encoding into a buffer with the room reserved cannot fail.
    let _ = frame.encode(&mut buf);
    buf.freeze()
}

fn trace_headers(cx: &opentelemetry::Context) -> (String, String) {
    let mut meta = tonic::metadata::MetadataMap::new();
    crate::telemetry::tracing::inject(cx, &mut meta);
    let get = |k: &str| {
        meta.get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    (get("traceparent"), get("tracestate"))
}

/// Largest reply frame accepted (as a unary reply).
const MAX_FRAME: usize = super::client::MAX_REPLY_BYTES;

/// Reads reply frames until the stream ends, handing each to its caller;
/// then closes the session.
async fn read_replies(session: Arc<Session>, response: h2::client::ResponseFuture) {
    let why = match response.await {
        Err(e) => format!("the agent refused the call stream: {e}"),
        Ok(resp) if resp.status() != http::StatusCode::OK => {
            format!("the agent answered the call stream with HTTP {}", resp.status())
        }
        Ok(resp) => {
            let mut body = resp.into_body();
            let mut buf = BytesMut::new();
            loop {
                match body.data().await {
                    Some(Ok(data)) => {
                        let _ = body.flow_control().release_capacity(data.len());
                        buf.extend_from_slice(&data);
                        if let Err(e) = dispatch(&session, &mut buf) {
                            break e;
                        }
                    }
                    Some(Err(e)) => break format!("{e}"),
                    None => {
                        break match body.trailers().await {
                            Ok(Some(t)) => format!(
                                "the agent ended it: grpc-status {} {}",
                                t.get("grpc-status").and_then(|v| v.to_str().ok()).unwrap_or("?"),
                                t.get("grpc-message").and_then(|v| v.to_str().ok()).unwrap_or("")
                            ),
                            _ => "the agent ended it".to_string(),
                        }
                    }
                }
            }
        }
    };
    tracing::debug!(reason = %why, "agent call stream closed");
    session.close(&why);
}

/// The stream's timer: fails each call still waiting at its deadline (the
/// agent enforces the deadline it was sent as well; this bounds the wait
/// when it does not) and cancels it on the stream. It sleeps until the
/// earliest deadline in flight, or until a call with an earlier one comes;
/// when it wakes it expires what is due and arms for the earliest left.
/// Calls that end first cost it nothing but, at worst, a wake-up that finds
/// nothing due. Ends with the stream.
async fn expire_calls(session: Arc<Session>) {
    loop {
        let now = Instant::now();
        let (due, next) = match session.pending.lock() {
            Ok(mut p) => {
                let due: Vec<(u64, Waiter)> = p
                    .calls
                    .extract_if(|_, (_, at)| *at <= now)
                    .map(|(id, (w, _))| (id, w))
                    .collect();
                p.armed = p.calls.values().map(|(_, at)| *at).min();
                (due, p.armed)
            }
            Err(_) => return,
        };
        let closed = session.closed.load(Ordering::Acquire);
        for (id, waiter) in due {
            let _ = waiter.send(Err(deadline_passed()));
            if !closed {
                let sent = session.write(cancel_frame(id)).is_ok();
                tracing::debug!(
                    call_id = id,
                    sent,
                    "agent call past its deadline, cancelled on the call stream"
                );
            }
        }
        if closed {
            return;
        }
        match next {
            Some(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = session.rearm.notified() => {}
                }
            }
            None => session.rearm.notified().await,
        }
    }
}

/// A call's end at its deadline, as a unary call's timeout gives it.
fn deadline_passed() -> tonic::Status {
    tonic::Status::deadline_exceeded("no reply from the agent by the call's deadline")
}

/// The next complete gRPC message in `buf` (its 5-byte prefix removed), or
/// `None` until more bytes come; an error for a compressed message or one
/// over [`MAX_FRAME`].
pub fn next_message(buf: &mut BytesMut) -> Result<Option<Bytes>, String> {
    if buf.len() < 5 {
        return Ok(None);
    }
    if buf[0] != 0 {
        return Err("compressed reply frame (not negotiated)".to_string());
    }
    let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    if len > MAX_FRAME {
        return Err(format!("reply frame of {len} bytes, over the {MAX_FRAME}-byte limit"));
    }
    if buf.len() < 5 + len {
        buf.reserve(5 + len - buf.len());
        return Ok(None);
    }
    buf.advance(5);
    Ok(Some(buf.split_to(len).freeze()))
}

/// Hands every complete frame in `buf` to its caller.
fn dispatch(session: &Session, buf: &mut BytesMut) -> Result<(), String> {
    while let Some(message) = next_message(buf)? {
        let frame = ReplyFrame::decode(message).map_err(|e| format!("undecodable reply frame: {e}"))?;
        let Some(waiter) = session.take(frame.id) else {
            // Cancelled, or an id never sent: nobody waits.
            continue;
        };
        let reply = match frame.reply {
            Some(Reply::Request(r)) => Ok(AgentReply::Request(r)),
            Some(Reply::Response(r)) => Ok(AgentReply::Response(r)),
            Some(Reply::Chunk(r)) => Ok(AgentReply::Chunk(r)),
            Some(Reply::Error(s)) => Err(tonic::Status::new(tonic::Code::from(s.code), s.message)),
            None => Err(tonic::Status::internal("reply frame without a reply")),
        };
        let _ = waiter.send(reply);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;
    use std::time::Duration;

    fn chunk_call(sequence: u64) -> AgentCall {
        let context = crate::wire::chunk_context(&Default::default(), &Default::default());
        AgentCall::Chunk(crate::wire::chunk_call(
            std::iter::empty(),
            &crate::wire::Chunk {
                request_id: "r-1",
                context: &context,
                sequence,
                framing: 0,
                events: &[],
                end_of_stream: false,
                states: &[],
                meta: &Default::default(),
            },
        ))
    }

    /// An agent that opens every call stream and never answers a call; the
    /// frames it reads go to `frames`.
    async fn silent_agent(
        listener: tokio::net::UnixListener,
        frames: tokio::sync::mpsc::UnboundedSender<crate::proto::CallFrame>,
    ) {
        let (io, _) = listener.accept().await.expect("accept");
        let mut conn = h2::server::handshake(io).await.expect("handshake");
        while let Some(Ok((request, mut respond))) = conn.accept().await {
            let open = respond.send_response(http::Response::new(()), false).expect("headers");
            let frames = frames.clone();
            tokio::spawn(async move {
                let _open = open;
                let mut body = request.into_body();
                let mut buf = BytesMut::new();
                while let Some(Ok(data)) = body.data().await {
                    let _ = body.flow_control().release_capacity(data.len());
                    buf.extend_from_slice(&data);
                    while let Some(message) = next_message(&mut buf).expect("a call frame's prefix") {
                        let frame = crate::proto::CallFrame::decode(message).expect("a call frame");
                        let _ = frames.send(frame);
                    }
                }
            });
        }
    }

    /// The stream's one timer bounds every call: a call with no reply fails
    /// with DEADLINE_EXCEEDED at its deadline, not before, and is cancelled
    /// on the stream. A call with an earlier deadline than those in flight
    /// re-arms the timer, and so does a call after the stream was idle.
    #[tokio::test]
    async fn a_call_with_no_reply_fails_at_its_deadline_and_is_cancelled() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("agent.sock");
        let listener = tokio::net::UnixListener::bind(&path).expect("bind");
        let (tx, mut frames) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(silent_agent(listener, tx));
        let uid = std::fs::metadata(&path).expect("the socket").uid();
        let (_, _, stream) =
            super::super::client::connect_lazy(&path, "silent", policy_net::ExpectedPeer { uid, gid: None });
        let sent = prometheus::IntCounter::new("sent", "calls sent").expect("counter");
        let call = |deadline: Instant| {
            let (stream, sent) = (&stream, &sent);
            async move {
                let result =
                    tokio::time::timeout(Duration::from_secs(5), stream.call(chunk_call(0), deadline, None, sent))
                        .await
                        .expect("the call ends at its deadline");
                (result.expect_err("the agent never answers"), Instant::now())
            }
        };
        let start = Instant::now();
        let (late, early) = (start + Duration::from_millis(600), start + Duration::from_millis(150));
        let ((late_err, late_end), (early_err, early_end)) = tokio::join!(call(late), async {
            // Once the first call is in flight, with the timer armed for it.
            tokio::time::sleep(Duration::from_millis(50)).await;
            call(early).await
        });
        for (err, end, deadline) in [(&late_err, late_end, late), (&early_err, early_end, early)] {
            assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{err}");
            assert!(end >= deadline, "a call failed before its deadline");
        }
        assert!(early_end < late, "the earlier deadline waited for the later one");
        // After an idle spell, a new call arms the timer again.
        let (err, end) = call(Instant::now() + Duration::from_millis(100)).await;
        assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{err}");
        assert!(end < Instant::now() + Duration::from_secs(1));
        // Three calls and three cancels reached the agent, each cancel
        // naming a call it got.
        let mut calls = Vec::new();
        let mut cancels = Vec::new();
        while calls.len() + cancels.len() < 6 {
            let frame = tokio::time::timeout(Duration::from_secs(5), frames.recv())
                .await
                .expect("a frame in time")
                .expect("the agent runs");
            match frame.call {
                Some(crate::proto::call_frame::Call::Cancel(_)) => cancels.push(frame.id),
                _ => calls.push(frame.id),
            }
        }
        calls.sort_unstable();
        cancels.sort_unstable();
        assert_eq!(calls.len(), 3);
        assert_eq!(calls, cancels);
        assert_eq!(sent.get(), 3);
    }

    #[test]
    fn a_frame_decodes_as_the_call_frame_the_agent_reads() {
        let call = chunk_call(3);
        let mut bytes = encode_frame(42, &call, None);
        assert_eq!(bytes[0], 0);
        let len = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
        bytes.advance(5);
        assert_eq!(bytes.len(), len);
        let frame = crate::proto::CallFrame::decode(bytes).expect("decodes");
        assert_eq!(frame.id, 42);
        match frame.call {
            Some(crate::proto::call_frame::Call::Chunk(c)) => {
                assert_eq!(c.request_id, "r-1");
                assert_eq!(c.sequence, 3);
            }
            other => panic!("wrong call: {other:?}"),
        }
    }

    #[test]
    fn cancel_frames_name_their_call() {
        let mut bytes = cancel_frame(7);
        bytes.advance(5);
        let frame = crate::proto::CallFrame::decode(bytes).expect("decodes");
        assert_eq!(frame.id, 7);
        assert!(matches!(frame.call, Some(crate::proto::call_frame::Call::Cancel(_))));
    }
}
