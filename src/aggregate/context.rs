//! The request and response as the next agent sees them: built once from
//! Envoy's headers, then updated by each reply in chain order.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::{HeaderOp, Instr, Mutations, Reply};
use crate::http::{parse_query, split_path};
use crate::proto;

/// A header: lower-case name and raw value bytes.
pub type Header = (String, Bytes);

/// Metadata accumulated over a request, both phases.
pub type Metadata = BTreeMap<String, String>;

/// The request as the next agent sees it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestCtx {
    /// Regular headers, in order (no pseudo-headers).
    pub headers: Vec<Header>,
    /// `:method`.
    pub method: String,
    /// `:path`, with query.
    pub path: String,
    /// `:scheme`.
    pub scheme: String,
    /// `:authority`.
    pub authority: String,
    /// Client IP without port, or empty.
    pub client_ip: String,
    /// Envoy's x-request-id, or a generated id.
    pub request_id: String,
    /// The body, when the chain asked for it.
    pub body: Option<Bytes>,
}

/// The upstream's response as the next agent sees it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResponseCtx {
    /// Regular headers, in order (no `:status`).
    pub headers: Vec<Header>,
    /// Status code.
    pub status: u16,
    /// The body, when the chain asked for it.
    pub body: Option<Bytes>,
}

fn set_header(headers: &mut Vec<Header>, name: &str, value: Bytes) {
    headers.retain(|(n, _)| n != name);
    headers.push((name.to_string(), value));
}

fn apply_header(headers: &mut Vec<Header>, muts: &mut Mutations, i: &Instr, reply: usize) -> bool {
    match i {
        Instr::SetHeader(n, v) => {
            set_header(headers, n, v.clone());
            muts.header(n, HeaderOp::Set(vec![v.clone()]), reply);
        }
        Instr::AppendHeader(n, v) => {
            headers.push((n.clone(), v.clone()));
            muts.header(n, HeaderOp::Append(vec![v.clone()]), reply);
        }
        Instr::RemoveHeader(n) => {
            headers.retain(|(h, _)| h != n);
            muts.header(n, HeaderOp::Remove, reply);
        }
        Instr::SetBody(b, ct) => {
            set_header(headers, "content-length", Bytes::from(b.len().to_string()));
            if let Some(ct) = ct {
                let v = Bytes::from(ct.clone());
                set_header(headers, "content-type", v.clone());
                muts.header("content-type", HeaderOp::Set(vec![v]), reply);
            }
            muts.set_body(b.clone(), ct.clone(), reply);
        }
        _ => return false,
    }
    true
}

fn merge_metadata(meta: &mut Metadata, reply: &Reply) {
    for (k, v) in &reply.metadata {
        meta.insert(k.clone(), v.clone());
    }
    for i in &reply.instructions {
        if let Instr::SetMetadata(k, v) = i {
            meta.insert(k.clone(), v.clone());
        }
    }
}

/// What applying a reply tells the chain to do next.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Call the next group.
    Continue,
    /// Stop this phase's chain, keeping everything so far.
    Skip,
    /// Answer the client with this.
    Immediate(super::Immediate),
}

fn next_of(reply: &Reply) -> Next {
    for i in &reply.instructions {
        match i {
            Instr::Immediate(imm) => return Next::Immediate(imm.clone()),
            Instr::Skip => return Next::Skip,
            _ => {}
        }
    }
    Next::Continue
}

impl RequestCtx {
    /// Applies a checked reply (number `reply` in the chain) to the context,
    /// the merged mutations and the metadata.
    pub fn apply(&mut self, r: &Reply, muts: &mut Mutations, meta: &mut Metadata, reply: usize) -> Next {
        merge_metadata(meta, r);
        let next = next_of(r);
        if matches!(next, Next::Immediate(_)) {
            return next;
        }
        for i in &r.instructions {
            if apply_header(&mut self.headers, muts, i, reply) {
                if let Instr::SetBody(b, _) = i {
                    self.body = Some(b.clone());
                }
                continue;
            }
            match i {
                Instr::SetPath(p) => {
                    let path = self.path.clone();
                    let pq = muts.path_mut(&path, reply);
                    pq.set_path(p);
                    self.path = pq.to_path();
                }
                Instr::SetQuery(k, v) => {
                    let path = self.path.clone();
                    let pq = muts.path_mut(&path, reply);
                    pq.set_param(k, v);
                    self.path = pq.to_path();
                }
                Instr::RemoveQuery(k) => {
                    let path = self.path.clone();
                    let pq = muts.path_mut(&path, reply);
                    pq.remove_param(k);
                    self.path = pq.to_path();
                }
                Instr::SetMethod(m) => {
                    self.method = m.clone();
                    muts.set_method(m.clone(), reply);
                }
                _ => {}
            }
        }
        next
    }

    /// The request as an agent decodes it from a call, as the generated
    /// message. Calls themselves are written by [`crate::wire`] without
    /// building it; its tests compare the two.
    pub fn to_proto(&self) -> proto::RequestData {
        let (_, query) = split_path(&self.path);
        proto::RequestData {
            headers: Some(headers_to_proto(&self.headers)),
            body: self.body.clone().unwrap_or_default(),
            body_included: self.body.is_some(),
            method: self.method.clone(),
            path: self.path.clone(),
            scheme: self.scheme.clone(),
            authority: self.authority.clone(),
            query_params: Some(proto::QueryParameters {
                params: query.map(parse_query).unwrap_or_default().into_iter().collect(),
            }),
            client_ip: self.client_ip.clone(),
        }
    }
}

impl ResponseCtx {
    /// Applies a checked response-phase reply.
    pub fn apply(&mut self, r: &Reply, muts: &mut Mutations, meta: &mut Metadata, reply: usize) -> Next {
        merge_metadata(meta, r);
        for i in &r.instructions {
            if apply_header(&mut self.headers, muts, i, reply) {
                if let Instr::SetBody(b, _) = i {
                    self.body = Some(b.clone());
                }
            } else if let Instr::SetStatus(s) = i {
                self.status = *s;
                muts.set_status(*s, reply);
            }
        }
        next_of(r)
    }

    /// The response as an agent decodes it from a call (see
    /// [`RequestCtx::to_proto`]).
    pub fn to_proto(&self) -> proto::ResponseData {
        proto::ResponseData {
            headers: Some(headers_to_proto(&self.headers)),
            body: self.body.clone().unwrap_or_default(),
            body_included: self.body.is_some(),
            status_code: i32::from(self.status),
        }
    }
}

/// Headers as agents decode them: `value` when UTF-8, else `raw_value`.
pub fn headers_to_proto(headers: &[Header]) -> proto::HttpHeaders {
    proto::HttpHeaders {
        headers: headers
            .iter()
            .map(|(k, v)| match std::str::from_utf8(v) {
                Ok(s) => proto::HeaderValue {
                    key: k.clone(),
                    value: s.to_string(),
                    raw_value: Bytes::new(),
                },
                Err(_) => proto::HeaderValue {
                    key: k.clone(),
                    value: String::new(),
                    raw_value: v.clone(),
                },
            })
            .collect(),
    }
}
