//! Tests of `auditLog`, the journal and its verification.

use super::*;
use policy_agents::testing::{TestCall, TestRequest, TestResponse};

fn request(i: usize) -> TestRequest {
    TestRequest::new("POST", &format!("/v1/items/{i}?api_key=sekret&page=2"))
        .header("authorization", "Bearer eyJ.secret.sig")
        .header("cookie", "sid=abc")
        .header("x-api-key", "k-123")
        .header("accept", "application/json")
        .client_ip("10.1.2.3")
}

async fn write_lines(log: &AuditLog, n: usize, call: &TestCall) {
    for i in 0..n {
        let resp = TestResponse::new(201)
            .header("set-cookie", "sid=new")
            .body(r#"{"ok":true}"#);
        call.response(log, &request(i), &resp).await.unwrap();
    }
    log.sync_all().await.unwrap();
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

#[tokio::test]
async fn lines_chain_verify_and_hide_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit/audit.jsonl");
    let log = AuditLog::new(&path, JournalOptions::default());
    let call = TestCall::new()
        .params(&[("log_response_body", "true")])
        .metadata("consumer", "alice");
    write_lines(&log, 5, &call).await;
    assert_eq!(verify_journal(&path).unwrap(), 5);

    let text = std::fs::read_to_string(&path).unwrap();
    for secret in ["eyJ.secret.sig", "sid=abc", "k-123", "sekret", "sid=new"] {
        assert!(!text.contains(secret), "{secret} leaked");
    }
    let first: serde_json::Value = serde_json::from_str(&lines(&path)[0]).unwrap();
    assert_eq!(first["hash_prev"], GENESIS);
    assert_eq!(first["status"], 201);
    assert_eq!(first["response_body"], r#"{"ok":true}"#);
    assert_eq!(first["metadata"]["consumer"], "alice");
    assert_eq!(first["path"], "/v1/items/0?api_key=[REDACTED]&page=2");
    log.on_shutdown().await;
}

#[tokio::test]
async fn tampered_line_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let log = AuditLog::new(&path, JournalOptions::default());
    write_lines(&log, 4, &TestCall::new()).await;
    log.on_shutdown().await;

    let original = lines(&path);
    let mut l = original.clone();
    l[2] = l[2].replace("\"status\":201", "\"status\":200");
    std::fs::write(&path, l.join("\n") + "\n").unwrap();
    match verify_journal(&path) {
        Err(AuditError::Broken { line, reason, .. }) => {
            assert_eq!(line, 3);
            assert!(reason.contains("altered"), "{reason}");
        }
        other => panic!("expected a broken chain, got {other:?}"),
    }

    let mut l = original;
    l.remove(1);
    std::fs::write(&path, l.join("\n") + "\n").unwrap();
    match verify_journal(&path) {
        Err(AuditError::Broken { line, reason, .. }) => {
            assert_eq!(line, 2);
            assert!(reason.contains("removed"), "{reason}");
        }
        other => panic!("expected a broken chain, got {other:?}"),
    }
}

#[tokio::test]
async fn reopening_continues_the_chain_and_cuts_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.jsonl");
    let log = AuditLog::new(&path, JournalOptions::default());
    write_lines(&log, 2, &TestCall::new()).await;
    log.on_shutdown().await;
    let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    std::io::Write::write_all(&mut f, b"{\"seq\":3,\"torn").unwrap();

    let log = AuditLog::new(
        &path,
        JournalOptions {
            fsync_every: 1,
            ..JournalOptions::default()
        },
    );
    write_lines(&log, 2, &TestCall::new()).await;
    log.on_shutdown().await;
    assert_eq!(verify_journal(&path).unwrap(), 4);
}

#[tokio::test]
async fn path_param_overrides_and_request_phase_logs() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path().join("default.jsonl"), JournalOptions::default());
    let call = TestCall::new().params(&[("path", "admin.jsonl")]);
    let out = call.request(&log, &request(1)).await.unwrap();
    assert_eq!(out.metadata_value("audit_seq"), Some("1"));
    log.sync_all().await.unwrap();
    let other = dir.path().join("admin.jsonl");
    assert_eq!(verify_journal(&other).unwrap(), 1);
    assert!(!dir.path().join("default.jsonl").exists());
    log.on_shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn concurrent_writers_keep_one_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.jsonl");
    let log = Arc::new(AuditLog::new(
        &path,
        JournalOptions {
            fsync_every: 8,
            fsync_interval: std::time::Duration::from_millis(5),
        },
    ));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let log = Arc::clone(&log);
        tasks.push(tokio::spawn(
            async move { write_lines(&log, 25, &TestCall::new()).await },
        ));
    }
    for t in tasks {
        t.await.unwrap();
    }
    log.on_shutdown().await;
    assert_eq!(verify_journal(&path).unwrap(), 100);
}

#[tokio::test]
async fn unwritable_journal_is_a_policy_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let log = AuditLog::new(file.join("audit.jsonl"), JournalOptions::default());
    assert!(TestCall::new().request(&log, &request(0)).await.is_err());
}
