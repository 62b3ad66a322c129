//! `contextBudgetStream`: `contextBudget` on routes that stream.
//!
//! The request phase is `contextBudget`'s (the same code; given the same
//! [`SessionStore`], as in `planner-agent`, the same sessions). The streamed
//! response passes unchanged while its usage is read: the OpenAI usage
//! chunk (`usage.total_tokens`, or `prompt_tokens + completion_tokens`;
//! the client asks for it with `stream_options.include_usage`, or
//! `tokenBasedRateLimit` adds it: list this policy before
//! `tokenBasedRateLimit` in the response chain, which removes the chunk it
//! added), or Anthropic `message_start` / `message_delta` usage. At the end
//! of the stream the usage replaces the request's estimate in the session,
//! and the verdict goes to metadata `context.verdict` (the response headers
//! went out before the usage was known). A non-SSE body is read whole at
//! the end (at most [`MAX_RAW`]).

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::budget::{reported_usage, BudgetConfig, ContextBudget};
use super::plan_critic::config_error_named;
use crate::ratelimit::stream_usage::usage_tokens;
use crate::sessions::SessionStore;
use policy_agents::stream::sse;
use policy_agents::{
    describe, ChunkContext, ChunkOutcome, Framing, Params, Policy, PolicyError, RequestContext, RequestOutcome,
};

const NAME: &str = "contextBudgetStream";

/// The largest non-SSE body read for its usage.
pub const MAX_RAW: usize = 256 * 1024;

#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    openai: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    input: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    output: Option<u64>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    raw: String,
    #[serde(default)]
    raw_over: bool,
}

impl State {
    fn usage(&self) -> Option<u64> {
        self.openai.or(match (self.input, self.output) {
            (None, None) => None,
            (i, o) => Some(i.unwrap_or(0).saturating_add(o.unwrap_or(0))),
        })
    }

    fn read_event(&mut self, doc: &Value) {
        if let Some(t) = doc.get("usage").and_then(usage_tokens) {
            self.openai = Some(t);
        }
        let usage = match doc.get("type").and_then(Value::as_str) {
            Some("message_start") => doc.pointer("/message/usage"),
            Some("message_delta") => doc.get("usage"),
            _ => None,
        };
        if let Some(u) = usage {
            let n = |k: &str| u.get(k).and_then(Value::as_u64);
            self.input = n("input_tokens").or(self.input);
            self.output = n("output_tokens").or(self.output);
        }
    }
}

/// The `contextBudgetStream` policy.
#[derive(Debug, Default)]
pub struct ContextBudgetStream {
    inner: ContextBudget,
}

impl ContextBudgetStream {
    /// A policy with no sessions.
    pub fn new() -> Self {
        ContextBudgetStream::default()
    }

    /// A policy keeping its sessions in `store` (give it a clone of
    /// `contextBudget`'s store to share that policy's sessions).
    pub fn with_store(store: SessionStore) -> Self {
        ContextBudgetStream {
            inner: ContextBudget::with_store(store),
        }
    }

    async fn settle(
        &self,
        cfg: &BudgetConfig,
        ctx: &ChunkContext<'_>,
        usage: Option<u64>,
    ) -> Result<ChunkOutcome, PolicyError> {
        let Some(session) = cfg.session(&ctx.request, ctx.metadata) else {
            return Ok(ChunkOutcome::pass());
        };
        let total = self.inner.settle(NAME, cfg, session, ctx.metadata, usage).await?;
        Ok(ChunkOutcome::pass()
            .set_metadata("context.verdict", cfg.verdict(total))
            .set_metadata("context.used", total.to_string())
            .set_metadata("context.budget", cfg.budget().to_string()))
    }
}

impl Policy for ContextBudgetStream {
    type Params = Params;
    describe! { name: NAME, params: super::budget::KEYS, phases: Both, body: true, streams: true }

    async fn on_request(&self, params: &Params, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        self.inner.request_phase(NAME, params, ctx).await
    }

    async fn on_response_chunk(&self, params: &Params, ctx: &ChunkContext<'_>) -> Result<ChunkOutcome, PolicyError> {
        let cfg = self
            .inner
            .cache
            .get(params, BudgetConfig::parse)
            .map_err(|e| config_error_named(NAME, &e))?;
        let mut st: State = if ctx.state.is_empty() {
            State::default()
        } else {
            serde_json::from_slice(ctx.state)
                .map_err(|e| PolicyError::new(format!("{NAME}: stream state unreadable: {e}")))?
        };
        let b64 = base64::engine::general_purpose::STANDARD;
        match ctx.framing {
            Framing::SseEvent => {
                for ev in ctx.events {
                    if let Some(doc) = sse::data(ev).and_then(|d| serde_json::from_str::<Value>(&d).ok()) {
                        st.read_event(&doc);
                    }
                }
            }
            Framing::Raw if !st.raw_over => {
                let mut raw = b64.decode(&st.raw).unwrap_or_default();
                for ev in ctx.events {
                    raw.extend_from_slice(ev);
                }
                if raw.len() > MAX_RAW {
                    st.raw_over = true;
                    st.raw = String::new();
                } else if ctx.end_of_stream {
                    st.openai = reported_usage(&raw);
                } else {
                    st.raw = b64.encode(&raw);
                }
            }
            Framing::Raw => {}
        }
        if ctx.end_of_stream {
            return self.settle(&cfg, ctx, st.usage()).await;
        }
        let state = serde_json::to_vec(&st).map_err(|e| PolicyError::new(format!("{NAME}: stream state: {e}")))?;
        Ok(ChunkOutcome::pass().state(state))
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use serde_json::json;

    use super::*;
    use policy_agents::proto;
    use policy_agents::testing::{TestCall, TestRequest};
    use policy_agents::{CallInfo, Metadata, Phase, RequestView, ResponseView};

    /// One request phase and one streamed response: the metadata at its end.
    async fn turn(p: &ContextBudgetStream, framing: Framing, events: &[&str]) -> Result<Vec<(String, String)>, u16> {
        let params: Params = [("budget", "1000")].into_iter().collect();
        let req = TestRequest::new("POST", "/v1/chat/completions")
            .header("x-session-id", "s")
            .body(r#"{"messages": [{"role": "user", "content": "hi"}]}"#);
        let out = TestCall::new()
            .params(&[("budget", "1000")])
            .request(p, &req)
            .await
            .unwrap();
        if let Some(d) = out.denial() {
            return Err(d.status);
        }
        let mut meta = Metadata::new();
        meta.insert("context.estimate", out.metadata_value("context.estimate").unwrap());
        let info = CallInfo::new("r", Phase::Response);
        let response = proto::ResponseData::default();
        let mut state = Vec::new();
        let mut md = Vec::new();
        for (n, e) in events.iter().enumerate() {
            let evs = vec![Bytes::from(e.to_string())];
            let ctx = ChunkContext {
                request: RequestView::new(req.data()),
                response: ResponseView::new(&response),
                metadata: &meta,
                call: &info,
                sequence: n as u64,
                framing,
                events: &evs,
                end_of_stream: n + 1 == events.len(),
                state: &state,
            };
            let o = p.on_response_chunk(&params, &ctx).await.unwrap();
            assert!(o.replacement().is_none(), "events pass unchanged");
            state = o.next_state().to_vec();
            md = o.metadata_set().to_vec();
        }
        Ok(md)
    }

    fn verdict(md: &[(String, String)]) -> &str {
        md.iter()
            .find(|(k, _)| k == "context.verdict")
            .map_or("-", |(_, v)| v.as_str())
    }

    #[tokio::test]
    async fn streamed_usage_is_charged_at_the_end() {
        let p = ContextBudgetStream::new();
        let openai = [
            format!(
                "data: {}\n\n",
                json!({"choices": [{"index": 0, "delta": {"content": "ok"}}]})
            ),
            format!(
                "data: {}\n\n",
                json!({"choices": [], "usage": {"prompt_tokens": 200, "completion_tokens": 100}})
            ),
            "data: [DONE]\n\n".to_string(),
        ];
        let openai: Vec<&str> = openai.iter().map(String::as_str).collect();
        assert_eq!(verdict(&turn(&p, Framing::SseEvent, &openai).await.unwrap()), "ok");
        let anthropic = [
            format!(
                "data: {}\n\n",
                json!({"type": "message_start", "message": {"usage": {"input_tokens": 250, "output_tokens": 1}}})
            ),
            format!(
                "data: {}\n\n",
                json!({"type": "message_delta", "usage": {"output_tokens": 150}})
            ),
        ];
        let anthropic: Vec<&str> = anthropic.iter().map(String::as_str).collect();
        assert_eq!(
            verdict(&turn(&p, Framing::SseEvent, &anthropic).await.unwrap()),
            "checkpoint"
        );
        let raw = json!({"usage": {"total_tokens": 300}}).to_string();
        let (a, b) = raw.split_at(10);
        assert_eq!(verdict(&turn(&p, Framing::Raw, &[a, b]).await.unwrap()), "summarize");
        assert_eq!(turn(&p, Framing::SseEvent, &["data: {}\n\n"]).await, Err(429));
    }
}
