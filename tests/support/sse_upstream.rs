//! An upstream that streams a scripted body in pieces, with pauses, as LLM
//! APIs stream server-sent events. The script is picked by the request's
//! `x-script` header. A gated script sends its first piece, then waits for
//! [`SseUpstream::release`] before each further one, so a test can prove
//! that the client got the first piece before the upstream sent the second.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::StreamBody;
use hyper::body::Frame;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::sync::Semaphore;

/// One scripted response.
#[derive(Clone)]
pub struct Script {
    /// `content-type` of the response.
    pub content_type: &'static str,
    /// The body, in the pieces it is written in.
    pub pieces: Vec<Vec<u8>>,
    /// Pause before each piece after the first.
    pub pause: Duration,
    /// Wait for a release before each piece after the first.
    pub gated: bool,
}

impl Script {
    /// One JSON body, at once.
    pub fn json(body: &[u8]) -> Self {
        Self {
            content_type: "application/json",
            pieces: vec![body.to_vec()],
            pause: Duration::ZERO,
            gated: false,
        }
    }

    /// An event stream of `pieces`, `pause_ms` apart.
    pub fn events<S: AsRef<[u8]>>(pieces: &[S], pause_ms: u64) -> Self {
        Self {
            content_type: "text/event-stream",
            pieces: pieces.iter().map(|p| p.as_ref().to_vec()).collect(),
            pause: Duration::from_millis(pause_ms),
            gated: false,
        }
    }

    /// `pieces` of `content_type`, `pause_ms` apart.
    pub fn raw(content_type: &'static str, pieces: Vec<Vec<u8>>, pause_ms: u64) -> Self {
        Self {
            content_type,
            pieces,
            pause: Duration::from_millis(pause_ms),
            gated: false,
        }
    }

    /// Each piece after the first waits for a release.
    pub fn gated(mut self) -> Self {
        self.gated = true;
        self
    }
}

/// One OpenAI-style chunk event carrying `content`.
pub fn openai_chunk(content: &str) -> String {
    let doc = serde_json::json!({"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": null}]});
    format!("data: {doc}\n\n")
}

/// The first piece of a body, within 10 s (`what` names the wait).
pub async fn first_chunk(r: &mut reqwest::Response, what: &str) -> Bytes {
    tokio::time::timeout(Duration::from_secs(10), r.chunk())
        .await
        .expect(what)
        .unwrap()
        .unwrap()
}

/// Reads the whole body, within 20 s.
pub async fn read_all(mut r: reqwest::Response) -> String {
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while let Some(c) = tokio::time::timeout_at(deadline.into(), r.chunk())
        .await
        .expect("the stream ends, it does not hang")
        .expect("body")
    {
        out.extend_from_slice(&c);
    }
    String::from_utf8(out).expect("utf-8")
}

struct Shared {
    scripts: Mutex<HashMap<String, Script>>,
    gate: Semaphore,
    /// Pieces written, over all responses.
    sent: AtomicUsize,
    /// The body of each request received, in order.
    bodies: Mutex<Vec<Vec<u8>>>,
}

/// The streaming upstream.
pub struct SseUpstream {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SseUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SseUpstream {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let shared = Arc::new(Shared {
            scripts: Mutex::new(HashMap::new()),
            gate: Semaphore::new(0),
            sent: AtomicUsize::new(0),
            bodies: Mutex::new(Vec::new()),
        });
        let s = Arc::clone(&shared);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let s = Arc::clone(&s);
                tokio::spawn(async move {
                    let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let s = Arc::clone(&s);
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = http_body_util::BodyExt::collect(body)
                                .await
                                .map(|b| b.to_bytes().to_vec())
                                .unwrap_or_default();
                            s.bodies.lock().unwrap().push(body);
                            Ok::<_, Infallible>(respond(s, hyper::Request::from_parts(parts, ())))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Self { addr, shared, task }
    }

    /// Adds (or replaces) script `name`.
    pub fn script(&self, name: &str, script: Script) {
        self.shared.scripts.lock().unwrap().insert(name.to_string(), script);
    }

    /// Lets `n` gated pieces go.
    pub fn release(&self, n: usize) {
        self.shared.gate.add_permits(n);
    }

    /// The bodies of the requests received so far, in order.
    pub fn bodies(&self) -> Vec<Vec<u8>> {
        self.shared.bodies.lock().unwrap().clone()
    }

    /// Pieces written so far, over all responses.
    pub fn sent(&self) -> usize {
        self.shared.sent.load(Ordering::SeqCst)
    }
}

type Body = StreamBody<tokio_stream::wrappers::ReceiverStream<Result<Frame<Bytes>, Infallible>>>;

fn respond(s: Arc<Shared>, req: hyper::Request<()>) -> hyper::Response<Body> {
    let name = req
        .headers()
        .get("x-script")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let script = s.scripts.lock().unwrap().get(&name).cloned();
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let content_type = script.as_ref().map_or("text/plain", |sc| sc.content_type);
    tokio::spawn(async move {
        let Some(script) = script else { return };
        for (i, piece) in script.pieces.into_iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(script.pause).await;
                if script.gated {
                    let Ok(p) = s.gate.acquire().await else { return };
                    p.forget();
                }
            }
            s.sent.fetch_add(1, Ordering::SeqCst);
            if tx.send(Ok(Frame::data(Bytes::from(piece)))).await.is_err() {
                return;
            }
        }
    });
    hyper::Response::builder()
        .header("content-type", content_type)
        .header("cache-control", "no-cache")
        .body(StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx)))
        .expect("response")
}
