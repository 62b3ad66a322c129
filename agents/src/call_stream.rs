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
            let Some(mut work) = answer(
                Arc::clone(&shared),
                id,
                call,
                frame.traceparent,
                frame.tracestate,
                tx.clone(),
            ) else {
                continue;
            };
            // Nothing runs beside this task on a current-thread runtime: a
            // call that finishes at once (most do) is answered here, without
            // a task of its own; one that waits goes on waiting in a task
            // (whose first poll registers its waker).
            if one_thread && work.as_mut().now_or_never().is_some() {
                continue;
            }
            let task = tokio::spawn(work);
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

/// Call `id` as one boxed future that runs it and sends its reply; none
/// for a cancellation, which is no call.
///
/// One allocation holds the whole call, and the future is built where it
/// is boxed: a call's future is large (its policies' futures are in it),
/// and each move of it is a copy, so it is not moved after that. A panic
/// of its policy is answered INTERNAL: the kernel learns at once (not at
/// the call's deadline), and the stream and its other calls go on. Past
/// its deadline the call is dropped and answered DEADLINE_EXCEEDED.
fn answer(
    shared: Arc<Shared>,
    id: u64,
    call: Call,
    traceparent: String,
    tracestate: String,
    tx: Replies,
) -> Option<Pin<Box<impl Future<Output = ()> + Send>>> {
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
    Some(Box::pin(
        async move {
            let _guard = shared.drain.enter();
            let registry = &shared.registry;
            let work = AssertUnwindSafe(async move {
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
            })
            .catch_unwind();
            let outcome = match deadline {
                Some(at) => tokio::time::timeout_at(at, work).await.ok(),
                None => Some(work.await),
            };
            let reply = match outcome {
                Some(Ok(reply)) => reply,
                Some(Err(_)) => {
                    tracing::error!(call_id = id, "a policy panicked; its call fails");
                    error_reply(Code::Internal, "the policy panicked")
                }
                None => error_reply(Code::DeadlineExceeded, "deadline exceeded"),
            };
            // The stream is gone when this fails: the kernel no longer waits.
            let _ = tx.send(Ok(proto::ReplyFrame { id, reply: Some(reply) }));
        }
        .instrument(span),
    ))
}
