//! The agent's side of the call stream (`rpc Calls`): calls arrive as
//! [`proto::CallFrame`]s on one long-lived stream, each runs as a task of its
//! own (a slow call holds back no other), and each reply goes back as a
//! [`proto::ReplyFrame`] with the call's id, as soon as it is ready.
//!
//! On a current-thread runtime (one CPU, or `--worker-threads 1`) a call is
//! first polled where it is read: one that ends at once, as most policies
//! do, is answered there without a task of its own (a task costs about 5%
//! of a call: benches/RESULTS.md); one that waits goes on as a task. No
//! other thread could run a task meanwhile, so this holds back nothing a
//! task would not.
//!
//! A policy that panics fails its call with INTERNAL at once, and the
//! stream and its other calls go on.
//!
//! A cancellation frame aborts its call's task; so does the end of the
//! stream (the kernel went away) for every call still running. A call's
//! `deadline_ms` bounds it as the gRPC deadline bounds a unary call: past
//! it, the call is dropped and answered DEADLINE_EXCEEDED.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;

use futures::{FutureExt, Stream};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tonic::{Code, Status, Streaming};
use tracing::Instrument;

use crate::context::{CallInfo, Phase};
use crate::proto::{self, call_frame::Call, reply_frame::Reply};
use crate::service::Shared;

/// The reply stream handed to tonic.
pub(crate) type ReplyStream = Pin<Box<dyn Stream<Item = Result<proto::ReplyFrame, Status>> + Send>>;

/// Where a call's reply goes.
type Replies = mpsc::UnboundedSender<Result<proto::ReplyFrame, Status>>;

/// Calls in flight tracked before finished ones are pruned.
const PRUNE_AT: usize = 256;

/// Serves one call stream: reads frames until the kernel closes it, runs
/// each call on a task of its own, and returns the stream of replies.
pub(crate) fn serve(shared: Arc<Shared>, mut inbound: Streaming<proto::CallFrame>) -> ReplyStream {
    let (tx, rx) = mpsc::unbounded_channel::<Result<proto::ReplyFrame, Status>>();
    let one_thread = tokio::runtime::Handle::current().runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread;
    tokio::spawn(async move {
        let mut running: HashMap<u64, AbortHandle> = HashMap::new();
        loop {
            let frame = match inbound.message().await {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(status) => {
                    tracing::debug!(error = %status, "call stream ended with an error");
                    break;
                }
            };
            let id = frame.id;
            let Some(call) = frame.call else {
                let _ = tx.send(Ok(error_frame(id, Code::InvalidArgument, "call frame without a call")));
                continue;
            };
            if let Call::Cancel(_) = call {
                if let Some(task) = running.remove(&id) {
                    if !task.is_finished() {
                        task.abort();
                        tracing::debug!(call_id = id, "call cancelled by the kernel");
                    }
                }
                continue;
            }
            if running.len() >= PRUNE_AT {
                running.retain(|_, task| !task.is_finished());
            }
            let work = contained(
                run(Arc::clone(&shared), id, call, frame.traceparent, frame.tracestate),
                id,
                tx.clone(),
            );
            let task = if one_thread {
                // Nothing runs beside this task: a call that finishes at
                // once (most do) is answered here, without a task of its
                // own; one that waits goes on waiting in a task (whose first
                // poll registers its waker).
                let mut work = Box::pin(work);
                if work.as_mut().now_or_never().is_some() {
                    continue;
                }
                tokio::spawn(work)
            } else {
                tokio::spawn(work)
            };
            running.insert(id, task.abort_handle());
        }
        // The kernel is gone (or closed the stream): nobody waits for these.
        let mut cancelled = 0usize;
        for task in running.into_values().filter(|t| !t.is_finished()) {
            task.abort();
            cancelled += 1;
        }
        if cancelled > 0 {
            tracing::debug!(cancelled, "call stream closed: its calls still running were cancelled");
        }
    });
    Box::pin(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
}

/// Runs call `id`'s `work` and sends its reply (none when it was aborted).
/// A panic of its policy is answered INTERNAL: the kernel learns at once
/// (not at the call's deadline), and the stream and its other calls go on.
async fn contained(work: impl Future<Output = Option<proto::ReplyFrame>> + Send, id: u64, tx: Replies) {
    let reply = match AssertUnwindSafe(work).catch_unwind().await {
        Ok(reply) => reply,
        Err(_) => {
            tracing::error!(call_id = id, "a policy panicked; its call fails");
            Some(error_frame(id, Code::Internal, "the policy panicked"))
        }
    };
    if let Some(reply) = reply {
        // The stream is gone when this fails: the kernel no longer waits.
        let _ = tx.send(Ok(reply));
    }
}

fn error_frame(id: u64, code: Code, message: &str) -> proto::ReplyFrame {
    proto::ReplyFrame {
        id,
        reply: Some(error_reply(code, message)),
    }
}

fn error_reply(code: Code, message: &str) -> Reply {
    Reply::Error(proto::CallStatus {
        code: code as i32,
        message: message.to_string(),
    })
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

/// Runs one call; its reply (none for a cancellation, which is no call).
async fn run(
    shared: Arc<Shared>,
    id: u64,
    call: Call,
    traceparent: String,
    tracestate: String,
) -> Option<proto::ReplyFrame> {
    let _guard = shared.drain.enter();
    let (request_id, deadline_ms, phase) = match &call {
        Call::Request(c) => (c.request_id.clone(), c.deadline_ms, Phase::Request),
        Call::Response(c) => (c.request_id.clone(), c.deadline_ms, Phase::Response),
        Call::Chunk(c) => (c.request_id.clone(), c.deadline_ms, Phase::Response),
        Call::Cancel(_) => return None,
    };
    let deadline = crate::service::deadline_of(deadline_ms);
    let info = CallInfo {
        request_id,
        phase,
        traceparent: non_empty(traceparent),
        tracestate: non_empty(tracestate),
        deadline,
    };
    let span = tracing::debug_span!("execute", call_id = id, request_id = %info.request_id);
    let registry = &shared.registry;
    // Boxed: the policies' futures are large, and a spawned task's future
    // is copied when it is spawned and again when it finishes; the task
    // itself stays small.
    let work = Box::pin(
        async move {
            let reply = match call {
                Call::Request(c) => crate::runner::execute_request(registry, c, info)
                    .await
                    .map(Reply::Request),
                Call::Response(c) => crate::runner::execute_response(registry, c, info)
                    .await
                    .map(Reply::Response),
                Call::Chunk(c) => crate::stream::execute_chunk(registry, c, info).await.map(Reply::Chunk),
                Call::Cancel(_) => Ok(Reply::Error(proto::CallStatus::default())),
            };
            // A call that cannot run (a policy that does not decode) is
            // answered with its status, as a unary call is.
            reply.unwrap_or_else(|status| error_reply(status.code(), status.message()))
        }
        .instrument(span),
    );
    let reply = match deadline {
        Some(at) => match tokio::time::timeout_at(at, work).await {
            Ok(reply) => proto::ReplyFrame { id, reply: Some(reply) },
            Err(_) => error_frame(id, Code::DeadlineExceeded, "deadline exceeded"),
        },
        None => proto::ReplyFrame {
            id,
            reply: Some(work.await),
        },
    };
    Some(reply)
}
