//! An agent's own Prometheus metrics, served over HTTP on `--metrics-addr`
//! ([`AgentBuilder::metrics_addr`](crate::AgentBuilder::metrics_addr)).
//!
//! The kernel counts every call it makes (its `/metrics`); what only the
//! agent knows (keys fetched from an identity provider, a store it could
//! not reach) goes here. Policies register their series in [`registry`]
//! once, when first needed, and update them where the event happens:
//!
//! ```
//! use policy_agents::metrics::{self, prometheus::IntCounter};
//! use std::sync::OnceLock;
//!
//! fn refreshes() -> &'static IntCounter {
//!     static C: OnceLock<IntCounter> = OnceLock::new();
//!     C.get_or_init(|| {
//!         metrics::register(IntCounter::new("my_policy_refreshes_total", "Refreshes of my policy's data").unwrap())
//!     })
//! }
//! refreshes().inc();
//! assert!(metrics::render().contains("my_policy_refreshes_total 1"));
//! ```
//!
//! The endpoint answers `GET /metrics` (Prometheus text format, with the
//! process's CPU, memory and file descriptors, and
//! `policy_agent_info{agent, version}`) and `GET /healthz`. It is off unless
//! an address is given; serve it on loopback or a network only the scraper
//! reaches.

use std::net::SocketAddr;
use std::sync::OnceLock;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus::core::Collector;
use prometheus::Registry;

pub use prometheus;

/// The registry the endpoint renders.
pub fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let r = Registry::new();
        #[cfg(target_os = "linux")]
        let _ = r.register(Box::new(prometheus::process_collector::ProcessCollector::for_self()));
        r
    })
}

/// Registers `collector` in [`registry`] and returns it. A second
/// registration of the same series (two policy instances) is not an error:
/// the first one stays and is what the endpoint shows, so register once, in
/// a `OnceLock`.
pub fn register<C: Collector + Clone + 'static>(collector: C) -> C {
    if let Err(e) = registry().register(Box::new(collector.clone())) {
        tracing::debug!(error = %e, "metric registered twice");
    }
    collector
}

/// The metrics in Prometheus text format.
pub fn render() -> String {
    let mut out = String::new();
    if let Err(e) = prometheus::TextEncoder::new().encode_utf8(&registry().gather(), &mut out) {
        tracing::warn!(error = %e, "rendering metrics");
    }
    out
}

/// Records the agent's name and version (`policy_agent_info`, value 1).
pub(crate) fn record_info(agent: &str, version: &str) {
    static INFO: OnceLock<Option<prometheus::IntGaugeVec>> = OnceLock::new();
    let info = INFO.get_or_init(|| {
        prometheus::IntGaugeVec::new(
            prometheus::Opts::new("policy_agent_info", "The agent's name and version (value 1)"),
            &["agent", "version"],
        )
        .ok()
        .map(register)
    });
    if let Some(g) = info {
        g.with_label_values(&[agent, version]).set(1);
    }
}

/// Binds `addr` and serves the endpoint on the current runtime until the
/// process exits; returns the bound address (port 0 picks one).
pub async fn serve(addr: SocketAddr) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let service = service_fn(|req: Request<hyper::body::Incoming>| async move {
                    Ok::<_, std::convert::Infallible>(answer(req.method(), req.uri().path()))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(bound)
}

fn answer(method: &hyper::Method, path: &str) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (method, path) {
        (&hyper::Method::GET, "/metrics") => (StatusCode::OK, "text/plain; version=0.0.4", render()),
        (&hyper::Method::GET, "/healthz") => (StatusCode::OK, "text/plain", "ok\n".to_string()),
        (&hyper::Method::GET, _) => (StatusCode::NOT_FOUND, "text/plain", "not found\n".to_string()),
        _ => (StatusCode::METHOD_NOT_ALLOWED, "text/plain", "GET only\n".to_string()),
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_endpoint_serves_registered_series() {
        let c = register(prometheus::IntCounter::new("sdk_test_events_total", "test").unwrap());
        c.inc_by(3);
        record_info("test-agent", "1.2.3");
        let addr = serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        assert!(out.contains("sdk_test_events_total 3"), "{out}");
        assert!(
            out.contains("policy_agent_info{agent=\"test-agent\",version=\"1.2.3\"} 1"),
            "{out}"
        );
        assert_eq!(answer(&hyper::Method::GET, "/nope").status(), StatusCode::NOT_FOUND);
        assert_eq!(
            answer(&hyper::Method::POST, "/metrics").status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
    }
}
