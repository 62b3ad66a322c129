//! # policy-agents
//!
//! The SDK for writing *policy agents* for policy-kernel. The reference
//! agents built with it (auth, rate limit, guardrail, MCP tools, planner) are
//! the `reference-agents` crate beside this one.
//!
//! A policy agent is a worker process that serves the `PolicyAgent` gRPC
//! service (`proto/policy_agent.proto`) on a Unix socket. The kernel, a
//! sidecar next to Envoy, discovers the agent's policies with
//! `GetAgentConfig`, watches it with `HealthCheck`, and sends it the policies
//! of a route's chain to run on each request and response.
//!
//! An author implements [`Policy`] once per policy and registers the policies
//! on an [`Agent`]; the SDK does the rest: discovery, health, running the
//! policies of a call in order, passing metadata between them, stopping at a
//! denial, `on_failure`, safe socket binding and draining on SIGTERM.
//!
//! ```no_run
//! use policy_agents::{
//!     Agent, FromParams, ParamError, Params, Policy, PolicyError, RequestContext,
//!     RequestOutcome,
//! };
//!
//! /// Denies requests without a tenant header; tags the others.
//! struct RequireTenant;
//!
//! /// Typed parameters, parsed from the kernel's strings on every call.
//! struct TenantParams {
//!     header: String,
//! }
//!
//! impl FromParams for TenantParams {
//!     fn from_params(p: &Params) -> Result<Self, ParamError> {
//!         Ok(TenantParams { header: p.get("header").unwrap_or("x-tenant").to_string() })
//!     }
//! }
//!
//! impl Policy for RequireTenant {
//!     type Params = TenantParams;
//!     fn name(&self) -> &str { "requireTenant" }
//!     fn version(&self) -> &str { "1.0.0" }
//!     fn param_schema(&self) -> &[&str] { &["header"] }
//!
//!     async fn on_request(
//!         &self,
//!         params: &TenantParams,
//!         ctx: &RequestContext<'_>,
//!     ) -> Result<RequestOutcome, PolicyError> {
//!         Ok(match ctx.request.header(&params.header) {
//!             Some(tenant) => RequestOutcome::proceed()
//!                 .set_header("x-tenant-checked", "1")
//!                 .set_metadata("tenant", tenant),
//!             None => RequestOutcome::deny_json(400, &serde_json::json!({"error": "missing tenant"})),
//!         })
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> anyhow::Result<()> {
//!     Agent::builder("tenant-agent", "1.0.0")
//!         .policy(RequireTenant)
//!         .serve_unix("/var/run/policy-engine/agents/tenant.sock")
//!         .await?;
//!     Ok(())
//! }
//! ```
//!
//! # Layout
//!
//! * [`policy`](Policy): the [`Policy`] trait, [`Phases`], [`PolicyError`].
//! * `describe`: [`describe!`], a policy's name, version, params, phases and
//!   body needs in one declaration.
//! * `params`: [`Params`] (the raw strings) and [`FromParams`] (typed params).
//! * `context`: what hooks read: [`RequestContext`], [`ResponseContext`],
//!   [`Metadata`], [`CallInfo`] (request id, `traceparent`, deadline).
//! * `outcome`: what hooks return: [`RequestOutcome`], [`ResponseOutcome`].
//! * [`stream`]: streamed response bodies: [`ChunkContext`] and
//!   [`ChunkOutcome`] of the streaming hook, SSE helpers ([`stream::sse`]).
//! * `action`: the changes and verdicts inside outcomes: [`RequestAction`],
//!   [`ResponseAction`], [`HeaderOp`], [`Deny`], [`Flow`].
//! * `convert`: outcome -> protocol instructions, enforcing the protocol's rules.
//! * `registry`: the agent's policies by name.
//! * `call_policy`: a call's policies kept encoded ([`proto::Policy`]), each
//!   distinct one decoded once.
//! * `call_data`: a call's request ([`proto::RequestData`], [`proto::HeaderValue`])
//!   with its strings as slices of the call's buffer.
//! * `runner`: runs the policies of one call; `on_failure`.
//! * `service`: the gRPC service ([`AgentService`]); health and drain state.
//! * `call_stream`: calls as messages on one long-lived stream (`rpc Calls`).
//! * `socket`: binding the Unix socket safely ([`SocketError`]).
//! * `agent`: [`Agent`] and [`AgentBuilder`]: serve, signals, drain.
//! * [`client`]: connect to an agent on a Unix socket (tests, tools).
//! * [`cli`]: flags and logging shared by agent binaries.
//! * [`testing`]: run a policy's hooks in unit tests.
//! * [`proto`]: the generated protocol types.
//!
//! The SDK does not choose a global allocator: a binary built on it picks its
//! own. The reference agents and `example-agent` use mimalloc; with glibc's
//! malloc, `example-agent` spent a fifth of its instructions per call in the
//! allocator (benches/RESULTS.md, 2026-11-26 21:30).
#![warn(missing_docs)]

mod action;
mod agent;
mod cache;
mod call_data;
mod call_policy;
mod call_stream;
pub mod cli;
pub mod client;
mod context;
mod convert;
mod describe;
pub mod metrics;
mod outcome;
mod params;
mod policy;
pub mod proto;
mod registry;
mod runner;
mod service;
mod socket;
pub mod stream;
pub mod testing;

pub use action::{Deny, Flow, HeaderOp, NewBody, RequestAction, ResponseAction};
pub use agent::{Agent, AgentBuilder, AgentError};
pub use cache::Cacheable;
pub use context::{CallInfo, Metadata, Phase, RequestContext, RequestView, ResponseContext, ResponseView};
pub use convert::{header_name, InstructionError};
pub use outcome::{RequestOutcome, ResponseOutcome};
pub use params::{parse_list, FromParams, ParamError, Params};
pub use policy::{Phases, Policy, PolicyError};
pub use service::AgentService;
pub use socket::SocketError;
pub use stream::{ChunkContext, ChunkOutcome, Framing};

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
