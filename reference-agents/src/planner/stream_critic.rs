//! `planCriticStream`: `planCritic` on streamed responses.
//!
//! **SSE** (`text/event-stream`): tool calls are assembled from their
//! fragments ([`super::assembler`]). The events that carry a part of a call
//! are held back, and only those: text and other events pass at once. When
//! a call is complete (its choice's `finish_reason`, the next call's start,
//! `content_block_stop`, `[DONE]` or the end of the stream) it is checked
//! like a buffered plan, and its held events are
//! * passed (allowed, or `on_violation: flag`: metadata only, the headers
//!   are gone by then);
//! * dropped (`strip`; a choice or message left with no call gets the
//!   finish / stop reason of a plain answer);
//! * or the stream ends with an SSE `error` event, reason `plan_rejected`,
//!   whose message names the call and the check (`block`).
//!
//! **Other bodies** (a JSON completion on a route that streams): held whole,
//! at most [`MAX_WHOLE`], and decided at the end like `planCritic` does; a
//! block replaces the body with the JSON error (the status was sent already).
//! A larger body passes with metadata `plan.decision: unreadable`.
//!
//! The declared tools come from the request phase (list the policy in the
//! route's request chain too): the kernel sends streaming hooks the request
//! without its body, so the agent keeps them per request ([`DeclaredStore`]).

use base64::Engine;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::approve::{resolve, resolve_all, ApprovalCx};
use super::assembler::Assembler;
use super::calls::{planned_calls, strip, Location};
use super::critic::{CriticConfig, Finding, OnViolation, PlanContext, SchemaCache, KEYS};
use super::declared::DeclaredStore;
use super::plan_critic::{block_body, request_tools};
use crate::param_cache::ParamCache;
use crate::rules::Caller;
use crate::tool::metadata_text;
use policy_agents::stream::sse;
use policy_agents::{
    describe, ChunkContext, ChunkOutcome, Framing, ParamError, Params, Policy, PolicyError, RequestContext,
    RequestOutcome,
};

const NAME: &str = "planCriticStream";

/// The most bytes of events held back at once (the kernel carries at most
/// 1 MiB of state per stream); past it, the open calls are refused as too large.
pub const MAX_HELD: usize = 256 * 1024;

/// The largest non-SSE body held whole.
pub const MAX_WHOLE: usize = 512 * 1024;

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// One held event and the calls it carries parts of.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Held {
    ev: String,
    keys: Vec<String>,
}

/// What travels between the calls of one stream.
#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    #[serde(default)]
    asm: Assembler,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    held: Vec<Held>,
    /// Verdicts by call key: `pass`, `strip`, `flag`.
    #[serde(default)]
    verdicts: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    refused: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    first: Option<(String, String)>,
    /// A raw body held whole (base64), or `unreadable` once past the limit.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    raw: String,
    #[serde(default)]
    raw_over: bool,
}

impl State {
    fn held_bytes(&self) -> usize {
        self.held.iter().map(|h| h.ev.len()).sum()
    }

    fn metadata(&self, cfg: &CriticConfig, out: ChunkOutcome) -> ChunkOutcome {
        let out = out.set_metadata("plan.calls", self.asm.calls.len().to_string());
        let Some((check, tool)) = &self.first else {
            return out.set_metadata("plan.decision", "pass");
        };
        out.set_metadata("plan.decision", cfg.on_violation.as_str())
            .set_metadata("plan.refused", self.refused.to_string())
            .set_metadata("plan.check", check.clone())
            .set_metadata("plan.tool", tool.clone())
    }
}

/// The `planCriticStream` policy.
#[derive(Debug)]
pub struct PlanCriticStream {
    cache: ParamCache<CriticConfig>,
    schemas: SchemaCache,
    declared: DeclaredStore,
    approvals: Option<std::sync::Arc<crate::approvals::Approvals>>,
}

impl Default for PlanCriticStream {
    fn default() -> Self {
        PlanCriticStream::new()
    }
}

fn config_error(e: &ParamError) -> PolicyError {
    super::plan_critic::config_error_named(NAME, e)
}

/// Decides the calls of `keys`; `Err` with the first blocking finding.
async fn decide(
    cfg: &CriticConfig,
    st: &mut State,
    keys: &[String],
    cx: PlanContext<'_>,
    acx: &ApprovalCx<'_>,
    schemas: &SchemaCache,
) -> Result<(), Finding> {
    for key in keys {
        let Some(call) = st.asm.call(key) else { continue };
        let finding = cfg.check(&call, cx, schemas).or_else(|| {
            cfg.step_limited(call.index).then(|| Finding {
                index: call.index,
                id: call.id.clone(),
                tool: call.name.clone(),
                check: "step_limit",
                detail: format!("more than {} calls", cfg.max_calls.unwrap_or_default()),
                approval: None,
            })
        });
        let finding = match finding {
            Some(f) => resolve(cfg, acx, f, &call).await,
            None => None,
        };
        st.asm.forget_args(key);
        let verdict = match &finding {
            None => "pass",
            Some(f) => {
                tracing::info!(policy = NAME, call = f.index, tool = %metadata_text(&f.tool), check = f.check, outcome = cfg.on_violation.as_str(), "planned tool call refused");
                st.refused += 1;
                if st.first.is_none() {
                    st.first = Some((f.check.to_string(), metadata_text(&f.tool)));
                }
                match cfg.on_violation {
                    OnViolation::Block => return Err(f.clone()),
                    OnViolation::Strip => "strip",
                    OnViolation::Flag => "flag",
                }
            }
        };
        st.verdicts.insert(key.clone(), verdict.to_string());
    }
    Ok(())
}

/// The event without the stripped calls it carried; `None` to drop it.
fn without_stripped(st: &State, ev: &[u8], keys: &[String]) -> Option<Bytes> {
    let stripped: Vec<&String> = keys
        .iter()
        .filter(|k| st.verdicts.get(*k).is_some_and(|v| v == "strip"))
        .collect();
    if stripped.is_empty() {
        return Some(Bytes::copy_from_slice(ev));
    }
    if stripped.len() == keys.len() {
        let data = sse::data(ev)?;
        let doc: Value = serde_json::from_str(&data).ok()?;
        // Only OpenAI chunks carry other things (text) beside a call.
        let text = doc
            .pointer("/choices/0/delta/content")
            .and_then(Value::as_str)
            .is_some_and(|t| !t.is_empty());
        if !text {
            return None;
        }
    }
    let data = sse::data(ev)?;
    let mut doc: Value = serde_json::from_str(&data).ok()?;
    if let Some(choices) = doc.get_mut("choices").and_then(Value::as_array_mut) {
        for (pos, choice) in choices.iter_mut().enumerate() {
            let c = choice.get("index").and_then(Value::as_u64).unwrap_or(pos as u64);
            if let Some(Value::Array(calls)) = choice.pointer_mut("/delta/tool_calls") {
                let mut k = 0;
                calls.retain(|d| {
                    let i = d.get("index").and_then(Value::as_u64).unwrap_or(k);
                    k += 1;
                    !stripped.iter().any(|s| **s == format!("o{c}.{i}"))
                });
            }
        }
    }
    Some(sse::with_data(ev, &doc.to_string()))
}

/// A finish event of a choice (or message) whose calls were all stripped
/// says it ended as a plain answer.
fn plain_finish(st: &State, ev: &[u8]) -> Option<Bytes> {
    let all_stripped = |prefix: &str| {
        let mut any = false;
        for (k, v) in &st.verdicts {
            if k.starts_with(prefix) {
                any = true;
                if v != "strip" {
                    return false;
                }
            }
        }
        any
    };
    let data = sse::data(ev)?;
    let mut doc: Value = serde_json::from_str(&data).ok()?;
    let mut changed = false;
    if let Some(choices) = doc.get_mut("choices").and_then(Value::as_array_mut) {
        for (pos, choice) in choices.iter_mut().enumerate() {
            let c = choice.get("index").and_then(Value::as_u64).unwrap_or(pos as u64);
            if choice.get("finish_reason").and_then(Value::as_str) == Some("tool_calls")
                && all_stripped(&format!("o{c}."))
            {
                choice["finish_reason"] = Value::String("stop".into());
                changed = true;
            }
        }
    }
    if doc.get("type").and_then(Value::as_str) == Some("message_delta")
        && doc.pointer("/delta/stop_reason").and_then(Value::as_str) == Some("tool_use")
        && all_stripped("a")
    {
        doc["delta"]["stop_reason"] = Value::String("end_turn".into());
        changed = true;
    }
    changed.then(|| sse::with_data(ev, &doc.to_string()))
}

/// Moves the held events whose calls are all decided to `out`, in order.
fn release(st: &mut State, out: &mut Vec<Bytes>) {
    let held = std::mem::take(&mut st.held);
    for h in held {
        if !h.keys.iter().all(|k| st.verdicts.contains_key(k)) {
            st.held.push(h);
            continue;
        }
        let Ok(ev) = b64().decode(&h.ev) else { continue };
        if let Some(ev) = without_stripped(st, &ev, &h.keys) {
            out.push(ev);
        }
    }
}

impl PlanCriticStream {
    /// A policy with empty caches.
    pub fn new() -> Self {
        PlanCriticStream {
            cache: ParamCache::new(KEYS),
            schemas: SchemaCache::default(),
            declared: DeclaredStore::default(),
            approvals: None,
        }
    }

    /// A policy whose `approve` rules ask `approvals` (without: calls they
    /// govern stay refused).
    pub fn with_approvals(approvals: std::sync::Arc<crate::approvals::Approvals>) -> Self {
        PlanCriticStream {
            approvals: Some(approvals),
            ..PlanCriticStream::new()
        }
    }

    async fn sse_chunk(
        &self,
        cfg: &CriticConfig,
        st: &mut State,
        ctx: &ChunkContext<'_>,
        page: &str,
    ) -> Result<ChunkOutcome, String> {
        let declared = self.declared.get(&ctx.call.request_id);
        let caller = Caller::from_metadata(ctx.metadata);
        let cx = PlanContext {
            declared: declared.as_deref(),
            caller: &caller,
        };
        let acx = ApprovalCx {
            approvals: self.approvals.as_deref(),
            metadata: ctx.metadata,
            request: ctx.request,
            caller: &caller,
            page,
        };
        let mut out = Vec::new();
        let block = |st: &State, out: Vec<Bytes>, f: Finding| {
            let msg = format!(
                "planned tool call {} (`{}`) refused: {}",
                f.index,
                metadata_text(&f.tool),
                f.check
            );
            st.metadata(cfg, ChunkOutcome::end_stream("plan_rejected", msg).replace(out))
        };
        for ev in ctx.events {
            let utf8 = std::str::from_utf8(ev).is_ok();
            let Some(data) = sse::data(ev) else {
                out.push(ev.clone());
                continue;
            };
            let (completed, touched) = if data.trim() == "[DONE]" {
                (st.asm.finish(), Vec::new())
            } else {
                match serde_json::from_str::<Value>(&data) {
                    Ok(doc) => {
                        let fed = st.asm.feed(&doc, utf8).map_err(|e| e.to_string())?;
                        (fed.completed, fed.touched)
                    }
                    Err(_) => (Vec::new(), Vec::new()),
                }
            };
            if !touched.is_empty() {
                st.held.push(Held {
                    ev: b64().encode(ev),
                    keys: touched.clone(),
                });
            }
            let mut completed = completed;
            if st.held_bytes() > MAX_HELD {
                let open: Vec<String> = st.held.iter().flat_map(|h| h.keys.clone()).collect();
                completed.extend(st.asm.overflow(&open));
            }
            if let Err(f) = decide(cfg, st, &completed, cx, &acx, &self.schemas).await {
                return Ok(block(st, out, f));
            }
            release(st, &mut out);
            if touched.is_empty() {
                out.push(plain_finish(st, ev).unwrap_or_else(|| ev.clone()));
            }
        }
        if ctx.end_of_stream {
            let rest = st.asm.finish();
            if let Err(f) = decide(cfg, st, &rest, cx, &acx, &self.schemas).await {
                return Ok(block(st, out, f));
            }
            release(st, &mut out);
        }
        let unchanged = out.len() == ctx.events.len() && out.iter().zip(ctx.events).all(|(a, b)| a == b);
        let outcome = if unchanged {
            ChunkOutcome::pass()
        } else {
            ChunkOutcome::pass().replace(out)
        };
        Ok(if st.asm.calls.is_empty() {
            outcome
        } else {
            st.metadata(cfg, outcome)
        })
    }

    async fn raw_chunk(&self, cfg: &CriticConfig, st: &mut State, ctx: &ChunkContext<'_>, page: &str) -> ChunkOutcome {
        if st.raw_over {
            return ChunkOutcome::pass();
        }
        let mut raw = b64().decode(&st.raw).unwrap_or_default();
        for ev in ctx.events {
            raw.extend_from_slice(ev);
        }
        if raw.len() > MAX_WHOLE {
            st.raw_over = true;
            st.raw = String::new();
            return ChunkOutcome::pass()
                .replace(vec![Bytes::from(raw)])
                .set_metadata("plan.decision", "unreadable")
                .set_metadata("plan.error", "body over the streamed plan limit");
        }
        if !ctx.end_of_stream {
            st.raw = b64().encode(&raw);
            return ChunkOutcome::pass().replace(Vec::new());
        }
        st.raw = String::new();
        let whole = |raw: Vec<u8>| ChunkOutcome::pass().replace(vec![Bytes::from(raw)]);
        let Ok(mut doc) = serde_json::from_slice::<Value>(&raw) else {
            return whole(raw);
        };
        let calls = planned_calls(&doc);
        if calls.is_empty() {
            return whole(raw);
        }
        let declared = self.declared.get(&ctx.call.request_id);
        let caller = Caller::from_metadata(ctx.metadata);
        let cx = PlanContext {
            declared: declared.as_deref(),
            caller: &caller,
        };
        let findings = cfg.check_plan(&calls, cx, &self.schemas);
        let acx = ApprovalCx {
            approvals: self.approvals.as_deref(),
            metadata: ctx.metadata,
            request: ctx.request,
            caller: &caller,
            page,
        };
        let findings = resolve_all(cfg, &acx, findings, &calls).await;
        let Some(first) = findings.first() else {
            return whole(raw)
                .set_metadata("plan.decision", "pass")
                .set_metadata("plan.calls", calls.len().to_string());
        };
        let meta = |o: ChunkOutcome| {
            o.set_metadata("plan.decision", cfg.on_violation.as_str())
                .set_metadata("plan.calls", calls.len().to_string())
                .set_metadata("plan.refused", findings.len().to_string())
                .set_metadata("plan.check", first.check)
                .set_metadata("plan.tool", metadata_text(&first.tool))
        };
        let meta = |o: ChunkOutcome| match findings.iter().find_map(|f| f.approval.as_ref()) {
            Some(id) => meta(o).set_metadata("plan.approval_id", id.clone()),
            None => meta(o),
        };
        match cfg.on_violation {
            OnViolation::Flag => meta(whole(raw)),
            OnViolation::Block => meta(whole(block_body(&findings).to_string().into_bytes())),
            OnViolation::Strip => {
                let locations: Vec<Location> = findings
                    .iter()
                    .filter_map(|f| calls.get(f.index).map(|c| c.location))
                    .collect();
                strip(&mut doc, &locations);
                meta(whole(doc.to_string().into_bytes()))
            }
        }
    }
}

impl Policy for PlanCriticStream {
    type Params = Params;
    describe! { name: NAME, params: KEYS, phases: Both, body: true, streams: true }

    /// Keeps the tools the request declared for its streamed response.
    async fn on_request(&self, params: &Params, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        self.cache
            .get(params, CriticConfig::parse)
            .map_err(|e| config_error(&e))?;
        if let Some(tools) = request_tools(ctx.request.body()) {
            self.declared.put(&ctx.call.request_id, tools);
        }
        Ok(RequestOutcome::proceed())
    }

    async fn on_response_chunk(&self, params: &Params, ctx: &ChunkContext<'_>) -> Result<ChunkOutcome, PolicyError> {
        let cfg = self
            .cache
            .get(params, CriticConfig::parse)
            .map_err(|e| config_error(&e))?;
        let mut st: State = if ctx.state.is_empty() {
            State::default()
        } else {
            serde_json::from_slice(ctx.state)
                .map_err(|e| PolicyError::new(format!("{NAME}: stream state unreadable: {e}")))?
        };
        let page = crate::approvals::page_url(params, &ctx.request);
        let out = match ctx.framing {
            Framing::SseEvent => match self.sse_chunk(&cfg, &mut st, ctx, &page).await {
                Ok(o) => o,
                Err(why) => ChunkOutcome::end_stream("plan_rejected", why).set_metadata("plan.decision", "block"),
            },
            Framing::Raw => self.raw_chunk(&cfg, &mut st, ctx, &page).await,
        };
        if ctx.end_of_stream {
            self.declared.remove(&ctx.call.request_id);
            return Ok(out);
        }
        let state = serde_json::to_vec(&st).map_err(|e| PolicyError::new(format!("{NAME}: stream state: {e}")))?;
        Ok(out.state(state))
    }
}

#[cfg(test)]
#[path = "stream_critic_tests.rs"]
mod tests;
