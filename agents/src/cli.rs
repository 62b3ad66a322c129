//! Command-line pieces shared by agent binaries: serving flags and logging.

use std::time::Duration;

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
}

impl ServeArgs {
    /// Applies the flags to an agent builder.
    pub fn apply(&self, builder: AgentBuilder) -> AgentBuilder {
        builder
            .socket_mode(self.socket_mode)
            .drain_timeout(Duration::from_secs(self.drain_timeout_s))
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
pub fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
    // Already initialised (tests, embedding): keep the existing subscriber.
    let _ = result;
}

#[cfg(test)]
mod tests {
    #[test]
    fn modes_parse_in_octal() {
        assert_eq!(super::parse_mode("660"), Ok(0o660));
        assert_eq!(super::parse_mode("0o600"), Ok(0o600));
        assert!(super::parse_mode("999").is_err());
        assert!(super::parse_mode("1777").is_err());
    }
}
