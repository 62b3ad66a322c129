//! What an audit line holds, with secrets redacted: credentials in headers
//! (Authorization, cookies, API keys, tokens) and in query parameters.

use std::time::SystemTime;

use serde_json::{Map, Value};

use policy_agents::{CallInfo, Metadata, RequestView, ResponseView};

/// The value written instead of a secret.
pub const REDACTED: &str = "[REDACTED]";

/// Largest response body kept in a line.
pub const MAX_BODY: usize = 64 * 1024;

const SECRET_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "x-api-key",
    "api-key",
    "apikey",
    "x-auth-token",
    "x-amz-security-token",
    "x-csrf-token",
    "x-xsrf-token",
];

const SECRET_WORDS: &[&str] = &[
    "token",
    "secret",
    "password",
    "passwd",
    "api-key",
    "api_key",
    "apikey",
    "session",
    "credential",
];

const SECRET_PARAMS: &[&str] = &["key", "sig", "signature", "code", "auth", "jwt"];

fn is_secret_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    SECRET_HEADERS.contains(&lower.as_str()) || SECRET_WORDS.iter().any(|w| lower.contains(w))
}

/// A header value as logged: secrets replaced, keeping an auth scheme.
pub fn redact_header(name: &str, value: &str) -> String {
    if !is_secret_name(name) {
        return value.to_string();
    }
    let lower = name.to_ascii_lowercase();
    if lower.ends_with("authorization") {
        if let Some((scheme, _)) = value.split_once(' ') {
            return format!("{scheme} {REDACTED}");
        }
    }
    REDACTED.to_string()
}

/// A path as logged: values of secret-looking query parameters replaced.
pub fn redact_path(path: &str) -> String {
    let Some((base, query)) = path.split_once('?') else {
        return path.to_string();
    };
    let parts: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _)) if is_secret_name(k) || SECRET_PARAMS.contains(&k.to_ascii_lowercase().as_str()) => {
                format!("{k}={REDACTED}")
            }
            _ => pair.to_string(),
        })
        .collect();
    format!("{base}?{}", parts.join("&"))
}

fn headers<'a>(iter: impl Iterator<Item = (&'a str, &'a str)>) -> Value {
    Value::Array(
        iter.map(|(k, v)| Value::Array(vec![Value::from(k), Value::from(redact_header(k, v))]))
            .collect(),
    )
}

/// The request part of a line.
pub fn request_record(request: &RequestView<'_>, call: &CallInfo, metadata: &Metadata) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(
        "ts".into(),
        Value::from(humantime::format_rfc3339_millis(SystemTime::now()).to_string()),
    );
    m.insert("request_id".into(), Value::from(call.request_id.as_str()));
    m.insert("phase".into(), Value::from(call.phase.as_str()));
    m.insert("method".into(), Value::from(request.method()));
    m.insert("path".into(), Value::from(redact_path(request.path())));
    m.insert("authority".into(), Value::from(request.authority()));
    m.insert("client_ip".into(), Value::from(request.client_ip().unwrap_or_default()));
    m.insert("request_headers".into(), headers(request.headers()));
    let md: Map<String, Value> = metadata
        .iter()
        .map(|(k, v)| (k.to_string(), Value::from(if is_secret_name(k) { REDACTED } else { v })))
        .collect();
    m.insert("metadata".into(), Value::Object(md));
    if let Some(tp) = &call.traceparent {
        m.insert("traceparent".into(), Value::from(tp.as_str()));
    }
    m
}

/// Shortest secret value scrubbed from bodies: shorter ones would match
/// ordinary text.
const MIN_SCRUBBED: usize = 6;

/// The values of the request's secret headers (whole values, the credential
/// after an auth scheme, and each cookie value), to scrub wherever else they
/// appear: an upstream may echo them in its body.
pub fn secret_values(request: &RequestView<'_>) -> Vec<String> {
    let mut out = Vec::new();
    for (name, value) in request.headers() {
        if !is_secret_name(name) {
            continue;
        }
        out.push(value.to_string());
        if let Some((_, credential)) = value.split_once(' ') {
            out.push(credential.trim().to_string());
        }
        if name.eq_ignore_ascii_case("cookie") {
            out.extend(
                value
                    .split(';')
                    .filter_map(|c| c.split_once('='))
                    .map(|(_, v)| v.trim().to_string()),
            );
        }
    }
    out.retain(|v| v.len() >= MIN_SCRUBBED);
    // Longest first, so a whole value goes before the parts it contains.
    out.sort_by_key(|v| std::cmp::Reverse(v.len()));
    out
}

/// `text` with every occurrence of a secret replaced.
pub fn scrub(text: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .fold(text.to_string(), |t, s| t.replace(s.as_str(), REDACTED))
}

/// Adds the response part to a line; `secrets` are scrubbed from the body.
pub fn add_response(m: &mut Map<String, Value>, response: &ResponseView<'_>, log_body: bool, secrets: &[String]) {
    m.insert("status".into(), Value::from(response.status()));
    m.insert("response_headers".into(), headers(response.headers()));
    if let Some(body) = response.body().filter(|_| log_body) {
        let kept = &body[..body.len().min(MAX_BODY)];
        m.insert(
            "response_body".into(),
            Value::from(scrub(&String::from_utf8_lossy(kept), secrets)),
        );
        if kept.len() < body.len() {
            m.insert("response_body_truncated".into(), Value::from(true));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoed_secrets_are_scrubbed_from_bodies() {
        let secrets = vec![
            "Bearer abc.def.ghi".to_string(),
            "abc.def.ghi".to_string(),
            "s3cret-cookie".to_string(),
        ];
        let body = r#"{"authorization":"Bearer abc.def.ghi","cookie":"sid=s3cret-cookie","raw":"abc.def.ghi"}"#;
        let out = scrub(body, &secrets);
        assert!(!out.contains("abc.def") && !out.contains("s3cret"), "{out}");
        assert_eq!(out.matches(REDACTED).count(), 3);
    }

    #[test]
    fn secrets_are_redacted() {
        assert_eq!(redact_header("Authorization", "Bearer abc.def"), "Bearer [REDACTED]");
        assert_eq!(redact_header("cookie", "sid=1"), REDACTED);
        assert_eq!(redact_header("x-api-key", "k"), REDACTED);
        assert_eq!(redact_header("x-goog-api-key", "k"), REDACTED);
        assert_eq!(redact_header("x-refresh-token", "k"), REDACTED);
        assert_eq!(redact_header("accept", "*/*"), "*/*");
        assert_eq!(
            redact_path("/a?user=1&api_key=s&access_token=t&key=k"),
            "/a?user=1&api_key=[REDACTED]&access_token=[REDACTED]&key=[REDACTED]"
        );
        assert_eq!(redact_path("/plain"), "/plain");
    }
}
