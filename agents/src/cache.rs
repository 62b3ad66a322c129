//! [`Cacheable`]: what a policy declares so that the kernel may keep its
//! request-phase outcome and answer repeats without calling the agent.
//!
//! The kernel keys an entry on the route's configuration version, the
//! policies of the call and their params, the agent and its connection, and
//! the request parts declared here. Declare every part the outcome depends
//! on, and nothing that changes on every request (a request id), or nothing
//! is ever reused. Stateful policies (rate limits, budgets, audit trails)
//! must not declare it: a cached answer skips them.
//!
//! An outcome may keep itself for less than the declared lifetime
//! ([`RequestOutcome::cache_for_at_most`](crate::RequestOutcome::cache_for_at_most))
//! or not at all ([`RequestOutcome::no_store`](crate::RequestOutcome::no_store)).

use std::time::Duration;

use crate::proto;

/// A policy's declaration that its request-phase outcome may be cached.
///
/// ```
/// use std::time::Duration;
/// use policy_agents::Cacheable;
/// let c = Cacheable::for_at_most(Duration::from_secs(60))
///     .header_param("header_name", "x-api-key")
///     .metadata("consumer");
/// assert_eq!(c.max_age(), Duration::from_secs(60));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cacheable {
    max_age: Duration,
    headers: Vec<String>,
    header_params: Vec<(String, String)>,
    metadata: Vec<String>,
    body: bool,
    body_fields: Vec<String>,
}

impl Cacheable {
    /// Entries live at most `max_age` (rounded down to milliseconds; the
    /// kernel may cap it further).
    pub fn for_at_most(max_age: Duration) -> Self {
        Cacheable {
            max_age,
            ..Cacheable::default()
        }
    }

    /// The declared lifetime.
    pub fn max_age(&self) -> Duration {
        self.max_age
    }

    /// The value of request header `name` keys an entry (`:method`, `:path`
    /// and `:authority` name the request line's parts).
    pub fn header(mut self, name: impl Into<String>) -> Self {
        self.headers.push(name.into().to_ascii_lowercase());
        self
    }

    /// The header named by the route's param `param` (else `default`) keys
    /// an entry.
    pub fn header_param(mut self, param: impl Into<String>, default: impl Into<String>) -> Self {
        self.header_params
            .push((param.into(), default.into().to_ascii_lowercase()));
        self
    }

    /// The value of metadata key `key`, set by an earlier policy, keys an entry.
    pub fn metadata(mut self, key: impl Into<String>) -> Self {
        self.metadata.push(key.into());
        self
    }

    /// The SHA-256 of the whole request body keys an entry.
    pub fn body(mut self) -> Self {
        self.body = true;
        self
    }

    /// The value at JSON Pointer `pointer` of a JSON request body keys an
    /// entry (a body that is not JSON is not cached).
    pub fn body_field(mut self, pointer: impl Into<String>) -> Self {
        self.body_fields.push(pointer.into());
        self
    }

    pub(crate) fn to_proto(&self) -> proto::DecisionCache {
        proto::DecisionCache {
            max_age_ms: u32::try_from(self.max_age.as_millis()).unwrap_or(u32::MAX),
            headers: self.headers.clone(),
            header_params: self.header_params.iter().cloned().collect(),
            metadata: self.metadata.clone(),
            body: self.body,
            body_fields: self.body_fields.clone(),
        }
    }
}

/// Milliseconds of `d`, saturating.
pub(crate) fn millis(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}
