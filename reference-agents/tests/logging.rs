//! An agent whose stderr nobody reads keeps answering: the real
//! `example-agent` binary, with its stderr on a pipe that the test leaves
//! unread while the agent logs a warning per call.

/// The agents' test helpers, shared with the SDK's tests.
#[path = "../../agents/tests/common/mod.rs"]
mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_log_reader_does_not_stall_calls() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("agent.sock");
    let child = Command::new(env!("CARGO_BIN_EXE_example-agent"))
        .arg("--socket")
        .arg(&socket)
        .env("RUST_LOG", "warn")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn example-agent");
    // Killed when dropped, should the test fail.
    let mut spawned = Spawned { child, socket, dir };
    wait_for_socket(&spawned.socket).await;
    let mut agent = spawned.client().await;

    // An unknown policy fails, and the agent logs one warning (~200 bytes)
    // per call: far more than the pipe (64 KiB) and the held-back lines
    // (1 MiB) take.
    let calls = 8_000;
    for i in 0..calls {
        let call = request_call(&format!("r{i}"), vec![policy("nope", &[], "")]);
        let reply = tokio::time::timeout(Duration::from_secs(10), agent.execute_policy_request(call))
            .await
            .unwrap_or_else(|_| panic!("call {i} not answered in 10 s: the agent blocked on its stderr"))
            .expect("call answered");
        assert_eq!(immediate(&reply.into_inner()).map(|d| d.status_code), Some(500));
    }

    // Now read: every line that was held back arrives whole, then a note
    // with the number dropped; together with the lines of the last calls
    // (written just after their answers, so possibly after the note) they
    // account for every call. Read until they do, or 30 s.
    let mut stderr = spawned.child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut buf = vec![0; 1 << 16];
        while let Ok(n) = stderr.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let text = tokio::task::spawn_blocking(move || {
        let mut text = String::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(text.contains("log lines dropped") && accounted(&text) >= calls) {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(bytes) => text.push_str(std::str::from_utf8(&bytes).expect("utf-8")),
                Err(e) => panic!(
                    "{} of {calls} calls accounted for; read {} bytes ({e})",
                    accounted(&text),
                    text.len()
                ),
            }
        }
        text
    })
    .await
    .unwrap();
    let (notes, written): (Vec<&str>, Vec<&str>) = text.lines().partition(|l| l.contains("log lines dropped"));
    for note in &notes {
        assert!(note.contains(" WARN "), "{note}");
    }
    assert!(dropped(&text) > 0, "more than the backlog was logged");
    for l in &written {
        assert!(
            l.contains("policy failed") && l.ends_with("on_failure=Deny"),
            "a cut or foreign line: {l:?}"
        );
    }
    assert_eq!(
        written.len() + dropped(&text),
        calls,
        "every warning written or counted"
    );

    // SIGTERM: a clean exit.
    sigterm(&spawned.child);
    let status = wait_exit(&mut spawned.child, Duration::from_secs(15));
    assert!(status.success(), "exit {status}");
}

/// The lines dropped, as the notes in `text` count them.
fn dropped(text: &str) -> usize {
    text.lines()
        .filter(|l| l.contains("log lines dropped"))
        .map(|note| {
            note.rsplit_once("dropped=")
                .and_then(|(_, n)| n.parse::<usize>().ok())
                .unwrap_or_else(|| panic!("note without a count: {note}"))
        })
        .sum()
}

/// The calls `text` accounts for: whole warning lines, and those dropped.
fn accounted(text: &str) -> usize {
    let whole = text.lines().filter(|l| l.ends_with("on_failure=Deny")).count();
    whole + dropped(text)
}
