use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use super::*;
use crate::approvals::tests::{binding, decide, pending_id, terms, who};
use crate::approvals::{Approvals, GrantKind, Limits};

#[test]
fn the_flag_names_what_is_wrong() {
    let ok: RelaySpec = "127.0.0.1:9470=http://127.0.0.1:8000/".parse().unwrap();
    assert_eq!(ok.upstream, "http://127.0.0.1:8000");
    for (bad, says) in [
        ("127.0.0.1:9470", "LISTEN=UPSTREAM"),
        ("nowhere=http://127.0.0.1:8000", "address to listen on"),
        ("127.0.0.1:9470=ftp://h", "http:// or https://"),
        ("127.0.0.1:9470=http://h:1/mcp", "scheme, host and port only"),
        ("127.0.0.1:9470=not a url", "not a URL"),
    ] {
        let e = bad.parse::<RelaySpec>().unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn a_boundary_is_only_after_an_empty_line() {
    let mut b = Boundary::default();
    assert!(b.between_events(), "before anything");
    let mut steps = vec![];
    for chunk in [
        "id: 1\n",
        "data: {}",
        "\n",
        "\n",
        ": ping\r",
        "\n\r",
        "\n",
        "data: x\r\r",
    ] {
        b.feed(chunk.as_bytes());
        steps.push(b.between_events());
    }
    // A CR ends a line: ": ping\r\n\r" ends with an empty line, whether or not
    // an LF follows.
    assert_eq!(steps, [false, false, false, true, false, true, true, true]);
}

/// A server whose GET stream sends `first`, then waits for a line on the
/// returned channel to send each next piece; records the headers it got.
async fn upstream(first: &'static str) -> (String, mpsc::Sender<String>, tokio::sync::oneshot::Receiver<String>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (more, mut pieces) = mpsc::channel::<String>(8);
    let (got_tx, got) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        let mut r = BufReader::new(s);
        let mut head = String::new();
        loop {
            let mut line = String::new();
            r.read_line(&mut line).await.unwrap();
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let _ = got_tx.send(head);
        let mut s = r.into_inner();
        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nmcp-session-id: s-1\r\ntransfer-encoding: chunked\r\n\r\n")
            .await
            .unwrap();
        let chunk = |p: &str| format!("{:x}\r\n{p}\r\n", p.len());
        s.write_all(chunk(first).as_bytes()).await.unwrap();
        while let Some(p) = pieces.recv().await {
            if s.write_all(chunk(&p).as_bytes()).await.is_err() {
                return;
            }
        }
        let _ = s.write_all(b"0\r\n\r\n").await;
    });
    (format!("http://{addr}"), more, got)
}

async fn pending(a: &Approvals, session: &str, endpoint: &str) -> String {
    let args = json!({"path": endpoint});
    let mut b = binding(&args, Some(session));
    b.endpoint = endpoint.into();
    pending_id(&a.check(b, &args, "r", &terms()).await.unwrap())
}

async fn allow(a: &Approvals, id: &str) {
    a.decide(id, &who("bob", &["approver"]), decide(GrantKind::AllowOnce), None)
        .await
        .unwrap();
}

/// Reads the body of `r` until `want` has been seen (within 10 s).
async fn read_until(r: &mut reqwest::Response, seen: &mut String, want: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !seen.contains(want) {
        let chunk = tokio::time::timeout_at(deadline, r.chunk())
            .await
            .unwrap_or_else(|_| panic!("{want:?} never came; got:\n{seen}"))
            .unwrap();
        let chunk = chunk.unwrap_or_else(|| panic!("the stream ended before {want:?}; got:\n{seen}"));
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_is_told_between_the_servers_events_on_its_sessions_stream_only() {
    let approvals = Approvals::memory(Limits::default());
    let (up, more, got) = upstream("id: 7\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"").await;
    let listen = "127.0.0.1:0".parse().unwrap();
    let relay = serve(RelaySpec { listen, upstream: up }, Notices::new(approvals.clone()))
        .await
        .unwrap();
    let mut c = reqwest::Client::new()
        .get(format!("http://{relay}/mcp?x=1"))
        .header("host", "gw:10000")
        .header("mcp-session-id", "s-1")
        .header("last-event-id", "6")
        .header("authorization", "Bearer t")
        .header("proxy-connection", "keep-alive")
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(c.headers()["mcp-session-id"], "s-1");
    let mut seen = String::new();
    read_until(&mut c, &mut seen, "notifications/message").await;
    let head = got.await.unwrap();
    assert!(head.starts_with("GET /mcp?x=1 HTTP/1.1"), "{head}");
    for h in [
        "mcp-session-id: s-1",
        "last-event-id: 6",
        "authorization: bearer t",
        "host: gw:10000",
    ] {
        assert!(head.to_ascii_lowercase().contains(h), "{h} not relayed:\n{head}");
    }
    assert!(!head.to_ascii_lowercase().contains("proxy-connection"), "{head}");

    // Another session's and another endpoint's decisions are not told here;
    // this session's is, but not inside the server's unfinished event.
    let other = pending(&approvals, "s-2", "gw:10000/mcp").await;
    allow(&approvals, &other).await;
    let elsewhere = pending(&approvals, "s-1", "gw:10000/other").await;
    allow(&approvals, &elsewhere).await;
    let mine = pending(&approvals, "s-1", "gw:10000/mcp").await;
    allow(&approvals, &mine).await;
    more.send("\n\n".into()).await.unwrap();
    let notice = format!("{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/elicitation/complete\",\"params\":{{\"elicitationId\":\"{mine}\"}}}}");
    read_until(&mut c, &mut seen, &notice).await;
    let at = seen.find("event: message").unwrap();
    assert!(
        seen[..at].ends_with("notifications/message\"\n\n"),
        "the notice must come after the server's event ended:\n{seen}"
    );
    // The server's next event still comes, after the notice.
    more.send("data: {\"later\":true}\n\n".into()).await.unwrap();
    read_until(&mut c, &mut seen, "later").await;
    assert!(!seen.contains(&other) && !seen.contains(&elsewhere), "{seen}");
    assert_eq!(seen.matches("elicitation/complete").count(), 1, "{seen}");
}

#[tokio::test]
async fn other_methods_are_refused_and_an_unreachable_server_is_named() {
    let approvals = Approvals::memory(Limits::default());
    let dead = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let spec = RelaySpec {
        listen: "127.0.0.1:0".parse().unwrap(),
        upstream: format!("http://{dead}"),
    };
    let relay = serve(spec, Notices::new(approvals)).await.unwrap();
    for (req, status, says) in [
        (
            "POST /mcp HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            "405",
            "GET streams only",
        ),
        (
            "GET /mcp HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
            "502",
            "unreachable",
        ),
    ] {
        let mut c = TcpStream::connect(relay).await.unwrap();
        c.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).await.unwrap();
        assert!(
            out.starts_with(&format!("HTTP/1.1 {status}")) && out.contains(says),
            "{out}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewritten_path_is_matched_as_the_client_asked_for_it() {
    let approvals = Approvals::memory(Limits::default());
    let (up, _more, got) = upstream(": open\n\n").await;
    let listen = "127.0.0.1:0".parse().unwrap();
    let relay = serve(RelaySpec { listen, upstream: up }, Notices::new(approvals.clone()))
        .await
        .unwrap();
    // As Envoy sends it after `prefix_rewrite: /mcp` on `/mcp-bidi`.
    let mut c = reqwest::Client::new()
        .get(format!("http://{relay}/mcp"))
        .header("host", "gw")
        .header("x-envoy-original-path", "/mcp-bidi?x=1")
        .header("mcp-session-id", "s-9")
        .send()
        .await
        .unwrap();
    let mut seen = String::new();
    read_until(&mut c, &mut seen, ": open").await;
    assert!(got.await.unwrap().starts_with("GET /mcp HTTP/1.1"));
    let rewritten = pending(&approvals, "s-9", "gw/mcp").await;
    allow(&approvals, &rewritten).await;
    let asked = pending(&approvals, "s-9", "gw/mcp-bidi").await;
    allow(&approvals, &asked).await;
    read_until(&mut c, &mut seen, &asked).await;
    assert!(!seen.contains(&rewritten), "{seen}");
}
