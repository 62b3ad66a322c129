//! Generated types and gRPC stubs of `proto/policy_agent.proto`
//! (package `policy_kernel.agent.v1`), the kernel <-> agent contract.
//!
//! Most agents never touch these: the SDK converts them to and from
//! [`RequestContext`](crate::RequestContext), [`RequestOutcome`](crate::RequestOutcome)
//! and friends. They are here for advanced users (custom servers, clients, tests).
#![allow(missing_docs, clippy::all)]
tonic::include_proto!("policy_kernel.agent.v1");

/// `Policy`, kept encoded until the SDK runs it (see [`Policy::new`]).
pub use crate::call_policy::Policy;

/// `HeaderValue` and `RequestData`, their strings sharing the call's buffer.
pub use crate::call_data::{HeaderValue, RequestData};
