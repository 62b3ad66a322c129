//! Generated types of `proto/policy_agent.proto`, the kernel <-> agent contract.
#![allow(missing_docs, clippy::all)]
tonic::include_proto!("policy_kernel.agent.v1");
