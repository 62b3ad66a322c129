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
use std::time::Duration;

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
