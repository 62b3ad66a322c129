//! Redacting inside a JSON document without re-serializing it: string
//! values are rewritten in place, keys, numbers, layout and key order are
//! kept byte for byte, so the document stays valid and otherwise unchanged.

/// Applies `redact` to every string value (not key) of the valid JSON text
/// `doc`. `redact` returns `Some(new)` to replace a value. Returns `None`
/// when nothing changed.
pub(crate) fn redact_strings(doc: &str, mut redact: impl FnMut(&str) -> Option<String>) -> Option<String> {
    let bytes = doc.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'"' {
            i += 1;
            continue;
        }
        let start = i;
        let mut escaped = false;
        i += 1;
        while i < bytes.len() && bytes[i] != b'"' {
            if bytes[i] == b'\\' {
                escaped = true;
                i += 1;
            }
            i += 1;
        }
        let end = (i + 1).min(bytes.len());
        i = end;
        let is_key = bytes[end..]
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|b| *b == b':');
        if is_key {
            continue;
        }
        let literal = &doc[start..end];
        let replacement = if escaped {
            serde_json::from_str::<String>(literal)
                .ok()
                .and_then(|s| redact(&s))
                .and_then(|s| serde_json::to_string(&s).ok())
        } else {
            // No escapes: the content is the literal minus its quotes, and a
            // mask of plain ASCII keeps it escape-free.
            literal
                .get(1..literal.len().saturating_sub(1))
                .and_then(&mut redact)
                .and_then(|s| serde_json::to_string(&s).ok())
        };
        if let Some(new) = replacement {
            let buf = out.get_or_insert_with(|| String::with_capacity(doc.len()));
            buf.push_str(&doc[copied..start]);
            buf.push_str(&new);
            copied = end;
        }
    }
    let mut buf = out?;
    buf.push_str(&doc[copied..]);
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upper_if_secret(s: &str) -> Option<String> {
        s.contains("secret").then(|| "[X]".to_string())
    }

    #[test]
    fn only_values_change_and_layout_is_kept() {
        let doc = r#"{ "secret" : "a secret",  "n": 1, "list": ["secret\n\"q\"", "ok"], "nested": {"k": "secret"} }"#;
        let out = redact_strings(doc, upper_if_secret).unwrap();
        assert_eq!(
            out,
            r#"{ "secret" : "[X]",  "n": 1, "list": ["[X]", "ok"], "nested": {"k": "[X]"} }"#
        );
        assert!(serde_json::from_str::<serde_json::Value>(&out).is_ok());
        assert_eq!(redact_strings(r#"{"a":"b"}"#, upper_if_secret), None);
        assert_eq!(redact_strings(r#""top secret""#, upper_if_secret).unwrap(), r#""[X]""#);
    }

    proptest::proptest! {
        /// Whatever the strings hold (quotes, escapes, unicode, PII), the
        /// result is valid JSON with the same keys and the same non-strings.
        #[test]
        fn redacted_json_stays_valid(key in ".*", value in ".*", pii in "[a-z]{1,8}@[a-z]{1,8}\\.io") {
            let doc = serde_json::json!({
                key.clone(): format!("{value} {pii}"),
                "list": [value.clone(), 7, {"n": null, "pii": pii}],
            })
            .to_string();
            let mut counts = crate::guardrail::Counts::new();
            let redactor = crate::guardrail::Redactor::shared().unwrap();
            let all = crate::guardrail::PiiType::ALL;
            let out = redactor.redact_body(doc.as_bytes(), &all, &crate::guardrail::DEFAULT_REGIONS, &mut counts).expect("the e-mail is found");
            let parsed: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
            let original: serde_json::Value = serde_json::from_str(&doc).unwrap();
            let keys = |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
            proptest::prop_assert_eq!(keys(&parsed), keys(&original));
            proptest::prop_assert_eq!(&parsed["list"][1], &serde_json::json!(7));
            proptest::prop_assert_eq!(&parsed["list"][2]["pii"], &serde_json::json!("[REDACTED:email]"));
        }
    }
}
