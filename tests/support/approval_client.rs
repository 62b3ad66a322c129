//! The official MCP SDKs' clients of the approvals tests
//! (`tests/mcp/ts/approval_client.mjs`, `tests/mcp/approval_client.py`),
//! driven line by line: a call that waits for a person, its retry, and the
//! completion notices that come meanwhile.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

use super::python::python;
use super::{reference, root};

/// An MCP client session (one of the SDK scripts), driven line by line.
pub struct Client {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    stderr: PathBuf,
    /// Notifications read while waiting for an outcome.
    notes: RefCell<VecDeque<Value>>,
}

impl Client {
    /// Starts the `kind` (`ts` or `python`) client on `url` as the bearer of
    /// `token`, with the script's `opts`; its stderr goes to a file in `dir`.
    pub fn start(kind: &str, url: &str, token: &str, opts: Value, dir: &Path) -> Client {
        let headers = json!({"authorization": format!("Bearer {token}")});
        let stderr = dir.join(format!("client-{kind}-{}.log", reference::now()));
        let mut cmd = match kind {
            "ts" => {
                let ts = super::mcp_ts::ts_dir();
                let mut c = Command::new("node");
                c.current_dir(&ts).arg(ts.join("approval_client.mjs"));
                c
            }
            _ => {
                let mut c = Command::new(python());
                c.arg(root().join("tests/mcp/approval_client.py"));
                c
            }
        };
        let mut child = cmd
            .args([url, &headers.to_string(), &opts.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("client log"))
            .spawn()
            .expect("start the MCP client");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Client {
            child,
            stdin,
            lines,
            stderr,
            notes: RefCell::new(VecDeque::new()),
        }
    }

    /// The next line, within 60 s.
    fn line(&self) -> Value {
        let line = self.lines.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|_| {
            panic!(
                "no answer from the MCP client:\n{}",
                std::fs::read_to_string(&self.stderr).unwrap_or_default()
            )
        });
        serde_json::from_str(&line).unwrap_or_else(|_| json!({"raw": line}))
    }

    /// The next outcome line (notifications are kept for
    /// [`Client::notification`]), within 60 s.
    pub fn next(&self) -> Value {
        loop {
            let v = self.line();
            if v.get("notification").is_none() {
                return v;
            }
            self.notes.borrow_mut().push_back(v);
        }
    }

    /// The next notification the client printed, within 60 s (no call may
    /// be outstanding).
    pub fn notification(&self) -> Value {
        if let Some(n) = self.notes.borrow_mut().pop_front() {
            return n;
        }
        let v = self.line();
        assert!(
            v.get("notification").is_some(),
            "an outcome while waiting for a notification: {v}"
        );
        v
    }

    /// The notifications read so far and not taken.
    pub fn notes(&self) -> Vec<Value> {
        self.notes.borrow().iter().cloned().collect()
    }

    /// Sends `command` (`retry`, `call {...}`); its outcome.
    pub fn send(&mut self, command: &str) -> Value {
        writeln!(self.stdin, "{command}").expect("write to the MCP client");
        self.stdin.flush().expect("flush");
        self.next()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The approval id and URL of a call waiting for approval.
pub fn waiting(v: &Value) -> (String, String) {
    let e = &v["elicitation"];
    assert_eq!(v["code"], -32042, "not a URL elicitation: {v}");
    assert_eq!(e["mode"], "url", "{v}");
    (
        e["elicitationId"]
            .as_str()
            .unwrap_or_else(|| panic!("no id: {v}"))
            .to_string(),
        e["url"].as_str().unwrap_or_else(|| panic!("no url: {v}")).to_string(),
    )
}
