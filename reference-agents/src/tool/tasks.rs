//! `mcpTaskOwnership`: an MCP task (extension `io.modelcontextprotocol/tasks`)
//! belongs to the principal that created it.
//!
//! A task id is a bearer handle: whoever holds it could read the task's
//! result, answer its questions or cancel it. So:
//!
//! * **Response phase**: a `tools/call` answered with `resultType: "task"`
//!   (JSON, or an event of an SSE reply) records its `taskId` as the
//!   caller's (the first owner stays).
//! * **Request phase**: `tasks/get`, `tasks/update` and `tasks/cancel` must
//!   name a task of the caller. A task of another principal, or one this
//!   policy never saw created, is refused alike, as the SDK server refuses
//!   an unknown task (JSON-RPC -32602 `task not found`, HTTP 400, the
//!   request's id: nothing tells the caller that it exists); a task call without a principal is refused (`no_principal`).
//!
//! A task-augmented `tools/call` is authorized like a plain one by
//! `mcpToolAuthorization`; the questions of a task's status (`tasks/get`)
//! and the answers of `tasks/update` are `mcpServerRequestGuard`'s, as for
//! `input_required` results.
//!
//! The principal is the JWT `sub`, else the API-key consumer. Owners live
//! in the agent's session store for `ttl_s` (default 1 day): in memory, or
//! in Redis with `tool-agent --redis-url` for several agents. Keys are
//! `namespace` (default: the request's authority) and the task id.
//!
//! Metadata: `mcp.task_id`, `mcp.task_access` (`owner`, `not_owner`,
//! `unknown_task`, `no_principal`), `mcp.tasks_learned`.

use std::time::Duration;

use serde_json::{json, Value};

use super::deny::{self, config_error, Incoming};
use super::events::{self, EventMessage};
use super::reply::{self, Format};
use crate::mcp::shapes::{self, Item, ResultType};
use crate::param_cache::ParamCache;
use crate::sessions::SessionStore;
use policy_agents::{
    describe, ChunkContext, ChunkOutcome, Deny, Framing, ParamError, Params, Policy, PolicyError, RequestContext,
    RequestOutcome, ResponseContext, ResponseOutcome,
};

const NAME: &str = "mcpTaskOwnership";
const KEYS: &[&str] = &["ttl_s", "namespace"];

/// The methods that name a task.
const TASK_METHODS: &[&str] = &["tasks/get", "tasks/update", "tasks/cancel"];

#[derive(Debug)]
struct OwnParams {
    ttl: Duration,
    namespace: Option<String>,
}

impl OwnParams {
    fn parse(p: &Params) -> Result<Self, ParamError> {
        let ttl_s: u64 = p.parse_or("ttl_s", 24 * 3600)?;
        if ttl_s == 0 {
            return Err(ParamError::invalid("ttl_s", "0", "must be at least 1"));
        }
        Ok(OwnParams {
            ttl: Duration::from_secs(ttl_s),
            namespace: p
                .get("namespace")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from),
        })
    }

    fn key(&self, authority: &str, task: &str) -> String {
        format!("mcp-task {} {task}", self.namespace.as_deref().unwrap_or(authority))
    }
}

/// The `mcpTaskOwnership` policy.
#[derive(Debug)]
pub struct McpTaskOwnership {
    cache: ParamCache<OwnParams>,
    store: SessionStore,
}

impl Default for McpTaskOwnership {
    fn default() -> Self {
        McpTaskOwnership::new(SessionStore::memory())
    }
}

impl McpTaskOwnership {
    /// A policy keeping task owners in `store`.
    pub fn new(store: SessionStore) -> Self {
        McpTaskOwnership {
            cache: ParamCache::new(KEYS),
            store,
        }
    }

    /// Records the caller as the owner of the tasks one reply document
    /// creates; how many.
    async fn learn(
        &self,
        cfg: &OwnParams,
        authority: &str,
        who: Option<&str>,
        doc: &Value,
    ) -> Result<u64, PolicyError> {
        let Ok(items) = shapes::read_reply(doc) else {
            // mcpServerRequestGuard refuses what cannot be read.
            return Ok(0);
        };
        let mut n = 0;
        for item in items {
            let Item::Result(r) = item else { continue };
            let (ResultType::Task, Some(task)) = (r.kind, r.task_id) else {
                continue;
            };
            let Some(who) = who else {
                tracing::warn!(policy = NAME, task = %super::metadata_text(task), "a task created without a principal: nobody may use it");
                continue;
            };
            let owner = self
                .store
                .claim_owner(&cfg.key(authority, task), who, cfg.ttl)
                .await
                .map_err(|e| e.policy_error(NAME))?;
            if owner != who {
                tracing::warn!(policy = NAME, task = %super::metadata_text(task), "a reply to one principal names another's task");
            }
            n += 1;
        }
        Ok(n)
    }
}

fn refuse(id: Value, access: &str, message: &str) -> RequestOutcome {
    let body = deny::error_object(
        id,
        crate::jsonrpc::INVALID_PARAMS,
        message,
        Some(&json!({"reason": access})),
    );
    RequestOutcome::denied_with(Deny::json(400, &body).reason(if access == "no_principal" {
        "no_principal"
    } else {
        "task_not_found"
    }))
    .set_metadata("mcp.task_access", access.to_string())
}

impl Policy for McpTaskOwnership {
    type Params = Params;
    describe! { name: NAME, params: KEYS, phases: Both, body: true, streams: true, events_only: true }

    async fn on_request(&self, params: &Params, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let cfg = self
            .cache
            .get(params, OwnParams::parse)
            .map_err(|e| config_error(NAME, &e))?;
        let env = match deny::incoming(NAME, ctx)? {
            Incoming::NotPost => return Ok(RequestOutcome::proceed()),
            Incoming::Bad(d) => return Ok(RequestOutcome::denied_with(d)),
            Incoming::Messages(env) => env,
        };
        let who = crate::a2a::principal(ctx.metadata);
        for m in &env.messages {
            // `incoming` read every message through the reader already.
            let Ok(Some(call)) = shapes::read_call(m) else { continue };
            let (true, Some(task)) = (TASK_METHODS.contains(&call.method), call.target) else {
                continue;
            };
            let id = m.id.clone().unwrap_or(Value::Null);
            let Some(who) = who.as_deref() else {
                return Ok(refuse(id, "no_principal", "task calls need an authenticated caller"));
            };
            let owner = self
                .store
                .owner(&cfg.key(ctx.request.authority(), task), cfg.ttl)
                .await
                .map_err(|e| e.policy_error(NAME))?;
            let access = match owner.as_deref() {
                Some(o) if o == who => continue,
                Some(_) => "not_owner",
                None => "unknown_task",
            };
            tracing::warn!(policy = NAME, request_id = %ctx.call.request_id, method = call.method, access, "task call refused");
            return Ok(refuse(id, access, "task not found").set_metadata("mcp.task_id", super::metadata_text(task)));
        }
        Ok(RequestOutcome::proceed())
    }

    async fn on_response(&self, params: &Params, ctx: &ResponseContext<'_>) -> Result<ResponseOutcome, PolicyError> {
        let cfg = self
            .cache
            .get(params, OwnParams::parse)
            .map_err(|e| config_error(NAME, &e))?;
        let (Some(format), Some(body)) = (Format::of(ctx.response.header("content-type")), ctx.response.body()) else {
            return Ok(ResponseOutcome::proceed());
        };
        reply::refuse_encoded(NAME, &ctx.response)?;
        if format == Format::Json && shapes::surely_plain(body) {
            return Ok(ResponseOutcome::proceed());
        }
        let who = crate::a2a::principal(ctx.metadata);
        let mut docs = Vec::new();
        // A body that is not JSON is mcpServerRequestGuard's to refuse.
        let _ = reply::each(body, format, &mut |doc| docs.push(doc.clone()));
        let mut n = 0;
        for doc in &docs {
            n += self.learn(&cfg, ctx.request.authority(), who.as_deref(), doc).await?;
        }
        let out = ResponseOutcome::proceed();
        Ok(if n > 0 {
            out.set_metadata("mcp.tasks_learned", n.to_string())
        } else {
            out
        })
    }

    async fn on_response_chunk(&self, params: &Params, ctx: &ChunkContext<'_>) -> Result<ChunkOutcome, PolicyError> {
        let cfg = self
            .cache
            .get(params, OwnParams::parse)
            .map_err(|e| config_error(NAME, &e))?;
        if ctx.framing == Framing::Raw {
            return Err(PolicyError::new(format!(
                "{NAME}: a streamed reply that is not an event stream cannot be read event by event"
            )));
        }
        let who = crate::a2a::principal(ctx.metadata);
        let mut n = 0;
        for ev in ctx.events {
            if let EventMessage::Message(doc) = events::read(ev) {
                n += self.learn(&cfg, ctx.request.authority(), who.as_deref(), &doc).await?;
            }
        }
        let out = ChunkOutcome::pass();
        Ok(if n > 0 {
            out.set_metadata("mcp.tasks_learned", n.to_string())
        } else {
            out
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy_agents::stream::sse;
    use policy_agents::testing::{TestCall, TestRequest, TestResponse};

    fn task_call(method: &str, task: &str) -> TestRequest {
        let body = json!({"jsonrpc": "2.0", "id": 5, "method": method, "params": {"taskId": task}});
        TestRequest::new("POST", "/mcp")
            .header("host", "mcp.local")
            .body(body.to_string())
    }

    fn created(task: &str) -> String {
        json!({"jsonrpc": "2.0", "id": 4, "result": {"resultType": "task", "taskId": task, "status": "working"}})
            .to_string()
    }

    #[tokio::test]
    async fn a_task_is_its_creators_only() {
        let policy = McpTaskOwnership::default();
        let ann = TestCall::new().metadata("sub", "ann");
        let bob = TestCall::new().metadata("sub", "bob");
        let call = TestRequest::new("POST", "/mcp").header("host", "mcp.local");
        // Unknown before the reply names it.
        let out = ann.request(&policy, &task_call("tasks/get", "t1")).await.unwrap();
        assert_eq!(out.metadata_value("mcp.task_access"), Some("unknown_task"));
        let reply = TestResponse::new(200)
            .header("content-type", "application/json")
            .body(created("t1"));
        let r = ann.response(&policy, &call, &reply).await.unwrap();
        assert_eq!(r.metadata_value("mcp.tasks_learned"), Some("1"));
        for method in TASK_METHODS {
            let mine = ann.request(&policy, &task_call(method, "t1")).await.unwrap();
            assert!(mine.denial().is_none(), "{method}");
            let theirs = bob.request(&policy, &task_call(method, "t1")).await.unwrap();
            let d = theirs.denial().expect("refused");
            let body: Value = serde_json::from_slice(&d.body).unwrap();
            assert_eq!(
                (body["id"].clone(), body["error"]["code"].clone()),
                (json!(5), json!(-32602))
            );
            assert_eq!(theirs.metadata_value("mcp.task_access"), Some("not_owner"));
        }
        // Learned from an SSE event too; no principal, no task calls.
        let sse_reply = TestResponse::new(200).header("content-type", "text/event-stream");
        let ev = sse::event("message", &created("t2"));
        let out = bob
            .chunk(&policy, &call, &sse_reply, &[ev], 0, true, b"")
            .await
            .unwrap();
        assert!(out.metadata_set().contains(&("mcp.tasks_learned".into(), "1".into())));
        assert!(bob
            .request(&policy, &task_call("tasks/cancel", "t2"))
            .await
            .unwrap()
            .denial()
            .is_none());
        let nobody = TestCall::new();
        let out = nobody.request(&policy, &task_call("tasks/get", "t2")).await.unwrap();
        assert_eq!(out.metadata_value("mcp.task_access"), Some("no_principal"));
    }
}
