//! `tokenBasedRateLimit`: LLM tokens per minute, per `key`.
//!
//! Request phase: estimates the prompt's tokens (characters / 4 over the
//! text of `messages[].content`, `prompt`, `input`) and takes them from the
//! bucket, or answers 429 when the budget is spent; a streaming OpenAI-style
//! request is made to report its usage ([`super::stream_usage`]). Response
//! phase: reads `usage.total_tokens` from the upstream's JSON (or the last
//! SSE event that carries it) and charges the difference with the estimate.
//! A streamed response is charged the same way, from its usage events, as
//! they pass ([`super::stream_usage`]).

use serde_json::Value;

use super::stream_usage::{self, USAGE_ADDED_KEY};
use super::{retry_after_secs, Backend, Decision, KeySpec, Take};
use crate::{error_body, text};
use policy_agents::stream::sse;
use policy_agents::{
    describe, ChunkContext, ChunkOutcome, Deny, FromParams, Metadata, ParamError, Params, Policy, PolicyError,
    RequestContext, RequestOutcome, RequestView, ResponseContext, ResponseOutcome,
};

/// Metadata key carrying the request-phase estimate to the response phase.
const ESTIMATE_KEY: &str = "tokens_estimated";

/// Parameters of `tokenBasedRateLimit`.
#[derive(Debug, Clone)]
pub struct TokenParams {
    tokens_per_minute: u64,
    key: KeySpec,
    /// Ask OpenAI-style streaming requests for usage (`stream_usage`, true).
    stream_usage: bool,
}

impl FromParams for TokenParams {
    fn from_params(p: &Params) -> Result<Self, ParamError> {
        let raw = p.required("tokens_per_minute")?;
        let tokens_per_minute: u64 = p.parse_or("tokens_per_minute", 0)?;
        if tokens_per_minute == 0 {
            return Err(ParamError::invalid("tokens_per_minute", raw, "must be > 0"));
        }
        Ok(TokenParams {
            tokens_per_minute,
            key: KeySpec::parse(p.get("key"))?,
            stream_usage: p.bool_or("stream_usage", true)?,
        })
    }
}

/// Estimated tokens of a request body: characters / 4, at least 1.
pub fn estimate_tokens(body: &[u8]) -> u64 {
    let chars = text::body_text(body).chars().count() as u64;
    chars.div_ceil(4).max(1)
}

/// `usage.total_tokens` of a JSON body, or of the last SSE `data:` event with one.
pub fn usage_total(body: &[u8]) -> Option<u64> {
    let total = |doc: &Value| doc.get("usage")?.get("total_tokens")?.as_u64();
    if let Ok(doc) = serde_json::from_slice::<Value>(body) {
        return total(&doc);
    }
    let text = std::str::from_utf8(body).ok()?;
    text.lines()
        .rev()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find_map(|doc| total(&doc))
}

/// The `tokenBasedRateLimit` policy.
#[derive(Clone)]
pub struct TokenBasedRateLimit {
    backend: Backend,
}

impl TokenBasedRateLimit {
    /// A policy keeping its buckets in `backend`.
    pub fn new(backend: Backend) -> Self {
        TokenBasedRateLimit { backend }
    }

    /// Charges the `total` tokens the upstream reported: the difference with
    /// the request phase's estimate (metadata `tokens_estimated`), taken
    /// whatever the bucket's level. The buffered and the streamed response
    /// paths both charge through here.
    async fn charge_usage(
        &self,
        params: &TokenParams,
        request: &RequestView<'_>,
        metadata: &Metadata,
        total: u64,
    ) -> Result<Decision, PolicyError> {
        let estimated: i64 = metadata.get(ESTIMATE_KEY).and_then(|v| v.parse().ok()).unwrap_or(0);
        let correction = i64::try_from(total).unwrap_or(i64::MAX).saturating_sub(estimated);
        let key = params.key.resolve(request, metadata);
        Ok(self
            .backend
            .take_tokens(&key, params.tokens_per_minute, correction, Take::Always)
            .await?)
    }
}

impl Policy for TokenBasedRateLimit {
    type Params = TokenParams;
    describe! { name: "tokenBasedRateLimit", params: &["tokens_per_minute", "key", "stream_usage"], phases: Both, body: true, streams: true }

    async fn on_request(&self, params: &TokenParams, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let estimate = ctx.request.body().map(estimate_tokens).unwrap_or(1);
        let key = params.key.resolve(&ctx.request, ctx.metadata);
        let cost = i64::try_from(estimate).unwrap_or(i64::MAX);
        let d = self
            .backend
            .take_tokens(&key, params.tokens_per_minute, cost, Take::IfAvailable)
            .await?;
        let limit = d.limit.to_string();
        if !d.allowed {
            let deny = Deny::json(429, &error_body("too_many_requests", "token_budget_exhausted"))
                .header("retry-after", retry_after_secs(d.retry_after).to_string())
                .header("x-ratelimit-limit-tokens", limit)
                .header("x-ratelimit-remaining-tokens", d.remaining.to_string())
                .reason("rate_limited");
            return Ok(RequestOutcome::denied_with(deny));
        }
        let remaining = d.remaining.to_string();
        let mut out = RequestOutcome::proceed()
            .set_header("x-ratelimit-limit-tokens", &limit)
            .set_header("x-ratelimit-remaining-tokens", &remaining)
            .set_metadata(ESTIMATE_KEY, estimate.to_string())
            .set_metadata("ratelimit_tokens_remaining", remaining);
        let plain = ctx
            .request
            .header("content-encoding")
            .is_none_or(|e| e.eq_ignore_ascii_case("identity"));
        let ask = params.stream_usage && plain && stream_usage::openai_style(&ctx.request);
        if let Some(body) = ctx.request.body().filter(|_| ask).and_then(stream_usage::ask_for_usage) {
            out = out.set_body(body).set_metadata(USAGE_ADDED_KEY, "true");
        }
        Ok(out)
    }

    async fn on_response(
        &self,
        params: &TokenParams,
        ctx: &ResponseContext<'_>,
    ) -> Result<ResponseOutcome, PolicyError> {
        let Some(body) = ctx.response.body() else {
            return Ok(ResponseOutcome::proceed());
        };
        // A buffered event stream whose usage chunk the client did not ask for.
        let event_stream = ctx
            .response
            .header("content-type")
            .is_some_and(|t| sse::is_event_stream(t.as_bytes()));
        let stripped = (event_stream && ctx.metadata.get(USAGE_ADDED_KEY) == Some("true"))
            .then(|| stream_usage::strip_usage_events(body))
            .flatten();
        let Some(total) = usage_total(body) else {
            return Ok(ResponseOutcome::proceed());
        };
        let d = self.charge_usage(params, &ctx.request, ctx.metadata, total).await?;
        let mut out = ResponseOutcome::proceed()
            .set_header("x-ratelimit-limit-tokens", d.limit.to_string())
            .set_header("x-ratelimit-remaining-tokens", d.remaining.to_string())
            .set_metadata("tokens_used", total.to_string());
        if let Some(body) = stripped {
            out = out.set_body(body);
        }
        Ok(out)
    }

    async fn on_response_chunk(
        &self,
        params: &TokenParams,
        ctx: &ChunkContext<'_>,
    ) -> Result<ChunkOutcome, PolicyError> {
        let read = stream_usage::read_chunk(ctx)?;
        let Some(total) = read.charge else {
            return Ok(read.outcome);
        };
        let d = self.charge_usage(params, &ctx.request, ctx.metadata, total).await?;
        Ok(read
            .outcome
            .set_metadata("tokens_used", total.to_string())
            .set_metadata("ratelimit_tokens_remaining", d.remaining.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use policy_agents::testing::{TestCall, TestRequest, TestResponse};

    fn chat(chars: usize) -> String {
        serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "x".repeat(chars)}]}).to_string()
    }

    #[test]
    fn estimates_and_usage() {
        assert_eq!(estimate_tokens(chat(400).as_bytes()), 100);
        assert_eq!(estimate_tokens(b""), 1);
        assert_eq!(usage_total(br#"{"usage":{"total_tokens":42}}"#), Some(42));
        let sse = "data: {\"choices\":[]}\n\ndata: {\"usage\":{\"total_tokens\":7}}\n\ndata: [DONE]\n";
        assert_eq!(usage_total(sse.as_bytes()), Some(7));
        assert_eq!(usage_total(b"{}"), None);
    }

    #[tokio::test]
    async fn a_buffered_event_stream_loses_the_usage_chunk_it_was_given() {
        let policy = TokenBasedRateLimit::new(Backend::memory());
        let call = TestCall::new()
            .params(&[("tokens_per_minute", "1000")])
            .metadata("tokens_estimated", "5");
        let req = TestRequest::new("POST", "/v1/chat/completions").body(chat(20));
        let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"total_tokens\":30}}\n\ndata: [DONE]\n\n";
        let resp = TestResponse::new(200)
            .header("content-type", "text/event-stream")
            .body(sse);
        let out = call.response(&policy, &req, &resp).await.unwrap();
        assert_eq!(out.metadata_value("tokens_used"), Some("30"));
        assert!(out.body_set().is_none(), "the client asked for usage");
        let added = call.clone().metadata(USAGE_ADDED_KEY, "true");
        let out = added.response(&policy, &req, &resp).await.unwrap();
        let body = &out.body_set().expect("usage chunk removed").body;
        assert_eq!(
            &body[..],
            b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn budget_is_spent_then_corrected_and_refilled() {
        let policy = TokenBasedRateLimit::new(Backend::memory());
        let call = TestCall::new().params(&[("tokens_per_minute", "1000"), ("key", "header:x-user")]);
        let req = TestRequest::new("POST", "/v1/chat/completions")
            .header("x-user", "u1")
            .body(chat(2000));
        let first = call.request(&policy, &req).await.unwrap();
        assert!(first.denial().is_none());
        assert_eq!(first.metadata_value("tokens_estimated"), Some("500"));
        assert_eq!(first.header_set("x-ratelimit-remaining-tokens"), Some("500"));

        // The upstream used 900 tokens: 400 more than estimated.
        let resp = TestResponse::new(200).body(r#"{"usage":{"total_tokens":900}}"#);
        let call_resp = call.clone().metadata("tokens_estimated", "500");
        let out = call_resp.response(&policy, &req, &resp).await.unwrap();
        assert_eq!(out.header_set("x-ratelimit-remaining-tokens"), Some("100"));

        let denied = call.request(&policy, &req).await.unwrap();
        let deny = denied.denial().expect("429");
        assert_eq!(deny.status, 429);
        assert!(deny.headers.contains(&("retry-after".into(), "24".into())), "{deny:?}");

        tokio::time::advance(Duration::from_secs(24)).await;
        assert!(call.request(&policy, &req).await.unwrap().denial().is_none());
        let other = TestRequest::new("POST", "/").header("x-user", "u2").body(chat(40));
        assert!(call.request(&policy, &other).await.unwrap().denial().is_none());
    }
}
