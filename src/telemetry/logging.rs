//! JSON-lines logging (spec §10.2): one object per event with `timestamp`,
//! `level`, `component`, `message` and the event's fields. A field named
//! `<name>_json` (JSON text the kernel built, such as the request log's
//! `metadata_json`) is written as the object `<name>`, so request logs have
//! the nested shape of the spec; other values logged with `?` or `%` are
//! embedded as JSON when they are a JSON document. The level applies to the
//! kernel's own events (dependencies log warnings and errors), can be
//! changed at runtime (configuration reload), and `RUST_LOG` overrides it.

use std::fmt;
use std::sync::OnceLock;

use serde::de::IgnoredAny;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

static FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

fn filter(level: &str) -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(format!("warn,policy_kernel={level}")))
}

/// Installs the global JSON logger at `level`. Later calls change the level.
///
/// Each line is formatted straight into the subscriber's per-thread buffer
/// and written to stdout with one `write` call, never waiting for a reader
/// that has stopped ([`super::stdout`]). (A writer thread for every line was
/// tried: no measurable CPU difference on the request path, and lines lagged
/// behind the answers they describe.)
pub fn init_logging(level: &str) {
    if FILTER.get().is_some() {
        set_level(level);
        return;
    }
    let (layer, handle) = reload::Layer::new(filter(level));
    let fmt = tracing_subscriber::fmt::layer()
        .event_format(JsonFormat)
        .with_writer(policy_net::log_output::Writer(super::stdout::output()));
    if tracing_subscriber::registry().with(layer).with(fmt).try_init().is_ok() {
        let _ = FILTER.set(handle);
    }
}

/// Changes the log level of the running process.
pub fn set_level(level: &str) {
    if let Some(handle) = FILTER.get() {
        if let Err(e) = handle.reload(filter(level)) {
            tracing::warn!(error = %e, "cannot change log level");
        }
    }
}

struct JsonFormat;

/// Names the formatter writes itself; an event field with one of them is
/// written as `field_<name>` so that no key appears twice in a line.
const RESERVED: [&str; 3] = ["timestamp", "level", "component"];

/// Writes an event's fields straight into the line as `,"name":value`.
struct Fields<'w, 'a> {
    out: &'w mut Writer<'a>,
    result: fmt::Result,
    /// The event had a `message` field.
    message: bool,
    /// Its `name` field, the message of events without one (OpenTelemetry's
    /// own warnings and errors are named, e.g. `BatchSpanProcessor.ExportError`).
    name: Option<String>,
}

/// Fields named `<name>_json` carry JSON text the kernel built itself (the
/// request log's `metadata_json`): written as it is under `<name>`, with no
/// copy and no parse. Any other field is checked (`json_or_string`).
const RAW_JSON: &str = "_json";

impl Fields<'_, '_> {
    fn key(&mut self, field: &Field) {
        self.key_named(field.name());
    }
    fn key_named(&mut self, name: &str) {
        self.message |= name == "message";
        let prefix = if RESERVED.contains(&name) { "field_" } else { "" };
        if self.result.is_ok() {
            self.result = [",\"", prefix, name, "\":"]
                .into_iter()
                .try_for_each(|part| self.out.write_str(part));
        }
    }
    fn write(&mut self, args: fmt::Arguments<'_>) {
        if self.result.is_ok() {
            self.result = self.out.write_fmt(args);
        }
    }
    fn integer(&mut self, value: impl itoa::Integer) {
        if self.result.is_ok() {
            self.result = self.out.write_str(itoa::Buffer::new().format(value));
        }
    }
    fn string(&mut self, value: &str) {
        if self.result.is_ok() {
            self.result = write_json_str(self.out, value);
        }
    }
    /// Embeds `text` as JSON when it is a JSON document, else as a string.
    fn json_or_string(&mut self, text: &str) {
        let trimmed = text.trim();
        let is_json = matches!(trimmed.as_bytes().first(), Some(b'{' | b'['))
            && serde_json::from_str::<IgnoredAny>(trimmed).is_ok();
        if is_json {
            self.write(format_args!("{trimmed}"));
        } else {
            self.string(text);
        }
    }
}

impl Visit for Fields<'_, '_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.key(field);
        if field.name() == "name" {
            self.name = Some(value.to_string());
        }
        self.string(value);
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.key(field);
        self.integer(value);
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.key(field);
        self.integer(value);
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.key(field);
        if value.is_finite() {
            self.write(format_args!("{value}"));
        } else {
            self.write(format_args!("null"));
        }
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.key(field);
        self.write(format_args!("{value}"));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if let Some(name) = field.name().strip_suffix(RAW_JSON) {
            self.key_named(name);
            self.write(format_args!("{value:?}"));
            return;
        }
        self.key(field);
        if field.name() == "message" {
            // Escaped as it is formatted: no copy of the text.
            if self.result.is_ok() {
                self.result = self
                    .out
                    .write_char('"')
                    .and_then(|()| fmt::Write::write_fmt(&mut JsonEscape(&mut *self.out), format_args!("{value:?}")))
                    .and_then(|()| self.out.write_char('"'));
            }
        } else {
            let text = format!("{value:?}");
            // Lists and maps logged with `?` are Rust debug text; keep them
            // machine-readable when they are valid JSON (Vec<String> is).
            self.json_or_string(&text);
        }
    }
}

/// Writes `s` as a JSON string literal (quotes and escapes included).
pub(super) fn write_json_str(out: &mut impl fmt::Write, s: &str) -> fmt::Result {
    out.write_char('"')?;
    write_json_escaped(out, s)?;
    out.write_char('"')
}

/// A writer that escapes what it is given for the inside of a JSON string.
struct JsonEscape<'w, W: fmt::Write>(&'w mut W);

impl<W: fmt::Write> fmt::Write for JsonEscape<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        write_json_escaped(self.0, s)
    }
}

/// Writes `s` with JSON string escapes, without quotes. Only ASCII bytes
/// are escaped, so the text is scanned byte by byte: every byte of a
/// multi-byte UTF-8 character is 0x80 or above, and each cut falls between
/// characters.
fn write_json_escaped(out: &mut impl fmt::Write, s: &str) -> fmt::Result {
    // Most text needs no escape: one pass without branches (which the
    // compiler vectorises) tells, and the text is written whole.
    let needs_escape = s
        .bytes()
        .fold(false, |any, b| any | (b < 0x20) | (b == b'"') | (b == b'\\'));
    if !needs_escape {
        return out.write_str(s);
    }
    let mut plain = 0;
    for (i, &b) in s.as_bytes().iter().enumerate() {
        let esc: Option<&str> = match b {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            b'\n' => Some("\\n"),
            b'\r' => Some("\\r"),
            b'\t' => Some("\\t"),
            0..=0x1f => None,
            _ => continue,
        };
        out.write_str(&s[plain..i])?;
        match esc {
            Some(e) => out.write_str(e)?,
            None => write!(out, "\\u{b:04x}")?,
        }
        plain = i + 1;
    }
    out.write_str(&s[plain..])
}

/// The start of every line the kernel writes, up to its own fields:
/// `{"timestamp":"…","level":"…","component":"kernel"`.
pub(super) fn write_head(out: &mut impl fmt::Write, now: std::time::SystemTime, level: &str) -> fmt::Result {
    write!(
        out,
        "{{\"timestamp\":\"{}\",\"level\":\"{level}\",\"component\":\"kernel\"",
        humantime::format_rfc3339_micros(now)
    )
}

fn level_name(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "error",
        Level::WARN => "warning",
        Level::INFO => "info",
        Level::DEBUG => "debug",
        Level::TRACE => "trace",
    }
}

impl<S, N> FormatEvent<S, N> for JsonFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, _: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        write_head(
            &mut writer,
            std::time::SystemTime::now(),
            level_name(event.metadata().level()),
        )?;
        let mut fields = Fields {
            out: &mut writer,
            result: Ok(()),
            message: false,
            name: None,
        };
        event.record(&mut fields);
        // Every line has a message (spec §10.2): an event without one gets
        // its `name` field, else where it was logged.
        if !fields.message {
            let text = fields.name.take();
            let text = text.as_deref().unwrap_or(event.metadata().target());
            fields.write(format_args!(",\"message\":"));
            fields.string(text);
        }
        fields.result?;
        writeln!(writer, "}}")
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use serde_json::Value;
    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::ErrorKind::Other)?
                .extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buf {
        type Writer = Buf;
        fn make_writer(&'a self) -> Buf {
            self.clone()
        }
    }

    /// What `log` logs, as the formatter writes it.
    fn text(log: impl FnOnce()) -> String {
        let buf = Buf::default();
        let subscriber = tracing_subscriber::fmt()
            .event_format(JsonFormat)
            .with_writer(buf.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, log);
        let bytes = buf.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    fn lines(log: impl FnOnce()) -> Vec<Value> {
        text(log)
            .lines()
            .inspect(|l| assert_eq!(l.matches("\"message\":").count(), 1, "one message per line: {l}"))
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    }

    #[test]
    fn each_event_is_one_json_object_with_the_spec_fields() {
        let hostile = "quote \" backslash \\ newline \n cr \r tab \t nul \0 bell \u{7} é ✓";
        let out = lines(|| {
            tracing::info!(
                request_id = "r-1",
                duration_ms = 12u64,
                delta = -3i64,
                ratio = 0.5f64,
                nan = f64::NAN,
                ok = true,
                text = hostile,
                metadata = format_args!("{{\"policies_executed\":2,\"instructions_count\":3}}"),
                counts_json = format_args!("{{\"total_policies\":{},\"agents\":[\"a\"]}}", 4),
                list = ?vec!["a", "b"],
                level = "a field named like a reserved key",
                "Request processed successfully"
            );
            tracing::warn!(metadata = "not { json", "second");
            tracing::error!(name = "BatchSpanProcessor.ExportError", error = "refused");
            tracing::error!(error = "refused");
            tracing::warn!(name = "Export.Failed", message = "data will be lost");
            tracing::warn!("a message with {hostile}");
        });
        assert_eq!(out.len(), 6);
        // The message is escaped as it is formatted.
        assert_eq!(out[5]["message"], format!("a message with {hostile}"));
        let l = &out[0];
        assert_eq!(l["level"], "info");
        assert_eq!(l["component"], "kernel");
        assert!(l["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')));
        assert_eq!(l["message"], "Request processed successfully");
        assert_eq!(l["request_id"], "r-1");
        assert_eq!(l["duration_ms"], 12);
        assert_eq!(l["delta"], -3);
        assert_eq!(l["ratio"], 0.5);
        assert_eq!(l["nan"], Value::Null);
        assert_eq!(l["ok"], true);
        assert_eq!(l["text"], hostile);
        assert_eq!(l["metadata"]["policies_executed"], 2);
        assert_eq!(l["metadata"]["instructions_count"], 3);
        // `_json` fields are written as they are, under the name without it.
        assert_eq!(l["counts"], serde_json::json!({"total_policies": 4, "agents": ["a"]}));
        assert!(l.get("counts_json").is_none());
        assert_eq!(l["list"], serde_json::json!(["a", "b"]));
        assert_eq!(l["field_level"], "a field named like a reserved key");
        assert_eq!(out[1]["level"], "warning");
        assert_eq!(out[1]["metadata"], "not { json");
        // Events without a message: their name, else their target.
        assert_eq!(out[2]["message"], "BatchSpanProcessor.ExportError");
        assert_eq!(out[2]["name"], "BatchSpanProcessor.ExportError");
        assert_eq!(out[2]["error"], "refused");
        assert_eq!(out[3]["message"], module_path!());
        assert_eq!(out[4]["message"], "data will be lost");
    }

    /// The request line written without tracing is the line the tracing
    /// formatter writes for the same fields, byte for byte but for the time.
    #[test]
    fn the_request_line_is_the_line_of_a_traced_event() {
        use super::super::request_log::{Metadata, RequestLine};
        let hostile = "r \"1\" \\ \n\u{1} é";
        let multi = serde_json::json!({"total_policies": 3, "agent_sequence": ["a", "b"]});
        let traced = text(|| {
            tracing::info!(
                request_id = hostile,
                route_name = "route \"x\"",
                agent_name = "agent-a",
                duration_ms = 7u64,
                metadata_json = format_args!("{{\"policies_executed\":2,\"instructions_count\":5}}"),
                "Request processed successfully"
            );
            tracing::info!(request_id = hostile, route_name = "route \"x\"", duration_ms = 9u64,
                metadata_json = %multi, "Policy chain executed across multiple agents");
        });
        let mut direct = String::new();
        let mut line = RequestLine {
            message: "Request processed successfully",
            request_id: hostile,
            route_name: "route \"x\"",
            agent_name: Some("agent-a"),
            duration_ms: 7,
        };
        let now = std::time::SystemTime::now();
        line.format(
            &mut direct,
            now,
            &Metadata::Counts {
                policies_executed: 2,
                instructions_count: 5,
            },
        );
        line.message = "Policy chain executed across multiple agents";
        line.agent_name = None;
        line.duration_ms = 9;
        line.format(&mut direct, now, &Metadata::Json(&multi));
        // The time is the one part that differs: `{"timestamp":"` and 27
        // characters.
        let untimed = |text: &str| -> Vec<String> {
            text.split_inclusive('\n')
                .map(|l| format!("{}{}", &l[..14], &l[41..]))
                .collect()
        };
        assert_eq!(untimed(&direct), untimed(&traced));
        assert_eq!(direct.lines().count(), 2);
        let first: Value = serde_json::from_str(direct.lines().next().unwrap_or_default()).expect("JSON");
        assert_eq!(first["request_id"], hostile);
        assert_eq!(first["metadata"]["instructions_count"], 5);
        assert!(first["timestamp"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z') && t.len() == 27));
    }

    #[test]
    fn strings_escape_to_what_serde_json_reads_back() {
        for s in ["", "plain", "\"", "\\", "\u{1f}", "a\u{0}b", "\u{2028}", "🙂 ok"] {
            let mut out = String::new();
            write_json_str(&mut out, s).unwrap();
            assert_eq!(serde_json::from_str::<String>(&out).unwrap(), s, "{out}");
        }
    }
}
