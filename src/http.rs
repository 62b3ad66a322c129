//! HTTP helpers shared by config validation, reply checking and translation:
//! header legality, and parsing and rewriting of `:path` query strings.

use std::borrow::Cow;

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, CONTROLS};

/// True for an RFC 9110 token (a legal header name), optionally prefixed by
/// `:` for pseudo-headers (callers reject those where they are not allowed).
pub fn valid_header_name(name: &[u8]) -> bool {
    let body = name.strip_prefix(b":").unwrap_or(name);
    !body.is_empty() && body.iter().all(|&c| is_tchar(c))
}

fn is_tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

/// True when a header value holds no CR, LF or NUL (Envoy fails the whole
/// request on those).
pub fn valid_header_value(value: &[u8]) -> bool {
    !value.iter().any(|&c| c == b'\r' || c == b'\n' || c == 0)
}

/// True for a legal HTTP method token.
pub fn valid_method(method: &str) -> bool {
    !method.is_empty() && method.bytes().all(is_tchar)
}

/// Characters percent-encoded in query names and values: controls, space and
/// the characters that delimit or terminate a query component.
const QUERY_COMPONENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'&')
    .add(b'+')
    .add(b'<')
    .add(b'=')
    .add(b'>')
    .add(b'%')
    .add(b'`')
    .add(b'{')
    .add(b'}');

/// Splits a `:path` into its path and query (without the `?`).
pub fn split_path(full: &str) -> (&str, Option<&str>) {
    match full.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (full, None),
    }
}

/// Decodes one query component (`+` is a space, `%XX` escapes).
pub fn decode_component(raw: &str) -> Cow<'_, str> {
    if raw.contains('+') {
        let spaced = raw.replace('+', " ");
        Cow::Owned(percent_decode_str(&spaced).decode_utf8_lossy().into_owned())
    } else {
        percent_decode_str(raw).decode_utf8_lossy()
    }
}

/// A query string's decoded (name, value) pairs, in order, borrowed where
/// no escape needed decoding.
pub fn query_pairs(query: &str) -> impl Iterator<Item = (Cow<'_, str>, Cow<'_, str>)> {
    query.split('&').filter(|kv| !kv.is_empty()).map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (decode_component(k), decode_component(v))
    })
}

/// Parses a query string into decoded (name, value) pairs, in order.
pub fn parse_query(query: &str) -> Vec<(String, String)> {
    query_pairs(query)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// Percent-encodes a query name or value.
pub fn encode_component(raw: &str) -> String {
    utf8_percent_encode(raw, QUERY_COMPONENT).to_string()
}

/// A `:path` being rewritten: the path part plus the raw query pairs, so that
/// parameters nobody touched keep their original encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathAndQuery {
    path: String,
    /// Raw (still encoded) `name=value` segments, in order.
    query: Option<Vec<String>>,
}

impl PathAndQuery {
    /// Parses a `:path` value. The parts kept as they are get control bytes,
    /// spaces and non-ASCII percent-encoded, and the path part always starts
    /// with `/`, so that a rewrite never produces a `:path` Envoy would
    /// refuse, whatever it received.
    pub fn parse(full: &str) -> Self {
        let (path, query) = split_path(full);
        let path = wire_safe(path);
        Self {
            path: if path.starts_with('/') {
                path
            } else {
                format!("/{path}")
            },
            query: query.map(|q| q.split('&').filter(|s| !s.is_empty()).map(wire_safe).collect()),
        }
    }

    /// Replaces the path. A `?query` in `new_path` replaces the query too.
    pub fn set_path(&mut self, new_path: &str) {
        let parsed = Self::parse(new_path);
        self.path = parsed.path;
        if parsed.query.is_some() {
            self.query = parsed.query;
        }
    }

    /// Sets `name` to `value`, replacing every earlier value of `name`. The
    /// new pair takes the place of the first old one, or goes last.
    pub fn set_param(&mut self, name: &str, value: &str) {
        let pair = format!("{}={}", encode_component(name), encode_component(value));
        let segs = self.query.get_or_insert_with(Vec::new);
        let mut placed = false;
        segs.retain_mut(|seg| {
            if segment_name(seg) != name {
                return true;
            }
            if placed {
                return false;
            }
            placed = true;
            *seg = pair.clone();
            true
        });
        if !placed {
            segs.push(pair);
        }
    }

    /// Removes every value of `name`.
    pub fn remove_param(&mut self, name: &str) {
        if let Some(segs) = &mut self.query {
            segs.retain(|seg| segment_name(seg) != name);
        }
    }

    /// The rewritten `:path`. An emptied query string is dropped.
    pub fn to_path(&self) -> String {
        match &self.query {
            Some(segs) if !segs.is_empty() => format!("{}?{}", self.path, segs.join("&")),
            _ => self.path.clone(),
        }
    }
}

/// Bytes never allowed raw in a `:path`: controls (CR, LF, NUL...), space,
/// and (by `utf8_percent_encode` itself) everything outside ASCII.
const PATH_UNSAFE: &AsciiSet = &CONTROLS.add(b' ');

fn wire_safe(s: &str) -> String {
    utf8_percent_encode(s, PATH_UNSAFE).to_string()
}

fn segment_name(seg: &str) -> Cow<'_, str> {
    decode_component(seg.split_once('=').map(|(k, _)| k).unwrap_or(seg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_names_and_values() {
        assert!(valid_header_name(b"x-user-id"));
        assert!(valid_header_name(b":path"));
        assert!(!valid_header_name(b""));
        assert!(!valid_header_name(b"bad name"));
        assert!(!valid_header_name(b"x\r\n"));
        assert!(valid_header_value(b"ok value\t"));
        assert!(!valid_header_value(b"a\r\nb"));
        assert!(!valid_header_value(b"a\0"));
    }

    #[test]
    fn query_rewrite_keeps_untouched_encoding() {
        let mut p = PathAndQuery::parse("/a/b?x=1&q=a%20b&x=2&keep=%2F");
        p.set_param("x", "new value&");
        p.remove_param("q");
        p.set_param("added", "ü");
        assert_eq!(p.to_path(), "/a/b?x=new%20value%26&keep=%2F&added=%C3%BC");
    }

    #[test]
    fn set_path_keeps_query_unless_given() {
        let mut p = PathAndQuery::parse("/old?debug=1");
        p.set_path("/v2/new");
        assert_eq!(p.to_path(), "/v2/new?debug=1");
        p.set_path("/v3?only=this");
        assert_eq!(p.to_path(), "/v3?only=this");
        p.remove_param("only");
        assert_eq!(p.to_path(), "/v3");
    }

    /// Regression: fuzz/regressions/stream/crash-4eec379c (a request without
    /// `:path` whose agent set a query parameter gave `:path` "?q=v%20w").
    #[test]
    fn a_missing_path_becomes_slash() {
        let mut p = PathAndQuery::parse("");
        p.set_param("q", "v w");
        assert_eq!(p.to_path(), "/?q=v%20w");
        assert_eq!(PathAndQuery::parse("?a=1").to_path(), "/?a=1");
    }

    /// Regression: fuzz/regressions/stream/crash-2f94e0f1 (CR/LF in the
    /// `:path` Envoy sent survived a query rewrite).
    #[test]
    fn kept_parts_are_made_wire_safe() {
        let mut p = PathAndQuery::parse("/a\r\nb c?x=1\n2&y=é");
        p.set_param("z", "1");
        assert_eq!(p.to_path(), "/a%0D%0Ab%20c?x=1%0A2&y=%C3%A9&z=1");
    }

    /// Regression: fuzz/regressions/stream/crash-660eafb9 (a `:path` that did
    /// not start with `/` survived a query rewrite).
    #[test]
    fn the_path_always_starts_with_a_slash() {
        let mut p = PathAndQuery::parse("a?/x=1");
        p.set_param("x", "v w");
        assert_eq!(p.to_path(), "/a?/x=1&x=v%20w");
        assert_eq!(PathAndQuery::parse("*").to_path(), "/*");
    }

    #[test]
    fn parse_query_decodes() {
        let q = parse_query("a=1&b=x+y&c=%41&d&");
        assert_eq!(
            q,
            vec![
                ("a".into(), "1".into()),
                ("b".into(), "x y".into()),
                ("c".into(), "A".into()),
                ("d".into(), "".into())
            ]
        );
    }

    #[test]
    fn encoded_round_trip() {
        for v in ["plain", "a b&c=d", "100%", "ü/é?#", "+"] {
            let mut p = PathAndQuery::parse("/x");
            p.set_param("k", v);
            let out = p.to_path();
            let (_, q) = split_path(&out);
            assert_eq!(parse_query(q.unwrap()), vec![("k".to_string(), v.to_string())]);
        }
    }
}
