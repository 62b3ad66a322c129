//! What a hook returns: small builders for instructions ([`RequestOutcome`],
//! [`ResponseOutcome`]), never raw proto structs. The SDK validates them and
//! converts them to the protocol's instructions (see `convert`).

use bytes::Bytes;

use crate::action::{Deny, Flow, HeaderOp, NewBody, RequestAction, ResponseAction};

macro_rules! common_builders {
    ($action:ident, $parts:ty) => {
        /// Sets (replaces) a header.
        pub fn set_header(self, name: impl Into<String>, value: impl Into<String>) -> Self {
            self.action($action::Header(HeaderOp::Set {
                name: name.into(),
                value: value.into(),
            }))
        }

        /// Adds a value to a header.
        pub fn append_header(self, name: impl Into<String>, value: impl Into<String>) -> Self {
            self.action($action::Header(HeaderOp::Append {
                name: name.into(),
                value: value.into(),
            }))
        }

        /// Removes a header.
        pub fn remove_header(self, name: impl Into<String>) -> Self {
            self.action($action::Header(HeaderOp::Remove { name: name.into() }))
        }

        /// Replaces the body, keeping the content-type.
        pub fn set_body(self, body: impl Into<Bytes>) -> Self {
            self.action($action::SetBody(NewBody {
                body: body.into(),
                content_type: None,
            }))
        }

        /// Replaces the body and its content-type.
        pub fn set_body_with_type(self, body: impl Into<Bytes>, content_type: impl Into<String>) -> Self {
            self.action($action::SetBody(NewBody {
                body: body.into(),
                content_type: Some(content_type.into()),
            }))
        }

        /// Sets a metadata key, seen by later policies and reported to Envoy.
        pub fn set_metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
            self.metadata.push((key.into(), value.into()));
            self
        }

        /// Stops the chain of this phase after this policy, keeping its changes.
        pub fn skip_remaining(mut self, reason: impl Into<String>) -> Self {
            if !matches!(self.flow, Flow::Deny(_)) {
                self.flow = Flow::SkipRemaining(reason.into());
            }
            self
        }

        /// Sets the human-readable message of the reply (for logs).
        pub fn message(mut self, message: impl Into<String>) -> Self {
            self.message = Some(message.into());
            self
        }

        /// Adds a header to the denial, if this outcome is one.
        pub fn deny_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
            if let Flow::Deny(d) = &mut self.flow {
                d.headers.push((name.into(), value.into()));
            }
            self
        }

        /// Sets the reason of the denial, if this outcome is one.
        pub fn deny_reason(mut self, reason: impl Into<String>) -> Self {
            if let Flow::Deny(d) = &mut self.flow {
                d.reason = reason.into();
            }
            self
        }

        /// The changes, in order.
        pub fn actions(&self) -> &[$action] {
            &self.actions
        }

        /// The metadata keys set, in order.
        pub fn metadata(&self) -> &[(String, String)] {
            &self.metadata
        }

        /// How the chain goes on.
        pub fn flow(&self) -> &Flow {
            &self.flow
        }

        /// The denial, if this outcome is one.
        pub fn denial(&self) -> Option<&Deny> {
            match &self.flow {
                Flow::Deny(d) => Some(d),
                _ => None,
            }
        }

        /// The reply message, if set.
        pub fn message_text(&self) -> Option<&str> {
            self.message.as_deref()
        }

        /// The value of the last `set_header` for `name` (case-insensitive).
        pub fn header_set(&self, name: &str) -> Option<&str> {
            self.actions.iter().rev().find_map(|a| match a {
                $action::Header(HeaderOp::Set { name: n, value }) if n.eq_ignore_ascii_case(name) => {
                    Some(value.as_str())
                }
                _ => None,
            })
        }

        /// The value of the last `set_metadata` for `key`.
        pub fn metadata_value(&self, key: &str) -> Option<&str> {
            self.metadata
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        }

        /// The last body set, if any.
        pub fn body_set(&self) -> Option<&NewBody> {
            self.actions.iter().rev().find_map(|a| match a {
                $action::SetBody(b) => Some(b),
                _ => None,
            })
        }

        /// Consumes the outcome into its parts.
        pub(crate) fn into_parts(self) -> ($parts, Option<String>) {
            ((self.actions, self.metadata, self.flow), self.message)
        }

        fn action(mut self, action: $action) -> Self {
            self.actions.push(action);
            self
        }
    };
}

/// The parts of an outcome: actions, metadata, flow.
pub(crate) type Parts<A> = (Vec<A>, Vec<(String, String)>, Flow);

/// What a request-phase hook returns.
///
/// ```
/// use policy_agents::RequestOutcome;
/// let ok = RequestOutcome::proceed()
///     .set_header("x-user", "alice")
///     .set_metadata("consumer", "alice");
/// let no = RequestOutcome::deny(401, r#"{"error":"unauthorized"}"#)
///     .deny_header("content-type", "application/json");
/// assert!(ok.denial().is_none());
/// assert_eq!(no.denial().map(|d| d.status), Some(401));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestOutcome {
    actions: Vec<RequestAction>,
    metadata: Vec<(String, String)>,
    flow: Flow,
    message: Option<String>,
    cache_max_age: Option<std::time::Duration>,
}

type RequestActionParts = Parts<RequestAction>;
type ResponseActionParts = Parts<ResponseAction>;

impl RequestOutcome {
    /// No change; the chain goes on.
    pub fn proceed() -> Self {
        RequestOutcome::default()
    }

    /// Answers the client now with `status` and `body`; the chain stops.
    pub fn deny(status: u16, body: impl Into<Bytes>) -> Self {
        RequestOutcome::denied_with(Deny::new(status, body))
    }

    /// Answers the client now with a JSON body; the chain stops.
    pub fn deny_json(status: u16, body: &serde_json::Value) -> Self {
        RequestOutcome::denied_with(Deny::json(status, body))
    }

    /// Answers the client now with a prepared [`Deny`].
    pub fn denied_with(deny: Deny) -> Self {
        RequestOutcome {
            flow: Flow::Deny(deny),
            ..RequestOutcome::default()
        }
    }

    /// Replaces the URL path.
    pub fn set_path(self, path: impl Into<String>) -> Self {
        self.action(RequestAction::SetPath(path.into()))
    }

    /// Sets a query parameter (not percent-encoded).
    pub fn set_query_param(self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.action(RequestAction::SetQueryParam(name.into(), value.into()))
    }

    /// Removes a query parameter.
    pub fn remove_query_param(self, name: impl Into<String>) -> Self {
        self.action(RequestAction::RemoveQueryParam(name.into()))
    }

    /// Replaces the HTTP method.
    pub fn set_method(self, method: impl Into<String>) -> Self {
        self.action(RequestAction::SetMethod(method.into()))
    }

    /// For a policy that declares [`Policy::cache`](crate::Policy::cache):
    /// the kernel keeps this outcome at most `max_age` (a token's remaining
    /// lifetime, say), never longer than declared.
    pub fn cache_for_at_most(mut self, max_age: std::time::Duration) -> Self {
        self.cache_max_age = Some(self.cache_max_age.map_or(max_age, |d| d.min(max_age)));
        self
    }

    /// For a policy that declares [`Policy::cache`](crate::Policy::cache):
    /// the kernel must not keep this outcome (it depends on something the
    /// declaration does not key on).
    pub fn no_store(self) -> Self {
        self.cache_for_at_most(std::time::Duration::ZERO)
    }

    /// The lifetime this outcome asks for, if it lowered the declared one.
    pub fn cache_max_age(&self) -> Option<std::time::Duration> {
        self.cache_max_age
    }

    common_builders!(RequestAction, RequestActionParts);
}

/// What a response-phase hook returns.
///
/// A denial in the response phase replaces the upstream's status, body and
/// the given headers, then stops the chain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponseOutcome {
    actions: Vec<ResponseAction>,
    metadata: Vec<(String, String)>,
    flow: Flow,
    message: Option<String>,
}

impl ResponseOutcome {
    /// No change; the chain goes on.
    pub fn proceed() -> Self {
        ResponseOutcome::default()
    }

    /// Replaces the response with `status` and `body`; the chain stops.
    pub fn deny(status: u16, body: impl Into<Bytes>) -> Self {
        ResponseOutcome::denied_with(Deny::new(status, body))
    }

    /// Replaces the response with a JSON body; the chain stops.
    pub fn deny_json(status: u16, body: &serde_json::Value) -> Self {
        ResponseOutcome::denied_with(Deny::json(status, body))
    }

    /// Replaces the response with a prepared [`Deny`].
    pub fn denied_with(deny: Deny) -> Self {
        ResponseOutcome {
            flow: Flow::Deny(deny),
            ..ResponseOutcome::default()
        }
    }

    /// Replaces the status code.
    pub fn set_status(self, status: u16) -> Self {
        self.action(ResponseAction::SetStatus(status))
    }

    common_builders!(ResponseAction, ResponseActionParts);
}
