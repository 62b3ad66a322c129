//! Runs the policies of one call in order: parses their params, calls their
//! hooks, passes metadata from one policy to the next, stops at a denial or
//! `SkipRemainingPolicies`, and applies `on_failure` to policy errors.

use std::collections::HashMap;

use futures::future::BoxFuture;

use crate::action::{Deny, Flow};
use crate::call_policy::Resolved;
use crate::context::{CallInfo, Metadata, RequestContext, RequestView, ResponseContext, ResponseView};
use crate::convert::{self, InstructionError};
use crate::params::Params;
use crate::policy::{DynPolicy, PolicyError};
use crate::proto::response_instruction::Instruction as RespI;
use crate::proto::{self, request_instruction::Instruction as ReqI};
use crate::registry::Registry;

impl From<InstructionError> for PolicyError {
    fn from(e: InstructionError) -> Self {
        PolicyError::new(format!("invalid instruction: {e}"))
    }
}

/// What the kernel asks for when a policy fails (`Policy.on_failure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnFailure {
    Deny,
    Continue,
    SkipRemaining,
}

impl OnFailure {
    /// Empty (the route did not say) and unknown values mean `deny`.
    pub(crate) fn parse(s: &str) -> Self {
        match s {
            "continue" => OnFailure::Continue,
            "skip_remaining" => OnFailure::SkipRemaining,
            "" | "deny" => OnFailure::Deny,
            other => {
                tracing::warn!(on_failure = other, "unknown on_failure value, using deny");
                OnFailure::Deny
            }
        }
    }
}

/// One policy's converted result.
struct Step<I> {
    actions: Vec<I>,
    metadata: Vec<(String, String)>,
    /// `Some` when the chain stops after this policy, with the closing instructions.
    stop: Option<Vec<I>>,
    message: Option<String>,
    /// The outcome's own cache lifetime, in milliseconds, when it set one.
    cache: Option<u32>,
}

/// One phase's way of calling a hook and building its instructions.
trait PhaseCall: Sync {
    type Instr: Send;
    fn run<'a>(
        &'a self,
        policy: &'a dyn DynPolicy,
        params: &'a Params,
        metadata: &'a Metadata,
    ) -> BoxFuture<'a, Result<Step<Self::Instr>, PolicyError>>;
    fn metadata_instr(key: String, value: String) -> Self::Instr;
    fn skip_instr(reason: String) -> Self::Instr;
    fn deny_instrs(deny: Deny) -> Result<Vec<Self::Instr>, InstructionError>;

    fn closing(flow: Flow) -> Result<Option<Vec<Self::Instr>>, InstructionError> {
        Ok(match flow {
            Flow::Continue => None,
            Flow::Deny(d) => Some(Self::deny_instrs(d)?),
            Flow::SkipRemaining(reason) => Some(vec![Self::skip_instr(reason)]),
        })
    }
}

struct RequestCall<'a> {
    data: &'a proto::RequestData,
    info: &'a CallInfo,
}

impl PhaseCall for RequestCall<'_> {
    type Instr = proto::RequestInstruction;

    fn run<'a>(
        &'a self,
        policy: &'a dyn DynPolicy,
        params: &'a Params,
        metadata: &'a Metadata,
    ) -> BoxFuture<'a, Result<Step<Self::Instr>, PolicyError>> {
        Box::pin(async move {
            let request = RequestView::new(self.data);
            let ctx = RequestContext {
                request,
                metadata,
                call: self.info,
            };
            let outcome = policy.run_request(params, &ctx).await?;
            let cache = outcome.cache_max_age().map(crate::cache::millis);
            let ((actions, metadata, flow), message) = outcome.into_parts();
            Ok(Step {
                actions: convert::request_actions(actions)?,
                metadata,
                stop: Self::closing(flow)?,
                message,
                cache,
            })
        })
    }

    fn metadata_instr(key: String, value: String) -> Self::Instr {
        let i = ReqI::SetMetadata(proto::SetMetadata { key, value });
        proto::RequestInstruction { instruction: Some(i) }
    }

    fn skip_instr(reason: String) -> Self::Instr {
        let i = ReqI::SkipRemainingPolicies(proto::SkipRemainingPolicies { reason });
        proto::RequestInstruction { instruction: Some(i) }
    }

    fn deny_instrs(deny: Deny) -> Result<Vec<Self::Instr>, InstructionError> {
        Ok(vec![convert::request_deny(deny)?])
    }
}

struct ResponseCall<'a> {
    request: &'a proto::RequestData,
    response: &'a proto::ResponseData,
    info: &'a CallInfo,
}

impl PhaseCall for ResponseCall<'_> {
    type Instr = proto::ResponseInstruction;

    fn run<'a>(
        &'a self,
        policy: &'a dyn DynPolicy,
        params: &'a Params,
        metadata: &'a Metadata,
    ) -> BoxFuture<'a, Result<Step<Self::Instr>, PolicyError>> {
        Box::pin(async move {
            let ctx = ResponseContext {
                request: RequestView::new(self.request),
                response: ResponseView::new(self.response),
                metadata,
                call: self.info,
            };
            let ((actions, metadata, flow), message) = policy.run_response(params, &ctx).await?.into_parts();
            Ok(Step {
                actions: convert::response_actions(actions)?,
                metadata,
                stop: Self::closing(flow)?,
                message,
                cache: None,
            })
        })
    }

    fn metadata_instr(key: String, value: String) -> Self::Instr {
        let i = RespI::SetMetadata(proto::SetMetadata { key, value });
        proto::ResponseInstruction { instruction: Some(i) }
    }

    fn skip_instr(reason: String) -> Self::Instr {
        let i = RespI::SkipRemainingPolicies(proto::SkipRemainingPolicies { reason });
        proto::ResponseInstruction { instruction: Some(i) }
    }

    fn deny_instrs(deny: Deny) -> Result<Vec<Self::Instr>, InstructionError> {
        convert::response_deny(deny)
    }
}

/// The accumulated reply of a chain.
struct Chain<I> {
    instructions: Vec<I>,
    metadata: HashMap<String, String>,
    message: String,
    /// The shortest cache lifetime an outcome asked for (0 after a failure).
    cache: Option<u32>,
}

/// The 500 sent when a policy fails under `on_failure: deny` without its own denial.
fn failure_deny(policy: &str) -> Deny {
    let body = serde_json::json!({"error": "policy_failed", "policy": policy});
    Deny::json(500, &body).reason("policy_failed")
}

async fn run_chain<C: PhaseCall>(
    registry: &Registry,
    call: &C,
    policies: Vec<std::sync::Arc<Resolved>>,
    mut metadata: Metadata,
    request_id: &str,
) -> Chain<C::Instr> {
    let mut chain = Chain {
        instructions: Vec::new(),
        metadata: HashMap::new(),
        message: String::new(),
        cache: None,
    };
    let mut messages = Vec::new();
    for policy in policies {
        let result = match registry.policy(&policy) {
            Some(p) => call.run(p, &policy.params, &metadata).await,
            None => Err(PolicyError::new("policy is not supported by this agent")),
        };
        let step = match result {
            Ok(step) => step,
            Err(err) => {
                let mode = OnFailure::parse(&policy.on_failure);
                tracing::warn!(policy = %policy.name, request_id, error = %err, on_failure = ?mode, "policy failed");
                // A failure is never kept: the next request tries again.
                chain.cache = Some(0);
                match mode {
                    OnFailure::Continue => continue,
                    OnFailure::SkipRemaining => {
                        let reason = format!("{} failed: {err}", policy.name);
                        chain.instructions.push(C::skip_instr(reason));
                    }
                    OnFailure::Deny => {
                        let deny = err.denial().cloned().unwrap_or_else(|| failure_deny(&policy.name));
                        let instrs = C::deny_instrs(deny)
                            .or_else(|_| C::deny_instrs(failure_deny(&policy.name)))
                            .unwrap_or_default();
                        chain.instructions.extend(instrs);
                    }
                }
                messages.push(format!("{} failed: {err}", policy.name));
                break;
            }
        };
        chain.instructions.extend(step.actions);
        if let Some(ms) = step.cache {
            chain.cache = Some(chain.cache.map_or(ms, |c| c.min(ms)));
        }
        for (key, value) in step.metadata {
            metadata.insert(key.clone(), value.clone());
            chain.metadata.insert(key.clone(), value.clone());
            chain.instructions.push(C::metadata_instr(key, value));
        }
        messages.extend(step.message);
        if let Some(closing) = step.stop {
            chain.instructions.extend(closing);
            break;
        }
    }
    chain.message = messages.join("; ");
    chain
}

/// Executes a request-phase call.
pub(crate) async fn execute_request(
    registry: &Registry,
    call: proto::PolicyRequestPhase,
    info: CallInfo,
) -> Result<proto::PolicyRequestResponse, tonic::Status> {
    let policies = registry.resolve(&call.policies)?;
    let data = call.request_data.unwrap_or_default();
    let phase = RequestCall {
        data: &data,
        info: &info,
    };
    let metadata = Metadata::from(call.policy_metadata);
    let chain = run_chain(registry, &phase, policies, metadata, &call.request_id).await;
    Ok(proto::PolicyRequestResponse {
        request_id: call.request_id,
        instructions: chain.instructions,
        message: chain.message,
        policy_metadata: chain.metadata,
        cache_max_age_ms: chain.cache,
    })
}

/// Executes a response-phase call.
pub(crate) async fn execute_response(
    registry: &Registry,
    call: proto::PolicyResponsePhase,
    info: CallInfo,
) -> Result<proto::PolicyResponseResponse, tonic::Status> {
    let policies = registry.resolve(&call.policies)?;
    let request = call.request_data.unwrap_or_default();
    let response = call.response_data.unwrap_or_default();
    let phase = ResponseCall {
        request: &request,
        response: &response,
        info: &info,
    };
    let metadata = Metadata::from(call.policy_metadata);
    let chain = run_chain(registry, &phase, policies, metadata, &call.request_id).await;
    Ok(proto::PolicyResponseResponse {
        request_id: call.request_id,
        instructions: chain.instructions,
        message: chain.message,
        policy_metadata: chain.metadata,
    })
}
