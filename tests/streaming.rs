//! Streamed responses through a real Envoy 1.40, the kernel binary, the real
//! guardrail-agent (`piiRedaction`) and `policy-test-agent` streaming
//! policies, from an upstream that streams server-sent events with pauses.

mod support;

use std::time::Duration;

use support::sse_upstream::{first_chunk, openai_chunk as openai, read_all as body, Script};
use support::*;

const STREAMER: &str = "policies:
  - {name: passStream, phases: response, requires_body: true, streams: true, chunk: {count: true}}
  - {name: upperStream, phases: response, requires_body: true, streams: true, chunk: {upper: true}}
  - {name: endStream, phases: response, requires_body: true, streams: true, chunk: {end_at: 1}}
  - {name: slowStream, phases: response, requires_body: true, streams: true, chunk: {delay_ms: 4000}}
  - {name: tagHeader, phases: response, response: [{set_header: {name: x-tagged, value: yes}}]}
";
const DYING: &str = "policies:
  - {name: dieStream, phases: response, requires_body: true, streams: true, chunk: {delay_ms: 300}}
";

const ROUTES: &str = "  route_policies:
    - route_name: resp
      response_policy_chain: [{policy: piiRedaction, params: {phases: [response]}}]
    - route_name: chain
      response_policy_chain: [{policy: tagHeader}, {policy: passStream}]
    - route_name: users
      response_policy_chain: [{policy: upperStream}]
    - route_name: deny
      response_policy_chain: [{policy: endStream}]
    - route_name: slow
      response_policy_chain: [{policy: slowStream}]
    - route_name: fail
      response_policy_chain: [{policy: dieStream, on_failure: deny}]
";

async fn stack() -> Stack {
    let b = Stack::builder();
    let audit = format!("--audit-path={}", b.dir().join("audit.jsonl").display());
    b.test_agent("streamer", STREAMER)
        .test_agent_with("dying", DYING, "      fail_open: false\n")
        .ref_agent("guardrail", "guardrail-agent", &[&audit])
        .config(ROUTES)
        .sse_upstream()
        .start()
        .await
}

async fn open(s: &Stack, path: &str, script: &str) -> reqwest::Response {
    s.client
        .get(s.url(path))
        .header("x-script", script)
        .send()
        .await
        .expect("request")
}

/// The streamed text of an OpenAI-style stream; every data event must be JSON.
fn text_of(stream: &str) -> String {
    let mut text = String::new();
    for ev in stream.split("\n\n").filter(|e| !e.trim().is_empty()) {
        let Some(data) = ev.lines().find_map(|l| l.strip_prefix("data: ")) else {
            continue;
        };
        if data == "[DONE]" {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(data).unwrap_or_else(|e| panic!("not JSON ({e}): {data}"));
        text.push_str(
            v.pointer("/choices/0/delta/content")
                .and_then(|c| c.as_str())
                .unwrap_or_default(),
        );
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_responses_through_envoy() {
    let mut s = stack().await;

    // First event first: the client has the first event while the upstream
    // still waits to send the second.
    let pieces = vec![
        openai("Hello there, "),
        openai("how are you? "),
        "data: [DONE]\n\n".to_string(),
    ];
    s.sse().script("gated", Script::events(&pieces, 0).gated());
    let mut r = open(&s, "/resp/chat", "gated").await;
    assert_eq!(r.status(), 200, "{}", s.diag_tail(30));
    assert_eq!(r.headers().get("content-type").unwrap(), "text/event-stream");
    let first = first_chunk(&mut r, "the first event arrives before the second is sent").await;
    assert_eq!(s.sse().sent(), 1, "the upstream sent only the first event");
    assert!(String::from_utf8_lossy(&first).contains("Hello there, "), "{first:?}");
    s.sse().release(10);
    let rest = body(r).await;
    assert_eq!(
        text_of(&format!("{}{rest}", String::from_utf8_lossy(&first))),
        "Hello there, how are you? "
    );

    // Unchanged bytes: events cut at odd places, in order, byte for byte,
    // when the streaming policy changes nothing; the header policy ran and
    // the state came back with every call (the count covers all events).
    let stream = format!(
        ": keep-alive\n\nid: 1\nevent: delta\ndata: {{\"a\":1}}\n\n{}{}data: [DONE]\n\n",
        openai("é ü 😀 split"),
        openai("second")
    );
    let cuts = [3, 17, 40, 41, 90, 91, 150];
    let mut pieces = Vec::new();
    let mut last = 0;
    for c in cuts.iter().copied().filter(|&c| c < stream.len()) {
        let c = (c..stream.len()).find(|&i| stream.is_char_boundary(i)).unwrap();
        pieces.push(stream.as_bytes()[last..c].to_vec());
        last = c;
    }
    pieces.push(stream.as_bytes()[last..].to_vec());
    s.sse()
        .script("cut", Script::raw("text/event-stream; charset=utf-8", pieces, 20));
    let r = open(&s, "/chain/x", "cut").await;
    assert_eq!(r.status(), 200, "{}", s.diag_tail(30));
    assert_eq!(r.headers().get("x-tagged").map(|v| v.to_str().unwrap()), Some("yes"));
    assert_eq!(body(r).await, stream, "{}", s.diag_tail(30));
    let calls: Vec<String> = s
        .test_agent("streamer")
        .events()
        .into_iter()
        .filter(|e| e.starts_with("end passStream"))
        .collect();
    assert!(calls.len() >= 2, "one call per group of complete events: {calls:?}");

    // A PII value split across two events is redacted; events stay JSON.
    let pieces = vec![
        openai("Write to alice.smi"),
        openai("th@example.com or call 555-867-"),
        openai("5309 today."),
        "data: [DONE]\n\n".into(),
    ];
    s.sse().script("pii", Script::events(&pieces, 30));
    let out = body(open(&s, "/resp/chat", "pii").await).await;
    assert_eq!(
        text_of(&out),
        "Write to [REDACTED:email] or call [REDACTED:phone] today.",
        "{out}"
    );
    assert!(!out.contains("example.com") && !out.contains("5309"), "{out}");

    // Events changed by a policy: every event upper-cased.
    s.sse()
        .script("plain", Script::events(&["data: abc\n\n", "data: def\n\n"], 10));
    assert_eq!(
        body(open(&s, "/users/x", "plain").await).await,
        "data: ABC\n\ndata: DEF\n\n"
    );

    // A policy ends the stream: what came before, then an error event, then
    // a clean close (the rest of the upstream's body is dropped).
    let pieces: Vec<String> = (0..5).map(|i| format!("data: {i}\n\n")).collect();
    s.sse().script("five", Script::events(&pieces, 50));
    let out = body(open(&s, "/deny/x", "five").await).await;
    assert!(out.starts_with("data: 0\n\n"), "{out}");
    assert!(
        out.ends_with("event: error\ndata: {\"error\":\"test_end\",\"message\":\"ended by endStream\"}\n\n"),
        "{out}"
    );
    assert!(!out.contains("data: 4"), "{out}");
    assert!(
        s.kernel
            .metric("policy_kernel_stream_terminations_total{reason=\"test_end\",route=\"deny\"}")
            >= 1.0
    );

    // A raw body cannot carry an error event: ending it resets the stream,
    // so the client sees an error, not a body that looks complete.
    let raw: Vec<Vec<u8>> = (0..5).map(|i| format!("part {i};").into_bytes()).collect();
    s.sse()
        .script("rawfive", Script::raw("application/octet-stream", raw, 50));
    let r = open(&s, "/deny/raw", "rawfive").await;
    assert_eq!(r.status(), 200);
    let got = tokio::time::timeout(Duration::from_secs(20), r.bytes())
        .await
        .expect("no hang");
    assert!(got.is_err(), "a cut raw body must not look complete: {got:?}");

    // A non-SSE chunked body passes through a streaming policy intact.
    let raw: Vec<Vec<u8>> = vec![b"{\"part\":".to_vec(), vec![0xc3], vec![0xa9, b'1'], b"}\n".to_vec()];
    s.sse()
        .script("raw", Script::raw("application/octet-stream", raw.clone(), 20));
    let r = open(&s, "/chain/raw", "raw").await;
    let bytes = r.bytes().await.unwrap();
    assert_eq!(bytes.to_vec(), raw.concat());

    // An agent killed mid-stream: `on_failure: deny` ends the stream with an
    // error event; the client is not left hanging.
    let pieces: Vec<String> = (0..6).map(|i| format!("data: {i}\n\n")).collect();
    s.sse().script("slowsix", Script::events(&pieces, 200));
    let r = open(&s, "/fail/x", "slowsix").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    s.test_agent_mut("dying").kill();
    let out = body(r).await;
    assert!(out.contains("event: error"), "{out}\n{}", s.diag_tail(30));
    assert!(!out.contains("data: 5"), "{out}");

    // The client goes away mid-stream: the agent call in flight is
    // cancelled, active streams go back to 0 and the kernel's fds stay flat.
    let kernel_pid = s.kernel.proc.pid();
    let before = load::open_fds(kernel_pid);
    for round in 0..3 {
        let pieces: Vec<String> = (0..4).map(|i| format!("data: {i}\n\n")).collect();
        s.sse().script("long", Script::events(&pieces, 100));
        let r = open(&s, "/slow/x", "long").await;
        assert_eq!(r.status(), 200);
        until("a slow chunk call in flight", Duration::from_secs(10), || async {
            s.test_agent("streamer")
                .events()
                .iter()
                .filter(|e| e.starts_with("start slowStream"))
                .count()
                > round
        })
        .await;
        drop(r);
        until("the chunk call cancelled", Duration::from_secs(10), || async {
            s.test_agent("streamer")
                .events()
                .iter()
                .filter(|e| e.starts_with("cancel slowStream"))
                .count()
                > round
        })
        .await;
    }
    until("no active streams", Duration::from_secs(10), || async {
        s.kernel.metric("policy_kernel_active_streams") == 0.0
    })
    .await;
    let after = load::open_fds(kernel_pid);
    assert!(after <= before + 2, "kernel fds {before} -> {after}");
    assert!(s.kernel.metric("policy_kernel_stream_chunks_total{route=\"resp\"}") > 0.0);
    assert_eq!(
        s.envoy.stat("http.ingress.ext_proc.streams_failed"),
        0,
        "{}",
        s.diag_tail(30)
    );
    assert!(s.envoy.stat("http.ingress.ext_proc.streams_started") > 0);
}
