//! The HTTP parts of a call (`policy_kernel.agent.v1.RequestData` and
//! `HeaderValue`), their strings kept as slices of the call's buffer.
//!
//! prost decodes a `string` field into a `String` of its own: an
//! allocation, a copy and a UTF-8 check for every header name and value,
//! the method, the path, the scheme and the authority of every call, about
//! 300 instructions each, and the largest item of a small policy's call in
//! the agent (benches/RESULTS.md, 2026-11-27). Here they are
//! [`ByteString`]s: checked as UTF-8 once, as prost checks a `String`, and
//! sharing the call's buffer with no copy. They live as long as the call,
//! so no buffer is held beyond it. Policies read them as `&str` through
//! [`RequestView`](crate::RequestView) and
//! [`ResponseView`](crate::ResponseView), as before.

use bytes::{Buf, BufMut, Bytes};
use bytestring::ByteString;
use prost::encoding::{self, DecodeContext, WireType};
use prost::{DecodeError, Message};

use crate::proto::{HttpHeaders, QueryParameters};

// Field numbers of `HeaderValue` in proto/policy_agent.proto.
const KEY: u32 = 1;
const VALUE: u32 = 2;
const RAW_VALUE: u32 = 3;

// Field numbers of `RequestData` in proto/policy_agent.proto.
const HEADERS: u32 = 1;
const BODY: u32 = 2;
const BODY_INCLUDED: u32 = 3;
const METHOD: u32 = 4;
const PATH: u32 = 5;
const SCHEME: u32 = 6;
const AUTHORITY: u32 = 7;
const QUERY_PARAMS: u32 = 8;
const CLIENT_IP: u32 = 9;

/// The HTTP request, as the kernel sends it.
#[derive(Clone, Default, PartialEq, Debug)]
pub struct RequestData {
    /// Request headers, lower-case names, in the order Envoy sent them
    /// (pseudo-headers are the fields below).
    pub headers: Option<HttpHeaders>,
    /// The body, when `body_included` is true.
    pub body: Bytes,
    /// True when `body` holds the whole body (possibly empty).
    pub body_included: bool,
    /// The HTTP method.
    pub method: ByteString,
    /// The URL path, query string included.
    pub path: ByteString,
    /// "http" or "https".
    pub scheme: ByteString,
    /// The authority (Host).
    pub authority: ByteString,
    /// Query parameters parsed from `path`, percent-decoded (last wins).
    pub query_params: Option<QueryParameters>,
    /// The client's IP address as Envoy saw it, or empty.
    pub client_ip: ByteString,
}

impl Message for RequestData {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if let Some(h) = &self.headers {
            encoding::message::encode(HEADERS, h, buf);
        }
        put_bytes(BODY, &self.body, buf);
        if self.body_included {
            encoding::bool::encode(BODY_INCLUDED, &true, buf);
        }
        for (tag, s) in self.strings() {
            put_bytes(tag, s.as_bytes(), buf);
        }
        if let Some(q) = &self.query_params {
            encoding::message::encode(QUERY_PARAMS, q, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            HEADERS => encoding::message::merge(wire_type, self.headers.get_or_insert_with(Default::default), buf, ctx)
                .map_err(at("RequestData", "headers")),
            BODY => encoding::bytes::merge(wire_type, &mut self.body, buf, ctx).map_err(at("RequestData", "body")),
            BODY_INCLUDED => encoding::bool::merge(wire_type, &mut self.body_included, buf, ctx)
                .map_err(at("RequestData", "body_included")),
            METHOD => merge_str(wire_type, &mut self.method, buf, ctx).map_err(at("RequestData", "method")),
            PATH => merge_str(wire_type, &mut self.path, buf, ctx).map_err(at("RequestData", "path")),
            SCHEME => merge_str(wire_type, &mut self.scheme, buf, ctx).map_err(at("RequestData", "scheme")),
            AUTHORITY => merge_str(wire_type, &mut self.authority, buf, ctx).map_err(at("RequestData", "authority")),
            QUERY_PARAMS => encoding::message::merge(
                wire_type,
                self.query_params.get_or_insert_with(Default::default),
                buf,
                ctx,
            )
            .map_err(at("RequestData", "query_params")),
            CLIENT_IP => merge_str(wire_type, &mut self.client_ip, buf, ctx).map_err(at("RequestData", "client_ip")),
            _ => encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        self.headers
            .as_ref()
            .map_or(0, |h| encoding::message::encoded_len(HEADERS, h))
            + bytes_len(BODY, &self.body)
            + if self.body_included {
                encoding::bool::encoded_len(BODY_INCLUDED, &true)
            } else {
                0
            }
            + self
                .strings()
                .map(|(tag, s)| bytes_len(tag, s.as_bytes()))
                .sum::<usize>()
            + self
                .query_params
                .as_ref()
                .map_or(0, |q| encoding::message::encoded_len(QUERY_PARAMS, q))
    }

    fn clear(&mut self) {
        *self = RequestData::default();
    }
}

impl RequestData {
    /// The string fields with their field numbers, in field order.
    fn strings(&self) -> impl Iterator<Item = (u32, &ByteString)> {
        [
            (METHOD, &self.method),
            (PATH, &self.path),
            (SCHEME, &self.scheme),
            (AUTHORITY, &self.authority),
            (CLIENT_IP, &self.client_ip),
        ]
        .into_iter()
    }
}

/// An HTTP header as the kernel sends it (and as an agent sends one in an
/// immediate response). The kernel lower-cases names; a value that is not
/// UTF-8 comes in `raw_value`, with `value` empty.
#[derive(Clone, Default, PartialEq, Eq, Hash, Debug)]
pub struct HeaderValue {
    /// The header's name.
    pub key: ByteString,
    /// The header's value, when it is UTF-8.
    pub value: ByteString,
    /// The value's bytes, when it is not UTF-8 (then `value` is empty).
    pub raw_value: Bytes,
}

impl HeaderValue {
    /// The header `key: value`.
    pub fn new(key: impl Into<ByteString>, value: impl Into<ByteString>) -> Self {
        HeaderValue {
            key: key.into(),
            value: value.into(),
            raw_value: Bytes::new(),
        }
    }
}

impl Message for HeaderValue {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        put_bytes(KEY, self.key.as_bytes(), buf);
        put_bytes(VALUE, self.value.as_bytes(), buf);
        put_bytes(RAW_VALUE, &self.raw_value, buf);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            KEY => merge_str(wire_type, &mut self.key, buf, ctx).map_err(at("HeaderValue", "key")),
            VALUE => merge_str(wire_type, &mut self.value, buf, ctx).map_err(at("HeaderValue", "value")),
            RAW_VALUE => {
                encoding::bytes::merge(wire_type, &mut self.raw_value, buf, ctx).map_err(at("HeaderValue", "raw_value"))
            }
            _ => encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        bytes_len(KEY, self.key.as_bytes())
            + bytes_len(VALUE, self.value.as_bytes())
            + bytes_len(RAW_VALUE, &self.raw_value)
    }

    fn clear(&mut self) {
        *self = HeaderValue::default();
    }
}

/// Writes a `string` or `bytes` field; proto3 leaves out an empty one.
fn put_bytes(tag: u32, value: &Bytes, buf: &mut impl BufMut) {
    if !value.is_empty() {
        encoding::bytes::encode(tag, value, buf);
    }
}

/// The encoded length of a field [`put_bytes`] writes.
fn bytes_len(tag: u32, value: &Bytes) -> usize {
    if value.is_empty() {
        0
    } else {
        encoding::bytes::encoded_len(tag, value)
    }
}

/// Names the field of `message` a decode error happened in, as prost's
/// generated code does ("RequestData.path: invalid string value ...").
fn at(message: &'static str, field: &'static str) -> impl FnOnce(DecodeError) -> DecodeError {
    move |mut e| {
        e.push(message, field);
        e
    }
}

/// Reads a `string` field as prost does (the last occurrence wins, it must
/// be UTF-8), without copying it out of `buf` when `buf` is a `Bytes`.
fn merge_str(
    wire_type: WireType,
    field: &mut ByteString,
    buf: &mut impl Buf,
    ctx: DecodeContext,
) -> Result<(), DecodeError> {
    let mut raw = Bytes::new();
    encoding::bytes::merge(wire_type, &mut raw, buf, ctx.clone())?;
    match ByteString::try_from(raw) {
        Ok(s) => {
            *field = s;
            Ok(())
        }
        Err(_) => {
            *field = ByteString::new();
            Err(not_utf8(ctx))
        }
    }
}

/// prost's own error for a `string` field that is not UTF-8: the one its
/// `String` fields give, from its own check of one byte that never is.
#[cold]
fn not_utf8(ctx: DecodeContext) -> DecodeError {
    let mut field: &[u8] = &[1, 0xff];
    match encoding::string::merge(WireType::LengthDelimited, &mut String::new(), &mut field, ctx) {
        Err(e) => e,
        Ok(()) => unreachable!("0xff is not UTF-8"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// prost's own decoding of the same message, to compare with.
    #[derive(Clone, PartialEq, Message)]
    struct Generated {
        #[prost(string, tag = "1")]
        key: String,
        #[prost(string, tag = "2")]
        value: String,
        #[prost(bytes = "bytes", tag = "3")]
        raw_value: Bytes,
    }

    #[test]
    fn reads_what_prost_writes_and_writes_what_prost_reads() {
        let cases = [
            Generated {
                key: "x-id".into(),
                value: "é 1".into(),
                raw_value: Bytes::new(),
            },
            Generated {
                key: "h".into(),
                value: String::new(),
                raw_value: Bytes::from_static(&[0xff, 0]),
            },
            Generated {
                key: String::new(),
                value: String::new(),
                raw_value: Bytes::new(),
            },
        ];
        for g in cases {
            let bytes = Bytes::from(g.encode_to_vec());
            let ours = HeaderValue::decode(bytes.clone()).expect("decodes");
            assert_eq!(&*ours.key, g.key);
            assert_eq!(&*ours.value, g.value);
            assert_eq!(ours.raw_value, g.raw_value);
            assert_eq!(ours.encoded_len(), bytes.len());
            assert_eq!(ours.encode_to_vec(), bytes.to_vec());
        }
    }

    /// prost's own decoding of `RequestData`.
    #[derive(Clone, PartialEq, Message)]
    struct GeneratedRequest {
        #[prost(message, optional, tag = "1")]
        headers: Option<HttpHeaders>,
        #[prost(bytes = "bytes", tag = "2")]
        body: Bytes,
        #[prost(bool, tag = "3")]
        body_included: bool,
        #[prost(string, tag = "4")]
        method: String,
        #[prost(string, tag = "5")]
        path: String,
        #[prost(string, tag = "6")]
        scheme: String,
        #[prost(string, tag = "7")]
        authority: String,
        #[prost(message, optional, tag = "8")]
        query_params: Option<QueryParameters>,
        #[prost(string, tag = "9")]
        client_ip: String,
    }

    fn full_request() -> GeneratedRequest {
        GeneratedRequest {
            headers: Some(HttpHeaders {
                headers: vec![HeaderValue::new("user-agent", "curl/8"), HeaderValue::new("x-é", "ü")],
            }),
            body: Bytes::from_static(b"{\"a\":1}"),
            body_included: true,
            method: "POST".into(),
            path: "/a/b?x=1".into(),
            scheme: "https".into(),
            authority: "api.example".into(),
            query_params: Some(QueryParameters {
                params: [("x".to_string(), "1".to_string())].into(),
            }),
            client_ip: "10.0.0.9".into(),
        }
    }

    #[test]
    fn a_request_reads_what_prost_writes_and_writes_what_prost_reads() {
        for g in [
            full_request(),
            GeneratedRequest::default(),
            GeneratedRequest {
                body_included: true,
                ..Default::default()
            },
        ] {
            let bytes = Bytes::from(g.encode_to_vec());
            let ours = RequestData::decode(bytes.clone()).expect("decodes");
            assert_eq!(ours.headers, g.headers);
            assert_eq!(ours.body, g.body);
            assert_eq!(ours.body_included, g.body_included);
            let strings: Vec<&str> = ours.strings().map(|(_, s)| &**s).collect();
            assert_eq!(
                strings,
                [&*g.method, &*g.path, &*g.scheme, &*g.authority, &*g.client_ip]
            );
            assert_eq!(ours.query_params, g.query_params);
            assert_eq!(ours.encoded_len(), bytes.len());
            assert_eq!(
                GeneratedRequest::decode(ours.encode_to_vec().as_slice()).expect("decodes"),
                g
            );
        }
    }

    #[test]
    fn the_last_occurrence_wins_and_unknown_fields_are_skipped() {
        let mut buf = Generated {
            key: "a".into(),
            value: "1".into(),
            raw_value: Bytes::new(),
        }
        .encode_to_vec();
        buf.extend(
            Generated {
                key: "b".into(),
                value: String::new(),
                raw_value: Bytes::new(),
            }
            .encode_to_vec(),
        );
        // Field 9, varint 7.
        buf.extend([9 << 3, 7]);
        let h = HeaderValue::decode(&buf[..]).expect("decodes");
        assert_eq!((&*h.key, &*h.value), ("b", "1"));
    }

    #[test]
    fn a_string_that_is_not_utf8_fails_as_prost_fails() {
        let field = |tag: u32| [(tag << 3 | 2) as u8, 2, b'a', 0xff];
        let same = |ours: DecodeError, theirs: DecodeError, generated: &str, name: &str| {
            assert_eq!(ours.to_string(), theirs.to_string().replace(generated, name));
        };
        for tag in [KEY, VALUE] {
            let buf = field(tag);
            let ours = HeaderValue::decode(&buf[..]).expect_err("not UTF-8");
            same(
                ours,
                Generated::decode(&buf[..]).expect_err("not UTF-8"),
                "Generated.",
                "HeaderValue.",
            );
        }
        // A bad header name inside the headers names every message on the way.
        let mut inner = vec![(1 << 3 | 2) as u8, 3];
        inner.extend([(KEY << 3 | 2) as u8, 1, 0xff]);
        let mut nested = vec![(HEADERS << 3 | 2) as u8, inner.len() as u8];
        nested.extend(inner);
        for buf in [METHOD, PATH, SCHEME, AUTHORITY, CLIENT_IP]
            .map(|t| field(t).to_vec())
            .into_iter()
            .chain([nested])
        {
            let ours = RequestData::decode(&buf[..]).expect_err("not UTF-8");
            same(
                ours,
                GeneratedRequest::decode(&buf[..]).expect_err("not UTF-8"),
                "GeneratedRequest.",
                "RequestData.",
            );
        }
    }

    #[test]
    fn decoded_strings_share_the_call_buffer_and_release_it() {
        let within = |call: &Bytes, s: &str| {
            (call.as_ptr() as usize..call.as_ptr() as usize + call.len()).contains(&(s.as_ptr() as usize))
        };
        let call = Bytes::from(HeaderValue::new("user-agent", "curl/8").encode_to_vec());
        let h = HeaderValue::decode(call.clone()).expect("decodes");
        assert!(within(&call, &h.key) && within(&call, &h.value), "no copy");
        drop(h);
        assert!(call.is_unique(), "released with the header");
        let call = Bytes::from(full_request().encode_to_vec());
        let r = RequestData::decode(call.clone()).expect("decodes");
        assert!(r.strings().all(|(_, s)| within(&call, s)), "no copy");
        drop(r);
        assert!(call.is_unique(), "released with the request");
    }
}
