//! Planner workers, the policies of `planner-agent`: the model's planned
//! tool calls are governed at the gateway, before the runtime runs them.
//!
//! * [`PlanCritic`] (`planCritic`, both phases): the tool calls of a
//!   completion (OpenAI `tool_calls`, Anthropic `tool_use` blocks) are
//!   checked against the allowed or declared tools, their JSON Schemas, a
//!   step limit and the rules and argument guards of the MCP tool agent
//!   (the same code: [`crate::rules`],
//!   [`crate::tool::check_call`]); refused calls block the
//!   response, are stripped, or are flagged.
//! * `PlanCriticStream` (`planCriticStream`, both phases): the same on
//!   streamed responses, call by call, holding back only each call's events.
//! * [`FutilityGuard`] (`futilityGuard`, request): sessions whose tool
//!   calls repeat the same failure, oscillate or bring nothing new.
//! * [`ContextBudget`] (`contextBudget`, both): cumulative tokens per
//!   session, verdicts `ok`, `delegate`, `checkpoint`, `summarize`, then 429;
//!   `ContextBudgetStream` (`contextBudgetStream`) charges streamed usage.
//! * [`UntrustedInput`] (`untrustedInput`, request): tool results and
//!   configured fields of the prompt wrapped in untrusted-input delimiters.
//!
//! One file per concern: [`calls`] (reading and stripping calls), [`critic`]
//! (params and checks), `plan_critic` (the policy on buffered responses),
//! [`assembler`] (calls from streamed fragments), [`declared`] (declared
//! tools kept for streams), `stream_critic`, [`untrusted`], [`history`]
//! (tool steps of a conversation), [`futility`], [`budget`]. Their
//! per-session state is in [`crate::sessions`] (in memory or in Redis).

pub mod approve;
pub mod assembler;
pub mod budget;
mod budget_stream;
pub mod calls;
pub mod critic;
pub mod declared;
pub mod futility;
pub mod history;
mod plan_critic;
pub mod splice;
mod stream_critic;
pub mod untrusted;

pub use crate::sessions::{SessionStore, SessionStoreError};
pub use budget::ContextBudget;
pub use budget_stream::ContextBudgetStream;
pub use critic::{CriticConfig, Finding, OnViolation, MAX_ARGUMENTS_BYTES};
pub use futility::FutilityGuard;
pub use plan_critic::PlanCritic;
pub use stream_critic::{PlanCriticStream, MAX_HELD, MAX_WHOLE};
pub use untrusted::{wrap_untrusted, UntrustedInput, CLOSE, OPEN};
