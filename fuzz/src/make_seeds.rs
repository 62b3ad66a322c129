//! Writes seed inputs for the `stream` and `reply_to_mutation` targets:
//! realistic Envoy message sequences (both routes, with and without bodies)
//! and agent replies, in the framing the targets expect.
use std::path::Path;

use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue};
use envoy_types::pb::envoy::service::ext_proc::v3::{processing_request::Request, HttpBody, HttpHeaders, ProcessingRequest};
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
use policy_kernel::proto::{self, request_instruction::Instruction as Rq, response_instruction::Instruction as Rs};
use prost::Message;

fn headers(pairs: &[(&str, &str)], eos: bool) -> HttpHeaders {
    HttpHeaders {
        headers: Some(HeaderMap {
            headers: pairs.iter().map(|(k, v)| HeaderValue { key: k.to_string(), value: String::new(), raw_value: v.as_bytes().to_vec() }).collect(),
        }),
        end_of_stream: eos,
        ..Default::default()
    }
}

fn request_headers(route: &str, eos: bool) -> Vec<u8> {
    let mut m = ProcessingRequest {
        request: Some(Request::RequestHeaders(headers(&[(":method", "POST"), (":path", "/a?x=1"), (":authority", "h"), ("x-request-id", "r1")], eos))),
        ..Default::default()
    };
    let mut fields = Struct::default();
    fields.fields.insert("xds.route_name".into(), Value { kind: Some(Kind::StringValue(route.into())) });
    m.attributes.insert("envoy.filters.http.ext_proc".into(), fields);
    m.encode_to_vec()
}

fn message(r: Request) -> Vec<u8> {
    ProcessingRequest { request: Some(r), ..Default::default() }.encode_to_vec()
}

fn request_reply() -> Vec<u8> {
    let i = |x| proto::RequestInstruction { instruction: Some(x) };
    proto::PolicyRequestResponse {
        request_id: "r1".into(),
        instructions: vec![
            i(Rq::SetHeader(proto::SetHeader { name: "x-a".into(), value: "1".into() })),
            i(Rq::SetPath(proto::SetPath { path: "/b".into() })),
            i(Rq::SetQueryParam(proto::SetQueryParam { name: "q".into(), value: "v w".into() })),
            i(Rq::SetBody(proto::SetBody { body: "new".into(), content_type: "text/plain".into() })),
            i(Rq::SetMetadata(proto::SetMetadata { key: "k".into(), value: "v".into() })),
        ],
        ..Default::default()
    }
    .encode_to_vec()
}

fn response_reply() -> Vec<u8> {
    let i = |x| proto::ResponseInstruction { instruction: Some(x) };
    proto::PolicyResponseResponse {
        request_id: "r1".into(),
        instructions: vec![
            i(Rs::SetStatusCode(proto::SetStatusCode { status_code: 418 })),
            i(Rs::SetHeader(proto::SetHeader { name: "x-b".into(), value: "2".into() })),
            i(Rs::SetBody(proto::SetBody { body: "out".into(), content_type: String::new() })),
        ],
        ..Default::default()
    }
    .encode_to_vec()
}

fn join(parts: &[Vec<u8>], sep: u8) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            out.push(sep);
        }
        out.extend_from_slice(p);
    }
    out
}

fn main() -> std::io::Result<()> {
    let stream = Path::new("corpus/stream");
    let replies = Path::new("corpus/reply_to_mutation");
    std::fs::create_dir_all(stream)?;
    std::fs::create_dir_all(replies)?;
    let body = message(Request::RequestBody(HttpBody { body: b"{\"a\":1}".to_vec(), end_of_stream: true, ..Default::default() }));
    let resp_headers = message(Request::ResponseHeaders(headers(&[(":status", "200")], false)));
    let resp_body = message(Request::ResponseBody(HttpBody { body: b"hello".to_vec(), end_of_stream: true, ..Default::default() }));
    // Envoy messages at even positions, agent replies at odd ones.
    let seeds = [
        join(&[request_headers("h", true), request_reply(), resp_headers.clone(), response_reply()], 0xFE),
        join(&[request_headers("b", false), request_reply(), body, response_reply(), resp_headers, Vec::new(), resp_body], 0xFE),
        join(&[request_headers("unknown", true)], 0xFE),
    ];
    for (i, s) in seeds.iter().enumerate() {
        std::fs::write(stream.join(format!("seed-{i}")), s)?;
    }
    std::fs::write(replies.join("seed-0"), join(&[request_reply(), response_reply()], 0xFF))?;
    Ok(())
}
