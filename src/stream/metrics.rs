//! Metrics of streamed responses, in the kernel's registry:
//!
//! - `policy_kernel_streamed_responses_total{route}`: responses streamed
//!   through streaming policies;
//! - `policy_kernel_stream_chunks_total{route}`: body chunks Envoy sent;
//! - `policy_kernel_stream_events_total{route}`: pieces (SSE events, raw
//!   chunks) sent on to the client;
//! - `policy_kernel_stream_bytes_total{route,direction}`: bytes `in` from
//!   the upstream and `out` to the client;
//! - `policy_kernel_stream_terminations_total{route,reason}`: streams ended
//!   by their policies (or by a failed agent under `deny`).
//!
//! A stream resolves its route's handles once, at its start.

use std::sync::LazyLock;

use prometheus::{IntCounter, IntCounterVec, Opts};

use crate::telemetry::metrics::metrics;

struct Families {
    responses: IntCounterVec,
    chunks: IntCounterVec,
    events: IntCounterVec,
    bytes: IntCounterVec,
    terminations: IntCounterVec,
}

fn family(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).unwrap_or_else(|e| panic!("metric {name}: {e}"));
    metrics()
        .registry
        .register(Box::new(c.clone()))
        .unwrap_or_else(|e| panic!("metric {name}: {e}"));
    c
}

// Registration only fails on a programming error, caught by the first test
// that streams.
static FAMILIES: LazyLock<Families> = LazyLock::new(|| Families {
    responses: family(
        "policy_kernel_streamed_responses_total",
        "Responses streamed through streaming policies",
        &["route"],
    ),
    chunks: family(
        "policy_kernel_stream_chunks_total",
        "Body chunks of streamed responses received from Envoy",
        &["route"],
    ),
    events: family(
        "policy_kernel_stream_events_total",
        "Pieces (SSE events or raw chunks) of streamed responses sent on to the client",
        &["route"],
    ),
    bytes: family(
        "policy_kernel_stream_bytes_total",
        "Bytes of streamed responses, in from the upstream and out to the client",
        &["route", "direction"],
    ),
    terminations: family(
        "policy_kernel_stream_terminations_total",
        "Streamed responses ended by their policies or by a failed agent",
        &["route", "reason"],
    ),
});

/// Registers the families, so that `/metrics` lists them before the first
/// streamed response.
pub fn register() {
    LazyLock::force(&FAMILIES);
}

/// One stream's counts and its route's handles.
#[derive(Debug, Default)]
pub struct Counts {
    route: String,
    handles: Option<[IntCounter; 4]>,
    /// Chunks received.
    pub chunks: u64,
    /// Pieces sent on.
    pub events: u64,
    /// Bytes received.
    pub bytes_in: u64,
    /// Bytes sent on.
    pub bytes_out: u64,
}

impl Counts {
    /// Counts for a new stream of `route`.
    pub fn new(route: &str) -> Self {
        let f = &*FAMILIES;
        f.responses.with_label_values(&[route]).inc();
        Counts {
            route: route.to_string(),
            handles: Some([
                f.chunks.with_label_values(&[route]),
                f.events.with_label_values(&[route]),
                f.bytes.with_label_values(&[route, "in"]),
                f.bytes.with_label_values(&[route, "out"]),
            ]),
            ..Counts::default()
        }
    }

    /// A chunk of `len` bytes arrived.
    pub fn chunk(&mut self, len: usize) {
        self.chunks += 1;
        self.bytes_in += len as u64;
        if let Some(h) = &self.handles {
            h[0].inc();
            h[2].inc_by(len as u64);
        }
    }

    /// `n` pieces went on.
    pub fn events(&mut self, n: usize) {
        self.events += n as u64;
        if let Some(h) = &self.handles {
            h[1].inc_by(n as u64);
        }
    }

    /// `len` bytes went on.
    pub fn bytes_out(&mut self, len: usize) {
        self.bytes_out += len as u64;
        if let Some(h) = &self.handles {
            h[3].inc_by(len as u64);
        }
    }

    /// The stream was ended for `reason` (a bounded token).
    pub fn terminated(&self, reason: &str) {
        FAMILIES.terminations.with_label_values(&[&self.route, reason]).inc();
    }
}
