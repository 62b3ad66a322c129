use super::*;
use serde_json::json;

fn oa_delta(index: u64, id: Option<&str>, name: Option<&str>, args: &str) -> Value {
    let mut f = json!({"arguments": args});
    if let Some(n) = name {
        f["name"] = json!(n);
    }
    let mut d = json!({"index": index, "function": f});
    if let Some(i) = id {
        d["id"] = json!(i);
        d["type"] = json!("function");
    }
    json!({"choices": [{"index": 0, "delta": {"tool_calls": [d]}, "finish_reason": null}]})
}

fn finish() -> Value {
    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
}

#[test]
fn openai_arguments_in_five_fragments() {
    let mut a = Assembler::new();
    let fed = a
        .feed(&oa_delta(0, Some("call_1"), Some("read_file"), ""), true)
        .unwrap();
    assert_eq!(fed.touched, ["o0.0"]);
    for frag in ["{\"pa", "th\": ", "\"/srv/", "data/notes", ".md\"}"] {
        let fed = a.feed(&oa_delta(0, None, None, frag), true).unwrap();
        assert_eq!(fed.touched, ["o0.0"]);
        assert!(fed.completed.is_empty());
    }
    let fed = a.feed(&finish(), true).unwrap();
    assert!(fed.touched.is_empty());
    assert_eq!(fed.completed, ["o0.0"]);
    let call = a.call("o0.0").unwrap();
    assert_eq!(call.name, "read_file");
    assert_eq!(call.id.as_deref(), Some("call_1"));
    assert_eq!(
        call.arguments,
        Arguments::Text("{\"path\": \"/srv/data/notes.md\"}".into())
    );
    assert_eq!(call.location, Location::OpenAi { choice: 0, call: 0 });
    // Finished calls are not completed twice.
    assert!(a.finish().is_empty());
}

#[test]
fn a_new_call_index_completes_the_previous_one() {
    let mut a = Assembler::new();
    a.feed(&oa_delta(0, Some("a"), Some("search"), "{}"), true).unwrap();
    let fed = a.feed(&oa_delta(1, Some("b"), Some("read_file"), "{"), true).unwrap();
    assert_eq!(fed.completed, ["o0.0"]);
    assert_eq!(fed.touched, ["o0.1"]);
    assert_eq!(a.finish(), ["o0.1"]);
    assert_eq!(a.call("o0.1").unwrap().index, 1);
    assert_eq!(a.call("o0.1").unwrap().arguments, Arguments::Text("{".into()));
}

#[test]
fn content_events_touch_no_call() {
    let mut a = Assembler::new();
    let text = json!({"choices": [{"index": 0, "delta": {"content": "Hello"}, "finish_reason": null}]});
    assert_eq!(a.feed(&text, true).unwrap(), Fed::default());
    let text = json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}});
    assert_eq!(a.feed(&text, true).unwrap(), Fed::default());
    assert!(a.calls.is_empty());
}

#[test]
fn anthropic_tool_use_with_input_json_deltas() {
    let mut a = Assembler::new();
    let start = json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}}});
    assert_eq!(a.feed(&start, true).unwrap().touched, ["a1"]);
    for frag in ["{\"q\"", ": \"rust", "\"}"] {
        let d = json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": frag}});
        assert_eq!(a.feed(&d, true).unwrap().touched, ["a1"]);
    }
    let stop = json!({"type": "content_block_stop", "index": 1});
    let fed = a.feed(&stop, true).unwrap();
    assert_eq!(
        (fed.touched.as_slice(), fed.completed.as_slice()),
        (&["a1".to_string()][..], &["a1".to_string()][..])
    );
    let call = a.call("a1").unwrap();
    assert_eq!(call.arguments, Arguments::Text("{\"q\": \"rust\"}".into()));
    assert_eq!(call.location, Location::Anthropic { block: 1 });
    // A text block's stop is not a call's.
    let fed = a
        .feed(&json!({"type": "content_block_stop", "index": 0}), true)
        .unwrap();
    assert_eq!(fed, Fed::default());
}

#[test]
fn the_state_survives_a_round_trip() {
    let mut a = Assembler::new();
    a.feed(&oa_delta(0, Some("a"), Some("search"), "{\"q\":"), true)
        .unwrap();
    let text = serde_json::to_vec(&a).unwrap();
    let mut b: Assembler = serde_json::from_slice(&text).unwrap();
    b.feed(&oa_delta(0, None, None, "1}"), true).unwrap();
    assert_eq!(b.finish(), ["o0.0"]);
    assert_eq!(b.call("o0.0").unwrap().arguments, Arguments::Text("{\"q\":1}".into()));
}

#[test]
fn hostile_streams_end_in_a_verdict_not_a_panic() {
    // Huge argument fragments: dropped, the call marked too large.
    let mut a = Assembler::new();
    let big = "x".repeat(MAX_ARGUMENTS_BYTES / 2 + 1);
    a.feed(&oa_delta(0, Some("a"), Some("search"), &big), true).unwrap();
    a.feed(&oa_delta(0, None, None, &big), true).unwrap();
    a.feed(&oa_delta(0, None, None, "more"), true).unwrap();
    assert!(a.calls["o0.0"].args.is_empty());
    assert_eq!(a.call("o0.0").unwrap().arguments, Arguments::TooLarge);
    // Invalid UTF-8 in a fragment taints the call.
    let mut a = Assembler::new();
    a.feed(&oa_delta(0, Some("a"), Some("search"), "{\"q\": \"\u{fffd}\"}"), false)
        .unwrap();
    assert_eq!(a.call("o0.0").unwrap().arguments, Arguments::NotUtf8);
    // Too many calls.
    let mut a = Assembler::new();
    let mut err = None;
    for i in 0..=MAX_CALLS as u64 {
        if let Err(e) = a.feed(&oa_delta(i, Some("x"), Some("search"), "{}"), true) {
            err = Some(e);
        }
    }
    assert_eq!(err, Some(AssembleError::TooManyCalls));
    // Odd shapes: wrong types everywhere.
    let mut a = Assembler::new();
    for doc in [
        json!({"choices": 3}),
        json!({"choices": [{"delta": {"tool_calls": [{"index": "x", "function": {"name": 5, "arguments": {"a": 1}}}]}}]}),
        json!({"choices": [{"delta": {"tool_calls": "no"}, "finish_reason": 1}]}),
        json!({"type": "content_block_start", "index": -1, "content_block": {"type": "tool_use", "name": ["x"]}}),
        json!({"type": "content_block_delta", "index": 99, "delta": {"type": "input_json_delta", "partial_json": "{"}}),
        json!(null),
        json!([1, 2]),
    ] {
        a.feed(&doc, true).unwrap();
    }
    for k in a.finish() {
        assert!(a.call(&k).is_some());
    }
}

proptest::proptest! {
    /// Arguments cut anywhere, in any number of fragments, assemble to the
    /// text the model sent.
    #[test]
    fn fragments_cut_anywhere_assemble_whole(args in "[ -~é😀]{0,80}", cuts in proptest::collection::vec(0usize..100, 0..8)) {
        let mut bounds: Vec<usize> = cuts
            .into_iter()
            .map(|c| c % (args.len() + 1))
            .filter(|&c| args.is_char_boundary(c))
            .collect();
        bounds.push(0);
        bounds.push(args.len());
        bounds.sort_unstable();
        bounds.dedup();
        let mut a = Assembler::new();
        a.feed(&oa_delta(0, Some("x"), Some("t"), ""), true).unwrap();
        for w in bounds.windows(2) {
            a.feed(&oa_delta(0, None, None, &args[w[0]..w[1]]), true).unwrap();
        }
        proptest::prop_assert_eq!(a.finish(), vec!["o0.0".to_string()]);
        let expected = if args.trim().is_empty() { Arguments::Missing } else { Arguments::Text(args.clone()) };
        proptest::prop_assert_eq!(a.call("o0.0").unwrap().arguments, expected);
    }
}
