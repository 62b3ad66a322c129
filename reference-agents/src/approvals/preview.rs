//! What approvers see of a call's arguments: the guardrails' PII patterns
//! and secret-looking member names redacted, long strings cut, deep
//! nesting elided. The digest binds the call; the preview only informs.

use serde_json::{Map, Value};

use crate::guardrail::{PiiType, Redactor};
use crate::tool::looks_secret;

const MAX_STRING: usize = 256;
const MAX_DEPTH: usize = 8;
const MAX_ITEMS: usize = 64;

/// The redacted preview of `args`.
pub fn preview(args: &Value) -> Value {
    let redactor = Redactor::shared().ok();
    walk(args, 0, redactor)
}

fn walk(v: &Value, depth: usize, r: Option<&Redactor>) -> Value {
    if depth >= MAX_DEPTH {
        return Value::String("[…]".into());
    }
    match v {
        Value::String(s) => {
            let red = match r {
                Some(r) => r
                    .redact_text(s, &PiiType::ALL, &[], &mut Vec::new())
                    .unwrap_or_else(|| s.clone()),
                // No patterns: show nothing rather than something unredacted.
                None => "[REDACTED]".to_string(),
            };
            Value::String(cut(&red))
        }
        Value::Array(a) => {
            let mut out: Vec<Value> = a.iter().take(MAX_ITEMS).map(|x| walk(x, depth + 1, r)).collect();
            if a.len() > MAX_ITEMS {
                out.push(Value::String(format!("[… {} more]", a.len() - MAX_ITEMS)));
            }
            Value::Array(out)
        }
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, x) in m.iter().take(MAX_ITEMS) {
                let shown = if looks_secret(k) {
                    Value::String("[REDACTED:secret]".into())
                } else {
                    walk(x, depth + 1, r)
                };
                out.insert(cut(k), shown);
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

fn cut(s: &str) -> String {
    if s.chars().count() <= MAX_STRING {
        return s.to_string();
    }
    let mut out: String = s.chars().take(MAX_STRING).collect();
    out.push('…');
    out
}
