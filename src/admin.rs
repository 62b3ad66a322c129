//! The operations endpoints, served on `observability.metrics_address`:
//! `metrics_port`:
//! - `/metrics`: Prometheus text format;
//! - `/healthz`: the process is alive;
//! - `/readyz`: the configuration is loaded and the ext_proc listener is up
//!   (with a fleet store, a second line says whether the routes may be stale,
//!   and a third names the routes whose stored value is not a valid route);
//! - `/config`: active version, routes and agent health as JSON. Params values
//!   are never shown: they may hold secrets.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;

use crate::kernel::Kernel;
use crate::telemetry::metrics::metrics;

/// Shared state of the endpoints.
#[derive(Debug, Clone)]
pub struct Admin {
    kernel: Arc<Kernel>,
    ready: Arc<AtomicBool>,
    store: Arc<std::sync::OnceLock<Arc<crate::management::fleet::status::Status>>>,
}

impl Admin {
    /// Endpoints over `kernel`; not ready until [`Admin::set_ready`].
    pub fn new(kernel: Arc<Kernel>) -> Self {
        crate::stream::metrics::register();
        crate::shadow::register();
        Self {
            kernel,
            ready: Arc::new(AtomicBool::new(false)),
            store: Arc::default(),
        }
    }

    /// Shows the fleet store's sync state in `/readyz` and `/config`.
    pub fn set_store_status(&self, status: Arc<crate::management::fleet::status::Status>) {
        let _ = self.store.set(status);
    }

    fn readyz(&self) -> Response<Full<Bytes>> {
        let ready = self.ready.load(Ordering::Acquire);
        let mut body = String::from(if ready { "ready\n" } else { "not ready\n" });
        if let Some(s) = self.store.get() {
            // Stale routes keep serving: losing the store never stops requests.
            let json = s.json();
            body.push_str(&if s.stale() {
                format!(
                    "config store: not watching for {} s; routes may be stale (started from {})\n",
                    s.sync_age_secs(),
                    json["started_from"].as_str().unwrap_or("?")
                )
            } else {
                format!("config store: watching, version {}\n", s.version())
            });
            if let Some(invalid) = json["invalid_routes"].as_array().filter(|a| !a.is_empty()) {
                body.push_str(&format!(
                    "config store: not a valid route in the store, refusing every request: {}\n",
                    invalid.iter().filter_map(|v| v.as_str()).collect::<Vec<_>>().join(", ")
                ));
            }
        }
        let status = if ready {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        reply(status, "text/plain", body)
    }

    /// Marks the ext_proc listener as up (or down, while draining).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
        metrics().ready.set(i64::from(ready));
    }

    /// Binds `addr` and serves in the background; returns the bound address.
    pub async fn spawn(self, addr: SocketAddr) -> std::io::Result<SocketAddr> {
        let listener = TcpListener::bind(addr).await?;
        self.serve(listener)
    }

    /// Serves on a listener bound by someone else (`policy-kernel
    /// supervise`); returns its address.
    pub fn spawn_on(self, listener: std::net::TcpListener) -> std::io::Result<SocketAddr> {
        listener.set_nonblocking(true)?;
        self.serve(TcpListener::from_std(listener)?)
    }

    fn serve(self, listener: TcpListener) -> std::io::Result<SocketAddr> {
        let bound = listener.local_addr()?;
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let admin = self.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let admin = admin.clone();
                        async move { Ok::<_, std::convert::Infallible>(admin.handle(req)) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(bound)
    }

    fn handle<B>(&self, req: Request<B>) -> Response<Full<Bytes>> {
        match req.uri().path() {
            "/metrics" => reply(StatusCode::OK, "text/plain; version=0.0.4", metrics().render()),
            "/healthz" => reply(StatusCode::OK, "text/plain", "ok\n".into()),
            "/readyz" => self.readyz(),
            "/config" => reply(StatusCode::OK, "application/json", self.config_json().to_string()),
            _ => reply(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
        }
    }

    /// The active configuration, without params values.
    pub fn config_json(&self) -> serde_json::Value {
        let snap = self.kernel.snapshot();
        let mut routes: Vec<_> = snap
            .routes
            .values()
            .map(|r| {
                let chain = |c: &crate::snapshot::Chain| -> Vec<serde_json::Value> {
                    c.policies
                        .iter()
                        .map(|p| {
                            json!({
                                "policy": p.proto.name,
                                "params": p.proto.params.keys().collect::<Vec<_>>(),
                                "on_failure": p.on_failure.map(|f| f.as_str()),
                                "agents": p.candidates.iter().map(|&i| snap.agents[i].name()).collect::<Vec<_>>(),
                            })
                        })
                        .collect()
                };
                let problems = r.problems();
                json!({
                    "route_name": r.name,
                    "mode": r.mode.as_str(),
                    "valid": problems.is_empty(),
                    "problems": problems,
                    "request_policy_chain": chain(&r.request),
                    "response_policy_chain": chain(&r.response),
                })
            })
            .collect();
        routes.sort_by(|a, b| a["route_name"].as_str().cmp(&b["route_name"].as_str()));
        let agents: Vec<_> = snap
            .agents
            .iter()
            .map(|a| {
                let d = a.discovered();
                let mut policies: Vec<&str> = d
                    .as_ref()
                    .map(|d| d.policies.keys().map(String::as_str).collect())
                    .unwrap_or_default();
                policies.sort_unstable();
                json!({
                    "name": a.name(),
                    "socket_path": a.config.socket_path,
                    "healthy": a.is_healthy(),
                    "discovered": d.is_some(),
                    "version": d.as_ref().map(|d| d.agent_version.clone()),
                    "policies": policies,
                })
            })
            .collect();
        let mut out = json!({"version": snap.version, "routes": routes, "agents": agents});
        if let Some(s) = self.store.get() {
            out["store"] = s.json();
        }
        out
    }
}

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    resp
}
