//! Logging setup: JSON lines on stdout. The configured level applies to the
//! kernel's own events; dependencies log warnings and errors only. `RUST_LOG`
//! overrides both.

use tracing_subscriber::EnvFilter;

/// Installs the global JSON logger. Calling it twice is harmless.
pub fn init_logging(level: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(format!("warn,policy_kernel={level}")));
    let _ = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_env_filter(filter)
        .with_target(false)
        .try_init();
}
