//! HTTP on loopback: an in-process upstream that echoes what it received,
//! and a client call that keeps the whole answer.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

/// An HTTP upstream that answers with a JSON echo of what it received:
/// `{"method", "path", "headers": {name: value}, "body"}`. A request header
/// `x-echo-status` sets the response status; `x-echo-body` replaces the body.
pub struct Upstream {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn echo(req: hyper::Request<hyper::body::Incoming>) -> Result<hyper::Response<Full<Bytes>>, hyper::Error> {
    let method = req.method().to_string();
    let path = req.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
    let mut headers = serde_json::Map::new();
    for k in req.headers().keys() {
        let values: Vec<String> = req
            .headers()
            .get_all(k)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        headers.insert(k.to_string(), serde_json::Value::String(values.join(",")));
    }
    let status = req
        .headers()
        .get("x-echo-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(200u16);
    let fixed = req
        .headers()
        .get("x-echo-body")
        .map(|v| Bytes::copy_from_slice(v.as_bytes()));
    let body = req.into_body().collect().await?.to_bytes();
    let out = match fixed {
        Some(b) => b,
        None => Bytes::from(
            serde_json::json!({"method": method, "path": path, "headers": headers, "body": String::from_utf8_lossy(&body)}).to_string(),
        ),
    };
    Ok(hyper::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .header("x-upstream", "echo")
        .body(Full::new(out))
        .unwrap_or_default())
}

impl Upstream {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind upstream");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service_fn(echo))
                        .await;
                });
            }
        });
        Self { addr, task }
    }
}

/// A response as the client got it.
#[derive(Debug)]
pub struct Got {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Got {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    /// The echo upstream's JSON (panics when the upstream did not answer).
    pub fn echo(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not an echo ({e}): {} {}", self.status, self.body))
    }
    /// The body as JSON (panics when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }
    pub fn echoed_header(&self, name: &str) -> Option<String> {
        self.echo()["headers"][name].as_str().map(String::from)
    }
}

/// Sends one request.
pub async fn send(
    client: &reqwest::Client,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Got {
    let mut req = client.request(reqwest::Method::from_bytes(method.as_bytes()).expect("method"), url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(b) = body {
        req = req.body(b.to_string());
    }
    let resp = req.send().await.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.text().await.unwrap_or_default();
    Got { status, headers, body }
}
