//! Request bodies a policy needs, sent without `content-length` (chunked),
//! through a real Envoy: within `server.max_request_body_bytes` the policy
//! sees the whole body; past it the kernel answers
//! `payload_too_large_response` at once, nothing reaches the upstream, and no
//! ext_proc stream fails.

mod support;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use support::*;

const MIB: usize = 1024 * 1024;

const ROUTES: &str = "  route_policies:\n    - route_name: resp\n      request_policy_chain: [{policy: sizer}]\n";

const SCRIPT: &str = r#"policies:
  - name: sizer
    requires_body: true
    request:
      - set_header: {name: x-body-len, value: "${body_len}"}
"#;

/// Sends `size` bytes as a chunked POST (64 KiB chunks) on a raw HTTP/1.1
/// connection; returns the status line's code, the response (head and
/// body) and how long the answer took. The writer runs on its own thread,
/// so an early answer (and Envoy closing the connection) is read as soon as
/// it comes.
fn chunked_post(port: u16, path: &str, size: usize) -> (u16, String, Duration) {
    let started = Instant::now();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    let mut w = s.try_clone().expect("clone");
    let head = format!("POST {path} HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n");
    let writer = std::thread::spawn(move || -> std::io::Result<()> {
        w.write_all(head.as_bytes())?;
        let chunk = vec![b'a'; 64 * 1024];
        let mut left = size;
        while left > 0 {
            let n = left.min(chunk.len());
            write!(w, "{n:x}\r\n")?;
            w.write_all(&chunk[..n])?;
            w.write_all(b"\r\n")?;
            left -= n;
        }
        w.write_all(b"0\r\n\r\n")
    });
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let took = started.elapsed();
    let _ = writer.join();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, text, took)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_bodies_are_counted_and_refused_past_the_limit() {
    let s = Stack::builder()
        .test_agent("sizer", SCRIPT)
        .config(ROUTES)
        .start()
        .await;
    let (kernel, envoy, port) = (&s.kernel, &s.envoy, s.envoy.port);
    let calls = || kernel.metric("policy_kernel_requests_total{agent=\"sizer\",route=\"resp\",status=\"ok\"}");
    let diag = || s.diag();

    // Within the limit (1 MiB, the default): the policy sees every byte.
    let size = MIB - 1024;
    let (status, text, _) = tokio::task::spawn_blocking(move || chunked_post(port, "/resp/a", size))
        .await
        .unwrap();
    assert_eq!(status, 200, "{}\n{}", &text[..text.len().min(400)], diag());
    assert!(
        text.contains(&format!("\"x-body-len\":\"{size}\"")),
        "the policy did not see the whole body: {}",
        &text[..text.len().min(600)]
    );
    assert!(text.contains("\"transfer-encoding\"") || text.contains("\"content-length\""));
    assert_eq!(calls(), 1.0);

    // Past it: 413 from the kernel, whatever the size, without a hang.
    for (i, size) in [MIB + 1024, 8 * MIB].into_iter().enumerate() {
        let path = format!("/resp/big{i}");
        let (status, text, took) = tokio::task::spawn_blocking(move || chunked_post(port, &path, size))
            .await
            .unwrap();
        assert_eq!(
            status,
            413,
            "{size} bytes: {}\n{}",
            &text[..text.len().min(400)],
            diag()
        );
        assert!(text.contains("PAYLOAD_TOO_LARGE"), "not the kernel's answer: {text}");
        assert!(took < Duration::from_secs(15), "{size} bytes took {took:?}");
    }
    assert_eq!(calls(), 1.0, "an oversized body reached the policy");
    assert!(
        kernel.log_has("request body without content-length larger than"),
        "{}",
        kernel.log()
    );
    assert_eq!(
        kernel.metric(
            "policy_kernel_immediate_responses_total{reason=\"payload_too_large\",route=\"resp\",status=\"413\"}"
        ),
        2.0,
        "{}",
        kernel.admin_get("/metrics").1
    );
    assert_eq!(envoy.stat("http.ingress.ext_proc.streams_failed"), 0, "{}", diag());
    // The upstream saw only the first request.
    assert_eq!(envoy.stat("cluster.upstream.upstream_rq_total"), 1);
}

/// A lower `max_request_body_bytes` than Envoy's buffer limit holds for
/// chunked bodies too: the kernel counts what Envoy buffered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kernels_limit_applies_below_envoys_buffer_limit() {
    let s = Stack::builder()
        .test_agent("sizer", SCRIPT)
        .server("    max_request_body_bytes: 4096\n")
        .config(ROUTES)
        .start()
        .await;
    let (envoy, port) = (&s.envoy, s.envoy.port);
    let (status, text, _) = tokio::task::spawn_blocking(move || chunked_post(port, "/resp/a", 4096))
        .await
        .unwrap();
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("\"x-body-len\":\"4096\""), "{text}");
    let (status, text, _) = tokio::task::spawn_blocking(move || chunked_post(port, "/resp/b", 4097))
        .await
        .unwrap();
    assert_eq!(status, 413, "{text}");
    assert_eq!(envoy.stat("http.ingress.ext_proc.streams_failed"), 0);
}
