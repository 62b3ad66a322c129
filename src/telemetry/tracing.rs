//! OpenTelemetry tracing (spec §10.3).
//!
//! A sampled request gets a root span `kernel.process_request` whose parent
//! is the W3C `traceparent` of the HTTP request, so kernel spans join the
//! caller's trace; the trace context goes on to agents as gRPC metadata.
//! Sampling is parent-based with `observability.tracing.sampling_rate` for
//! new traces. Spans are exported over OTLP/gRPC when
//! `observability.tracing.otlp_endpoint` is set; otherwise tracing is off
//! and costs one atomic load per request.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{Span, TraceContextExt, Tracer};
use opentelemetry::{global, Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};

use crate::config::TracingConfig;

static ENABLED: AtomicBool = AtomicBool::new(false);
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot start the OTLP exporter: {0}")]
pub struct TraceInitError(String);

/// Starts OTLP export when configured.
pub fn init(cfg: &TracingConfig) -> Result<(), TraceInitError> {
    let Some(endpoint) = cfg.otlp_endpoint.as_ref().filter(|_| cfg.enabled) else {
        return Ok(());
    };
    use opentelemetry_otlp::WithExportConfig;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint.clone())
        .build()
        .map_err(|e| TraceInitError(e.to_string()))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(sampler(cfg.sampling_rate))
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name("policy-kernel")
                .build(),
        )
        .build();
    install(provider);
    Ok(())
}

/// The kernel's sampler: follow the caller's decision, else sample `rate`.
pub fn sampler(rate: f64) -> Sampler {
    Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(rate)))
}

/// Installs `provider` as the kernel's tracer provider (tests use an
/// in-memory exporter this way).
pub fn install(provider: SdkTracerProvider) {
    global::set_tracer_provider(provider.clone());
    let _ = PROVIDER.set(provider);
    ENABLED.store(true, Ordering::Release);
}

/// Exports the spans still buffered and stops export. A failure (collector
/// unreachable, or the flush's 5 s timeout) is logged as a warning.
///
/// It blocks until the export ends: call it from a thread that does not
/// drive the runtime the exporter's gRPC client runs on (e.g.
/// `spawn_blocking`).
pub fn shutdown() {
    if let Some(p) = PROVIDER.get() {
        if let Err(e) = p.shutdown() {
            tracing::warn!(error = %e, "buffered spans were not exported at shutdown");
        }
    }
}

/// The W3C trace headers of a request.
#[derive(Debug, Default, Clone, Copy)]
pub struct TraceHeaders<'a> {
    /// `traceparent`.
    pub traceparent: Option<&'a [u8]>,
    /// `tracestate`.
    pub tracestate: Option<&'a [u8]>,
}

impl Extractor for TraceHeaders<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        let v = match key {
            "traceparent" => self.traceparent,
            "tracestate" => self.tracestate,
            _ => None,
        };
        v.and_then(|v| std::str::from_utf8(v).ok())
    }
    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

struct Metadata<'a>(&'a mut tonic::metadata::MetadataMap);

impl Injector for Metadata<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(k), Ok(v)) = (
            tonic::metadata::MetadataKey::from_bytes(key.as_bytes()),
            tonic::metadata::MetadataValue::try_from(value.as_str()),
        ) {
            self.0.insert(k, v);
        }
    }
}

/// The trace of one sampled request.
#[derive(Debug)]
pub struct RequestTrace {
    root: Context,
}

impl RequestTrace {
    /// Starts `kernel.process_request` under the request's `traceparent`;
    /// `None` when tracing is off or the request is not sampled.
    pub fn start(headers: TraceHeaders<'_>) -> Option<Self> {
        if !ENABLED.load(Ordering::Acquire) {
            return None;
        }
        let parent = TraceContextPropagator::new().extract(&headers);
        let span = global::tracer("policy-kernel").start_with_context("kernel.process_request", &parent);
        if !span.span_context().is_sampled() {
            return None;
        }
        Some(Self {
            root: parent.with_span(span),
        })
    }

    /// The root context.
    pub fn context(&self) -> &Context {
        &self.root
    }

    /// Starts a child of `parent` named `name`.
    pub fn child(parent: &Context, name: &'static str, attributes: Vec<KeyValue>) -> Context {
        let mut span = global::tracer("policy-kernel").start_with_context(name, parent);
        span.set_attributes(attributes);
        parent.with_span(span)
    }

    /// Starts a child with a computed name (`kernel.agent_call.1`, ...).
    pub fn child_named(parent: &Context, name: String, attributes: Vec<KeyValue>) -> Context {
        let mut span = global::tracer("policy-kernel").start_with_context(name, parent);
        span.set_attributes(attributes);
        parent.with_span(span)
    }

    /// Sets attributes on the root span.
    pub fn set(&self, attributes: Vec<KeyValue>) {
        self.root.span().set_attributes(attributes);
    }
}

impl Drop for RequestTrace {
    fn drop(&mut self) {
        self.root.span().end();
    }
}

/// Ends the span of `cx`.
pub fn end(cx: Context) {
    cx.span().end();
}

/// Writes `cx`'s trace context (`traceparent`) into gRPC metadata.
pub fn inject(cx: &Context, metadata: &mut tonic::metadata::MetadataMap) {
    TraceContextPropagator::new().inject_context(cx, &mut Metadata(metadata));
}
