//! The SDK's side of the call stream (`rpc Calls`), served in-process on a
//! current-thread runtime (`#[tokio::test]`), as an agent on one CPU runs:
//! there a call that ends at once is answered where its frame is read, and
//! a call that waits goes on as a task.

mod common;

use std::time::Duration;

use common::*;
use policy_agents::proto::{self, call_frame::Call, reply_frame::Reply};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// A request call of `id` running the probe policy `first` with `params`.
fn frame(id: u64, params: &[(&str, &str)]) -> proto::CallFrame {
    proto::CallFrame {
        id,
        call: Some(Call::Request(request_call(
            &format!("r{id}"),
            vec![policy("first", params, "")],
        ))),
        ..Default::default()
    }
}

/// Opens the call stream; frames sent on the returned sender go out.
async fn open(agent: &TestAgent) -> (mpsc::Sender<proto::CallFrame>, tonic::Streaming<proto::ReplyFrame>) {
    let (tx, rx) = mpsc::channel(8);
    let replies = agent
        .client()
        .await
        .calls(ReceiverStream::new(rx))
        .await
        .expect("call stream")
        .into_inner();
    (tx, replies)
}

/// Asserts that `reply` answers call `id` with INTERNAL (its policy panicked).
fn assert_failed_internal(reply: &proto::ReplyFrame, id: u64) {
    assert_eq!(reply.id, id);
    assert!(
        matches!(&reply.reply, Some(Reply::Error(s)) if s.code == tonic::Code::Internal as i32),
        "call {id} was not failed with INTERNAL: {:?}",
        reply.reply
    );
}

async fn next(replies: &mut tonic::Streaming<proto::ReplyFrame>) -> proto::ReplyFrame {
    tokio::time::timeout(Duration::from_secs(5), replies.message())
        .await
        .expect("a reply within 5 s")
        .expect("the stream goes on")
        .expect("a reply, not the stream's end")
}

#[tokio::test]
async fn a_call_that_waits_holds_back_no_call_after_it() {
    let agent = TestAgent::start(probe_agent()).await;
    let (tx, mut replies) = open(&agent).await;
    tx.send(frame(1, &[("sleep_ms", "300")])).await.unwrap();
    tx.send(frame(2, &[])).await.unwrap();
    let first = next(&mut replies).await;
    assert_eq!(first.id, 2, "the call that ends at once is answered first");
    let second = next(&mut replies).await;
    assert_eq!(second.id, 1);
    for reply in [first, second] {
        let Some(Reply::Request(r)) = reply.reply else {
            panic!("call {} was not answered: {:?}", reply.id, reply.reply);
        };
        assert_eq!(set_headers(&r), vec![("x-first".to_string(), "first".to_string())]);
    }
}

#[tokio::test]
async fn a_panicking_policy_fails_its_call_and_not_the_stream() {
    let agent = TestAgent::start(probe_agent()).await;
    let (tx, mut replies) = open(&agent).await;
    tx.send(frame(1, &[("action", "panic")])).await.unwrap();
    tx.send(frame(2, &[])).await.unwrap();
    assert_failed_internal(&next(&mut replies).await, 1);
    let ok = next(&mut replies).await;
    assert_eq!(ok.id, 2);
    assert!(matches!(ok.reply, Some(Reply::Request(_))), "{:?}", ok.reply);
    // One that panics after it waited panics in its task: the same.
    tx.send(frame(3, &[("sleep_ms", "20"), ("action", "panic")]))
        .await
        .unwrap();
    assert_failed_internal(&next(&mut replies).await, 3);
}

/// On more threads every call is a task of its own; a panic there fails its
/// call too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_policy_fails_its_call_on_more_threads_too() {
    let agent = TestAgent::start(probe_agent()).await;
    let (tx, mut replies) = open(&agent).await;
    tx.send(frame(1, &[("action", "panic")])).await.unwrap();
    assert_failed_internal(&next(&mut replies).await, 1);
    tx.send(frame(2, &[])).await.unwrap();
    assert_eq!(next(&mut replies).await.id, 2);
}

/// The SDK decodes each distinct policy of a call once and keeps it: a
/// policy that does not decode fails its own call (and is not kept), and
/// the same policy with other params runs with those.
#[tokio::test]
async fn a_policy_that_does_not_decode_fails_its_call_and_not_the_stream() {
    use prost::Message;
    let agent = TestAgent::start(probe_agent()).await;
    let (tx, mut replies) = open(&agent).await;
    // Field 1 (the name) with bytes that are not UTF-8.
    let bad = proto::Policy::decode(&[0x0a, 0x02, 0xff, 0xfe][..]).expect("a well-framed field");
    for id in [1, 2] {
        let mut call = frame(id, &[]);
        if let Some(Call::Request(r)) = &mut call.call {
            r.policies = vec![bad.clone()];
        }
        tx.send(call).await.unwrap();
        let reply = next(&mut replies).await;
        assert_eq!(reply.id, id);
        assert!(
            matches!(&reply.reply, Some(Reply::Error(s)) if s.code == tonic::Code::InvalidArgument as i32 && s.message.contains("does not decode")),
            "call {id}: {:?}",
            reply.reply
        );
    }
    // The same policy, its params changed between calls.
    for (id, action, header) in [(3, "", "first"), (4, "deny", ""), (5, "", "first")] {
        tx.send(frame(id, &[("action", action)])).await.unwrap();
        let reply = next(&mut replies).await;
        let Some(Reply::Request(r)) = reply.reply else {
            panic!("call {id} was not answered: {:?}", reply.reply);
        };
        assert_eq!(immediate(&r).is_some(), action == "deny", "call {id}: {r:?}");
        if !header.is_empty() {
            assert_eq!(set_headers(&r), vec![("x-first".to_string(), header.to_string())]);
        }
    }
}
