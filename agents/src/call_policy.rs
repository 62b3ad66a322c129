//! The policies of a call as the kernel sends them, and the agent's table of
//! the ones it has seen.
//!
//! The kernel encodes each policy of a route (its name, params and
//! `on_failure`) once per configuration and sends the same bytes in every
//! call. Decoding them on every call (a string for the name, two for each
//! param, a map) was about a fifth of a small policy's call in the agent
//! (benches/RESULTS.md, 2026-11-27). So a call's [`Policy`] keeps its fields
//! as they came, as slices of the call's buffer with no copy, and the agent
//! decodes each distinct policy once: [`Seen::resolve`] looks the bytes up
//! and decodes only what it has not seen. A policy that does not decode
//! fails its call (INVALID_ARGUMENT), as a call that did not decode did.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::{Buf, BufMut, Bytes};
use prost::encoding::{self, DecodeContext, WireType};
use prost::{DecodeError, Message};

use crate::params::Params;

/// Distinct policies kept at most (routes × policies × the kernel's
/// configurations); beyond, the table starts over.
const MAX_SEEN: usize = 1024;

// Field numbers of `Policy` in proto/policy_agent.proto.
const NAME: u32 = 1;
const PARAMS: u32 = 2;
const ON_FAILURE: u32 = 3;

/// One policy of a call (`policy_kernel.agent.v1.Policy`), its fields kept
/// encoded. Build one with [`Policy::new`]; the SDK decodes it when it runs
/// the call.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// `(field number, encoded value)` in the order received.
    fields: Vec<(u32, Bytes)>,
}

impl std::hash::Hash for Policy {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        for (tag, value) in &self.fields {
            state.write_u32(*tag);
            state.write_usize(value.len());
            state.write(value);
        }
    }
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match Decoded::of(self) {
            Ok(d) => f
                .debug_struct("Policy")
                .field("name", &d.name)
                .field("params", &d.params)
                .field("on_failure", &d.on_failure)
                .finish(),
            Err(e) => f.debug_struct("Policy").field("undecodable", &e).finish(),
        }
    }
}

impl Policy {
    /// The policy `name` with `params`, and what to do when it fails
    /// (`on_failure`: "deny", "continue", "skip_remaining", or empty).
    pub fn new<K: Into<String>, V: Into<String>>(
        name: &str,
        params: impl IntoIterator<Item = (K, V)>,
        on_failure: &str,
    ) -> Self {
        let decoded = Decoded {
            name: name.to_string(),
            params: params.into_iter().map(|(k, v)| (k.into(), v.into())).collect(),
            on_failure: on_failure.to_string(),
        };
        let mut policy = Policy::default();
        // Our own encoding of a valid message: it decodes.
        let _ = policy.merge(decoded.encode_to_vec().as_slice());
        policy
    }

    /// A copy that shares no buffer with the call it came in.
    fn owned(&self) -> Self {
        Policy {
            fields: self
                .fields
                .iter()
                .map(|(t, v)| (*t, Bytes::copy_from_slice(v)))
                .collect(),
        }
    }
}

impl Message for Policy {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        for (tag, value) in &self.fields {
            encoding::bytes::encode(*tag, value, buf);
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
            NAME | PARAMS | ON_FAILURE => {
                let mut value = Bytes::new();
                encoding::bytes::merge(wire_type, &mut value, buf, ctx)?;
                self.fields.push((tag, value));
                Ok(())
            }
            _ => encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        self.fields
            .iter()
            .map(|(tag, v)| encoding::bytes::encoded_len(*tag, v))
            .sum()
    }

    fn clear(&mut self) {
        self.fields.clear();
    }
}

/// The decoded form, as prost decodes the message (later fields win, map
/// entries add up, strings must be UTF-8).
#[derive(Clone, PartialEq, Message)]
struct Decoded {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(map = "string, string", tag = "2")]
    params: HashMap<String, String>,
    #[prost(string, tag = "3")]
    on_failure: String,
}

impl Decoded {
    fn of(policy: &Policy) -> Result<Self, DecodeError> {
        Decoded::decode(policy.encode_to_vec().as_slice())
    }
}

/// A policy of a call, decoded.
#[derive(Debug)]
pub(crate) struct Resolved {
    pub(crate) name: String,
    pub(crate) params: Params,
    pub(crate) on_failure: String,
    /// Its index among the agent's policies; `None` when it has no such policy.
    pub(crate) index: Option<usize>,
}

type Table = HashMap<Policy, Arc<Resolved>, foldhash::fast::RandomState>;

/// The policies an agent has decoded, by their bytes.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    table: Mutex<Table>,
}

impl Seen {
    /// `policy` decoded: from the table, or decoded now (and kept), with
    /// `index` giving the agent's policy of that name.
    pub(crate) fn resolve(
        &self,
        policy: &Policy,
        index: impl FnOnce(&str) -> Option<usize>,
    ) -> Result<Arc<Resolved>, DecodeError> {
        if let Some(hit) = self.table().get(policy) {
            return Ok(Arc::clone(hit));
        }
        let d = Decoded::of(policy)?;
        let resolved = Arc::new(Resolved {
            index: index(&d.name),
            name: d.name,
            params: Params::new(d.params),
            on_failure: d.on_failure,
        });
        let mut table = self.table();
        if table.len() >= MAX_SEEN {
            table.clear();
        }
        table.insert(policy.owned(), Arc::clone(&resolved));
        Ok(resolved)
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.table().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(name: &str) -> Option<usize> {
        (name == "known").then_some(7)
    }

    #[test]
    fn a_policy_decodes_as_built_and_once() {
        let seen = Seen::default();
        let p = Policy::new("known", [("a", "1"), ("b", "x y")], "continue");
        let r = seen.resolve(&p, index).unwrap();
        assert_eq!(r.name, "known");
        assert_eq!(r.params.get("a"), Some("1"));
        assert_eq!(r.params.get("b"), Some("x y"));
        assert_eq!(r.on_failure, "continue");
        assert_eq!(r.index, Some(7));
        // The same bytes again: the same decoded policy, not a second one.
        let again = Policy::decode(p.encode_to_vec().as_slice()).unwrap();
        assert!(Arc::ptr_eq(
            &r,
            &seen.resolve(&again, |_| panic!("decoded twice")).unwrap()
        ));
        // Other params: another entry.
        let other = seen.resolve(&Policy::new("known", [("a", "2")], ""), index).unwrap();
        assert_eq!(other.params.get("a"), Some("2"));
        assert_eq!(seen.len(), 2);
        let unknown = seen.resolve(&Policy::new("other", [("a", "2")], ""), index).unwrap();
        assert_eq!(unknown.index, None);
    }

    #[test]
    fn it_reads_what_the_generated_message_writes() {
        // Field by field as prost encodes `Policy`, unknown fields included.
        let mut buf = Vec::new();
        encoding::string::encode(NAME, &"n".to_string(), &mut buf);
        encoding::uint32::encode(9, &5, &mut buf);
        let params: HashMap<String, String> = [("k".to_string(), "v".to_string())].into();
        encoding::hash_map::encode(
            encoding::string::encode,
            encoding::string::encoded_len,
            encoding::string::encode,
            encoding::string::encoded_len,
            PARAMS,
            &params,
            &mut buf,
        );
        encoding::string::encode(NAME, &"m".to_string(), &mut buf);
        let p = Policy::decode(buf.as_slice()).unwrap();
        let r = Seen::default().resolve(&p, index).unwrap();
        assert_eq!(r.name, "m", "the last occurrence wins, as in prost");
        assert_eq!(r.params.get("k"), Some("v"));
        assert_eq!(r.on_failure, "");
    }

    #[test]
    fn bad_bytes_are_refused_and_not_kept() {
        let seen = Seen::default();
        let mut buf = Vec::new();
        encoding::bytes::encode(NAME, &vec![0xff, 0xfe], &mut buf);
        let p = Policy::decode(buf.as_slice()).unwrap();
        assert!(seen.resolve(&p, index).is_err(), "a name that is not UTF-8");
        assert_eq!(seen.len(), 0);
        // A field cut short fails the call's decoding, as before.
        let mut short = Vec::new();
        encoding::string::encode(NAME, &"name".to_string(), &mut short);
        short.truncate(short.len() - 1);
        assert!(Policy::decode(short.as_slice()).is_err());
        assert!(format!("{p:?}").contains("undecodable"));
    }

    #[test]
    fn the_table_is_bounded_and_holds_no_call_buffer() {
        let seen = Seen::default();
        for i in 0..MAX_SEEN + 10 {
            seen.resolve(&Policy::new("known", [("i", i.to_string())], ""), index)
                .unwrap();
        }
        assert!(seen.len() <= MAX_SEEN);
        let call = Bytes::from(Policy::new("known", [("big", "x")], "").encode_to_vec());
        let p = Policy::decode(call.clone()).unwrap();
        seen.resolve(&p, index).unwrap();
        drop(p);
        assert!(call.is_unique(), "the table copied what it keeps");
    }
}
