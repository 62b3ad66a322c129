//! The routing headers of MCP 2026-07-28, checked against the body.
//!
//! A 2026-07-28 request repeats its method in `Mcp-Method`, its target in
//! `Mcp-Name` (`params.name`, `params.uri` or `params.taskId`) and its
//! `_meta` protocol version in `MCP-Protocol-Version`, so that proxies can
//! route without reading the body. The body is the source of truth: a
//! header that disagrees with it (after decoding the `=?base64?...?=`
//! form), or one the revision requires that is missing, is refused with
//! HTTP 400 and -32020 (`HeaderMismatch`), as the specification says a
//! server answers it. No policy decides on these headers: they could
//! name another call than the one the server runs.
//!
//! A request of an older revision (no `_meta` version) needs none of
//! them, but one it sends must still agree with its body.

use serde_json::Value;

use super::shapes::{is_2026, read_call, META_VERSION};
use crate::jsonrpc::{Envelope, Message};

/// The value of an MCP routing header: as sent, or decoded from the SDKs'
/// `=?base64?...?=` form (values that are not printable ASCII); `None` when
/// that form does not decode to UTF-8.
pub fn routing_header(raw: &str) -> Option<String> {
    use base64::Engine;
    match raw.strip_prefix("=?base64?").and_then(|r| r.strip_suffix("?=")) {
        Some(payload) => base64::engine::general_purpose::STANDARD
            .decode(payload)
            .ok()
            .and_then(|b| String::from_utf8(b).ok()),
        None => Some(raw.to_string()),
    }
}

/// The `_meta` protocol version of a message, when it is a string.
fn meta_version(m: &Message) -> Option<&str> {
    m.params.as_ref()?.get("_meta")?.get(META_VERSION)?.as_str()
}

/// Why the headers disagree with the body, naming the header; `None` when
/// they agree. `header` reads a request header by its lower-case name.
pub fn mismatch<'h>(header: impl Fn(&str) -> Option<&'h str>, env: &Envelope) -> Option<String> {
    let single = match env.messages.as_slice() {
        [m] if !env.batch => Some(m),
        _ => None,
    };
    let version = single.and_then(meta_version);
    let modern = version.is_some_and(is_2026);
    let target = single.and_then(|m| read_call(m).ok().flatten()).and_then(|c| c.target);
    let checks: [(&str, Option<&str>, bool); 3] = [
        ("mcp-method", single.and_then(|m| m.method.as_deref()), modern),
        ("mcp-name", target, modern && target.is_some()),
        ("mcp-protocol-version", version, modern),
    ];
    for (name, body, required) in checks {
        match (header(name), body) {
            (None, _) if required => {
                return Some(format!(
                    "header {name} is missing (required by protocol {})",
                    version.unwrap_or("-")
                ))
            }
            (None, _) => {}
            // An older request's protocol header names the session's
            // version, which its body does not repeat.
            (Some(_), None) if name == "mcp-protocol-version" => {}
            (Some(raw), body) => {
                let decoded = routing_header(raw);
                if single.is_none() || decoded.as_deref() != body {
                    return Some(format!("header {name} does not match the body"));
                }
            }
        }
    }
    None
}

/// The `id` a header refusal answers with: a single message's, else null.
pub fn reply_id(env: &Envelope) -> Value {
    match env.messages.as_slice() {
        [m] if !env.batch => m.id.clone().unwrap_or(Value::Null),
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::parse;
    use std::collections::HashMap;

    fn check(headers: &[(&str, &str)], body: &str) -> Option<String> {
        let h: HashMap<&str, &str> = headers.iter().copied().collect();
        let env = parse(body.as_bytes()).expect("a body");
        mismatch(|n| h.get(n).copied(), &env)
    }

    const CALL_2026: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
    const CALL_2025: &str =
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file","arguments":{}}}"#;

    #[test]
    fn a_2026_request_needs_its_headers_and_they_must_agree() {
        let all = [
            ("mcp-method", "tools/call"),
            ("mcp-name", "read_file"),
            ("mcp-protocol-version", "2026-07-28"),
        ];
        assert_eq!(check(&all, CALL_2026), None);
        for skip in 0..3 {
            let some: Vec<_> = all
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != skip)
                .map(|(_, h)| *h)
                .collect();
            let why = check(&some, CALL_2026).expect("refused");
            assert!(why.contains(all[skip].0) && why.contains("missing"), "{why}");
        }
        let mut other = all;
        other[1] = ("mcp-name", "delete_file");
        assert!(check(&other, CALL_2026).unwrap().contains("mcp-name"));
        other = all;
        other[2] = ("mcp-protocol-version", "2025-11-25");
        assert!(check(&other, CALL_2026).unwrap().contains("mcp-protocol-version"));
        // The base64 form is decoded before comparing.
        other = all;
        other[1] = ("mcp-name", "=?base64?cmVhZF9maWxl?=");
        assert_eq!(check(&other, CALL_2026), None);
        other[1] = ("mcp-name", "=?base64?ZGVsZXRlX2ZpbGU=?=");
        assert!(check(&other, CALL_2026).is_some());
        other[1] = ("mcp-name", "=?base64?!!?=");
        assert!(check(&other, CALL_2026).is_some());
    }

    #[test]
    fn an_older_request_needs_none_but_what_it_sends_must_agree() {
        assert_eq!(check(&[], CALL_2025), None);
        assert_eq!(check(&[("mcp-protocol-version", "2025-11-25")], CALL_2025), None);
        assert!(check(&[("mcp-method", "tools/list")], CALL_2025).is_some());
        let batch = format!("[{CALL_2025}]");
        assert!(check(&[("mcp-method", "tools/call")], &batch).is_some());
        assert_eq!(check(&[], &batch), None);
    }
}
