//! The SSE framer and event helpers of streamed responses, fed arbitrary
//! bytes in arbitrary chunks. Framing never loses, adds or reorders a byte;
//! every event it returns ends with an empty line; the helpers never panic,
//! and an event rewritten with new data reads back that data.
#![no_main]
use libfuzzer_sys::fuzz_target;
use policy_net::sse::{self, Framer};

fuzz_target!(|data: &[u8]| {
    // The first byte picks the limit, the next ones chunk sizes; the rest is the body.
    let Some((&limit, rest)) = data.split_first() else {
        return;
    };
    let (sizes, body) = rest.split_at(rest.len().min(8));
    let mut framer = Framer::new(64 + usize::from(limit) * 64);
    let mut out = Vec::new();
    let mut pos = 0;
    let mut i = 0;
    let mut refused = false;
    while pos < body.len() {
        let n = (usize::from(sizes.get(i % sizes.len().max(1)).copied().unwrap_or(7)) + 1).min(body.len() - pos);
        match framer.push(&body[pos..pos + n]) {
            Ok(events) => {
                for e in events {
                    assert!(
                        e.ends_with(b"\n\n")
                            || e.ends_with(b"\r\r")
                            || e.ends_with(b"\n\r")
                            || e.ends_with(b"\r\n")
                            || e == "\n"
                            || e == "\r",
                        "{e:?}"
                    );
                    let _ = sse::data(&e);
                    let _ = sse::event_type(&e);
                    out.extend_from_slice(&e);
                }
            }
            Err(_) => {
                refused = true;
                break;
            }
        }
        pos += n;
        i += 1;
    }
    if !refused {
        out.extend(framer.finish().unwrap_or_default());
        assert_eq!(out, body, "framing changed the bytes");
    }
    if let Ok(text) = std::str::from_utf8(body) {
        if !text.contains('\r') {
            let rewritten = sse::with_data(b"event: x\ndata: old\n\n", text);
            assert_eq!(sse::data(&rewritten).as_deref(), Some(text));
        }
    }
});
