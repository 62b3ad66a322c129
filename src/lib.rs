//! policy-kernel: an Envoy ext_proc sidecar that runs route policy chains on
//! policy agents over Unix sockets.
//!
//! # Layout
//! - [`config`] — the YAML schema, defaults and structural validation.
//! - [`registry`] — agent handles, pooled Unix-socket gRPC clients (unary
//!   calls, and the call stream for agents that serve it), peer identity,
//!   discovery and health checks.
//! - [`snapshot`] — the immutable, atomically swapped view the request path
//!   reads: routes compiled against discovered agents, each with a version
//!   (a digest of its configuration) that agents get as `route.version`.
//! - [`kernel`] — the `ArcSwap<Snapshot>` and what keeps it current.
//! - [`plan`] — two-stage validation and grouping of chains into agent calls.
//! - [`chain`] — running a plan, with context propagation and failure handling.
//! - [`aggregate`] — checked agent instructions and the last-wins merge.
//! - [`decisions`] — the decision cache: outcomes of calls whose policies
//!   the agent declared cacheable, keyed on what they depend on.
//! - [`envoy`] — the ext_proc service, stream state machine and translation,
//!   request-body limits.
//! - [`stream`] — streamed response bodies: SSE framing, streaming policies
//!   called piece by piece, ending a stream, their metrics.
//! - [`http`] — header legality and query/path rewriting.
//! - [`server`] — the Unix-socket listener (peer uids) and the optional TCP
//!   one (mTLS).
//! - [`admin`] — `/metrics`, `/healthz`, `/readyz` and `/config`.
//! - [`reload`] — SIGHUP reload through [`kernel::Kernel::apply`].
//! - [`management`] — the management API: routes changed over HTTP with
//!   strict validation, versions, rollback and a persisted state: a local
//!   file, or etcd shared by a fleet of kernels (`management/fleet/`).
//! - [`shadow`] — shadow-mode routes: the chain runs, Envoy gets CONTINUE.
//! - [`validate`] — the `validate` command's checks and route table.
//! - [`upgrade`] — `supervise` and `upgrade`: the parent that owns the
//!   listening sockets and runs the kernel as generations, upgrades and
//!   restarts that fail no request, the generation header.
//! - [`telemetry`] — JSON logs (the per-request summary line written
//!   without tracing's per-event machinery), Prometheus metrics,
//!   OpenTelemetry traces.
//! - [`proto`] — generated types of `proto/policy_agent.proto`.
//! - [`wire`] — policy calls encoded once from borrowed request data.
//!
//! Beside this crate, in the workspace: `proto/` (the kernel–agent
//! contract), `net/` (`policy-net`: the Unix-socket stream, the agent codec,
//! SSE framing, log output), `agents/` (`policy-agents`, the SDK for writing
//! agents), `reference-agents/` (the reference policies and agent binaries),
//! `benches/`, `fuzz/`, `tests/` (end-to-end through a real Envoy) and
//! `docs/` (the reference pages).

pub mod admin;
pub mod aggregate;
pub mod chain;
pub mod config;
pub mod decisions;
pub mod envoy;
pub mod http;
pub mod kernel;
pub mod management;
pub mod plan;
pub mod proto;
pub mod registry;
pub mod reload;
pub mod server;
pub mod shadow;
pub mod snapshot;
pub mod stream;
pub mod telemetry;
pub mod upgrade;
pub mod validate;
pub mod wire;
