//! `tokenBasedRateLimit` on streams: the request asks for usage, streamed
//! usage is read once (OpenAI, Anthropic, raw bodies), the usage-only chunk
//! is hidden from a client that did not ask for it.

use super::*;
use policy_agents::proto;
use policy_agents::{CallInfo, Metadata, Phase, RequestView, ResponseView};

#[test]
fn a_streaming_request_asks_for_usage_and_keeps_the_rest() {
    let body = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi \u00e9"}],"n":1}"#;
    let out = ask_for_usage(body).expect("changed");
    assert_eq!(
        std::str::from_utf8(&out).unwrap(),
        r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi \u00e9"}],"n":1,"stream_options":{"include_usage":true}}"#
    );
    // Other stream options are kept; a false include_usage is turned on.
    let body = br#"{"stream": true, "stream_options": {"x": 1, "include_usage": false}}"#;
    let out = ask_for_usage(body).expect("changed");
    assert_eq!(
        std::str::from_utf8(&out).unwrap(),
        r#"{"stream":true,"stream_options":{"x":1,"include_usage":true}}"#
    );
    let body = br#"{"stream":true,"stream_options":null}"#;
    assert_eq!(
        &ask_for_usage(body).unwrap()[..],
        br#"{"stream":true,"stream_options":{"include_usage":true}}"#
    );
    // Nothing to do: not streaming, already asked, not JSON, not an object.
    assert!(ask_for_usage(br#"{"stream":false}"#).is_none());
    assert!(ask_for_usage(br#"{"messages":[]}"#).is_none());
    assert!(ask_for_usage(br#"{"stream":true,"stream_options":{"include_usage":true}}"#).is_none());
    assert!(ask_for_usage(b"stream=true").is_none());
    assert!(ask_for_usage(b"[1]").is_none());
    assert!(ask_for_usage(br#"{"stream":true,"stream_options":7}"#).is_none());
}

fn openai(content: &str) -> String {
    let doc = serde_json::json!({"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": null}]});
    format!("data: {doc}\n\n")
}

const USAGE: &str = "data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":32,\"total_tokens\":42}}\n\n";

/// Runs calls through `read_chunk`: the bytes out and each call's charge.
fn run(framing: Framing, meta: &Metadata, calls: &[Vec<&str>]) -> (String, Vec<Option<u64>>) {
    let request = proto::RequestData::default();
    let response = proto::ResponseData::default();
    let info = CallInfo::new("r", Phase::Response);
    let mut state = Vec::new();
    let mut out = String::new();
    let mut charges = Vec::new();
    for (n, call) in calls.iter().enumerate() {
        let events: Vec<Bytes> = call.iter().map(|e| Bytes::from(e.to_string())).collect();
        let ctx = ChunkContext {
            request: RequestView::new(&request),
            response: ResponseView::new(&response),
            metadata: meta,
            call: &info,
            sequence: n as u64,
            framing,
            events: &events,
            end_of_stream: n + 1 == calls.len(),
            state: &state,
        };
        let read = read_chunk(&ctx).unwrap();
        for e in read.outcome.replacement().unwrap_or(&events) {
            out.push_str(std::str::from_utf8(e).unwrap());
        }
        state = read.outcome.next_state().to_vec();
        charges.push(read.charge);
    }
    (out, charges)
}

#[test]
fn openai_usage_is_charged_once_and_hidden_when_added() {
    let a = openai("Hello");
    let b = openai(" world");
    let calls = vec![vec![a.as_str()], vec![b.as_str(), USAGE], vec!["data: [DONE]\n\n"]];
    // The client asked for usage: every byte passes, the charge is made at the usage chunk.
    let (out, charges) = run(Framing::SseEvent, &Metadata::new(), &calls);
    assert_eq!(out, format!("{a}{b}{USAGE}data: [DONE]\n\n"));
    assert_eq!(charges, vec![None, Some(42), None]);
    // The kernel-side policy asked for it: the usage-only chunk is dropped.
    let mut meta = Metadata::new();
    meta.insert(USAGE_ADDED_KEY, "true");
    let (out, charges) = run(Framing::SseEvent, &meta, &calls);
    assert_eq!(out, format!("{a}{b}data: [DONE]\n\n"));
    assert_eq!(charges, vec![None, Some(42), None]);
    // A second usage report is not charged again; a chunk with text and usage is never dropped.
    let both = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n";
    let (out, charges) = run(Framing::SseEvent, &meta, &[vec![both], vec![USAGE]]);
    assert_eq!(out, both);
    assert_eq!(charges, vec![Some(7), None]);
    // No usage at all: no charge.
    let (_, charges) = run(Framing::SseEvent, &Metadata::new(), &[vec![a.as_str()], vec![]]);
    assert_eq!(charges, vec![None, None]);
}

#[test]
fn anthropic_usage_is_summed_and_charged_at_message_stop() {
    let start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n";
    let delta = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n";
    let mdelta = "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n";
    let stop = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    let (out, charges) = run(
        Framing::SseEvent,
        &Metadata::new(),
        &[vec![start, delta], vec![mdelta], vec![stop], vec![]],
    );
    assert_eq!(out, format!("{start}{delta}{mdelta}{stop}"));
    assert_eq!(charges, vec![None, None, Some(40), None]);
    // A stream cut before message_stop is charged at its end.
    let (_, charges) = run(Framing::SseEvent, &Metadata::new(), &[vec![start], vec![mdelta]]);
    assert_eq!(charges, vec![None, Some(40)]);
}

#[test]
fn raw_bodies_are_read_whole_at_the_end() {
    let (out, charges) = run(
        Framing::Raw,
        &Metadata::new(),
        &[vec!["{\"usage\":{\"total"], vec!["_tokens\":9}}"], vec![]],
    );
    assert_eq!(out, "{\"usage\":{\"total_tokens\":9}}");
    assert_eq!(charges, vec![None, None, Some(9)]);
    let big = "x".repeat(MAX_RAW + 1);
    let (_, charges) = run(Framing::Raw, &Metadata::new(), &[vec![big.as_str()], vec!["{}"]]);
    assert_eq!(charges, vec![None, None]);
}

#[test]
fn a_buffered_stream_loses_only_the_usage_chunk() {
    let a = openai("Hi");
    let body = format!("{a}{USAGE}data: [DONE]\n\n");
    assert_eq!(
        &strip_usage_events(body.as_bytes()).unwrap()[..],
        format!("{a}data: [DONE]\n\n").as_bytes()
    );
    assert!(strip_usage_events(a.as_bytes()).is_none());
}

#[tokio::test(start_paused = true)]
async fn streamed_usage_spends_the_budget_of_the_buffered_path() {
    use crate::ratelimit::{Backend, TokenBasedRateLimit};
    use policy_agents::testing::{TestCall, TestRequest};
    use policy_agents::{FromParams, Params, Policy};

    let policy = TokenBasedRateLimit::new(Backend::memory());
    let pairs = [("tokens_per_minute", "1000"), ("key", "header:x-user")];
    let call = TestCall::new().params(&pairs);
    let chat =
        serde_json::json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "x".repeat(40)}]});
    let req = TestRequest::new("POST", "/v1/chat/completions")
        .header("x-user", "u1")
        .body(chat.to_string());
    let first = call.request(&policy, &req).await.unwrap();
    assert!(first.denial().is_none());
    assert_eq!(first.metadata_value(USAGE_ADDED_KEY), Some("true"));
    let sent: serde_json::Value = match first.body_set() {
        Some(policy_agents::NewBody { body, .. }) => serde_json::from_slice(body).unwrap(),
        None => panic!("the body asks for usage"),
    };
    assert_eq!(sent["stream_options"]["include_usage"], true);
    assert_eq!(first.metadata_value("tokens_estimated"), Some("10"));

    // The stream reports 900 tokens: 890 more than estimated.
    let mut meta = Metadata::new();
    meta.insert("tokens_estimated", "10");
    meta.insert(USAGE_ADDED_KEY, "true");
    let usage = "data: {\"choices\":[],\"usage\":{\"total_tokens\":900}}\n\n";
    let events = vec![Bytes::from(openai("Hi")), Bytes::from(usage)];
    let request = req.data().clone();
    let response = proto::ResponseData::default();
    let info = CallInfo::new("r", Phase::Response);
    let ctx = ChunkContext {
        request: RequestView::new(&request),
        response: ResponseView::new(&response),
        metadata: &meta,
        call: &info,
        sequence: 0,
        framing: Framing::SseEvent,
        events: &events,
        end_of_stream: false,
        state: &[],
    };
    let params = super::super::tokens::TokenParams::from_params(&Params::new(
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    ))
    .unwrap();
    let out = policy.on_response_chunk(&params, &ctx).await.unwrap();
    assert_eq!(out.replacement(), Some(&[Bytes::from(openai("Hi"))][..]));
    let md = out.metadata_set();
    assert!(md.contains(&("tokens_used".into(), "900".into())), "{md:?}");
    assert!(
        md.contains(&("ratelimit_tokens_remaining".into(), "100".into())),
        "{md:?}"
    );

    // Anthropic-style requests, and routes that turn it off, are left alone.
    let anthropic = TestRequest::new("POST", "/v1/messages")
        .header("x-user", "u9")
        .body(chat.to_string());
    let out = call.request(&policy, &anthropic).await.unwrap();
    assert!(
        out.body_set().is_none() && out.metadata_value(USAGE_ADDED_KEY).is_none(),
        "{out:?}"
    );
    let versioned = TestRequest::new("POST", "/llm")
        .header("x-user", "u9")
        .header("anthropic-version", "2023-06-01")
        .body(chat.to_string());
    assert!(call.request(&policy, &versioned).await.unwrap().body_set().is_none());
    let off = TestCall::new().params(&[("tokens_per_minute", "1000"), ("stream_usage", "false")]);
    assert!(off.request(&policy, &req).await.unwrap().body_set().is_none());
    assert!(TestCall::new()
        .params(&[("tokens_per_minute", "1000"), ("stream_usage", "maybe")])
        .request(&policy, &req)
        .await
        .is_err());

    // The next request over what is left gets 429.
    let small = call.request(&policy, &req).await.unwrap();
    assert!(small.denial().is_none(), "10 tokens fit in 100");
    let big =
        serde_json::json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "x".repeat(400)}]});
    let big = TestRequest::new("POST", "/v1/chat/completions")
        .header("x-user", "u1")
        .body(big.to_string());
    assert_eq!(
        call.request(&policy, &big).await.unwrap().denial().map(|d| d.status),
        Some(429)
    );
}
