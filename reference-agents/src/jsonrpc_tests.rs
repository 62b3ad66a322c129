use super::*;

fn err(body: &[u8]) -> BodyError {
    parse(body).unwrap_err()
}

#[test]
fn single_messages_of_each_kind() {
    let env = parse(
        br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/x"}}}"#,
    )
    .unwrap();
    assert!(!env.batch);
    let m = &env.messages[0];
    assert_eq!(m.kind, Kind::Request);
    assert_eq!(m.target(), Ok(Some("read_file")));
    assert_eq!(m.tool_arguments(), Some(&serde_json::json!({"path": "/x"})));
    let n = &parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .unwrap()
        .messages[0];
    assert_eq!((n.kind, n.id.clone()), (Kind::Notification, None));
    let r = &parse(br#"{"jsonrpc":"2.0","id":"s-1","result":{}}"#).unwrap().messages[0];
    assert_eq!(r.kind, Kind::Response);
    let read = &parse(br#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///a"}}"#)
        .unwrap()
        .messages[0];
    assert_eq!(read.target(), Ok(Some("file:///a")));
    let nameless = &parse(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#)
        .unwrap()
        .messages[0];
    assert!(nameless.target().is_err());
}

#[test]
fn batches_keep_order() {
    let env = parse(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/x"},{"jsonrpc":"2.0","id":2,"method":"tools/list"}]"#).unwrap();
    assert!(env.batch);
    assert_eq!(env.messages.len(), 3);
    let ids: Vec<&Value> = env.request_ids().collect();
    assert_eq!(ids, vec![&serde_json::json!(1), &serde_json::json!(2)]);
}

#[test]
fn not_json_is_a_parse_error() {
    for body in [&b""[..], b"   ", b"{", b"nope", &[0xff, 0xfe, b'{', b'}'][..]] {
        assert_eq!(err(body).code, PARSE_ERROR, "{body:?}");
    }
}

#[test]
fn json_that_is_not_jsonrpc_is_an_invalid_request() {
    for body in [
        &br#"[]"#[..],
        br#"42"#,
        br#"{"id":1,"method":"ping"}"#,
        br#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
        br#"{"jsonrpc":"2.0","id":1,"method":7}"#,
        br#"{"jsonrpc":"2.0","id":1,"method":""}"#,
        br#"{"jsonrpc":"2.0","id":1,"method":"x","params":"str"}"#,
        br#"{"jsonrpc":"2.0","id":{"a":1},"method":"x"}"#,
        br#"{"jsonrpc":"2.0","id":null,"method":"x"}"#,
        br#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#,
        br#"{"jsonrpc":"2.0","id":1}"#,
        br#"{"jsonrpc":"2.0","id":1,"result":{},"error":{}}"#,
        br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}, 3]"#,
    ] {
        assert_eq!(err(body).code, INVALID_REQUEST, "{}", String::from_utf8_lossy(body));
    }
}

#[test]
fn hostile_bodies_are_refused_cleanly() {
    // Deep nesting: beyond serde_json's recursion limit.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert_eq!(err(deep.as_bytes()).code, PARSE_ERROR);
    let deep_params = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"x","arguments":{}1{}}}}}"#,
        "[".repeat(5000),
        "]".repeat(5000)
    );
    assert_eq!(err(deep_params.as_bytes()).code, PARSE_ERROR);
    // Huge ids: a number beyond 64 bits, a long string.
    let big = format!(r#"{{"jsonrpc":"2.0","id":{},"method":"ping"}}"#, "9".repeat(400));
    assert!(parse(big.as_bytes()).is_err());
    let long = format!(
        r#"{{"jsonrpc":"2.0","id":"{}","method":"ping"}}"#,
        "x".repeat(MAX_ID_LEN + 1)
    );
    assert_eq!(err(long.as_bytes()).code, INVALID_REQUEST);
    let max = format!(r#"{{"jsonrpc":"2.0","id":{},"method":"ping"}}"#, u64::MAX);
    assert!(parse(max.as_bytes()).is_ok());
    // A batch of 10,000.
    let one = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let batch = format!("[{}]", vec![one; 10_000].join(","));
    let e = err(batch.as_bytes());
    assert_eq!(e.code, INVALID_REQUEST);
    assert!(e.message.contains("10000"), "{}", e.message);
    let ok = format!("[{}]", vec![one; MAX_BATCH].join(","));
    assert_eq!(parse(ok.as_bytes()).unwrap().messages.len(), MAX_BATCH);
    // Invalid UTF-8 inside a string.
    let mut bad = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":""#.to_vec();
    bad.extend_from_slice(&[0xc3, 0x28]);
    bad.extend_from_slice(br#""}}"#);
    assert_eq!(err(&bad).code, PARSE_ERROR);
}

#[test]
fn methods_are_classified() {
    assert_eq!(classify("initialize"), MethodClass::Open);
    assert_eq!(classify("server/discover"), MethodClass::Open);
    assert_eq!(classify("notifications/cancelled"), MethodClass::Open);
    assert_eq!(classify("tools/call"), MethodClass::Targeted("name"));
    assert_eq!(classify("resources/read"), MethodClass::Targeted("uri"));
    assert_eq!(classify("tools/list"), MethodClass::Plain);
}

proptest::proptest! {
    /// Any bytes either parse or give one of the two error codes; never a panic.
    #[test]
    fn any_bytes_are_handled(body in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
        match parse(&body) {
            Ok(env) => proptest::prop_assert!(!env.messages.is_empty()),
            Err(e) => proptest::prop_assert!(e.code == PARSE_ERROR || e.code == INVALID_REQUEST),
        }
    }
}

#[test]
fn errors_keep_the_requests_id_when_it_was_readable() {
    // JSON-RPC 2.0 section 5: the id of the request it answers, when it
    // could be read; null otherwise (what the official servers answer).
    assert_eq!(
        err(br#"{"jsonrpc":"1.0","id":7,"method":"x"}"#).id,
        serde_json::json!(7)
    );
    assert_eq!(err(br#"{"jsonrpc":"2.0","id":"a-1"}"#).id, serde_json::json!("a-1"));
    assert_eq!(
        err(br#"{"jsonrpc":"2.0","id":"q","method":5}"#).id,
        serde_json::json!("q")
    );
    assert_eq!(err(br#"{"jsonrpc":"1.0","id":true,"method":"x"}"#).id, Value::Null);
    assert_eq!(err(br#"{"jsonrpc":"1.0","id":1.5,"method":"x"}"#).id, Value::Null);
    assert_eq!(err(br#"{"jsonrpc":"2.0","id":1,"#).id, Value::Null);
    assert_eq!(err(br#"[{"jsonrpc":"1.0","id":3,"method":"x"}]"#).id, Value::Null);
}
