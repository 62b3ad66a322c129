//! Server-sent events (`text/event-stream`, the WHATWG HTML "server-sent
//! events" format), as LLM APIs and MCP servers stream them.
//!
//! [`Framer`] cuts a body that arrives in arbitrary network chunks into
//! complete events: the kernel holds an event split across chunks until its
//! blank line arrives, so that a policy always sees whole events. Framing
//! never changes a byte: the events it returns, concatenated, are exactly the
//! bytes pushed (plus [`Framer::finish`]'s remainder).
//!
//! [`data`] and [`with_data`] read and rewrite one event's `data` field, for
//! policies that look into JSON payloads (`choices[].delta.content`, ...).

use std::borrow::Cow;

use bytes::{Bytes, BytesMut};

/// The largest event the kernel holds by default: 1 MiB.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 1024 * 1024;

/// Why a stream cannot be framed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// An event grew past the limit without ending.
    EventTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::EventTooLarge { limit } => {
                write!(f, "a server-sent event grew past {limit} bytes without ending")
            }
        }
    }
}

impl std::error::Error for FrameError {}

/// Cuts a streamed body into complete events.
///
/// An event ends with an empty line; lines end with CRLF, LF or CR. Bytes
/// that belong to an unfinished event stay in the framer until a later push
/// completes it, or until [`Framer::finish`] at the end of the stream.
#[derive(Debug)]
pub struct Framer {
    held: BytesMut,
    /// Where the scan for the next line end resumes in `held`.
    scanned: usize,
    /// Where the line being scanned starts in `held`: a terminator found
    /// there ends an empty line, which ends the event.
    line_start: usize,
    limit: usize,
}

impl Default for Framer {
    fn default() -> Self {
        Framer::new(DEFAULT_MAX_EVENT_BYTES)
    }
}

impl Framer {
    /// A framer that refuses events over `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Framer {
            held: BytesMut::new(),
            scanned: 0,
            line_start: 0,
            limit: limit.max(1),
        }
    }

    /// Bytes held: the start of an event not yet complete.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Adds `chunk`; returns the events it completed, in order. On an error
    /// the framer holds nothing any more.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<Bytes>, FrameError> {
        self.held.extend_from_slice(chunk);
        let mut events = Vec::new();
        let mut event_start = 0;
        let mut i = self.scanned;
        let buf = &self.held[..];
        while i < buf.len() {
            let b = buf[i];
            if b != b'\n' && b != b'\r' {
                i += 1;
                continue;
            }
            // A CR at the very end may be the first half of a CRLF: wait.
            if b == b'\r' && i + 1 == buf.len() {
                break;
            }
            let term = if b == b'\r' && buf[i + 1] == b'\n' { 2 } else { 1 };
            let empty_line = i == self.line_start;
            i += term;
            self.line_start = i;
            if empty_line {
                if i > event_start {
                    events.push(i);
                }
                event_start = i;
            }
        }
        // Split off the complete events.
        let mut out = Vec::with_capacity(events.len());
        let mut taken = 0;
        for end in events {
            out.push(self.held.split_to(end - taken).freeze());
            taken = end;
        }
        self.scanned = i - taken;
        self.line_start -= taken;
        if self.held.len() > self.limit {
            self.held.clear();
            self.scanned = 0;
            self.line_start = 0;
            return Err(FrameError::EventTooLarge { limit: self.limit });
        }
        Ok(out)
    }

    /// The end of the stream: whatever is held (an event without its final
    /// blank line), if anything.
    pub fn finish(&mut self) -> Option<Bytes> {
        self.scanned = 0;
        self.line_start = 0;
        (!self.held.is_empty()).then(|| self.held.split().freeze())
    }
}

/// One line of an event: field name and value (after the optional space).
fn fields(event: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    event
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .flat_map(|l| l.split(|&b| b == b'\r'))
        .filter(|l| !l.is_empty() && l[0] != b':')
        .map(|l| match l.iter().position(|&b| b == b':') {
            Some(p) => {
                let v = &l[p + 1..];
                (&l[..p], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (l, &b""[..]),
        })
}

/// The event's `event` field (its type), if any.
pub fn event_type(event: &[u8]) -> Option<&[u8]> {
    fields(event).filter(|(k, _)| *k == b"event").map(|(_, v)| v).last()
}

/// The event's data: its `data` lines joined with `\n`; `None` when it has
/// none. Invalid UTF-8 is replaced.
pub fn data(event: &[u8]) -> Option<Cow<'_, str>> {
    let mut lines = fields(event).filter(|(k, _)| *k == b"data").map(|(_, v)| v);
    let first = lines.next()?;
    let mut rest = lines.peekable();
    if rest.peek().is_none() {
        return Some(String::from_utf8_lossy(first));
    }
    let mut joined = first.to_vec();
    for l in rest {
        joined.push(b'\n');
        joined.extend_from_slice(l);
    }
    Some(Cow::Owned(String::from_utf8_lossy(&joined).into_owned()))
}

/// The event with its data replaced by `new_data`: every other line (event
/// type, id, retry, comments) is kept in place, the data lines are replaced
/// by one `data:` line per line of `new_data` where the first data line was,
/// and the event ends with `\n\n`.
pub fn with_data(event: &[u8], new_data: &str) -> Bytes {
    let mut out = Vec::with_capacity(event.len() + new_data.len());
    let mut wrote_data = false;
    let body = trim_end_blank(event);
    for line in body.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let is_data = line == b"data" || line.starts_with(b"data:");
        if is_data {
            if !wrote_data {
                for d in new_data.split('\n') {
                    out.extend_from_slice(b"data: ");
                    out.extend_from_slice(d.as_bytes());
                    out.push(b'\n');
                }
                wrote_data = true;
            }
            continue;
        }
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    if !wrote_data {
        for d in new_data.split('\n') {
            out.extend_from_slice(b"data: ");
            out.extend_from_slice(d.as_bytes());
            out.push(b'\n');
        }
    }
    out.push(b'\n');
    Bytes::from(out)
}

/// `event` without the line ends that close it.
fn trim_end_blank(event: &[u8]) -> &[u8] {
    let mut end = event.len();
    while end > 0 && matches!(event[end - 1], b'\n' | b'\r') {
        end -= 1;
    }
    &event[..end]
}

/// A complete event with the given type (may be empty) and data.
pub fn event(kind: &str, data: &str) -> Bytes {
    let mut out = String::with_capacity(kind.len() + data.len() + 16);
    if !kind.is_empty() {
        out.push_str("event: ");
        out.push_str(kind);
        out.push('\n');
    }
    for d in data.split('\n') {
        out.push_str("data: ");
        out.push_str(d);
        out.push('\n');
    }
    out.push('\n');
    Bytes::from(out)
}

/// True for a `content-type` of `text/event-stream` (parameters ignored).
pub fn is_event_stream(content_type: &[u8]) -> bool {
    let main = content_type.split(|&b| b == b';').next().unwrap_or_default();
    main.trim_ascii().eq_ignore_ascii_case(b"text/event-stream")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame_all(chunks: &[&[u8]]) -> (Vec<Bytes>, Option<Bytes>) {
        let mut f = Framer::default();
        let mut out = Vec::new();
        for c in chunks {
            out.extend(f.push(c).unwrap());
        }
        (out, f.finish())
    }

    #[test]
    fn whole_events_come_out_whole() {
        let (ev, rest) = frame_all(&[b"data: a\n\ndata: b\n\n"]);
        assert_eq!(ev, vec![Bytes::from("data: a\n\n"), Bytes::from("data: b\n\n")]);
        assert_eq!(rest, None);
    }

    #[test]
    fn a_split_event_is_held_until_its_blank_line() {
        let mut f = Framer::default();
        assert!(f.push(b"event: x\ndata: {\"a\":").unwrap().is_empty());
        assert_eq!(f.held(), 20);
        assert!(f.push(b"1}\n").unwrap().is_empty());
        let ev = f.push(b"\ndata: next").unwrap();
        assert_eq!(ev, vec![Bytes::from("event: x\ndata: {\"a\":1}\n\n")]);
        assert_eq!(f.finish(), Some(Bytes::from("data: next")));
    }

    #[test]
    fn crlf_and_cr_line_ends_split_at_any_byte() {
        let text = b"data: a\r\n\r\ndata: b\r\rdata: c\n\n";
        for cut in 0..text.len() {
            let (ev, rest) = frame_all(&[&text[..cut], &text[cut..]]);
            let joined: Vec<u8> = ev
                .iter()
                .flat_map(|e| e.to_vec())
                .chain(rest.iter().flat_map(|r| r.to_vec()))
                .collect();
            assert_eq!(joined, text.to_vec(), "cut at {cut}");
            assert_eq!(ev.len(), 3, "cut at {cut}: {ev:?}");
        }
    }

    #[test]
    fn every_byte_comes_back_in_order() {
        let text = b": comment\n\nid: 1\nevent: delta\ndata: x\ndata: y\n\n\n\ndata: [DONE]\n\n";
        for step in 1..text.len() {
            let chunks: Vec<&[u8]> = text.chunks(step).collect();
            let (ev, rest) = frame_all(&chunks);
            let joined: Vec<u8> = ev
                .iter()
                .flat_map(|e| e.to_vec())
                .chain(rest.iter().flat_map(|r| r.to_vec()))
                .collect();
            assert_eq!(joined, text.to_vec(), "step {step}");
        }
    }

    #[test]
    fn an_event_over_the_limit_is_refused() {
        let mut f = Framer::new(16);
        assert!(f.push(b"data: 0123456").unwrap().is_empty());
        assert_eq!(f.push(b"789abcdef"), Err(FrameError::EventTooLarge { limit: 16 }));
        assert_eq!(f.held(), 0);
        assert_eq!(f.push(b"data: ok\n\n").unwrap(), vec![Bytes::from("data: ok\n\n")]);
    }

    #[test]
    fn data_lines_are_joined_and_rewritten_in_place() {
        let ev = b"id: 7\nevent: delta\ndata: one\ndata:two\n: note\n\n";
        assert_eq!(data(ev).as_deref(), Some("one\ntwo"));
        assert_eq!(event_type(ev), Some(&b"delta"[..]));
        let new = with_data(ev, "{\"x\":1}");
        assert_eq!(new, Bytes::from("id: 7\nevent: delta\ndata: {\"x\":1}\n: note\n\n"));
        assert_eq!(data(b"event: ping\n\n"), None);
        assert_eq!(
            with_data(b"event: ping\n\n", "a\nb"),
            Bytes::from("event: ping\ndata: a\ndata: b\n\n")
        );
    }

    #[test]
    fn content_types() {
        assert!(is_event_stream(b"text/event-stream"));
        assert!(is_event_stream(b"Text/Event-Stream; charset=utf-8"));
        assert!(!is_event_stream(b"application/json"));
    }
}
