//! Load harness for policy-kernel.
//!
//! - [`msgs`]: ext_proc messages built the way Envoy 1.40 sends them, and the
//!   checks applied to every answer.
//! - [`target`]: where the load goes (Unix socket or TCP) and the gRPC channel.
//! - [`exchange`]: one whole `Process` stream (one HTTP request).
//! - [`hop`]: the agent round trip `pk-floor --hop-agent` adds to the floor.
//! - [`procstat`]: CPU time and memory of the process under test, from `/proc`.
//!
//! The binaries are `pk-loadgen` (the load generator) and `pk-floor` (an
//! ext_proc server that answers CONTINUE to everything: the physical floor).

pub mod exchange;
pub mod hop;
pub mod msgs;
pub mod procstat;
pub mod target;
