//! JSON-lines logging (spec §10.2): one object per event with `timestamp`,
//! `level`, `component`, `message` and the event's fields. A field named
//! `metadata` holding JSON text is embedded as an object, so request logs
//! have the nested shape of the spec. The level applies to the kernel's own
//! events (dependencies log warnings and errors), can be changed at runtime
//! (configuration reload), and `RUST_LOG` overrides it.

use std::fmt;
use std::sync::OnceLock;

use serde_json::{Map, Value};
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
pub fn init_logging(level: &str) {
    if FILTER.get().is_some() {
        set_level(level);
        return;
    }
    let (layer, handle) = reload::Layer::new(filter(level));
    let fmt = tracing_subscriber::fmt::layer()
        .event_format(JsonFormat)
        .with_writer(std::io::stdout);
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

struct Fields(Map<String, Value>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        let v = if field.name() == "metadata" {
            serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.into()))
        } else {
            Value::String(value.into())
        };
        self.0.insert(field.name().into(), v);
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        // Lists and maps logged with `?` are Rust debug text; keep them
        // machine-readable when they are valid JSON (Vec<String> is).
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        self.0.insert(field.name().into(), v);
    }
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
        let mut fields = Fields(Map::new());
        fields.0.insert(
            "timestamp".into(),
            humantime::format_rfc3339_micros(std::time::SystemTime::now())
                .to_string()
                .into(),
        );
        fields
            .0
            .insert("level".into(), level_name(event.metadata().level()).into());
        fields.0.insert("component".into(), "kernel".into());
        event.record(&mut fields);
        writeln!(writer, "{}", Value::Object(fields.0))
    }
}
