//! Agent calls written straight from the request context, in the agent
//! protocol's wire format.
//!
//! Building the generated `PolicyRequestPhase` / `PolicyResponsePhase` for
//! every call copied each header into two new `String`s, each policy with its
//! params map, the query into a map, and the metadata, only for prost to
//! encode them once and drop them; that was about a sixth of the kernel's
//! instructions per K1 stream (benches/RESULTS.md). Here a call is written
//! once, from borrowed data, into one buffer: policies come pre-encoded from
//! the snapshot, and bodies are not copied (they stay `Bytes` segments of
//! the call). An agent decodes it as the generated message, field for field
//! (the tests below decode every shape and compare). Calls on a streamed
//! response body ([`chunk_call`]) copy in the request and response headers
//! encoded once per stream ([`chunk_context`]) and carry their events and
//! the policies' states as segments.
//!
//! Fields are written in field-number order, empty scalars skipped and
//! message fields always present, as prost writes them. Two differences, both
//! invisible after decoding: `deadline_ms` comes last (each attempt appends
//! its own), and the query-parameter map lists every pair of the query in
//! order, where prost would list a map with one entry per name (protobuf
//! maps keep the last entry of a name, as the map built here did).

use std::borrow::Cow;

use bytes::{Buf, BufMut, Bytes};
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, DecodeContext, WireType};
use prost::{DecodeError, Message};

use crate::aggregate::{Header, Metadata, RequestCtx, ResponseCtx};
use crate::http::{query_pairs, split_path};

/// An encoded agent call, ready to send: the phase message without its
/// `deadline_ms`, which [`EncodedCall::deadline_ms`] adds when encoded.
#[derive(Debug, Clone, PartialEq)]
pub struct EncodedCall {
    /// The bytes before the first body, then (body, bytes after it) pairs.
    head: Bytes,
    rest: Vec<(Bytes, Bytes)>,
    /// Field number of `deadline_ms` in this phase's message.
    deadline_field: u32,
    /// The deadline sent with the call (0: not sent).
    pub deadline_ms: i64,
}

impl Message for EncodedCall {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        buf.put_slice(&self.head);
        for (body, after) in &self.rest {
            buf.put_slice(body);
            buf.put_slice(after);
        }
        if self.deadline_ms != 0 {
            prost::encoding::int64::encode(self.deadline_field, &self.deadline_ms, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        // Only ever encoded; decoding one skips every field.
        prost::encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        let parts: usize = self.rest.iter().map(|(b, a)| b.len() + a.len()).sum();
        let deadline = if self.deadline_ms != 0 {
            prost::encoding::int64::encoded_len(self.deadline_field, &self.deadline_ms)
        } else {
            0
        };
        self.head.len() + parts + deadline
    }

    fn clear(&mut self) {
        self.head.clear();
        self.rest.clear();
        self.deadline_ms = 0;
    }
}

/// Encodes a policy as it goes into calls (once, when the snapshot is built).
pub fn encode_policy(p: &crate::proto::Policy) -> Bytes {
    Bytes::from(p.encode_to_vec())
}

// Field numbers of `PolicyRequestPhase` and `PolicyResponsePhase`: the
// same up to `request_data`; the response phase then has `response_data`,
// which moves `deadline_ms` and `policy_metadata` one number up.
const CALL_REQUEST_ID: u32 = 1;
const CALL_POLICIES: u32 = 2;
const CALL_REQUEST_DATA: u32 = 3;
const CALL_RESPONSE_DATA: u32 = 4;

/// A request-phase call (`PolicyRequestPhase`).
pub fn request_call<'a>(
    request_id: &str,
    policies: impl Iterator<Item = &'a Bytes> + Clone,
    request: &RequestCtx,
    meta: &Metadata,
    route: &[(&str, &str)],
) -> EncodedCall {
    call(request_id, policies, request, None, meta, route)
}

/// A response-phase call (`PolicyResponsePhase`).
pub fn response_call<'a>(
    request_id: &str,
    policies: impl Iterator<Item = &'a Bytes> + Clone,
    request: &RequestCtx,
    response: &ResponseCtx,
    meta: &Metadata,
    route: &[(&str, &str)],
) -> EncodedCall {
    call(request_id, policies, request, Some(response), meta, route)
}

fn call<'a>(
    request_id: &str,
    policies: impl Iterator<Item = &'a Bytes> + Clone,
    request: &RequestCtx,
    response: Option<&ResponseCtx>,
    meta: &Metadata,
    route: &[(&str, &str)],
) -> EncodedCall {
    let (deadline_field, meta_field) = if response.is_some() { (5, 6) } else { (4, 5) };
    // The route's own entries go last: in a protobuf map the last one wins.
    let meta = || {
        meta.iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .chain(route.iter().copied())
    };
    let query: Query<'_> = query_pairs(split_path(&request.path).1.unwrap_or("")).collect();
    let req_len = request_data_len(request, &request.body, &query);
    let resp_len = response.map(|r| response_data_len(r, &r.body));
    let mut w = Writer::with_capacity(
        head_len(request_id, policies.clone())
            + msg_len(CALL_REQUEST_DATA, req_len)
            + resp_len.map_or(0, |n| msg_len(CALL_RESPONSE_DATA, n))
            + map_len(meta_field, meta()),
    );
    w.head(request_id, policies);
    w.msg(CALL_REQUEST_DATA, req_len);
    w.request_data(request, &request.body, &query, req_len);
    if let (Some(r), Some(n)) = (response, resp_len) {
        w.msg(CALL_RESPONSE_DATA, n);
        w.response_data(r, &r.body, n);
    }
    w.map(meta_field, meta());
    w.finish(deadline_field)
}

// Field numbers of `PolicyResponseChunk` after `response_data`.
const CHUNK_SEQUENCE: u32 = 5;
const CHUNK_FRAMING: u32 = 6;
const CHUNK_EVENTS: u32 = 7;
const CHUNK_END_OF_STREAM: u32 = 8;
const CHUNK_STATE: u32 = 9;
const CHUNK_DEADLINE: u32 = 10;
const CHUNK_METADATA: u32 = 11;

/// `request_data` and `response_data` of every call on one streamed
/// response, without bodies: they do not change while the body streams, so
/// they are encoded once per stream ([`chunk_call`] copies them in).
pub fn chunk_context(request: &RequestCtx, response: &ResponseCtx) -> Bytes {
    let query: Query<'_> = query_pairs(split_path(&request.path).1.unwrap_or("")).collect();
    let req_len = request_data_len(request, &None, &query);
    let resp_len = response_data_len(response, &None);
    let mut w = Writer::with_capacity(msg_len(CALL_REQUEST_DATA, req_len) + msg_len(CALL_RESPONSE_DATA, resp_len));
    w.msg(CALL_REQUEST_DATA, req_len);
    w.request_data(request, &None, &query, req_len);
    w.msg(CALL_RESPONSE_DATA, resp_len);
    w.response_data(response, &None, resp_len);
    Bytes::from(w.buf)
}

/// One call on a piece of a streamed response, but its policies.
pub struct Chunk<'a> {
    /// The stream's request id.
    pub request_id: &'a str,
    /// From [`chunk_context`].
    pub context: &'a Bytes,
    /// The piece's sequence number.
    pub sequence: u64,
    /// `ChunkFraming` as sent.
    pub framing: i32,
    /// The events (or raw chunk): segments of the call, not copied.
    pub events: &'a [Bytes],
    /// Whether this is the last call of the stream.
    pub end_of_stream: bool,
    /// The group's policy states from their last reply: segments of the
    /// call, not copied.
    pub states: &'a [Bytes],
    /// Metadata so far.
    pub meta: &'a Metadata,
}

/// A streamed-body call (`PolicyResponseChunk`), as prost would encode the
/// generated message but for `deadline_ms`, which comes last.
pub fn chunk_call<'a>(policies: impl Iterator<Item = &'a Bytes> + Clone, c: &Chunk<'_>) -> EncodedCall {
    let meta = || c.meta.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    // At most what goes into the buffer: events and states are segments,
    // only their keys and lengths are written (scalars are counted even when
    // skipped).
    let mut w = Writer::with_capacity(
        head_len(c.request_id, policies.clone())
            + c.context.len()
            + prost::encoding::uint64::encoded_len(CHUNK_SEQUENCE, &c.sequence)
            + prost::encoding::int32::encoded_len(CHUNK_FRAMING, &c.framing)
            + c.events
                .iter()
                .map(|e| msg_len(CHUNK_EVENTS, e.len()) - e.len())
                .sum::<usize>()
            + bool_len(CHUNK_END_OF_STREAM, true)
            + c.states
                .iter()
                .map(|s| msg_len(CHUNK_STATE, s.len()) - s.len())
                .sum::<usize>()
            + map_len(CHUNK_METADATA, meta()),
    );
    w.head(c.request_id, policies);
    w.raw(c.context);
    if c.sequence != 0 {
        prost::encoding::uint64::encode(CHUNK_SEQUENCE, &c.sequence, &mut w.buf);
    }
    if c.framing != 0 {
        prost::encoding::int32::encode(CHUNK_FRAMING, &c.framing, &mut w.buf);
    }
    for e in c.events {
        w.segment(CHUNK_EVENTS, e);
    }
    w.bool(CHUNK_END_OF_STREAM, c.end_of_stream);
    for s in c.states {
        w.segment(CHUNK_STATE, s);
    }
    w.map(CHUNK_METADATA, meta());
    w.finish(CHUNK_DEADLINE)
}

// Message field numbers of the data messages.
const DATA_HEADERS: u32 = 1;
const DATA_BODY: u32 = 2;
const DATA_BODY_INCLUDED: u32 = 3;
const REQUEST_METHOD: u32 = 4;
const REQUEST_PATH: u32 = 5;
const REQUEST_SCHEME: u32 = 6;
const REQUEST_AUTHORITY: u32 = 7;
const REQUEST_QUERY: u32 = 8;
const REQUEST_CLIENT_IP: u32 = 9;
const RESPONSE_STATUS: u32 = 4;
/// `HttpHeaders.headers`, `QueryParameters.params`.
const REPEATED: u32 = 1;
/// `HeaderValue` fields.
const HV_KEY: u32 = 1;
const HV_VALUE: u32 = 2;
const HV_RAW_VALUE: u32 = 3;

/// Length of the fields every call starts with: its request id and its
/// pre-encoded policies.
fn head_len<'a>(request_id: &str, policies: impl Iterator<Item = &'a Bytes>) -> usize {
    str_len(CALL_REQUEST_ID, request_id) + policies.map(|p| msg_len(CALL_POLICIES, p.len())).sum::<usize>()
}

/// Length of a length-delimited field holding `n` bytes, skipped when empty.
fn bytes_len(tag: u32, n: usize) -> usize {
    if n == 0 {
        0
    } else {
        msg_len(tag, n)
    }
}

fn str_len(tag: u32, s: &str) -> usize {
    bytes_len(tag, s.len())
}

/// Length of an embedded message field of `n` bytes (always written).
fn msg_len(tag: u32, n: usize) -> usize {
    key_len(tag) + encoded_len_varint(n as u64) + n
}

fn bool_len(tag: u32, b: bool) -> usize {
    if b {
        key_len(tag) + 1
    } else {
        0
    }
}

/// One `HeaderValue`: the value goes in `value` when UTF-8, else in
/// `raw_value`; both fields are one-byte keys, so the length is the same.
fn header_len((k, v): &Header) -> usize {
    str_len(HV_KEY, k) + bytes_len(HV_VALUE, v.len())
}

fn headers_len(headers: &[Header]) -> usize {
    headers.iter().map(|h| msg_len(REPEATED, header_len(h))).sum()
}

fn entry_len(k: &str, v: &str) -> usize {
    str_len(1, k) + str_len(2, v)
}

fn map_len<'a>(tag: u32, entries: impl Iterator<Item = (&'a str, &'a str)>) -> usize {
    entries.map(|(k, v)| msg_len(tag, entry_len(k, v))).sum()
}

/// The decoded query parameters, in order (decoded once per call; no
/// allocation for a path without query, or components without escapes).
type Query<'a> = Vec<(Cow<'a, str>, Cow<'a, str>)>;

/// The query as map entries.
fn query_entries<'a>(query: &'a Query<'_>) -> impl Iterator<Item = (&'a str, &'a str)> {
    query.iter().map(|(k, v)| (k.as_ref(), v.as_ref()))
}

fn body_len(body: &Option<Bytes>) -> usize {
    body.as_ref().map_or(0, |b| bytes_len(DATA_BODY, b.len())) + bool_len(DATA_BODY_INCLUDED, body.is_some())
}

fn request_data_len(r: &RequestCtx, body: &Option<Bytes>, query: &Query<'_>) -> usize {
    msg_len(DATA_HEADERS, headers_len(&r.headers))
        + body_len(body)
        + str_len(REQUEST_METHOD, &r.method)
        + str_len(REQUEST_PATH, &r.path)
        + str_len(REQUEST_SCHEME, &r.scheme)
        + str_len(REQUEST_AUTHORITY, &r.authority)
        + msg_len(REQUEST_QUERY, map_len(REPEATED, query_entries(query)))
        + str_len(REQUEST_CLIENT_IP, &r.client_ip)
}

fn response_data_len(r: &ResponseCtx, body: &Option<Bytes>) -> usize {
    let status = i32::from(r.status);
    msg_len(DATA_HEADERS, headers_len(&r.headers))
        + body_len(body)
        + if status != 0 {
            prost::encoding::int32::encoded_len(RESPONSE_STATUS, &status)
        } else {
            0
        }
}

/// Writes a call into one buffer; a body is cut out as a segment of its own.
struct Writer {
    buf: Vec<u8>,
    /// (offset in `buf`, body inserted there).
    cuts: Vec<(usize, Bytes)>,
}

impl Writer {
    fn with_capacity(n: usize) -> Self {
        Self {
            buf: Vec::with_capacity(n),
            cuts: Vec::new(),
        }
    }

    fn key(&mut self, tag: u32, wire: WireType) {
        encode_key(tag, wire, &mut self.buf);
    }

    fn raw(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    /// The key and length of an embedded message of `n` bytes.
    fn msg(&mut self, tag: u32, n: usize) {
        self.key(tag, WireType::LengthDelimited);
        encode_varint(n as u64, &mut self.buf);
    }

    /// The fields every call starts with ([`head_len`]).
    fn head<'a>(&mut self, request_id: &str, policies: impl Iterator<Item = &'a Bytes>) {
        self.str(CALL_REQUEST_ID, request_id);
        for p in policies {
            self.msg(CALL_POLICIES, p.len());
            self.raw(p);
        }
    }

    fn bytes(&mut self, tag: u32, b: &[u8]) {
        if !b.is_empty() {
            self.msg(tag, b.len());
            self.raw(b);
        }
    }

    fn str(&mut self, tag: u32, s: &str) {
        self.bytes(tag, s.as_bytes());
    }

    fn bool(&mut self, tag: u32, b: bool) {
        if b {
            self.key(tag, WireType::Varint);
            self.buf.push(1);
        }
    }

    fn map<'a>(&mut self, tag: u32, entries: impl Iterator<Item = (&'a str, &'a str)>) {
        for (k, v) in entries {
            self.msg(tag, entry_len(k, v));
            self.str(1, k);
            self.str(2, v);
        }
    }

    fn headers(&mut self, headers: &[Header]) {
        self.msg(DATA_HEADERS, headers_len(headers));
        for h in headers {
            self.msg(REPEATED, header_len(h));
            let (k, v) = h;
            self.str(HV_KEY, k);
            let field = if std::str::from_utf8(v).is_ok() {
                HV_VALUE
            } else {
                HV_RAW_VALUE
            };
            self.bytes(field, v);
        }
    }

    fn body(&mut self, body: &Option<Bytes>) {
        if let Some(b) = body {
            if !b.is_empty() {
                self.segment(DATA_BODY, b);
            }
        }
        self.bool(DATA_BODY_INCLUDED, body.is_some());
    }

    /// A bytes field whose content becomes a segment of its own (not copied).
    fn segment(&mut self, tag: u32, b: &Bytes) {
        self.msg(tag, b.len());
        if !b.is_empty() {
            self.cuts.push((self.buf.len(), b.clone()));
        }
    }

    /// Bytes written so far, bodies included.
    fn written(&self) -> usize {
        self.buf.len() + self.cuts.iter().map(|(_, b)| b.len()).sum::<usize>()
    }

    fn request_data(&mut self, r: &RequestCtx, body: &Option<Bytes>, query: &Query<'_>, len: usize) {
        let start = self.written();
        self.headers(&r.headers);
        self.body(body);
        self.str(REQUEST_METHOD, &r.method);
        self.str(REQUEST_PATH, &r.path);
        self.str(REQUEST_SCHEME, &r.scheme);
        self.str(REQUEST_AUTHORITY, &r.authority);
        self.msg(REQUEST_QUERY, map_len(REPEATED, query_entries(query)));
        self.map(REPEATED, query_entries(query));
        self.str(REQUEST_CLIENT_IP, &r.client_ip);
        debug_assert_eq!(self.written() - start, len, "RequestData length");
    }

    fn response_data(&mut self, r: &ResponseCtx, body: &Option<Bytes>, len: usize) {
        let start = self.written();
        self.headers(&r.headers);
        self.body(body);
        let status = i32::from(r.status);
        if status != 0 {
            prost::encoding::int32::encode(RESPONSE_STATUS, &status, &mut self.buf);
        }
        debug_assert_eq!(self.written() - start, len, "ResponseData length");
    }

    fn finish(self, deadline_field: u32) -> EncodedCall {
        let all = Bytes::from(self.buf);
        let mut at = self.cuts.first().map_or(all.len(), |(o, _)| *o);
        let head = all.slice(..at);
        let mut rest = Vec::with_capacity(self.cuts.len());
        for (i, (_, body)) in self.cuts.iter().enumerate() {
            let end = self.cuts.get(i + 1).map_or(all.len(), |(o, _)| *o);
            rest.push((body.clone(), all.slice(at..end)));
            at = end;
        }
        EncodedCall {
            head,
            rest,
            deadline_field,
            deadline_ms: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto;

    fn request() -> RequestCtx {
        RequestCtx {
            headers: vec![
                ("content-type".into(), Bytes::from_static(b"application/json")),
                ("x-empty".into(), Bytes::new()),
                ("x-raw".into(), Bytes::from_static(&[0xff, 0x41])),
                ("x-long".into(), Bytes::from(vec![b'a'; 300])),
            ],
            method: "POST".into(),
            path: "/users/1?a=1&b=x+y&c=%41&d&&a=2&=v".into(),
            scheme: "https".into(),
            authority: "api.example".into(),
            client_ip: "10.0.0.1".into(),
            request_id: "rid".into(),
            body: Some(Bytes::from(vec![7u8; 200])),
        }
    }

    fn response() -> ResponseCtx {
        ResponseCtx {
            headers: vec![("server".into(), Bytes::from_static(b"up"))],
            status: 503,
            body: Some(Bytes::from_static(b"{\"late\":true}")),
        }
    }

    fn policies() -> Vec<proto::Policy> {
        vec![
            proto::Policy {
                name: "jwt".into(),
                params: [("issuer".to_string(), "\"me\"".to_string())].into_iter().collect(),
                on_failure: "deny".into(),
            },
            proto::Policy {
                name: "noop".into(),
                ..Default::default()
            },
        ]
    }

    fn meta() -> Metadata {
        [
            ("user".to_string(), "42".to_string()),
            ("tier".to_string(), String::new()),
        ]
        .into_iter()
        .collect()
    }

    fn encode(call: &EncodedCall) -> Vec<u8> {
        let v = call.encode_to_vec();
        assert_eq!(v.len(), call.encoded_len());
        v
    }

    /// Every shape of the two contexts: bodies absent, empty and present,
    /// empty and odd headers and queries, empty strings and metadata.
    fn requests() -> Vec<RequestCtx> {
        let full = request();
        vec![
            full.clone(),
            RequestCtx {
                body: None,
                ..full.clone()
            },
            RequestCtx {
                body: Some(Bytes::new()),
                path: "/".into(),
                ..full.clone()
            },
            RequestCtx::default(),
        ]
    }

    fn responses() -> Vec<ResponseCtx> {
        vec![
            response(),
            ResponseCtx {
                body: None,
                ..response()
            },
            ResponseCtx::default(),
        ]
    }

    #[test]
    fn request_calls_decode_as_the_generated_message() {
        for ctx in requests() {
            for (ps, meta) in [(policies(), meta()), (vec![], Metadata::new())] {
                let wire: Vec<Bytes> = ps.iter().map(encode_policy).collect();
                let mut call = request_call("rid-1", wire.iter(), &ctx, &meta, &[]);
                call.deadline_ms = 250;
                let got = proto::PolicyRequestPhase::decode(encode(&call).as_slice()).unwrap();
                let want = proto::PolicyRequestPhase {
                    request_id: "rid-1".into(),
                    policies: ps.clone(),
                    request_data: Some(ctx.to_proto()),
                    deadline_ms: 250,
                    policy_metadata: meta.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                };
                assert_eq!(got, want, "{ctx:?}");
            }
        }
    }

    #[test]
    fn the_routes_name_and_version_go_last_in_the_metadata() {
        let mut meta = Metadata::new();
        meta.insert("route.name".into(), "forged".into());
        meta.insert("sub".into(), "alice".into());
        let ctx = RequestCtx::default();
        let call = request_call(
            "r",
            std::iter::empty(),
            &ctx,
            &meta,
            &[("route.name", "mcp"), ("route.version", "v9")],
        );
        let got = proto::PolicyRequestPhase::decode(encode(&call).as_slice()).unwrap();
        assert_eq!(got.policy_metadata.get("route.name").map(String::as_str), Some("mcp"));
        assert_eq!(got.policy_metadata.get("route.version").map(String::as_str), Some("v9"));
        assert_eq!(got.policy_metadata.get("sub").map(String::as_str), Some("alice"));
    }

    #[test]
    fn response_calls_decode_as_the_generated_message() {
        for req in requests() {
            for resp in responses() {
                let wire: Vec<Bytes> = policies().iter().map(encode_policy).collect();
                let call = response_call("rid-2", wire.iter(), &req, &resp, &meta(), &[]);
                let got = proto::PolicyResponsePhase::decode(encode(&call).as_slice()).unwrap();
                let want = proto::PolicyResponsePhase {
                    request_id: "rid-2".into(),
                    policies: policies(),
                    request_data: Some(req.to_proto()),
                    response_data: Some(resp.to_proto()),
                    deadline_ms: 0,
                    policy_metadata: meta().into_iter().collect(),
                };
                assert_eq!(got, want, "{req:?} {resp:?}");
            }
        }
    }

    #[test]
    fn chunk_calls_decode_as_the_generated_message() {
        let events = [
            Bytes::from_static(b"data: {\"a\":1}\n\n"),
            Bytes::new(),
            Bytes::from(vec![b'x'; 300]),
        ];
        let states = [Bytes::from_static(b"{}"), Bytes::new()];
        for req in requests() {
            for resp in responses() {
                for (sequence, framing, events, states, eos, meta) in [
                    (0, 0, &events[..], &states[..], false, Metadata::new()),
                    (7, 1, &events[..1], &[][..], true, meta()),
                    (300, 0, &[][..], &states[1..], true, meta()),
                ] {
                    let context = chunk_context(&req, &resp);
                    let wire: Vec<Bytes> = policies().iter().map(encode_policy).collect();
                    let mut call = chunk_call(
                        wire.iter(),
                        &Chunk {
                            request_id: "rid-3",
                            context: &context,
                            sequence,
                            framing,
                            events,
                            end_of_stream: eos,
                            states,
                            meta: &meta,
                        },
                    );
                    call.deadline_ms = 40;
                    let got = proto::PolicyResponseChunk::decode(encode(&call).as_slice()).unwrap();
                    let no_body = |mut r: proto::RequestData| {
                        r.body = Bytes::new();
                        r.body_included = false;
                        r
                    };
                    let mut want_resp = resp.to_proto();
                    want_resp.body = Bytes::new();
                    want_resp.body_included = false;
                    let want = proto::PolicyResponseChunk {
                        request_id: "rid-3".into(),
                        policies: policies(),
                        request_data: Some(no_body(req.to_proto())),
                        response_data: Some(want_resp),
                        sequence,
                        framing,
                        events: events.to_vec(),
                        end_of_stream: eos,
                        policy_state: states.to_vec(),
                        deadline_ms: 40,
                        policy_metadata: meta.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                    };
                    assert_eq!(got, want, "{req:?} {resp:?} {sequence}");
                }
            }
        }
    }

    #[test]
    fn bodies_are_segments_not_copies() {
        let ctx = request();
        let call = request_call("r", std::iter::empty(), &ctx, &Metadata::new(), &[]);
        assert_eq!(call.rest.len(), 1);
        let body = ctx.body.as_ref().unwrap();
        assert_eq!(call.rest[0].0.as_ptr(), body.as_ptr(), "the body was copied");
        let call = response_call("r", std::iter::empty(), &ctx, &response(), &Metadata::new(), &[]);
        assert_eq!(call.rest.len(), 2, "request and response bodies");
        let events = [Bytes::from(vec![b'e'; 100])];
        let context = chunk_context(&ctx, &response());
        let chunk = Chunk {
            request_id: "r",
            context: &context,
            sequence: 1,
            framing: 0,
            events: &events,
            end_of_stream: false,
            states: &[],
            meta: &Metadata::new(),
        };
        let call = chunk_call(std::iter::empty(), &chunk);
        assert_eq!(call.rest.len(), 1, "one event, no bodies");
        assert_eq!(call.rest[0].0.as_ptr(), events[0].as_ptr(), "the event was copied");
    }
}
