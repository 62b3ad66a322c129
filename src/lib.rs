//! policy-kernel library.
pub mod proto;
