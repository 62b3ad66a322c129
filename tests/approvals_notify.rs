//! End to end: approvers are told where they work, and a request nobody
//! decides is denied at expiry. Through a real Envoy, the kernel binary
//! and the real agents, with the official Python SDK as MCP server and
//! client (`tests/mcp/mrtr_*.py`, protocol 2026-07-28), and a local
//! receiver (`tests/notify/receiver.py`) that checks what it gets: the
//! webhook's HMAC-SHA256 signature, Slack's Block Kit with the official
//! `slack_sdk` models, the Teams Adaptive Card's shape.
//!
//! * A held call is announced to a signed webhook that fails twice (503)
//!   and then accepts, to a Slack and a Teams target; the decision and the
//!   run are announced too. Each event is accepted once, signed, with the
//!   page's link to the request and the arguments only redacted; the
//!   retries and deliveries are in the tool agent's metrics.
//! * With the receiver down, the held call is answered all the same and
//!   the failure is counted. The rule says `on_expiry: deny`: nobody
//!   decides, so the request is denied at expiry, and the MCP client's
//!   retry is refused with the rule's reason.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::jwt::jwt;
use support::mcp_2026::*;
use support::{free_port, http_get, port_from_file, sample, Proc};

struct Receiver {
    _proc: Proc,
    port: u16,
    log: PathBuf,
}

impl Receiver {
    fn start(dir: &Path, secret_file: &Path, fail_first: u32) -> Receiver {
        let port_file = dir.join("receiver.port");
        let log = dir.join("receiver.jsonl");
        let mut cmd = Command::new(support::python::python());
        cmd.arg(support::root().join("tests/notify/receiver.py"))
            .arg("--port-file")
            .arg(&port_file)
            .arg("--log")
            .arg(&log)
            .arg("--secret-file")
            .arg(secret_file)
            .arg("--fail-first")
            .arg(fail_first.to_string());
        let out = dir.join("receiver.log");
        let proc = Proc::spawn("receiver", &mut cmd, &out);
        let port = port_from_file(&port_file, Duration::from_secs(30), "receiver", &out);
        Receiver { _proc: proc, port, log }
    }

    fn lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The POSTs to `path` it accepted.
    fn accepted(&self, path: &str) -> Vec<Value> {
        self.lines()
            .into_iter()
            .filter(|l| l["path"] == path && l["status"] == 200)
            .collect()
    }

    /// Waits (60 s at most) until `path` accepted `event`.
    fn until(&self, path: &str, event: &str, diag: &dyn Fn() -> String) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(l) = self.accepted(path).into_iter().find(|l| l["event"] == event) {
                return l;
            }
            assert!(
                Instant::now() < deadline,
                "{path} never accepted {event}: {:#?}\n{}",
                self.lines(),
                diag()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The support's rules with the approve rule's `approval` extended by
/// `extra`.
fn rules(extra: Value) -> String {
    let mut v: Value = serde_json::from_str(RULES).expect("rules");
    if let (Some(a), Value::Object(x)) = (v[0]["approval"].as_object_mut(), extra) {
        a.extend(x);
    }
    v.to_string()
}

fn secret_file(dir: &Path) -> PathBuf {
    let f = dir.join("notify-secret");
    std::fs::write(&f, "a-webhook-secret-for-the-tests\n").unwrap();
    f
}

/// The metric `series` of the tool agent, once it is at least `want`
/// (polled, 60 s at most).
fn metric_at_least(port: u16, series: &str, want: f64, diag: &dyn Fn() -> String) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = sample(&http_get(port, "/metrics").1, series);
        if v >= want {
            return v;
        }
        assert!(Instant::now() < deadline, "{series} = {v}, wanted {want}\n{}", diag());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Alice's held `delete_file` of `path`: the client (waiting for `go` in
/// `wait`) and the approval's id.
fn held(e: &Env, wait: &Path, path: &str, n: usize) -> (Child, String) {
    let alice = jwt(SECRET, "alice", &["agent"]);
    let steps = json!([call("delete_file", json!({"path": path}))]);
    let mut child = e
        .client(
            Sdk::Python,
            &alice,
            &steps,
            &["--no-progress", "--url-wait", &wait.to_string_lossy()],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let url = next_url(wait, n, &mut child, &e.diag());
    let id = url.split("#id=").nth(1).unwrap_or_else(|| panic!("{url}")).to_string();
    (child, id)
}

fn finish(e: &Env, wait: &Path, child: Child, path: &str) -> Value {
    std::fs::write(wait.join("go"), b"").unwrap();
    let out = child.wait_with_output().unwrap();
    let steps = json!([call("delete_file", json!({"path": path}))]);
    parse(&out.stdout, &out.stderr, &steps, &e.diag()).remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_decisions_and_runs_are_announced_signed_once_each_in_every_format() {
    let metrics = free_port();
    let flag = format!("--metrics-addr=127.0.0.1:{metrics}");
    let e = start_with(Sdk::Python, &["--json"], &[&flag]).await;
    let secret = secret_file(&e.dir);
    let r = Receiver::start(&e.dir, &secret, 2);
    let base = format!("http://127.0.0.1:{}", r.port);
    let notify = json!({"notify": [
        {"url": format!("{base}/hook"), "secret_file": secret, "page": "https://approvals.example/approvals/page"},
        {"url": format!("{base}/slack"), "format": "slack", "events": ["requested", "decided"]},
        {"url": format!("{base}/teams"), "format": "teams", "events": ["requested"]},
    ]});
    e.s.reload(&e.s.kernel_body(&routes_with(&rules(notify), "example.com")))
        .await;
    let diag = || {
        format!(
            "{}\nreceiver: {}",
            e.diag(),
            std::fs::read_to_string(e.dir.join("receiver.log")).unwrap_or_default()
        )
    };
    let wait = e.dir.join("user");
    std::fs::create_dir_all(&wait).unwrap();

    // The path carries an e-mail address: the page's redaction hides it.
    let path = "/home/alice.smith@example.com/report.txt";
    let (child, id) = held(&e, &wait, path, 1);
    let requested = r.until("/hook", "approval.requested", &diag);
    let fails: Vec<Value> = r.lines().into_iter().filter(|l| l["status"] == 503).collect();
    assert_eq!(fails.len(), 2, "{fails:#?}");
    assert!(
        fails
            .iter()
            .all(|f| f["delivery"] == requested["delivery"] && f["signed"] == true),
        "the retries were not the same signed delivery: {fails:#?} {requested:#}"
    );
    let a = &requested["body"]["approval"];
    assert_eq!(a["id"], id.as_str());
    assert_eq!(a["target"], "delete_file");
    assert_eq!(a["principal"], "sub:alice");
    assert_eq!(a["state"], "pending");
    let preview = a["args_preview"].as_str().unwrap_or("");
    assert!(preview.contains("/home/[REDACTED"), "{preview}");
    assert_eq!(a["link"], format!("https://approvals.example/approvals/page#id={id}"));
    let slack = r.until("/slack", "approval.requested", &diag);
    assert!(
        slack["body"]["text"].as_str().unwrap_or("").contains("delete_file"),
        "{slack:#}"
    );
    let teams = r.until("/teams", "approval.requested", &diag);
    assert!(
        teams["body"].to_string().contains(&format!("/approvals/page#id={id}")),
        "{teams:#}"
    );

    let bob = jwt(SECRET, "bob", &["approver"]);
    let (status, body) = e
        .api(
            "POST",
            &format!("/approvals/{id}"),
            &bob,
            Some(json!({"grant": "allow_once"})),
        )
        .await;
    assert_eq!(status, 200, "{body}\n{}", diag());
    let got = finish(&e, &wait, child, path);
    assert_eq!(got["text"], format!("deleted {path}"), "{got}\n{}", diag());
    let decided = r.until("/hook", "approval.decided", &diag);
    assert_eq!(decided["body"]["approval"]["decision"]["by"], "sub:bob");
    assert_eq!(decided["body"]["approval"]["decision"]["grant"], "allow_once");
    r.until("/hook", "approval.consumed", &diag);
    r.until("/slack", "approval.decided", &diag);
    // The deliveries, once counted, are all there is: each event once.
    metric_at_least(
        metrics,
        "policy_agent_approval_notifications_total{format=\"webhook\",outcome=\"delivered\"}",
        3.0,
        &diag,
    );
    metric_at_least(
        metrics,
        "policy_agent_approval_notifications_total{format=\"slack\",outcome=\"delivered\"}",
        2.0,
        &diag,
    );
    let text = http_get(metrics, "/metrics").1;
    assert_eq!(
        sample(
            &text,
            "policy_agent_approval_notification_retries_total{format=\"webhook\"}"
        ),
        2.0
    );
    let hook = r.accepted("/hook");
    let mut events: Vec<&str> = hook.iter().map(|l| l["event"].as_str().unwrap_or("")).collect();
    events.sort_unstable();
    assert_eq!(
        events,
        ["approval.consumed", "approval.decided", "approval.requested"],
        "{hook:#?}"
    );
    assert!(hook.iter().all(|l| l["signed"] == true), "{hook:#?}");
    assert_eq!(r.accepted("/slack").len(), 2);
    assert_eq!(r.accepted("/teams").len(), 1);
    assert!(
        r.lines().iter().all(|l| l["status"] != 400 && l["status"] != 401),
        "a target refused what it got: {:#?}",
        r.lines()
    );
    let everything = std::fs::read_to_string(&r.log).unwrap();
    assert!(
        !everything.contains("alice.smith@example.com"),
        "a notification carried the raw arguments: {everything}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_receiver_holds_nothing_and_an_undecided_request_is_denied_at_expiry() {
    let metrics = free_port();
    let flag = format!("--metrics-addr=127.0.0.1:{metrics}");
    let e = start_with(Sdk::Python, &["--json"], &[&flag]).await;
    let secret = secret_file(&e.dir);
    // Nothing listens there.
    let dead = format!("http://127.0.0.1:{}/hook", free_port());
    let extra = json!({
        "ttl_s": 2,
        "on_expiry": "deny",
        "expiry_reason": "nobody was on call",
        "notify": [{"url": dead, "secret_file": secret}],
    });
    e.s.reload(&e.s.kernel_body(&routes_with(&rules(extra), "example.com")))
        .await;
    let diag = || e.diag();
    let wait = e.dir.join("user");
    std::fs::create_dir_all(&wait).unwrap();

    // The call is answered (held, with the page's URL) while the
    // notification cannot be delivered.
    let (child, id) = held(&e, &wait, "/srv/a", 1);
    let bob = jwt(SECRET, "bob", &["approver"]);
    // Nobody decides: denied at expiry, by the gateway, with the reason.
    let deadline = Instant::now() + Duration::from_secs(30);
    let a = loop {
        let (status, a) = e.api("GET", &format!("/approvals/{id}"), &bob, None).await;
        assert_eq!(status, 200, "{a}\n{}", diag());
        if a["state"] != "pending" {
            break a;
        }
        assert!(Instant::now() < deadline, "still pending: {a}\n{}", diag());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(a["state"], "denied", "{a}");
    assert_eq!(a["decision"]["by"], "expiry", "{a}");
    assert_eq!(a["decision"]["reason"], "nobody was on call", "{a}");
    let got = finish(&e, &wait, child, "/srv/a");
    assert_eq!(got["error"]["data"]["reason"], "approval_denied", "{got}\n{}", diag());
    assert_eq!(got["error"]["data"]["denial_reason"], "nobody was on call", "{got}");
    assert!(
        e.ran().iter().all(|(t, _)| t != "delete_file"),
        "the denied call ran\n{}",
        diag()
    );
    metric_at_least(metrics, "policy_agent_approvals_auto_denied_total", 1.0, &diag);
    // The requested and the decided event, each given up after its tries.
    metric_at_least(
        metrics,
        "policy_agent_approval_notifications_total{format=\"webhook\",outcome=\"failed\"}",
        2.0,
        &diag,
    );
}
