//! `auditLog` on streamed responses: one chained line at the end, with the
//! count, size and SHA-256 of the events.

use std::path::Path;

use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::super::{verify_journal, AuditLog, JournalOptions};
use policy_agents::testing::{TestCall, TestRequest, TestResponse};
use policy_agents::{
    CallInfo, ChunkContext, ChunkOutcome, Framing, Metadata, Phase, Policy, RequestView, ResponseView,
};
use policy_agents::{FromParams, Params};

fn params(log_body: bool) -> super::super::AuditParams {
    let p = [("log_response_body".to_string(), log_body.to_string())].into();
    super::super::AuditParams::from_params(&Params::new(p)).unwrap()
}

fn request() -> TestRequest {
    TestRequest::new("POST", "/v1/chat/completions?api_key=sekret")
        .header("authorization", "Bearer eyJ.secret.sig")
        .header("content-type", "application/json")
}

/// Streams `calls` through the policy; the outcome of each call.
async fn stream(log: &AuditLog, log_body: bool, framing: Framing, calls: &[Vec<Vec<u8>>]) -> Vec<ChunkOutcome> {
    let req = request();
    let resp = TestResponse::new(200).header("content-type", "text/event-stream");
    let mut meta = Metadata::new();
    meta.insert("consumer", "alice");
    let info = CallInfo::new("req-1", Phase::Response);
    let mut state = Vec::new();
    let mut outs = Vec::new();
    for (n, call) in calls.iter().enumerate() {
        let events: Vec<Bytes> = call.iter().map(|e| Bytes::from(e.clone())).collect();
        let ctx = ChunkContext {
            request: RequestView::new(req.data()),
            response: ResponseView::new(resp.data()),
            metadata: &meta,
            call: &info,
            sequence: n as u64,
            framing,
            events: &events,
            end_of_stream: n + 1 == calls.len(),
            state: &state,
        };
        let out = log.on_response_chunk(&params(log_body), &ctx).await.unwrap();
        assert_eq!(out.replacement(), None, "the events pass unchanged");
        state = out.next_state().to_vec();
        outs.push(out);
    }
    outs
}

fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn a_stream_is_one_chained_line_at_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::new(&path, JournalOptions::default());
    // A buffered line first: the streamed one continues its chain.
    let call = TestCall::new();
    call.response(&log, &request(), &TestResponse::new(201).body("{}"))
        .await
        .unwrap();

    let events: Vec<Vec<u8>> = vec![
        b"data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n".to_vec(),
        b"event: x\ndata: echo Bearer eyJ.secret.sig\n\n".to_vec(),
        "data: {\"choices\":[{\"delta\":{\"content\":\"l\u{f6}\"}}]}\n\n"
            .as_bytes()
            .to_vec(),
        b"data: [DONE]\n\n".to_vec(),
    ];
    let calls = vec![
        vec![events[0].clone()],
        vec![events[1].clone(), events[2].clone()],
        vec![events[3].clone()],
        vec![],
    ];
    let outs = stream(&log, true, Framing::SseEvent, &calls).await;
    log.sync_all().await.unwrap();
    // Only the last call writes, and says where.
    assert!(outs[..3].iter().all(|o| o.metadata_set().is_empty()));
    assert_eq!(outs[3].metadata_set(), &[("audit_seq".to_string(), "2".to_string())]);
    assert_eq!(verify_journal(&path).unwrap(), 2);

    let all = events.concat();
    let line = &lines(&path)[1];
    assert_eq!(line["stream"]["framing"], "sse");
    assert_eq!(line["stream"]["events"], 4);
    assert_eq!(line["stream"]["bytes"], all.len());
    assert_eq!(line["stream"]["sha256"], hex::encode(Sha256::digest(&all)));
    assert_eq!(line["status"], 200);
    assert_eq!(line["phase"], "response");
    assert_eq!(line["metadata"]["consumer"], "alice");
    assert_eq!(line["path"], "/v1/chat/completions?api_key=[REDACTED]");
    let body = line["response_body"].as_str().unwrap();
    assert_eq!(
        body,
        String::from_utf8(all)
            .unwrap()
            .replace("Bearer eyJ.secret.sig", "[REDACTED]")
    );
    assert!(line.get("response_body_truncated").is_none());
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains("eyJ.secret.sig") && !text.contains("sekret"), "{text}");
    log.on_shutdown().await;
}

#[tokio::test]
async fn a_long_raw_stream_keeps_a_cut_body_and_hashes_it_all() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::new(&path, JournalOptions::default());
    let chunk = vec![b'a'; 40 * 1024];
    let calls = vec![vec![chunk.clone()], vec![chunk.clone(), chunk.clone()]];
    stream(&log, true, Framing::Raw, &calls).await;
    // Without log_response_body, the state carries no body.
    let outs = stream(&log, false, Framing::Raw, &calls).await;
    assert!(outs[0].next_state().len() < 512, "{}", outs[0].next_state().len());
    log.sync_all().await.unwrap();
    assert_eq!(verify_journal(&path).unwrap(), 2);
    let all = chunk.repeat(3);
    let lines = lines(&path);
    assert_eq!(lines[0]["stream"]["framing"], "raw");
    assert_eq!(lines[0]["stream"]["events"], 3);
    assert_eq!(lines[0]["stream"]["bytes"], all.len());
    assert_eq!(lines[0]["stream"]["sha256"], hex::encode(Sha256::digest(&all)));
    assert_eq!(lines[0]["response_body"].as_str().unwrap().len(), super::MAX_BODY);
    assert_eq!(lines[0]["response_body_truncated"], true);
    assert!(lines[1].get("response_body").is_none());
    assert_eq!(lines[1]["stream"]["sha256"], lines[0]["stream"]["sha256"]);
    log.on_shutdown().await;
}

#[tokio::test]
async fn unreadable_state_is_an_error_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::new(&path, JournalOptions::default());
    let req = request();
    let resp = TestResponse::new(200);
    let meta = Metadata::new();
    let info = CallInfo::new("r", Phase::Response);
    let ctx = ChunkContext {
        request: RequestView::new(req.data()),
        response: ResponseView::new(resp.data()),
        metadata: &meta,
        call: &info,
        sequence: 1,
        framing: Framing::SseEvent,
        events: &[],
        end_of_stream: true,
        state: b"not json",
    };
    let err = log.on_response_chunk(&params(false), &ctx).await.unwrap_err();
    assert!(err.to_string().contains("stream state"), "{err}");
    assert!(!path.exists());
}
