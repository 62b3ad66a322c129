//! Agent replies as checked domain instructions, the running request and
//! response context they update, and the last-wins merge of everything the
//! chain decided into the set of mutations sent to Envoy.
//!
//! A reply is converted and checked as a whole ([`convert`]) before any of it
//! is applied: an invalid instruction fails the call, and nothing of that
//! reply reaches Envoy.

mod context;
mod convert;

use bytes::Bytes;

pub use context::{Header, Metadata, Next, RequestCtx, ResponseCtx};
pub use convert::{convert_request_reply, convert_response_reply, InvalidReply};

use crate::http::PathAndQuery;

/// One checked instruction from an agent.
#[derive(Debug, Clone, PartialEq)]
pub enum Instr {
    /// Replace a header (lower-case name).
    SetHeader(String, Bytes),
    /// Add a value to a header.
    AppendHeader(String, Bytes),
    /// Remove a header.
    RemoveHeader(String),
    /// Replace the body; optionally the content-type.
    SetBody(Bytes, Option<String>),
    /// Replace the path (request phase).
    SetPath(String),
    /// Set a query parameter (request phase).
    SetQuery(String, String),
    /// Remove a query parameter (request phase).
    RemoveQuery(String),
    /// Replace the method (request phase).
    SetMethod(String),
    /// Replace the status (response phase).
    SetStatus(u16),
    /// Answer the client now (request phase).
    Immediate(Immediate),
    /// Set a metadata key.
    SetMetadata(String, String),
    /// Stop the chain of this phase after this reply.
    Skip,
}

/// An immediate answer to the client: from an agent, or configured.
#[derive(Debug, Clone, PartialEq)]
pub struct Immediate {
    /// HTTP status, 200-599.
    pub status: u16,
    /// Headers (checked names and values).
    pub headers: Vec<Header>,
    /// Body.
    pub body: Bytes,
    /// Why: shown in Envoy's response details, logs and metrics.
    pub reason: String,
}

/// A checked agent reply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reply {
    /// Instructions, in order; `Continue` is dropped, the first `Immediate`
    /// ends the list, and only the first `Skip` is kept.
    pub instructions: Vec<Instr>,
    /// The reply's `policy_metadata`.
    pub metadata: Vec<(String, String)>,
    /// The reply's `cache_max_age_ms` (request phase).
    pub cache_max_age_ms: Option<u32>,
}

/// The final state of one header name after merging (last wins).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderOp {
    /// Overwrite with these values (the first replaces, the rest are added).
    Set(Vec<Bytes>),
    /// Add these values to whatever the header holds.
    Append(Vec<Bytes>),
    /// Remove the header.
    Remove,
}

/// Kinds of conflict counted by the `instruction_conflicts_total` metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Conflicts {
    /// A header a previous reply had already changed.
    pub header: u32,
    /// A body a previous reply had already replaced.
    pub body: u32,
    /// A path, query or method a previous reply had already changed.
    pub request_line: u32,
    /// A status a previous reply had already changed.
    pub status: u32,
}

/// Everything one phase's chain decided, merged; translated to Envoy once.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Mutations {
    /// Per header name, its final operation and the reply that last touched it.
    pub headers: Vec<(String, HeaderOp, usize)>,
    /// New body and content-type, and the reply that set it.
    pub body: Option<(Bytes, Option<String>, usize)>,
    /// New `:path`, when path or query changed.
    pub path: Option<(PathAndQuery, usize)>,
    /// New method.
    pub method: Option<(String, usize)>,
    /// New status.
    pub status: Option<(u16, usize)>,
    /// Conflicts seen while merging.
    pub conflicts: Conflicts,
}

impl Mutations {
    /// True when nothing changes.
    pub fn is_empty(&self) -> bool {
        self.headers.is_empty()
            && self.body.is_none()
            && self.path.is_none()
            && self.method.is_none()
            && self.status.is_none()
    }

    /// Merges a header instruction from reply number `reply`.
    pub fn header(&mut self, name: &str, op: HeaderOp, reply: usize) {
        match self.headers.iter_mut().find(|(n, _, _)| n == name) {
            None => self.headers.push((name.to_string(), op, reply)),
            Some((_, prev, by)) => {
                if *by != reply {
                    self.conflicts.header += 1;
                }
                *by = reply;
                *prev = match (std::mem::replace(prev, HeaderOp::Remove), op) {
                    (HeaderOp::Set(mut vs), HeaderOp::Append(add)) => {
                        vs.extend(add);
                        HeaderOp::Set(vs)
                    }
                    (HeaderOp::Append(mut vs), HeaderOp::Append(add)) => {
                        vs.extend(add);
                        HeaderOp::Append(vs)
                    }
                    // Appending to a removed header leaves just the new value.
                    (HeaderOp::Remove, HeaderOp::Append(add)) => HeaderOp::Set(add),
                    (_, later) => later,
                };
            }
        }
    }

    /// Merges a body replacement.
    pub fn set_body(&mut self, body: Bytes, content_type: Option<String>, reply: usize) {
        if matches!(self.body, Some((_, _, by)) if by != reply) {
            self.conflicts.body += 1;
        }
        self.body = Some((body, content_type, reply));
    }

    /// Merges a status replacement.
    pub fn set_status(&mut self, status: u16, reply: usize) {
        if matches!(self.status, Some((_, by)) if by != reply) {
            self.conflicts.status += 1;
        }
        self.status = Some((status, reply));
    }

    /// Merges a method replacement.
    pub fn set_method(&mut self, method: String, reply: usize) {
        if matches!(self.method, Some((_, by)) if by != reply) {
            self.conflicts.request_line += 1;
        }
        self.method = Some((method, reply));
    }

    /// The path being rewritten, starting from `current` the first time.
    pub fn path_mut(&mut self, current: &str, reply: usize) -> &mut PathAndQuery {
        if matches!(self.path, Some((_, by)) if by != reply) {
            self.conflicts.request_line += 1;
        }
        let entry = self.path.get_or_insert_with(|| (PathAndQuery::parse(current), reply));
        entry.1 = reply;
        &mut entry.0
    }

    /// Total number of conflicts.
    pub fn conflict_count(&self) -> u32 {
        let c = self.conflicts;
        c.header + c.body + c.request_line + c.status
    }
}

#[cfg(test)]
mod tests;
