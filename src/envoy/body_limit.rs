//! The request-body size limit (`server.max_request_body_bytes`) for bodies a
//! policy needs.
//!
//! - A declared body (`content-length`) larger than the limit is refused at
//!   the request headers, before Envoy buffers anything; a declared body
//!   within it is buffered whole (`BUFFERED`).
//! - A body Envoy streams without a declared length (`transfer-encoding:
//!   chunked`, HTTP/2 without `content-length`) is asked for in
//!   `BUFFERED_PARTIAL` mode: Envoy holds the headers, buffers the body up to
//!   its own buffer limit and sends it then, marked as not the end of the
//!   stream when more was coming. The kernel counts the bytes as they
//!   arrive: past the limit, or a body cut at Envoy's buffer limit, it
//!   answers `payload_too_large_response` at once. Nothing of such a body
//!   reaches the upstream or a policy, and Envoy buffers no more of it.
//!
//! For a streamed body the effective limit is therefore the smaller of
//! `max_request_body_bytes` and Envoy's buffer limit
//! (`per_connection_buffer_limit_bytes`, 1 MiB by default).

use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::processing_mode::BodySendMode;

/// How Envoy is asked to send a request body the policies need.
pub fn request_body_mode(declared_len: Option<u64>) -> BodySendMode {
    match declared_len {
        Some(_) => BodySendMode::Buffered,
        None => BodySendMode::BufferedPartial,
    }
}

/// The `content-length` of a request, when it declares one that parses.
pub fn declared_length<'a>(mut headers: impl Iterator<Item = (&'a str, &'a [u8])>) -> Option<u64> {
    headers
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| std::str::from_utf8(v).ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

/// Counts the request body's bytes as Envoy hands them over.
#[derive(Debug, Clone, Copy)]
pub struct BodyCounter {
    limit: u64,
    received: u64,
}

/// What to do with the body received so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The whole body, within the limit: run the policies on it.
    Whole,
    /// Over the limit, or cut by Envoy at its buffer limit (more was
    /// coming): answer `payload_too_large_response` now.
    TooLarge {
        /// Bytes received when the limit was found exceeded.
        received: u64,
    },
}

impl BodyCounter {
    /// A counter for a body of at most `limit` bytes.
    pub fn new(limit: u64) -> Self {
        Self { limit, received: 0 }
    }

    /// Counts one piece of `len` bytes; `end_of_stream` says whether it was
    /// the last. A piece that is not the last means Envoy stopped buffering
    /// at its own limit: the body is larger than the kernel may see whole.
    pub fn piece(&mut self, len: usize, end_of_stream: bool) -> Verdict {
        self.received = self.received.saturating_add(len as u64);
        if self.received > self.limit || !end_of_stream {
            Verdict::TooLarge {
                received: self.received,
            }
        } else {
            Verdict::Whole
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_body_within_the_limit_passes_and_anything_else_is_too_large() {
        assert_eq!(BodyCounter::new(10).piece(10, true), Verdict::Whole);
        assert_eq!(BodyCounter::new(10).piece(0, true), Verdict::Whole);
        assert_eq!(BodyCounter::new(10).piece(11, true), Verdict::TooLarge { received: 11 });
        // Cut by Envoy at its buffer limit, even below the kernel's.
        assert_eq!(BodyCounter::new(10).piece(4, false), Verdict::TooLarge { received: 4 });
    }

    #[test]
    fn only_bodies_without_a_declared_length_are_taken_partially() {
        assert_eq!(request_body_mode(Some(5)), BodySendMode::Buffered);
        assert_eq!(request_body_mode(None), BodySendMode::BufferedPartial);
        let h: [(&str, &[u8]); 2] = [("x-a", b"1"), ("Content-Length", b" 42 ")];
        assert_eq!(declared_length(h.into_iter()), Some(42));
        let bad: [(&str, &[u8]); 1] = [("content-length", b"4x")];
        assert_eq!(declared_length(bad.into_iter()), None);
    }
}
