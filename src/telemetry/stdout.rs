//! The kernel's log output: standard output through
//! [`policy_net::log_output`], which never blocks a request on a log reader
//! that has stopped reading; dropped lines are counted in a metric.

use std::sync::{LazyLock, OnceLock};

use policy_net::log_output::Output;
use prometheus::IntCounter;

/// `policy_kernel_log_lines_dropped_total`: lines not written because the
/// backlog was full, since start. The metrics registry serves this counter
/// itself ([`super::metrics`]).
pub fn dropped_counter() -> &'static IntCounter {
    static DROPPED: LazyLock<IntCounter> = LazyLock::new(|| {
        IntCounter::new(
            "policy_kernel_log_lines_dropped_total",
            "Log lines dropped because standard output was not being read",
        )
        .unwrap_or_else(|e| panic!("metric log_lines_dropped: {e}"))
    });
    &DROPPED
}

/// Standard output, shared by the whole process; the log subscriber writes
/// to it through [`policy_net::log_output::Writer`].
pub fn output() -> &'static Output {
    static STDOUT: OnceLock<Output> = OnceLock::new();
    STDOUT.get_or_init(|| Output::new(libc::STDOUT_FILENO, note).on_drop(|| dropped_counter().inc()))
}

/// The warning line that reports `dropped` lines, in the kernel's JSON.
fn note(dropped: u64) -> String {
    use std::fmt::Write as _;
    let mut line = String::new();
    // Writing to a String does not fail.
    let _ = super::logging::write_head(&mut line, std::time::SystemTime::now(), "warning");
    let _ = writeln!(
        line,
        ",\"message\":\"log lines dropped: standard output was not being read\",\"dropped\":{dropped}}}"
    );
    line
}

#[cfg(test)]
mod tests {
    /// The note that reports dropped lines is one JSON log line.
    #[test]
    fn the_dropped_note_is_one_json_log_line() {
        let line = super::note(42);
        let (json, rest) = line.split_once('\n').expect("a newline");
        assert!(rest.is_empty(), "one line: {line:?}");
        let v: serde_json::Value = serde_json::from_str(json).expect("JSON");
        assert_eq!(v["level"], "warning");
        assert_eq!(v["dropped"], 42);
        assert!(v["message"].as_str().is_some_and(|m| m.contains("log lines dropped")));
    }
}
