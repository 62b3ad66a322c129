//! The `policy-kernel config` command: a small HTTP/1.1 client of the
//! management API over its TCP address or its Unix socket.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

/// Where the API is and how to authenticate.
#[derive(Debug, Clone)]
pub struct Client {
    /// `host:port` of the TCP listener.
    pub addr: Option<String>,
    /// The Unix socket.
    pub socket: Option<PathBuf>,
    /// The bearer token.
    pub token: String,
}

/// One answer: status and JSON body.
#[derive(Debug, Clone)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// The body, parsed.
    pub body: Value,
}

/// `name` percent-encoded for a path segment.
pub fn encode_name(name: &str) -> String {
    percent_encoding::utf8_percent_encode(name, percent_encoding::NON_ALPHANUMERIC).to_string()
}

impl Client {
    /// Sends one request.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        if_match: Option<u64>,
    ) -> anyhow::Result<Answer> {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, "policy-kernel")
            .header(hyper::header::AUTHORIZATION, format!("Bearer {}", self.token));
        if let Some(v) = if_match {
            req = req.header(hyper::header::IF_MATCH, v.to_string());
        }
        let bytes = body.map(|b| b.to_string()).unwrap_or_default();
        if !bytes.is_empty() {
            req = req.header(hyper::header::CONTENT_TYPE, "application/json");
        }
        let req = req.body(Full::new(Bytes::from(bytes)))?;
        let resp = match (&self.socket, &self.addr) {
            (Some(path), _) => {
                let io = tokio::net::UnixStream::connect(path)
                    .await
                    .with_context(|| format!("connecting to {}", path.display()))?;
                exchange(io, req).await?
            }
            (None, Some(addr)) => {
                let io = tokio::net::TcpStream::connect(addr)
                    .await
                    .with_context(|| format!("connecting to {addr}"))?;
                exchange(io, req).await?
            }
            (None, None) => bail!("give --addr HOST:PORT or --socket PATH"),
        };
        Ok(resp)
    }

    async fn current_version(&self) -> anyhow::Result<u64> {
        let a = self.send(Method::GET, "/v1/config", None, None).await?;
        a.body["version"]
            .as_u64()
            .with_context(|| format!("GET /v1/config answered {} {}", a.status, a.body))
    }
}

async fn exchange<S>(io: S, req: Request<Full<Bytes>>) -> anyhow::Result<Answer>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(conn);
    let resp = sender.send_request(req).await?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    let body = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()))
    };
    Ok(Answer { status, body })
}

/// A route or config file (YAML or JSON) as JSON.
fn read_json(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_yaml::from_str(&text).with_context(|| format!("{} is not YAML or JSON", path.display()))
}

/// One `config` subcommand.
#[derive(Debug, Clone)]
pub enum Command {
    /// Print the version and effective config.
    Get,
    /// Create or replace the route in a file.
    PutRoute(PathBuf),
    /// Remove a route.
    DeleteRoute(String),
    /// Dry-run a route or `route_policies` file.
    Validate(PathBuf),
    /// List versions.
    Versions,
    /// Restore version N.
    Rollback(u64),
    /// Routes that differ between two versions.
    Diff(u64, u64),
}

/// Runs `command`; returns the text to print and whether it succeeded.
pub async fn run(client: &Client, command: Command, if_match: Option<u64>) -> anyhow::Result<(String, bool)> {
    let version = || async {
        match if_match {
            Some(v) => Ok(v),
            None => client.current_version().await,
        }
    };
    let answer = match command {
        Command::Get => client.send(Method::GET, "/v1/config", None, None).await?,
        Command::Versions => client.send(Method::GET, "/v1/versions", None, None).await?,
        Command::PutRoute(file) => {
            let route = read_json(&file)?;
            let name = route["route_name"]
                .as_str()
                .with_context(|| format!("{}: route_name is missing", file.display()))?
                .to_string();
            let v = version().await?;
            let path = format!("/v1/routes/{}", encode_name(&name));
            client.send(Method::PUT, &path, Some(route), Some(v)).await?
        }
        Command::DeleteRoute(name) => {
            let v = version().await?;
            let path = format!("/v1/routes/{}", encode_name(&name));
            client.send(Method::DELETE, &path, None, Some(v)).await?
        }
        Command::Validate(file) => {
            let body = read_json(&file)?;
            // A whole kernel file validates its routes.
            let body = match body.get("policy_kernel") {
                Some(k) => json!({"route_policies": k.get("route_policies").cloned().unwrap_or(json!([]))}),
                None => body,
            };
            client.send(Method::POST, "/v1/validate", Some(body), None).await?
        }
        Command::Rollback(n) => {
            let v = version().await?;
            client
                .send(Method::POST, "/v1/rollback", Some(json!({"version": n})), Some(v))
                .await?
        }
        Command::Diff(a, b) => {
            let va = client
                .send(Method::GET, &format!("/v1/versions/{a}"), None, None)
                .await?;
            let vb = client
                .send(Method::GET, &format!("/v1/versions/{b}"), None, None)
                .await?;
            for x in [&va, &vb] {
                if x.status != 200 {
                    return Ok((pretty(&x.body), false));
                }
            }
            return Ok((diff(&va.body, &vb.body), true));
        }
    };
    Ok((pretty(&answer.body), answer.status < 300))
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

/// The routes added, removed and changed from version body `a` to `b`.
pub fn diff(a: &Value, b: &Value) -> String {
    let routes = |v: &Value| -> BTreeMap<String, Value> {
        v["routes"]
            .as_array()
            .map(|l| {
                l.iter()
                    .map(|r| (r["route_name"].as_str().unwrap_or("").to_string(), r.clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (ra, rb) = (routes(a), routes(b));
    let mut out = format!("--- version {}\n+++ version {}\n", a["version"], b["version"]);
    for (name, r) in &ra {
        match rb.get(name) {
            None => out.push_str(&format!("- route {name:?}\n  {r}\n")),
            Some(s) if s != r => out.push_str(&format!("~ route {name:?}\n  - {r}\n  + {s}\n")),
            Some(_) => {}
        }
    }
    for (name, r) in &rb {
        if !ra.contains_key(name) {
            out.push_str(&format!("+ route {name:?}\n  {r}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_lists_added_removed_and_changed_routes() {
        let a = json!({"version": 1, "routes": [{"route_name": "/a", "mode": "enforce"}, {"route_name": "/b"}]});
        let b = json!({"version": 2, "routes": [{"route_name": "/a", "mode": "shadow"}, {"route_name": "/c"}]});
        let d = diff(&a, &b);
        assert!(d.contains("~ route \"/a\""), "{d}");
        assert!(d.contains("- route \"/b\""), "{d}");
        assert!(d.contains("+ route \"/c\""), "{d}");
        assert_eq!(encode_name("/api/v1"), "%2Fapi%2Fv1");
    }
}
