//! The request summary line of spec §10.2, one per request that called
//! agents ("Request processed successfully", or "Policy chain executed
//! across multiple agents"): written straight into the log output, in the
//! shape of every other line ([`super::logging`]), without tracing's
//! per-event machinery.
//!
//! That machinery (the event's visitor called through `dyn` for each field,
//! `fmt` arguments, the line formatted into the subscriber's buffer and
//! copied out) was most of the line's cost: about 4,800 instructions of the
//! kernel's 88,000 per request, 1,742 written here (benches/RESULTS.md,
//! 2026-11-28). The fixed parts are written as they are, the numbers with
//! `itoa`.
//!
//! Whether the line is written stays the subscriber's decision: the caller
//! asks `tracing::enabled!` at its own call site, so the configured level,
//! its reloads and `RUST_LOG` apply as to any event, and nothing is written
//! when no subscriber is installed.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::io::Write as _;

use tracing_subscriber::fmt::MakeWriter;

use super::logging::{write_head, write_json_str};

/// The fields of one request line.
#[derive(Debug)]
pub struct RequestLine<'a> {
    /// The line's message.
    pub message: &'static str,
    pub request_id: &'a str,
    pub route_name: &'a str,
    /// The agent, when every call went to one.
    pub agent_name: Option<&'a str>,
    pub duration_ms: u64,
}

/// What the line's `metadata` object holds.
#[derive(Debug)]
pub enum Metadata<'a> {
    /// One agent: `{"policies_executed":N,"instructions_count":M}`.
    Counts {
        policies_executed: usize,
        instructions_count: usize,
    },
    /// An object the caller built, written as compact JSON.
    Json(&'a serde_json::Value),
}

impl RequestLine<'_> {
    /// Writes the line to the kernel's log output (held with the thread's
    /// other lines until it waits for work, as every line is).
    pub fn write(&self, metadata: Metadata<'_>) {
        thread_local!(static LINE: RefCell<String> = RefCell::new(String::with_capacity(512)));
        let now = std::time::SystemTime::now();
        let out = |line: &str| {
            // The log output never fails a write: a reader that stopped
            // reading gets the line later, or a count of dropped lines.
            let _ = policy_net::log_output::Writer(super::stdout::output())
                .make_writer()
                .write_all(line.as_bytes());
        };
        let reused = LINE.try_with(|cell| match cell.try_borrow_mut() {
            Ok(mut line) => {
                line.clear();
                self.format(&mut line, now, &metadata);
                out(&line);
                true
            }
            Err(_) => false,
        });
        // The thread's buffer is gone (the thread is ending) or in use: a
        // buffer of its own, rather than a lost line.
        if reused != Ok(true) {
            let mut line = String::with_capacity(512);
            self.format(&mut line, now, &metadata);
            out(&line);
        }
    }

    /// The line, newline included, as of `now`.
    pub fn format(&self, out: &mut String, now: std::time::SystemTime, metadata: &Metadata<'_>) {
        let mut number = itoa::Buffer::new();
        // Writing to a String does not fail.
        let _ = write_head(out, now, "info");
        out.push_str(",\"message\":");
        let _ = write_json_str(out, self.message);
        out.push_str(",\"request_id\":");
        let _ = write_json_str(out, self.request_id);
        out.push_str(",\"route_name\":");
        let _ = write_json_str(out, self.route_name);
        if let Some(agent) = self.agent_name {
            out.push_str(",\"agent_name\":");
            let _ = write_json_str(out, agent);
        }
        out.push_str(",\"duration_ms\":");
        out.push_str(number.format(self.duration_ms));
        out.push_str(",\"metadata\":");
        match metadata {
            Metadata::Counts {
                policies_executed,
                instructions_count,
            } => {
                out.push_str("{\"policies_executed\":");
                out.push_str(number.format(*policies_executed));
                out.push_str(",\"instructions_count\":");
                out.push_str(number.format(*instructions_count));
                out.push('}');
            }
            Metadata::Json(value) => {
                let _ = write!(out, "{value}");
            }
        }
        out.push_str("}\n");
    }
}
