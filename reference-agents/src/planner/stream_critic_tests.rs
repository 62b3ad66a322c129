//! `planCriticStream`: calls assembled from fragments, held back alone,
//! decided when complete; raw bodies held whole.

use bytes::Bytes;
use serde_json::json;

use super::*;
use crate::planner::calls::declared_tools;
use policy_agents::proto;
use policy_agents::{CallInfo, Metadata, Phase, RequestView, ResponseView};

/// What one call of the hook sent on.
struct Step {
    out: Vec<u8>,
    end: Option<(String, String)>,
    state_len: usize,
}

/// Runs a stream call by call; each call gets the events of one item.
fn run(params: &[(&str, &str)], framing: Framing, calls: &[Vec<Vec<u8>>]) -> (Vec<Step>, Vec<(String, String)>) {
    let policy = PlanCriticStream::new();
    let req = json!({"tools": [
        {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
        {"name": "search", "input_schema": {"type": "object"}}
    ]});
    policy.declared.put("r", declared_tools(&req).unwrap());
    let params: Params = params.iter().map(|(k, v)| (*k, *v)).collect();
    let request = proto::RequestData::default();
    let response = proto::ResponseData {
        status_code: 200,
        ..Default::default()
    };
    let meta = Metadata::new();
    let info = CallInfo::new("r", Phase::Response);
    let mut state = Vec::new();
    let mut steps = Vec::new();
    let mut md = Vec::new();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    for (n, call) in calls.iter().enumerate() {
        let events: Vec<Bytes> = call.iter().map(|e| Bytes::from(e.clone())).collect();
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
        let o = rt.block_on(policy.on_response_chunk(&params, &ctx)).unwrap();
        let sent = o.replacement().unwrap_or(&events);
        steps.push(Step {
            out: sent.iter().flat_map(|e| e.to_vec()).collect(),
            end: o.ending().cloned(),
            state_len: o.next_state().len(),
        });
        state = o.next_state().to_vec();
        md.extend(o.metadata_set().iter().cloned());
        if o.ending().is_some() {
            break;
        }
    }
    (steps, md)
}

fn ev(doc: Value) -> Vec<u8> {
    format!("data: {doc}\n\n").into_bytes()
}

fn text(t: &str) -> Vec<u8> {
    ev(json!({"id": "c", "choices": [{"index": 0, "delta": {"content": t}, "finish_reason": null}]}))
}

fn frag(first: Option<(&str, &str)>, args: &str) -> Vec<u8> {
    let mut d = json!({"index": 0, "function": {"arguments": args}});
    if let Some((id, name)) = first {
        d["id"] = json!(id);
        d["function"]["name"] = json!(name);
    }
    ev(json!({"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [d]}, "finish_reason": null}]}))
}

fn finish() -> Vec<u8> {
    ev(json!({"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}))
}

fn done() -> Vec<u8> {
    b"data: [DONE]\n\n".to_vec()
}

/// Text, then a call whose arguments come in 5 fragments, one event per call.
fn five(tool: &str, path: &str) -> Vec<Vec<Vec<u8>>> {
    let args = format!("{{\"path\": \"{path}\"}}");
    let cut = |i: usize| args.len() * i / 5..args.len() * (i + 1) / 5;
    let mut calls = vec![
        vec![text("Reading ")],
        vec![text("your notes.")],
        vec![frag(Some(("call_1", tool)), "")],
    ];
    for i in 0..5 {
        calls.push(vec![frag(None, &args[cut(i)])]);
    }
    calls.push(vec![finish()]);
    calls.push(vec![done()]);
    calls
}

fn meta<'a>(md: &'a [(String, String)], key: &str) -> Option<&'a str> {
    md.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

#[test]
fn an_allowed_call_in_five_fragments_passes_whole_and_text_is_not_delayed() {
    let calls = five("read_file", "/srv/data/notes.md");
    let (steps, md) = run(&[], Framing::SseEvent, &calls);
    // Text goes out in the call it came in.
    assert_eq!(steps[0].out, calls[0][0]);
    assert_eq!(steps[1].out, calls[1][0]);
    // The call's events are held until it is complete...
    for s in &steps[2..8] {
        assert!(s.out.is_empty());
    }
    // ... then go out, unchanged and in order, before the finish event.
    let expected: Vec<u8> = calls[2..9].iter().flatten().flatten().copied().collect();
    assert_eq!(steps[8].out, expected);
    assert_eq!(steps[9].out, done());
    assert_eq!(meta(&md, "plan.decision"), Some("pass"));
    assert_eq!(meta(&md, "plan.calls"), Some("1"));
}

#[test]
fn block_ends_the_stream_naming_the_call_and_the_check() {
    let calls = five("read_file", "/etc/shadow");
    let params = [(
        "constraints",
        r#"[{"tools": ["read_file"], "path_args": ["path"], "allowed_paths": ["/srv/data"]}]"#,
    )];
    let (steps, md) = run(&params, Framing::SseEvent, &calls);
    let last = steps.last().unwrap();
    let (reason, message) = last.end.clone().expect("ended");
    assert_eq!(reason, "plan_rejected");
    assert!(
        message.contains("read_file") && message.contains("argument_refused"),
        "{message}"
    );
    assert!(!message.contains("shadow"));
    let sent: Vec<u8> = steps.iter().flat_map(|s| s.out.clone()).collect();
    assert!(
        !String::from_utf8_lossy(&sent).contains("shadow"),
        "no fragment of the refused call went out"
    );
    assert_eq!(meta(&md, "plan.decision"), Some("block"));
}

#[test]
fn strip_drops_the_calls_events_and_makes_the_finish_plain() {
    let calls = five("delete_repo", "/srv/data/x");
    let (steps, md) = run(&[("on_violation", "strip")], Framing::SseEvent, &calls);
    let sent: Vec<u8> = steps.iter().flat_map(|s| s.out.clone()).collect();
    let sent = String::from_utf8(sent).unwrap();
    assert!(
        !sent.contains("delete_repo") && !sent.contains("tool_calls\":["),
        "{sent}"
    );
    assert!(
        sent.contains("Reading ") && sent.contains("\"finish_reason\":\"stop\""),
        "{sent}"
    );
    assert!(sent.ends_with("data: [DONE]\n\n"));
    assert_eq!(meta(&md, "plan.decision"), Some("strip"));
    assert_eq!(meta(&md, "plan.check"), Some("unknown_tool"));
}

#[test]
fn anthropic_tool_use_is_decided_at_its_block_stop() {
    let a = |d: Value| ev(d);
    let calls = vec![
        vec![a(
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        )],
        vec![a(
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}}),
        )],
        vec![a(json!({"type": "content_block_stop", "index": 0}))],
        vec![a(
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t", "name": "read_file", "input": {}}}),
        )],
        vec![a(
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"path\": "}}),
        )],
        vec![a(
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "7}"}}),
        )],
        vec![a(json!({"type": "content_block_stop", "index": 1}))],
        vec![a(
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}}),
        )],
        vec![a(json!({"type": "message_stop"}))],
    ];
    let (steps, md) = run(&[("on_violation", "strip")], Framing::SseEvent, &calls);
    for (i, s) in steps.iter().enumerate().take(3) {
        assert_eq!(s.out, calls[i][0], "text block events pass at once");
    }
    let sent = String::from_utf8(steps.iter().flat_map(|s| s.out.clone()).collect()).unwrap();
    assert!(
        !sent.contains("tool_use\",\"id") && !sent.contains("partial_json"),
        "{sent}"
    );
    assert!(sent.contains("end_turn"), "{sent}");
    assert_eq!(meta(&md, "plan.check"), Some("schema_mismatch"));
}

#[test]
fn hostile_fragments_get_a_verdict_and_the_state_stays_bounded() {
    // Invalid UTF-8 inside a fragment.
    let mut calls = five("read_file", "/srv/data/notes.md");
    let mut bad = frag(None, "X");
    let at = bad.iter().position(|&b| b == b'X').unwrap();
    bad[at] = 0xff;
    calls.insert(4, vec![bad]);
    let (steps, md) = run(&[("on_violation", "strip")], Framing::SseEvent, &calls);
    assert_eq!(meta(&md, "plan.check"), Some("invalid_arguments"));
    assert!(steps.iter().all(|s| !s.out.contains(&0xff)));
    // Huge argument strings in many fragments: refused as too large, the
    // state never near the kernel's 1 MiB.
    let chunk = "a".repeat(16 * 1024);
    let mut calls = vec![vec![frag(Some(("c", "search")), "{\"q\": \"")]];
    for _ in 0..64 {
        calls.push(vec![frag(None, &chunk)]);
    }
    calls.push(vec![finish()]);
    let (steps, md) = run(&[("on_violation", "strip")], Framing::SseEvent, &calls);
    assert_eq!(meta(&md, "plan.check"), Some("arguments_too_large"));
    assert!(steps.iter().all(|s| s.state_len < 512 * 1024), "state bounded");
    // Deep JSON in an event: not read, passed on.
    let deep = format!("data: {}{}\n\n", "[".repeat(10_000), "]".repeat(10_000)).into_bytes();
    let (steps, _) = run(&[], Framing::SseEvent, &[vec![deep.clone()]]);
    assert_eq!(steps[0].out, deep);
}

#[test]
fn raw_json_bodies_are_held_whole_and_decided_at_the_end() {
    let body =
        json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "nope", "arguments": "{}"}}
        ]}}]})
        .to_string()
        .into_bytes();
    let (a, b) = body.split_at(body.len() / 2);
    let (steps, md) = run(&[], Framing::Raw, &[vec![a.to_vec()], vec![b.to_vec()]]);
    assert!(steps[0].out.is_empty());
    let out: Value = serde_json::from_slice(&steps[1].out).unwrap();
    assert_eq!(out["reason"], "plan_rejected");
    assert_eq!(out["call"]["check"], "unknown_tool");
    assert_eq!(meta(&md, "plan.decision"), Some("block"));
}
