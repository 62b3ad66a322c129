//! The request and response contexts built from Envoy's headers.

use envoy_types::pb::envoy::config::core::v3::HeaderMap;

use super::*;

fn header(key: &str, value: &str, raw: &[u8]) -> HeaderValue {
    HeaderValue {
        key: key.into(),
        value: value.into(),
        raw_value: raw.to_vec(),
    }
}

/// Pseudo-headers become the request's fields (from `raw_value`, or
/// `value` without it; bytes that are not UTF-8 become U+FFFD); other
/// headers keep their bytes, and `x-request-id` is both.
#[test]
fn request_headers_become_the_request_context() {
    let h = HttpHeaders {
        headers: Some(HeaderMap {
            headers: vec![
                header(":method", "", b"POST"),
                header(":path", "", b"/a\xffb?q=1"),
                header(":scheme", "https", b""),
                header(":authority", "", b"api.example"),
                header(":protocol", "", b"websocket"),
                header("x-request-id", "", b"req-1"),
                header("x-bin", "", b"\x80\x81"),
            ],
        }),
        ..Default::default()
    };
    let ctx = request_ctx(h, &HashMap::new());
    assert_eq!(ctx.method, "POST");
    assert_eq!(ctx.path, "/a\u{fffd}b?q=1");
    assert_eq!(ctx.scheme, "https");
    assert_eq!(ctx.authority, "api.example");
    assert_eq!(ctx.request_id, "req-1");
    let headers: Vec<(&str, &[u8])> = ctx.headers.iter().map(|(k, v)| (k.as_str(), v.as_ref())).collect();
    assert_eq!(headers, [("x-request-id", &b"req-1"[..]), ("x-bin", &b"\x80\x81"[..])]);
}

/// The response's `:status` is read from the same bytes (`value` without
/// `raw_value` too); other headers keep theirs.
#[test]
fn response_headers_become_the_response_context() {
    for status in [header(":status", "", b"201"), header(":status", "201", b"")] {
        let h = HttpHeaders {
            headers: Some(HeaderMap {
                headers: vec![status, header("content-type", "", b"text/plain")],
            }),
            ..Default::default()
        };
        let ctx = response_ctx(h);
        assert_eq!(ctx.status, 201);
        assert_eq!(
            ctx.headers,
            [("content-type".to_string(), Bytes::from_static(b"text/plain"))]
        );
    }
}
