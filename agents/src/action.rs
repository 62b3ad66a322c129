//! The changes and verdicts a policy can ask for, as plain domain types
//! (converted to protocol instructions in `convert`).

use bytes::Bytes;

/// A header change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderOp {
    /// Set (replace) a header.
    Set {
        /// Header name (sent lower case).
        name: String,
        /// Header value.
        value: String,
    },
    /// Add a value to a header.
    Append {
        /// Header name (sent lower case).
        name: String,
        /// Value to add.
        value: String,
    },
    /// Remove a header.
    Remove {
        /// Header name (sent lower case).
        name: String,
    },
}

/// A replacement body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewBody {
    /// The new body.
    pub body: Bytes,
    /// The new content-type, if it changes.
    pub content_type: Option<String>,
}

/// A request change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestAction {
    /// A header change.
    Header(HeaderOp),
    /// Replace the body.
    SetBody(NewBody),
    /// Replace the path (a `?query` part replaces the query string).
    SetPath(String),
    /// Set a query parameter (name, value), not percent-encoded.
    SetQueryParam(String, String),
    /// Remove a query parameter.
    RemoveQueryParam(String),
    /// Replace the method.
    SetMethod(String),
}

/// A response change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseAction {
    /// A header change.
    Header(HeaderOp),
    /// Replace the body.
    SetBody(NewBody),
    /// Replace the status code.
    SetStatus(u16),
}

/// A denial: the answer the client gets instead of (or in place of) the upstream's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deny {
    /// HTTP status, 200-599.
    pub status: u16,
    /// Response body.
    pub body: Bytes,
    /// Response headers.
    pub headers: Vec<(String, String)>,
    /// Short reason for logs and metrics (for example `rate_limited`).
    pub reason: String,
}

impl Deny {
    /// A denial with a plain body and no headers.
    pub fn new(status: u16, body: impl Into<Bytes>) -> Self {
        Deny {
            status,
            body: body.into(),
            headers: Vec::new(),
            reason: String::new(),
        }
    }

    /// A denial with a JSON body and `content-type: application/json`.
    pub fn json(status: u16, body: &serde_json::Value) -> Self {
        Deny::new(status, body.to_string()).header("content-type", "application/json")
    }

    /// Adds a response header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the reason.
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = reason.into();
        self
    }
}

/// How the chain goes on after a policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Flow {
    /// Run the next policy.
    #[default]
    Continue,
    /// Answer the client now; the remaining policies do not run.
    Deny(Deny),
    /// Stop the chain of this phase, keeping the changes so far.
    SkipRemaining(String),
}
