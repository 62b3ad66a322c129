//! `piiRedaction` on streamed bodies: values split across events, flushes,
//! untouched events, raw bodies.

use bytes::Bytes;

use super::*;
use policy_agents::proto;
use policy_agents::{CallInfo, FromParams, Metadata, Params, Phase, RequestView, ResponseView};

fn params() -> PiiParams {
    let p: std::collections::HashMap<String, String> = [("phases".to_string(), "[\"response\"]".to_string())].into();
    PiiParams::from_params(&Params::new(p)).unwrap()
}

/// Runs a stream through the policy call by call; returns the bytes out and
/// the last call's metadata.
fn run(framing: Framing, content_type: &str, calls: &[Vec<&str>]) -> (String, Vec<(String, String)>) {
    let request = proto::RequestData::default();
    let response = proto::ResponseData {
        headers: Some(proto::HttpHeaders {
            headers: vec![proto::HeaderValue::new("content-type", content_type)],
        }),
        status_code: 200,
        ..Default::default()
    };
    let meta = Metadata::new();
    let info = CallInfo::new("r", Phase::Response);
    let mut state = Vec::new();
    let mut out = String::new();
    let mut md = Vec::new();
    for (n, call) in calls.iter().enumerate() {
        let events: Vec<Bytes> = call.iter().map(|e| Bytes::from(e.to_string())).collect();
        let ctx = ChunkContext {
            request: RequestView::new(&request),
            response: ResponseView::new(&response),
            metadata: &meta,
            call: &info,
            sequence: n as u64,
            framing,
            events: &events,
            end_of_stream: n + 1 == calls.len(),
            state: &state,
        };
        let o = on_chunk(&params(), &ctx).unwrap();
        let sent = o.replacement().unwrap_or(&events);
        for e in sent {
            out.push_str(std::str::from_utf8(e).unwrap());
        }
        state = o.next_state().to_vec();
        md = o.metadata_set().to_vec();
    }
    (out, md)
}

fn openai(content: &str) -> String {
    let doc = serde_json::json!({"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": null}]});
    format!("data: {doc}\n\n")
}

/// The streamed text of an OpenAI-style stream, every event checked to be JSON.
fn text_of(stream: &str) -> String {
    let mut text = String::new();
    for ev in stream.split("\n\n").filter(|e| !e.is_empty()) {
        let data = sse::data(ev.as_bytes()).unwrap().into_owned();
        if data == "[DONE]" {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(&data).expect("every event stays JSON");
        if let Some(c) = v.pointer("/choices/0/delta/content").and_then(|c| c.as_str()) {
            text.push_str(c);
        }
        if let Some(c) = v.pointer("/delta/text").and_then(|c| c.as_str()) {
            text.push_str(c);
        }
    }
    text
}

#[test]
fn a_value_split_across_events_is_redacted() {
    let (a, b) = (openai("Mail me at alice.smi"), openai("th@example.com today"));
    let (out, md) = run(
        Framing::SseEvent,
        "text/event-stream",
        &[vec![&a], vec![&b], vec!["data: [DONE]\n\n"]],
    );
    assert_eq!(text_of(&out), "Mail me at [REDACTED:email] today");
    assert!(!out.contains("example.com"), "{out}");
    assert!(out.ends_with("data: [DONE]\n\n"));
    assert!(
        md.contains(&("pii_redacted_email".to_string(), "1".to_string())),
        "{md:?}"
    );
}

#[test]
fn a_phone_number_split_in_three_is_redacted_and_the_tail_flushed_at_the_end() {
    let calls = [vec![openai("call 555-")], vec![openai("867-")], vec![openai("5309")]];
    let calls: Vec<Vec<&str>> = calls.iter().map(|c| c.iter().map(String::as_str).collect()).collect();
    let (out, _) = run(Framing::SseEvent, "text/event-stream", &calls);
    assert_eq!(text_of(&out), "call [REDACTED:phone]");
}

#[test]
fn only_the_trailing_word_is_held_and_clean_events_pass_unchanged() {
    let a = openai("Hello there, friend");
    let role = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n";
    let (out, _) = run(
        Framing::SseEvent,
        "text/event-stream",
        &[vec![role, &a], vec!["data: [DONE]\n\n"]],
    );
    assert!(
        out.starts_with(role),
        "an event without text passes byte for byte: {out}"
    );
    assert!(out.contains("\"content\":\"Hello there, \""), "{out}");
    assert_eq!(text_of(&out), "Hello there, friend");
}

#[test]
fn finish_reason_flushes_the_choice() {
    let a = openai("reach me: 555-867-5309");
    let fin = "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";
    let (out, _) = run(Framing::SseEvent, "text/event-stream", &[vec![&a, fin]]);
    assert_eq!(text_of(&out), "reach me: [REDACTED:phone]");
    let last = out.split("\n\n").filter(|e| !e.is_empty()).last().unwrap();
    assert!(last.contains("\"finish_reason\":\"stop\""), "{last}");
}

#[test]
fn anthropic_text_deltas_are_redacted_and_flushed_before_the_block_stops() {
    let d = |t: &str| {
        let doc =
            serde_json::json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}});
        format!("event: content_block_delta\ndata: {doc}\n\n")
    };
    let (a, b) = (d("SSN 123-45-"), d("6789"));
    let stop = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n";
    let (out, _) = run(Framing::SseEvent, "text/event-stream", &[vec![&a], vec![&b, stop]]);
    assert_eq!(text_of(&out), "SSN [REDACTED:ssn]");
    assert!(out.ends_with(stop));
}

#[test]
fn raw_text_and_json_bodies() {
    let (out, _) = run(
        Framing::Raw,
        "text/plain",
        &[vec!["write to bob@exa"], vec!["mple.org now"]],
    );
    assert_eq!(out, "write to [REDACTED:email] now");
    let (out, _) = run(
        Framing::Raw,
        "application/json",
        &[vec!["{\"to\":\"bob@exa"], vec!["mple.org\",\"n\":5551234567}"]],
    );
    assert_eq!(out, "{\"to\":\"[REDACTED:email]\",\"n\":5551234567}");
}

#[test]
fn the_held_tail_is_bounded() {
    assert_eq!(hold_from("Hello world"), 6);
    assert_eq!(hold_from("call 555 123"), 5);
    assert_eq!(hold_from("end."), 0);
    let long = "x".repeat(1000);
    assert_eq!(long.len() - hold_from(&long), MAX_HOLD);
}

#[test]
fn a_flush_event_has_the_shape_of_the_streams_chunks() {
    let first = "data: {\"id\":\"c7\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"usage\":{\"total_tokens\":3},\"choices\":[{\"index\":0,\"delta\":{\"content\":\"dial 555-\"}}]}\n\n";
    let (out, _) = run(
        Framing::SseEvent,
        "text/event-stream",
        &[vec![first], vec!["data: [DONE]\n\n"]],
    );
    let flush = out
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .nth(1)
        .expect("a flush event before [DONE]");
    let v: serde_json::Value = serde_json::from_str(&sse::data(flush.as_bytes()).unwrap()).unwrap();
    assert_eq!(v["id"], "c7", "{flush}");
    assert_eq!(v["object"], "chat.completion.chunk");
    assert_eq!(v["model"], "m");
    assert!(v.get("usage").is_none(), "usage is not repeated: {flush}");
    assert_eq!(v["choices"][0]["delta"]["content"], "555-");
    assert!(out.ends_with("data: [DONE]\n\n"));
}

#[test]
fn the_flush_template_is_the_event_without_choices_and_usage() {
    let doc: Value =
        serde_json::from_str(r#"{"id":"c7","choices":[{"index":0}],"model":"m","usage":{"t":1},"created":5}"#).unwrap();
    let t = template(&doc).unwrap().expect("an object has a template");
    let back: Value = serde_json::from_str(t.get()).unwrap();
    assert_eq!(back, serde_json::json!({"id": "c7", "model": "m", "created": 5}));
    assert!(template(&Value::String("x".into())).unwrap().is_none());
}

#[test]
fn a2a_events_are_redacted_part_by_part() {
    let artifact = serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {"artifactUpdate": {
        "taskId": "t-555-1234", "artifact": {"artifactId": "a", "parts": [{"text": "done: write to bob@example.com"}]}}}});
    let status = serde_json::json!({"statusUpdate": {"taskId": "t", "status": {"state": "TASK_STATE_WORKING",
        "message": {"messageId": "m", "parts": [{"text": "step 1"}]}}}});
    let (a, b) = (format!("data: {artifact}\n\n"), format!("data: {status}\n\n"));
    let (out, md) = run(Framing::SseEvent, "text/event-stream", &[vec![&a, &b]]);
    assert!(out.contains("done: write to [REDACTED:email]"), "{out}");
    assert!(!out.contains("bob@example.com"), "{out}");
    assert!(out.contains("t-555-1234"), "ids are not parts: {out}");
    assert!(
        out.ends_with(&b),
        "an event without personal data passes byte for byte: {out}"
    );
    assert!(
        md.contains(&("pii_redacted_email".to_string(), "1".to_string())),
        "{md:?}"
    );
}
