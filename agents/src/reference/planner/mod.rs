//! Planner workers, the policies of `planner-agent`: the model's planned
//! tool calls are governed at the gateway, before the runtime runs them.
//!
//! * [`PlanCritic`] (`planCritic`, both phases): the tool calls of a
//!   completion (OpenAI `tool_calls`, Anthropic `tool_use` blocks) are
//!   checked against the allowed or declared tools, their JSON Schemas, a
//!   step limit and the rules and argument guards of the MCP tool agent
//!   (the same code: [`crate::reference::tool::rules`],
//!   [`crate::reference::tool::check_call`]); refused calls block the
//!   response, are stripped, or are flagged.
//!
//! One file per concern: `calls` (reading and stripping calls), `critic`
//! (params and checks), `plan_critic` (the policy on buffered responses).

pub mod assembler;
pub mod calls;
pub mod critic;
pub mod declared;
mod plan_critic;
mod stream_critic;

pub use critic::{CriticConfig, Finding, OnViolation, MAX_ARGUMENTS_BYTES};
pub use plan_critic::PlanCritic;
pub use stream_critic::{PlanCriticStream, MAX_HELD, MAX_WHOLE};
