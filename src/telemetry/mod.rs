//! Observability: JSON logs, Prometheus metrics and OpenTelemetry traces.

pub mod logging;
pub mod metrics;
pub mod request_log;
pub mod stdout;
pub mod tracing;

pub use logging::{init_logging, set_level};
