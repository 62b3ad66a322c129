//! Streamed chat completions through a real Envoy 1.40, the kernel binary,
//! the real `ratelimit-agent` (`tokenBasedRateLimit`) and `guardrail-agent`
//! (`auditLog`): the request is made to report its usage, the streamed usage
//! is charged, the usage-only chunk is hidden from a client that did not ask
//! for it, the next request over the budget gets 429, and each streamed
//! response is one line of the audit journal, whose chain verifies.

mod support;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::reference::verify_audit;
use support::sse_upstream::{openai_chunk as openai, read_all as body, Script};
use support::*;

const LIMIT: &str = "{tokens_per_minute: 1000, key: \"header:x-user\"}";

async fn stack() -> (Stack, PathBuf) {
    let b = Stack::builder();
    let audit = b.dir().join("audit.jsonl");
    let audit_path = format!("--audit-path={}", audit.display());
    let s = b
        .ref_agent("ratelimit", "ratelimit-agent", &[])
        .ref_agent("guardrail", "guardrail-agent", &[&audit_path, "--audit-fsync-ms=5"])
        .config(&format!(
            "  route_policies:
    - route_name: body
      request_policy_chain: [{{policy: tokenBasedRateLimit, params: {LIMIT}}}]
      response_policy_chain:
        - {{policy: tokenBasedRateLimit, params: {LIMIT}}}
        - {{policy: auditLog}}
"
        ))
        .sse_upstream()
        .start()
        .await;
    (s, audit)
}

async fn chat(s: &Stack, user: &str, script: &str, body: &serde_json::Value) -> reqwest::Response {
    post(s, "/body/v1/chat/completions", user, script, body).await
}

async fn post(s: &Stack, path: &str, user: &str, script: &str, body: &serde_json::Value) -> reqwest::Response {
    s.client
        .post(s.url(path))
        .header("x-user", user)
        .header("x-script", script)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("request")
}

/// The hex SHA-256 of `data`, by coreutils' `sha256sum`.
fn sha256(data: &[u8]) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sha256sum");
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The audit journal's lines, once it holds `n` (lines are written in batches).
async fn journal(path: &std::path::Path, n: usize) -> Vec<serde_json::Value> {
    let read = || {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect::<Vec<serde_json::Value>>()
    };
    until("audit lines written", Duration::from_secs(10), || async {
        read().len() >= n
    })
    .await;
    read()
}

fn usage(total: u64) -> String {
    let doc = serde_json::json!({"id": "c1", "object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": total - 10, "total_tokens": total}});
    format!("data: {doc}\n\n")
}

fn request(chars: usize, include_usage: Option<bool>) -> serde_json::Value {
    let mut doc =
        serde_json::json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "x".repeat(chars)}]});
    if let Some(on) = include_usage {
        doc["stream_options"] = serde_json::json!({"include_usage": on});
    }
    doc
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_usage_is_charged_and_hidden() {
    let (s, audit) = stack().await;
    let (hello, world, done) = (openai("Hello"), openai(" world"), "data: [DONE]\n\n".to_string());

    // A client that asked for usage gets the usage chunk, byte for byte.
    s.sse().script(
        "asked",
        Script::events(&[hello.clone(), world.clone(), usage(20), done.clone()], 20),
    );
    let r = chat(&s, "u2", "asked", &request(40, Some(true))).await;
    assert_eq!(r.status(), 200, "{}", s.diag());
    assert_eq!(r.headers().get("content-type").unwrap(), "text/event-stream");
    assert_eq!(body(r).await, format!("{hello}{world}{}{done}", usage(20)));
    let sent: serde_json::Value = serde_json::from_slice(s.sse().bodies().last().unwrap()).unwrap();
    assert_eq!(sent, request(40, Some(true)), "a request that asked is unchanged");

    // A client that did not ask: the upstream is asked for usage, the
    // client's stream has no usage chunk, and the 950 tokens are charged.
    s.sse().script(
        "usage",
        Script::events(&[hello.clone(), world.clone(), usage(950), done.clone()], 20),
    );
    let r = chat(&s, "u1", "usage", &request(40, None)).await;
    assert_eq!(r.status(), 200, "{}", s.diag());
    let out = body(r).await;
    assert_eq!(out, format!("{hello}{world}{done}"), "{}", s.diag());
    let sent: serde_json::Value = serde_json::from_slice(s.sse().bodies().last().unwrap()).unwrap();
    let mut expected = request(40, None);
    expected["stream_options"] = serde_json::json!({"include_usage": true});
    assert_eq!(sent, expected);

    // The audit journal has one line per streamed response, written at its
    // end, with the SHA-256 of what the client got; its chain verifies.
    let lines = journal(&audit, 2).await;
    assert_eq!(lines.len(), 2, "{lines:?}");
    let stream = &lines[1]["stream"];
    assert_eq!(stream["framing"], "sse");
    assert_eq!(stream["events"], 3, "the usage chunk was gone before auditLog");
    assert_eq!(stream["bytes"], out.len());
    assert_eq!(stream["sha256"], sha256(out.as_bytes()));
    // The charge's metadata reached the line (its value is redacted: `token` names a secret).
    assert!(lines[1]["metadata"].get("tokens_used").is_some(), "{}", lines[1]);
    let verify = verify_audit(&audit);
    assert!(
        verify.status.success(),
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );

    // 1000 - 950 = 50 tokens left: a 100-token prompt is over the budget
    // (without the streamed charge, 990 would be left); another key is not.
    let r = chat(&s, "u1", "usage", &request(400, None)).await;
    assert_eq!(r.status(), 429, "{}", s.diag());
    assert!(r.headers().get("retry-after").is_some());
    let r = chat(&s, "u3", "asked", &request(400, None)).await;
    assert_eq!(r.status(), 200);
    body(r).await;
    // An Anthropic-style stream: the request is left as it is, and input
    // (message_start) + output (message_delta) tokens are charged: 25 + 960
    // leave 1000 - 985 = 15, too few for a 100-token prompt.
    let anthropic = [
        (
            "message_start",
            serde_json::json!({"type": "message_start", "message": {"id": "m1", "usage": {"input_tokens": 25, "output_tokens": 1}}}),
        ),
        (
            "content_block_delta",
            serde_json::json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
        ),
        (
            "message_delta",
            serde_json::json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 960}}),
        ),
        ("message_stop", serde_json::json!({"type": "message_stop"})),
    ];
    let pieces: Vec<String> = anthropic
        .iter()
        .map(|(t, d)| format!("event: {t}\ndata: {d}\n\n"))
        .collect();
    s.sse().script("anthropic", Script::events(&pieces, 20));
    let r = post(&s, "/body/v1/messages", "u4", "anthropic", &request(40, None)).await;
    assert_eq!(r.status(), 200, "{}", s.diag());
    assert_eq!(body(r).await, pieces.concat(), "an Anthropic stream passes unchanged");
    let sent: serde_json::Value = serde_json::from_slice(s.sse().bodies().last().unwrap()).unwrap();
    assert_eq!(
        sent,
        request(40, None),
        "no stream_options for an Anthropic-style request"
    );
    let r = post(&s, "/body/v1/messages", "u4", "anthropic", &request(400, None)).await;
    assert_eq!(r.status(), 429, "{}", s.diag());

    // The responses were streamed through the policy, not buffered.
    assert!(
        s.kernel.metric("policy_kernel_stream_chunks_total{route=\"body\"}") > 0.0,
        "{}",
        s.diag()
    );
    assert_eq!(s.envoy.stat("http.ingress.ext_proc.streams_failed"), 0, "{}", s.diag());
}
