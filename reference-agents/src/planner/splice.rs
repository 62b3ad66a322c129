//! Rewriting string values of a JSON text in place, by path: everything
//! else (member order, whitespace, numbers as written) is kept byte for byte.

use std::collections::HashMap;

use serde_json::Value;

/// One step of a path: an object member or an array item.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Seg {
    /// An object member.
    Key(String),
    /// An array item.
    Index(usize),
}

/// The string values that differ between `before` and `after` (documents of
/// the same shape), by path, with their new text.
pub fn changed_strings(before: &Value, after: &Value) -> HashMap<Vec<Seg>, String> {
    let mut out = HashMap::new();
    let mut path = Vec::new();
    diff(before, after, &mut path, &mut out);
    out
}

fn diff(a: &Value, b: &Value, path: &mut Vec<Seg>, out: &mut HashMap<Vec<Seg>, String>) {
    match (a, b) {
        (Value::String(x), Value::String(y)) if x != y => {
            out.insert(path.clone(), y.clone());
        }
        (Value::Object(x), Value::Object(y)) => {
            for (k, va) in x {
                if let Some(vb) = y.get(k) {
                    path.push(Seg::Key(k.clone()));
                    diff(va, vb, path, out);
                    path.pop();
                }
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                path.push(Seg::Index(i));
                diff(va, vb, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

struct Walk<'a> {
    text: &'a [u8],
    pos: usize,
    targets: &'a HashMap<Vec<Seg>, String>,
    path: Vec<Seg>,
    /// (start, end, new literal) of the strings to replace, in text order.
    splices: Vec<(usize, usize, String)>,
}

impl Walk<'_> {
    fn ws(&mut self) {
        while self.text.get(self.pos).is_some_and(u8::is_ascii_whitespace) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    fn expect(&mut self, b: u8) -> Option<()> {
        self.ws();
        (self.peek()? == b).then(|| self.pos += 1)
    }

    /// A string literal: its span.
    fn string(&mut self) -> Option<(usize, usize)> {
        self.ws();
        let start = self.pos;
        if self.peek()? != b'"' {
            return None;
        }
        self.pos += 1;
        loop {
            match self.peek()? {
                b'\\' => self.pos += 2,
                b'"' => {
                    self.pos += 1;
                    return Some((start, self.pos));
                }
                _ => self.pos += 1,
            }
        }
    }

    fn value(&mut self) -> Option<()> {
        self.ws();
        match self.peek()? {
            b'{' => {
                self.pos += 1;
                self.ws();
                if self.peek()? == b'}' {
                    self.pos += 1;
                    return Some(());
                }
                loop {
                    let (s, e) = self.string()?;
                    let key: String = serde_json::from_slice(&self.text[s..e]).ok()?;
                    self.expect(b':')?;
                    self.path.push(Seg::Key(key));
                    self.value()?;
                    self.path.pop();
                    self.ws();
                    match self.peek()? {
                        b',' => self.pos += 1,
                        b'}' => {
                            self.pos += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            b'[' => {
                self.pos += 1;
                self.ws();
                if self.peek()? == b']' {
                    self.pos += 1;
                    return Some(());
                }
                let mut i = 0;
                loop {
                    self.path.push(Seg::Index(i));
                    self.value()?;
                    self.path.pop();
                    i += 1;
                    self.ws();
                    match self.peek()? {
                        b',' => self.pos += 1,
                        b']' => {
                            self.pos += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            b'"' => {
                let (s, e) = self.string()?;
                if let Some(new) = self.targets.get(&self.path) {
                    self.splices.push((s, e, serde_json::to_string(new).ok()?));
                }
                Some(())
            }
            _ => {
                while self
                    .peek()
                    .is_some_and(|b| !matches!(b, b',' | b']' | b'}') && !b.is_ascii_whitespace())
                {
                    self.pos += 1;
                }
                Some(())
            }
        }
    }
}

/// `text` (valid JSON) with the string values at `targets` replaced;
/// `None` when the text cannot be walked.
pub fn replace_strings(text: &[u8], targets: &HashMap<Vec<Seg>, String>) -> Option<Vec<u8>> {
    let mut w = Walk {
        text,
        pos: 0,
        targets,
        path: Vec::new(),
        splices: Vec::new(),
    };
    w.value()?;
    let mut out = Vec::with_capacity(text.len() + w.splices.iter().map(|s| s.2.len()).sum::<usize>());
    let mut copied = 0;
    for (s, e, new) in &w.splices {
        out.extend_from_slice(&text[copied..*s]);
        out.extend_from_slice(new.as_bytes());
        copied = *e;
    }
    out.extend_from_slice(&text[copied..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_the_changed_strings_change() {
        let text =
            br#"{ "z": 1.50, "messages" : [ {"role":"tool", "content": "a\"b"}, {"content": "keep"} ], "a": "x" }"#;
        let before: Value = serde_json::from_slice(text).unwrap();
        let mut after = before.clone();
        after["messages"][0]["content"] = json!("new \"quoted\" é");
        after["a"] = json!("y");
        let changes = changed_strings(&before, &after);
        assert_eq!(changes.len(), 2);
        let out = replace_strings(text, &changes).unwrap();
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            r#"{ "z": 1.50, "messages" : [ {"role":"tool", "content": "new \"quoted\" é"}, {"content": "keep"} ], "a": "y" }"#
        );
        assert_eq!(serde_json::from_slice::<Value>(&out).unwrap(), after);
    }

    proptest::proptest! {
        #[test]
        fn any_document_comes_back_equal(s in "[ -~é]{0,20}", k in "[a-z\"\\\\]{1,5}", n in -1000i64..1000) {
            let k = format!("k{k}");
            let before = json!({"n": n, k.clone(): [s.clone(), {"x": s.clone(), "y": null}], "t": true});
            let mut after = before.clone();
            after[&k][1]["x"] = json!(format!("<{s}>"));
            let text = serde_json::to_vec_pretty(&before).unwrap();
            let out = replace_strings(&text, &changed_strings(&before, &after)).unwrap();
            proptest::prop_assert_eq!(serde_json::from_slice::<Value>(&out).unwrap(), after);
        }
    }
}
