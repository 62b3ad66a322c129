//! Command-line pieces shared by agent binaries: serving flags and logging.

use std::sync::OnceLock;
use std::time::Duration;

use policy_net::log_output::{Output, Writer};

use crate::agent::AgentBuilder;

/// Serving flags, to `#[command(flatten)]` into an agent's clap parser.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Permission bits of the socket file, in octal.
    #[arg(long, value_name = "OCTAL", default_value = "660", value_parser = parse_mode)]
    pub socket_mode: u32,
    /// Seconds to wait for in-flight calls after SIGTERM before exiting.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    pub drain_timeout_s: u64,
    /// Log JSON lines instead of text (the level comes from RUST_LOG, default info).
    #[arg(long)]
    pub log_json: bool,
    /// Threads that run calls: 0 = one per CPU the process may use, and a
    /// single-threaded runtime when that is one CPU; 1 = single-threaded.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub worker_threads: usize,
    /// Serve the agent's Prometheus metrics on this address (`/metrics`),
    /// for example 127.0.0.1:9101; off when unset.
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
}

impl ServeArgs {
    /// The async runtime for `--worker-threads` (see [`policy_net::runtime`]:
    /// a current-thread runtime on one CPU, which costs least there).
    pub fn runtime(&self) -> std::io::Result<tokio::runtime::Runtime> {
        policy_net::runtime::build(self.worker_threads, "policy-agent")
    }

    /// Applies the flags to an agent builder.
    pub fn apply(&self, builder: AgentBuilder) -> AgentBuilder {
        builder
            .socket_mode(self.socket_mode)
            .drain_timeout(Duration::from_secs(self.drain_timeout_s))
            .metrics_addr(self.metrics_addr)
    }
}

/// Parses an octal permission mode such as `660` or `0o660`.
pub fn parse_mode(s: &str) -> Result<u32, String> {
    let digits = s.trim_start_matches("0o");
    let mode = u32::from_str_radix(digits, 8).map_err(|e| format!("not an octal mode: {e}"))?;
    if mode > 0o777 {
        return Err(format!("mode {s} is larger than 777"));
    }
    Ok(mode)
}

/// Starts logging to stderr; the filter comes from `RUST_LOG` (default `info`).
///
/// Lines go out through [`policy_net::log_output`]: a stderr pipe that
/// nobody reads (a stuck log shipper) holds lines back, then drops them with
/// a count, instead of blocking the threads that answer the kernel.
pub fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(Writer(stderr_output(json)));
    let result = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
    // Already initialised (tests, embedding): keep the existing subscriber.
    let _ = result;
}

static STDERR: OnceLock<Output> = OnceLock::new();

/// Standard error, shared by the whole process; the first call picks the
/// format of the note on dropped lines.
fn stderr_output(json: bool) -> &'static Output {
    STDERR.get_or_init(|| Output::new(libc::STDERR_FILENO, move |dropped| dropped_note(json, dropped)))
}

/// The warning line that reports `dropped` lines, in the format of the
/// subscriber's other lines.
fn dropped_note(json: bool, dropped: u64) -> String {
    let now = humantime::format_rfc3339_micros(std::time::SystemTime::now());
    let message = "log lines dropped: standard error was not being read";
    if json {
        format!(
            "{{\"timestamp\":\"{now}\",\"level\":\"WARN\",\"fields\":{{\"message\":\"{message}\",\"dropped\":{dropped}}},\"target\":\"policy_agents\"}}\n"
        )
    } else {
        format!("{now}  WARN policy_agents: {message} dropped={dropped}\n")
    }
}

/// Gives log lines still held back (stderr not being read) up to a second
/// to get out; for the end of `main`. Does nothing without [`init_tracing`].
pub fn flush_logs() {
    if let Some(out) = STDERR.get() {
        out.flush(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    /// The note on dropped lines is one line in either format.
    #[test]
    fn the_dropped_note_matches_the_log_format() {
        let json = super::dropped_note(true, 7);
        let (line, rest) = json.split_once('\n').expect("a newline");
        assert!(rest.is_empty());
        let v: serde_json::Value = serde_json::from_str(line).expect("JSON");
        assert_eq!(v["level"], "WARN");
        assert_eq!(v["fields"]["dropped"], 7);
        let text = super::dropped_note(false, 7);
        assert!(text.ends_with("log lines dropped: standard error was not being read dropped=7\n"));
        assert_eq!(text.lines().count(), 1);
    }

    #[test]
    fn modes_parse_in_octal() {
        assert_eq!(super::parse_mode("660"), Ok(0o660));
        assert_eq!(super::parse_mode("0o600"), Ok(0o600));
        assert!(super::parse_mode("999").is_err());
        assert!(super::parse_mode("1777").is_err());
    }
}
