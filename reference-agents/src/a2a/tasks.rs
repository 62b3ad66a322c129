//! `a2aTaskOwnership`: an A2A task belongs to the principal that created it.
//!
//! **Request phase** (with the body): the tasks a call touches (the task
//! of `GetTask`, `CancelTask`, `SubscribeToTask` and the push-notification
//! config methods; for a send, the task it continues and those it
//! references) must be the caller's. A task of another principal, or one
//! this policy never saw created (`unknown_tasks: deny`, the default), is
//! refused as the agent refuses an unknown task (JSON-RPC -32001, HTTP 404
//! `TASK_NOT_FOUND`): nothing tells the caller that it exists. Task calls
//! and `ListTasks` without a principal are refused (403 / the JSON-RPC
//! denial, reason `NO_PRINCIPAL`).
//!
//! The principal is the JWT `sub`, else the API-key consumer, as
//! `jwtValidation` / `apiKeyAuth` recorded them earlier in the chain.
//!
//! **Response phase**: the replies to a principal's sends name the tasks
//! they created; each is recorded as that principal's (the first owner
//! stays). Streamed replies (`SendStreamingMessage`, `SubscribeToTask`) are
//! read event by event as they pass, unchanged and unbuffered; JSON replies
//! whole. A `ListTasks` reply keeps only the caller's tasks.
//!
//! Owners live in the session store for `ttl_s` (default 7 days) after
//! their last use: in memory, or in Redis with `tool-agent --redis-url`
//! for several agents and kernels. Keys are `namespace` (default: the
//! request's authority) and the task id.
//!
//! Metadata: `a2a.method`, `a2a.binding`, `a2a.task_id`, `a2a.task_access`
//! (`owner`, `not_owner`, `unknown_task`, `unknown_task_allowed`,
//! `no_principal`, `none`), `a2a.tasks_learned` (tasks recorded from the
//! reply), `a2a.tasks_hidden` (tasks taken out of a list).

use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};

use super::authorize::{binding_name, unreadable};
use super::call::{Call, Op};
use super::errors::{self, Kind, Refusal};
use super::{denial, metadata_text, principal, replies, unknown_fields};
use crate::param_cache::ParamCache;
use crate::sessions::SessionStore;
use crate::tool::deny::config_error;
use crate::tool::events::{self, EventMessage};
use crate::tool::Style;
use policy_agents::{
    describe, ChunkContext, ChunkOutcome, Framing, ParamError, Params, Policy, PolicyError, RequestContext,
    RequestOutcome, ResponseContext, ResponseOutcome, ResponseView,
};

const NAME: &str = "a2aTaskOwnership";
const KEYS: &[&str] = &[
    "unknown_tasks",
    "ttl_s",
    "namespace",
    "denial",
    "jsonrpc_error_code",
    "unknown_fields",
];

/// Parsed params.
#[derive(Debug)]
struct OwnParams {
    allow_unknown: bool,
    ttl: Duration,
    namespace: Option<String>,
    style: Style,
    code: i64,
    strict: bool,
}

impl OwnParams {
    fn parse(p: &Params) -> Result<Self, ParamError> {
        let allow_unknown = match p.get("unknown_tasks").map(str::trim) {
            None | Some("") | Some("deny") => false,
            Some("allow") => true,
            Some(other) => return Err(ParamError::invalid("unknown_tasks", other, "expected deny or allow")),
        };
        let ttl_s: u64 = p.parse_or("ttl_s", 7 * 24 * 3600)?;
        if ttl_s == 0 {
            return Err(ParamError::invalid("ttl_s", "0", "must be at least 1"));
        }
        Ok(OwnParams {
            allow_unknown,
            ttl: Duration::from_secs(ttl_s),
            namespace: p
                .get("namespace")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from),
            style: denial(p)?,
            code: p.parse_or("jsonrpc_error_code", errors::DENIED)?,
            strict: unknown_fields(p)?,
        })
    }

    fn key(&self, authority: &str, task: &str) -> String {
        format!("a2a-task {} {task}", self.namespace.as_deref().unwrap_or(authority))
    }
}

/// The `a2aTaskOwnership` policy.
pub struct A2aTaskOwnership {
    cache: ParamCache<OwnParams>,
    store: SessionStore,
}

impl Default for A2aTaskOwnership {
    fn default() -> Self {
        A2aTaskOwnership::new(SessionStore::memory())
    }
}

/// Whether the reply to the call named `method` creates tasks.
fn creates_tasks(method: Option<&str>) -> bool {
    method
        .and_then(Op::of_method)
        .is_some_and(|o| o.sends() || o == Op::SubscribeToTask)
}

fn is_list(method: Option<&str>) -> bool {
    method.and_then(Op::of_method) == Some(Op::ListTasks)
}

impl A2aTaskOwnership {
    /// A policy keeping task owners in `store`.
    pub fn new(store: SessionStore) -> Self {
        A2aTaskOwnership {
            cache: ParamCache::new(KEYS),
            store,
        }
    }

    fn params(&self, params: &Params) -> Result<std::sync::Arc<OwnParams>, PolicyError> {
        self.cache
            .get(params, OwnParams::parse)
            .map_err(|e| config_error(NAME, &e))
    }

    /// Records `who` as the owner of the tasks `doc` names; how many.
    async fn learn(&self, cfg: &OwnParams, authority: &str, who: &str, doc: &Value) -> Result<u64, PolicyError> {
        let mut n = 0;
        for task in replies::task_ids(doc) {
            let owner = self
                .store
                .claim_owner(&cfg.key(authority, task), who, cfg.ttl)
                .await
                .map_err(|e| e.policy_error(NAME))?;
            if owner != who {
                tracing::warn!(policy = NAME, task = %metadata_text(task), "a reply to one principal names another's task");
            }
            n += 1;
        }
        Ok(n)
    }

    /// The caller's own tasks of a list reply: the new body and how many
    /// were taken out.
    async fn filter_list(
        &self,
        cfg: &OwnParams,
        authority: &str,
        who: Option<&str>,
        mut doc: Value,
    ) -> Result<Option<(Value, usize)>, PolicyError> {
        let Some(list) = replies::task_list(&mut doc) else {
            return Ok(None);
        };
        let mut keep = Vec::with_capacity(list.len());
        for task in list.iter() {
            let mine = match (who, replies::list_item_id(task)) {
                (Some(who), Some(id)) => {
                    let owner = self
                        .store
                        .owner(&cfg.key(authority, id), cfg.ttl)
                        .await
                        .map_err(|e| e.policy_error(NAME))?;
                    owner.as_deref() == Some(who)
                }
                _ => false,
            };
            keep.push(mine);
        }
        let before = list.len();
        let mut flags = keep.into_iter();
        list.retain(|_| flags.next().unwrap_or(false));
        let hidden = before - list.len();
        Ok(Some((doc, hidden)))
    }
}

impl Policy for A2aTaskOwnership {
    type Params = Params;
    describe! { name: NAME, params: KEYS, phases: Both, body: true, streams: true, events_only: true }

    async fn on_request(&self, params: &Params, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let cfg = self.params(params)?;
        let call = match Call::of(&ctx.request, cfg.strict) {
            Ok(c) => c,
            Err(u) => return Ok(unreadable(&u, cfg.style, cfg.code)),
        };
        let meta = |o: RequestOutcome, access: &str| {
            o.set_metadata("a2a.method", metadata_text(&call.method))
                .set_metadata("a2a.binding", binding_name(&call.binding))
                .set_metadata("a2a.task_access", access.to_string())
        };
        let tasks = call.tasks();
        if tasks.is_empty() && call.op != Some(Op::ListTasks) {
            return Ok(meta(RequestOutcome::proceed(), "none"));
        }
        let Some(who) = principal(ctx.metadata) else {
            let r = Refusal {
                kind: Kind::Denied,
                reason: "NO_PRINCIPAL",
                message: "A2A task calls need an authenticated caller".into(),
                metadata: json!({"rule": "no_principal"}),
            };
            let out = RequestOutcome::denied_with(errors::render(&call.binding, cfg.style, cfg.code, &r));
            return Ok(meta(out, "no_principal"));
        };
        let mut access = "owner";
        for task in &tasks {
            let owner = self
                .store
                .owner(&cfg.key(ctx.request.authority(), task), cfg.ttl)
                .await
                .map_err(|e| e.policy_error(NAME))?;
            let refused = match owner {
                Some(o) if o == who => None,
                Some(_) => Some("not_owner"),
                None if cfg.allow_unknown => {
                    access = "unknown_task_allowed";
                    None
                }
                None => Some("unknown_task"),
            };
            if let Some(why) = refused {
                tracing::info!(policy = NAME, request_id = %ctx.call.request_id, task = %metadata_text(task), why, "A2A task refused");
                let r = Refusal {
                    kind: Kind::TaskNotFound,
                    reason: "TASK_NOT_FOUND",
                    message: String::new(),
                    metadata: json!({}),
                };
                let out = RequestOutcome::denied_with(errors::render(&call.binding, cfg.style, cfg.code, &r))
                    .set_metadata("a2a.task_id", metadata_text(task));
                return Ok(meta(out, why));
            }
        }
        let mut out = meta(
            RequestOutcome::proceed(),
            if tasks.is_empty() { "none" } else { access },
        );
        if let Some(t) = tasks.first() {
            out = out.set_metadata("a2a.task_id", metadata_text(t));
        }
        Ok(out)
    }

    async fn on_response(&self, params: &Params, ctx: &ResponseContext<'_>) -> Result<ResponseOutcome, PolicyError> {
        let cfg = self.params(params)?;
        let method = ctx.metadata.get("a2a.method");
        let (learn, list) = (creates_tasks(method), is_list(method));
        if !learn && !list {
            return Ok(ResponseOutcome::proceed());
        }
        crate::tool::refuse_encoded(NAME, &ctx.response)?;
        let Some(doc) = json_body(&ctx.response) else {
            return Ok(ResponseOutcome::proceed());
        };
        let who = principal(ctx.metadata);
        let authority = ctx.request.authority();
        if list {
            let Some((doc, hidden)) = self.filter_list(&cfg, authority, who.as_deref(), doc).await? else {
                return Ok(ResponseOutcome::proceed());
            };
            let out = ResponseOutcome::proceed().set_metadata("a2a.tasks_hidden", hidden.to_string());
            return Ok(if hidden == 0 {
                out
            } else {
                let ct = ctx
                    .response
                    .header("content-type")
                    .unwrap_or("application/json")
                    .to_string();
                out.set_body_with_type(doc.to_string(), ct)
            });
        }
        let Some(who) = who else {
            return Ok(ResponseOutcome::proceed());
        };
        let n = self.learn(&cfg, authority, &who, &doc).await?;
        Ok(ResponseOutcome::proceed().set_metadata("a2a.tasks_learned", n.to_string()))
    }

    async fn on_response_chunk(&self, params: &Params, ctx: &ChunkContext<'_>) -> Result<ChunkOutcome, PolicyError> {
        let cfg = self.params(params)?;
        if ctx.framing == Framing::Raw {
            return Err(PolicyError::new(format!(
                "{NAME}: a streamed reply that is not an event stream cannot be read event by event"
            )));
        }
        let (Some(who), true) = (principal(ctx.metadata), creates_tasks(ctx.metadata.get("a2a.method"))) else {
            return Ok(ChunkOutcome::pass());
        };
        let mut learned: u64 = std::str::from_utf8(ctx.state)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        for ev in ctx.events {
            if let EventMessage::Message(doc) = events::read(ev) {
                learned += self.learn(&cfg, ctx.request.authority(), &who, &doc).await?;
            }
        }
        Ok(ChunkOutcome::pass()
            .set_metadata("a2a.tasks_learned", learned.to_string())
            .state(Bytes::from(learned.to_string())))
    }
}

/// The JSON of a response body, if it is JSON.
fn json_body(response: &ResponseView<'_>) -> Option<Value> {
    let body = response.body()?;
    serde_json::from_slice(body).ok()
}

#[cfg(test)]
#[path = "tasks_tests.rs"]
mod tests;
