//! Spans leave the real kernel binary over OTLP/gRPC (spec §10.3): the
//! kernel process exports to a gRPC trace collector served by this test,
//! with real `policy-test-agent` processes on Unix sockets behind it.
//! `tracing_spans.rs` checks the shape of the span tree in-process; this file
//! checks that the configured exporter delivers it, periodically and at
//! shutdown, on both runtimes the kernel can run (`server.worker_threads`).

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use support::extproc::{self, Stream};
use support::*;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";

/// An OTLP/gRPC trace collector on loopback that keeps what it receives.
#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Vec<ExportTraceServiceRequest>>>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0
            .lock()
            .map_err(|_| tonic::Status::internal("poisoned"))?
            .push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl Collector {
    /// Serves on a loopback port of its own; returns the endpoint URL.
    ///
    /// The listener is bound here and handed to the server, so no other
    /// socket can take the port between choosing it and listening on it.
    async fn start(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the collector");
        let port = listener.local_addr().expect("collector address").port();
        let svc = TraceServiceServer::new(self.clone());
        tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            if let Err(e) = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(incoming)
                .await
            {
                eprintln!("collector stopped: {e}");
            }
        });
        format!("http://127.0.0.1:{port}")
    }

    /// Every span received so far, with its resource's `service.name`.
    fn spans(&self) -> Vec<(String, Span)> {
        let batches = self.0.lock().expect("collector lock").clone();
        let mut out = Vec::new();
        for batch in batches {
            for rs in batch.resource_spans {
                let service = rs
                    .resource
                    .as_ref()
                    .and_then(|r| string_attr(&r.attributes, "service.name"))
                    .unwrap_or_default();
                for ss in rs.scope_spans {
                    out.extend(ss.spans.into_iter().map(|s| (service.clone(), s)));
                }
            }
        }
        out
    }
}

fn string_attr(attrs: &[KeyValue], key: &str) -> Option<String> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            Value::StringValue(s) => Some(s.clone()),
            Value::IntValue(i) => Some(i.to_string()),
            _ => None,
        })
}

fn read(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A kernel exporting to `endpoint`, one agent, a route `traced` with a
/// request and a response policy; sampling only what the caller sampled.
async fn kernel(
    dir: &std::path::Path,
    agent: &TestAgent,
    server: &str,
    endpoint: &str,
    env: &[(&str, &str)],
) -> KernelProc {
    let body = format!(
        "    tracing: {{enabled: true, sampling_rate: 0.0, otlp_endpoint: \"{endpoint}\"}}\n  agents:\n{}  route_policies:\n    - route_name: traced\n      request_policy_chain: [{{policy: tag}}]\n      response_policy_chain: [{{policy: stamp}}]\n",
        agent_entry("a1", agent, "")
    );
    let kernel = KernelProc::start_env(dir, server, &body, env);
    let k = &kernel;
    until("the agent to be discovered", Duration::from_secs(10), || async move {
        k.admin_get("/readyz").0 == 200 && k.log().contains("agent discovered")
    })
    .await;
    kernel
}

fn agent(dir: &std::path::Path) -> TestAgent {
    TestAgent::start(
        dir,
        "a1",
        "policies:\n  - name: tag\n    request:\n      - set_header: {name: x-tag, value: one}\n  - name: stamp\n    response:\n      - set_header: {name: x-stamp, value: two}\n",
    )
}

/// One request through both phases, sampled by the caller or not.
async fn one_request(kernel: &KernelProc, sampled: bool) {
    let mut client = extproc::connect(&kernel.socket).await;
    let traceparent = format!("00-{TRACE_ID}-{PARENT_ID}-01");
    let headers: &[(&str, &str)] = if sampled { &[("traceparent", &traceparent)] } else { &[] };
    let mut s = Stream::open(&mut client, None).await;
    s.exchange(extproc::request_headers(Some("traced"), headers)).await;
    s.exchange(extproc::response_headers(200)).await;
}

/// The spans of the one sampled request: all in the caller's trace, the
/// root under the caller's span, from the service `policy-kernel`, with the
/// agent calls of both phases.
fn check_trace(spans: &[(String, Span)], log: &str) {
    let names: Vec<&str> = spans.iter().map(|(_, s)| s.name.as_str()).collect();
    for (service, s) in spans {
        assert_eq!(service, "policy-kernel", "span {} from another service", s.name);
        assert_eq!(
            hex(&s.trace_id),
            TRACE_ID,
            "span {} is in another trace: {names:?}",
            s.name
        );
    }
    let roots: Vec<&Span> = spans
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s.name == "kernel.process_request")
        .collect();
    assert_eq!(roots.len(), 1, "one traced request, one root: {names:?}\n{log}");
    assert_eq!(hex(&roots[0].parent_span_id), PARENT_ID);
    let calls: Vec<&Span> = spans
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s.name.starts_with("kernel.agent_call"))
        .collect();
    assert_eq!(calls.len(), 2, "one agent call per phase: {names:?}");
    for c in calls {
        assert_eq!(string_attr(&c.attributes, "agent.name").as_deref(), Some("a1"));
    }
}

/// With the default runtime, the batch exporter delivers the spans of a
/// sampled request while the kernel runs, and nothing of an unsampled one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampled_spans_reach_the_collector() {
    let dir = workdir();
    let collector = Collector::default();
    let endpoint = collector.start().await;
    let a1 = agent(dir.path());
    // Export every 200 ms instead of every 5 s.
    let k = kernel(dir.path(), &a1, "", &endpoint, &[("OTEL_BSP_SCHEDULE_DELAY", "200")]).await;
    one_request(&k, false).await;
    one_request(&k, true).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !collector
        .spans()
        .iter()
        .any(|(_, s)| s.name == "kernel.process_request")
    {
        assert!(Instant::now() < deadline, "no span exported within 20 s:\n{}", k.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Spans are exported in the order they end: the request's other spans,
    // and any of the unsampled request before them, came with the root or
    // earlier.
    check_trace(&collector.spans(), &k.log());
}

/// Spans still buffered when the kernel stops are exported before it exits,
/// on the multi-threaded runtime and on the single-threaded one (where the
/// export must not wait on the thread that is shutting down).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffered_spans_are_exported_at_shutdown() {
    for server in ["", "    worker_threads: 1\n"] {
        let dir = workdir();
        let collector = Collector::default();
        let endpoint = collector.start().await;
        let a1 = agent(dir.path());
        // No periodic export within the test: only shutdown sends.
        let mut k = kernel(
            dir.path(),
            &a1,
            server,
            &endpoint,
            &[("OTEL_BSP_SCHEDULE_DELAY", "600000")],
        )
        .await;
        one_request(&k, true).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(collector.spans().is_empty(), "exported before shutdown");
        k.proc.signal("TERM");
        let log = k.log.clone();
        let status = k.proc.exit_status(Duration::from_secs(20), || read(&log)).await;
        assert!(status.success(), "kernel ({server:?}) exit {status}:\n{}", k.log());
        check_trace(&collector.spans(), &k.log());
    }
}

/// With no collector listening, requests are answered as before, each failed
/// export is logged as an error naming the cause, and the kernel still stops
/// cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_collector_is_logged_and_harmless() {
    let dir = workdir();
    let a1 = agent(dir.path());
    let endpoint = format!("http://127.0.0.1:{}", free_port());
    let mut k = kernel(dir.path(), &a1, "", &endpoint, &[("OTEL_BSP_SCHEDULE_DELAY", "200")]).await;
    one_request(&k, true).await;
    let failed = |log: &str| {
        log.lines().any(|l| {
            l.contains(r#""level":"error""#)
                && l.contains(r#""message":"BatchSpanProcessor.ExportError""#)
                && l.contains("Connection refused")
        })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !failed(&k.log()) {
        assert!(Instant::now() < deadline, "no export error logged:\n{}", k.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    one_request(&k, true).await;
    k.proc.signal("TERM");
    let log = k.log.clone();
    let status = k.proc.exit_status(Duration::from_secs(20), || read(&log)).await;
    assert!(status.success(), "exit {status}:\n{}", k.log());
}
