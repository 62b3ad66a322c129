//! The JSON-RPC messages of a server's reply, as `application/json` (one
//! message or an array) or as `text/event-stream` (one message per event's
//! `data:` lines). [`rewrite`] changes messages and keeps everything else
//! byte for byte: other events, `event:`/`id:`/`retry:` lines, comments,
//! blank lines and line endings.

use serde_json::Value;

/// The format of a reply body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `application/json` (or `+json`).
    Json,
    /// `text/event-stream`.
    Sse,
}

impl Format {
    /// The format from a content-type; `None` for anything else.
    pub fn of(content_type: Option<&str>) -> Option<Format> {
        let ct = content_type?.split(';').next()?.trim();
        let b = ct.as_bytes();
        let ends_json = b.len() >= 5 && b[b.len() - 5..].eq_ignore_ascii_case(b"+json");
        if ct.eq_ignore_ascii_case("text/event-stream") {
            Some(Format::Sse)
        } else if ct.eq_ignore_ascii_case("application/json") || ends_json {
            Some(Format::Json)
        } else {
            None
        }
    }
}

/// Applies `f` to each message (a JSON value); `f` returns true when it
/// changed the message. Returns the new body when any message changed.
/// Errors: a JSON body that does not parse, an SSE body that is not UTF-8.
pub fn rewrite(body: &[u8], format: Format, f: &mut dyn FnMut(&mut Value) -> bool) -> Result<Option<Vec<u8>>, String> {
    match format {
        Format::Json => {
            let mut value: Value = serde_json::from_slice(body).map_err(|e| format!("reply is not JSON: {e}"))?;
            let changed = match &mut value {
                Value::Array(items) => items.iter_mut().fold(false, |c, m| f(m) | c),
                one => f(one),
            };
            Ok(changed.then(|| value.to_string().into_bytes()))
        }
        Format::Sse => {
            let text = std::str::from_utf8(body).map_err(|_| "event stream is not UTF-8".to_string())?;
            Ok(rewrite_sse(text, f).map(String::into_bytes))
        }
    }
}

/// Calls `f` on each message without changing anything.
pub fn each(body: &[u8], format: Format, f: &mut dyn FnMut(&Value)) -> Result<(), String> {
    rewrite(body, format, &mut |v| {
        f(v);
        false
    })
    .map(|_| ())
}

/// A reply whose body is compressed cannot be read: an error (the route's
/// `on_failure` decides), never a list, a card or a question passed unread.
pub fn refuse_encoded(
    policy: &str,
    response: &policy_agents::ResponseView<'_>,
) -> Result<(), policy_agents::PolicyError> {
    match response.header("content-encoding").map(str::trim) {
        Some(enc) if !enc.is_empty() && !enc.eq_ignore_ascii_case("identity") => Err(policy_agents::PolicyError::new(format!(
            "{policy}: cannot read a {enc}-encoded reply; let the agent answer uncompressed (remove accept-encoding on the route)"
        ))),
        _ => Ok(()),
    }
}

fn is_blank(line: &str) -> bool {
    line.trim_end_matches(['\r', '\n']).is_empty()
}

/// The value of a `data` field line, if it is one.
fn data_value(line: &str) -> Option<&str> {
    let content = line.trim_end_matches(['\r', '\n']);
    let rest = content.strip_prefix("data")?;
    if rest.is_empty() {
        return Some("");
    }
    let rest = rest.strip_prefix(':')?;
    Some(rest.strip_prefix(' ').unwrap_or(rest))
}

fn rewrite_sse(text: &str, f: &mut dyn FnMut(&mut Value) -> bool) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut event: Vec<&str> = Vec::new();
    let mut changed = false;
    let mut flush = |event: &mut Vec<&str>, out: &mut String| {
        let data: Vec<&str> = event.iter().filter_map(|l| data_value(l)).collect();
        let replaced = if data.is_empty() {
            None
        } else {
            serde_json::from_str::<Value>(&data.join("\n"))
                .ok()
                .and_then(|mut v| f(&mut v).then(|| v.to_string()))
        };
        match replaced {
            None => event.iter().for_each(|l| out.push_str(l)),
            Some(json) => {
                changed = true;
                let mut written = false;
                for l in event.iter() {
                    if data_value(l).is_none() {
                        out.push_str(l);
                    } else if !written {
                        written = true;
                        let ending = if l.ends_with("\r\n") {
                            "\r\n"
                        } else if l.ends_with('\n') {
                            "\n"
                        } else {
                            ""
                        };
                        out.push_str("data: ");
                        out.push_str(&json);
                        out.push_str(ending);
                    }
                }
            }
        }
        event.clear();
    };
    for line in text.split_inclusive('\n') {
        if is_blank(line) {
            flush(&mut event, &mut out);
            out.push_str(line);
        } else {
            event.push(line);
        }
    }
    flush(&mut event, &mut out);
    changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drop_b(v: &mut Value) -> bool {
        let Some(tools) = v.pointer_mut("/result/tools").and_then(Value::as_array_mut) else {
            return false;
        };
        let before = tools.len();
        tools.retain(|t| t["name"] != "b");
        tools.len() != before
    }

    #[test]
    fn sse_framing_is_kept() {
        let body = ": comment\r\nevent: message\r\nid: 7\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\r\n\r\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\r\ndata: \"result\":{\"tools\":[{\"name\":\"a\"},{\"name\":\"b\"}]}}\r\n\r\n";
        let out = String::from_utf8(rewrite(body.as_bytes(), Format::Sse, &mut drop_b).unwrap().unwrap()).unwrap();
        let lines: Vec<&str> = out.split_inclusive('\n').collect();
        assert_eq!(lines.len(), 8, "{out:?}");
        assert_eq!(&lines[..5], &body.split_inclusive('\n').collect::<Vec<_>>()[..5]);
        assert_eq!(lines[5], "event: message\r\n");
        let data = lines[6]
            .strip_prefix("data: ")
            .and_then(|l| l.strip_suffix("\r\n"))
            .unwrap();
        let v: Value = serde_json::from_str(data).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "a"}]}})
        );
        assert_eq!(lines[7], "\r\n");
        // Nothing to change: no new body.
        assert!(rewrite(b"event: x\ndata: {}\n\n", Format::Sse, &mut drop_b)
            .unwrap()
            .is_none());
        assert!(rewrite(b"data: not json\n\n", Format::Sse, &mut drop_b)
            .unwrap()
            .is_none());
        assert!(rewrite(&[0xff, 0xfe], Format::Sse, &mut drop_b).is_err());
    }

    #[test]
    fn json_single_and_array() {
        let one = br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a"},{"name":"b"}]}}"#;
        let out: Value = serde_json::from_slice(&rewrite(one, Format::Json, &mut drop_b).unwrap().unwrap()).unwrap();
        assert_eq!(out["result"]["tools"], serde_json::json!([{"name": "a"}]));
        let many =
            br#"[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"b"}]}}]"#;
        let out: Value = serde_json::from_slice(&rewrite(many, Format::Json, &mut drop_b).unwrap().unwrap()).unwrap();
        assert_eq!(out[1]["result"]["tools"], serde_json::json!([]));
        assert!(rewrite(b"{", Format::Json, &mut drop_b).is_err());
    }

    #[test]
    fn content_types() {
        assert_eq!(Format::of(Some("text/event-stream; charset=utf-8")), Some(Format::Sse));
        assert_eq!(Format::of(Some("Application/JSON")), Some(Format::Json));
        assert_eq!(Format::of(Some("text/plain")), None);
        assert_eq!(Format::of(None), None);
        assert_eq!(Format::of(Some("application/vnd.x+JSON")), Some(Format::Json));
        assert_eq!(Format::of(Some("text/plainé")), None);
    }
}
