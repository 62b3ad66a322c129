//! A stand-in identity provider for unit tests: a loopback HTTP/1.1 server
//! whose answers the test sets per path, and which counts requests per path.
//! (The end-to-end tests use a real OpenID provider.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// One canned answer.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: String,
    pub(crate) cache_control: Option<String>,
    pub(crate) delay: Duration,
}

impl Answer {
    pub(crate) fn json(body: impl Into<String>) -> Self {
        Answer {
            status: 200,
            body: body.into(),
            cache_control: None,
            delay: Duration::ZERO,
        }
    }

    pub(crate) fn max_age(mut self, secs: u64) -> Self {
        self.cache_control = Some(format!("max-age={secs}"));
        self
    }

    pub(crate) fn delayed(mut self, d: Duration) -> Self {
        self.delay = d;
        self
    }

    pub(crate) fn status(status: u16) -> Self {
        Answer {
            status,
            body: "{}".into(),
            cache_control: None,
            delay: Duration::ZERO,
        }
    }
}

#[derive(Default)]
struct State {
    answers: HashMap<String, Answer>,
    hits: HashMap<String, usize>,
    bodies: Vec<(String, String, String)>,
}

/// The stub; it stops when dropped.
pub(crate) struct StubIdp {
    pub(crate) base: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StubIdp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StubIdp {
    pub(crate) async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State::default()));
        let shared = Arc::clone(&state);
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let state = Arc::clone(&shared);
                tokio::spawn(async move {
                    let Some((path, auth, body)) = read_request(&mut conn).await else {
                        return;
                    };
                    let answer = {
                        let mut s = state.lock().unwrap();
                        *s.hits.entry(path.clone()).or_default() += 1;
                        s.bodies.push((path.clone(), auth, body));
                        s.answers.get(&path).cloned().unwrap_or(Answer::status(404))
                    };
                    tokio::time::sleep(answer.delay).await;
                    let cc = answer
                        .cache_control
                        .map(|c| format!("cache-control: {c}\r\n"))
                        .unwrap_or_default();
                    let head = format!(
                        "HTTP/1.1 {} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{cc}connection: close\r\n\r\n",
                        answer.status,
                        answer.body.len()
                    );
                    let _ = conn.write_all(head.as_bytes()).await;
                    let _ = conn.write_all(answer.body.as_bytes()).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        StubIdp { base, state, task }
    }

    pub(crate) fn set(&self, path: &str, answer: Answer) {
        self.state.lock().unwrap().answers.insert(path.to_string(), answer);
    }

    pub(crate) fn hits(&self, path: &str) -> usize {
        self.state.lock().unwrap().hits.get(path).copied().unwrap_or(0)
    }

    /// `(path, authorization header, body)` of every request so far.
    pub(crate) fn requests(&self) -> Vec<(String, String, String)> {
        self.state.lock().unwrap().bodies.clone()
    }
}

async fn read_request(conn: &mut tokio::net::TcpStream) -> Option<(String, String, String)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let path = head.split_whitespace().nth(1)?.to_string();
    let header = |name: &str| {
        head.lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_string())
            })
            .unwrap_or_default()
    };
    let len: usize = header("content-length").parse().unwrap_or(0);
    while buf.len() < head_end + len {
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = String::from_utf8_lossy(&buf[head_end..]).to_string();
    Some((path, header("authorization"), body))
}
