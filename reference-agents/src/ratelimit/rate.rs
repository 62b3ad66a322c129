//! `rateLimit`: `requests_per_second` with a `burst`, per `key`.
//!
//! Over the limit: 429 with `Retry-After`. Under it: request headers
//! `x-ratelimit-limit` / `x-ratelimit-remaining`, and the same numbers in
//! metadata (`ratelimit_limit`, `ratelimit_remaining`); when the policy is
//! also in the response chain it copies them to the response headers.

use super::{retry_after_secs, Backend, KeySpec, Rate};
use crate::error_body;
use policy_agents::{
    describe, Deny, FromParams, ParamError, Params, Policy, PolicyError, RequestContext, RequestOutcome,
    ResponseContext, ResponseOutcome,
};

/// Parameters of `rateLimit`.
#[derive(Debug, Clone)]
pub struct RateParams {
    rate: Rate,
    key: KeySpec,
}

impl FromParams for RateParams {
    fn from_params(p: &Params) -> Result<Self, ParamError> {
        let rps_raw = p.required("requests_per_second")?;
        let per_second: f64 = p.parse_or("requests_per_second", 0.0)?;
        if !(per_second.is_finite() && per_second > 0.0 && per_second <= 1e9) {
            return Err(ParamError::invalid("requests_per_second", rps_raw, "must be > 0"));
        }
        let default_burst = per_second.ceil().clamp(1.0, f64::from(u32::MAX)) as u32;
        let burst: u32 = p.parse_or("burst", default_burst)?;
        if burst == 0 {
            return Err(ParamError::invalid("burst", "0", "must be at least 1"));
        }
        Ok(RateParams {
            rate: Rate { per_second, burst },
            key: KeySpec::parse(p.get("key"))?,
        })
    }
}

/// The `rateLimit` policy.
#[derive(Clone)]
pub struct RateLimit {
    backend: Backend,
}

impl RateLimit {
    /// A policy keeping its state in `backend`.
    pub fn new(backend: Backend) -> Self {
        RateLimit { backend }
    }
}

impl Policy for RateLimit {
    type Params = RateParams;
    describe! { name: "rateLimit", params: &["requests_per_second", "burst", "key"], phases: Both }

    async fn on_request(&self, params: &RateParams, ctx: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        let key = params.key.resolve(&ctx.request, ctx.metadata);
        let d = self.backend.check_rate(&key, params.rate).await?;
        let (limit, remaining) = (d.limit.to_string(), d.remaining.to_string());
        if !d.allowed {
            let deny = Deny::json(429, &error_body("too_many_requests", "rate_limited"))
                .header("retry-after", retry_after_secs(d.retry_after).to_string())
                .header("x-ratelimit-limit", limit)
                .header("x-ratelimit-remaining", "0")
                .reason("rate_limited");
            return Ok(RequestOutcome::denied_with(deny));
        }
        Ok(RequestOutcome::proceed()
            .set_header("x-ratelimit-limit", &limit)
            .set_header("x-ratelimit-remaining", &remaining)
            .set_metadata("ratelimit_limit", limit)
            .set_metadata("ratelimit_remaining", remaining))
    }

    async fn on_response(
        &self,
        _params: &RateParams,
        ctx: &ResponseContext<'_>,
    ) -> Result<ResponseOutcome, PolicyError> {
        let mut out = ResponseOutcome::proceed();
        if let Some(limit) = ctx.metadata.get("ratelimit_limit") {
            out = out.set_header("x-ratelimit-limit", limit);
        }
        if let Some(remaining) = ctx.metadata.get("ratelimit_remaining") {
            out = out.set_header("x-ratelimit-remaining", remaining);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use policy_agents::testing::{TestCall, TestRequest, TestResponse};

    fn call(rps: &str, burst: &str) -> TestCall {
        TestCall::new().params(&[("requests_per_second", rps), ("burst", burst)])
    }

    #[tokio::test(start_paused = true)]
    async fn limits_per_client_and_refills_with_time() {
        let policy = RateLimit::new(Backend::memory());
        let call = call("1", "2");
        let alice = TestRequest::new("GET", "/").client_ip("10.0.0.1");
        let bob = TestRequest::new("GET", "/").client_ip("10.0.0.2");
        let first = call.request(&policy, &alice).await.unwrap();
        assert_eq!(first.header_set("x-ratelimit-limit"), Some("2"));
        assert_eq!(first.header_set("x-ratelimit-remaining"), Some("1"));
        assert_eq!(first.metadata_value("ratelimit_remaining"), Some("1"));
        assert!(call.request(&policy, &alice).await.unwrap().denial().is_none());
        let third = call.request(&policy, &alice).await.unwrap();
        let deny = third.denial().expect("429");
        assert_eq!(deny.status, 429);
        assert!(deny.headers.contains(&("retry-after".into(), "1".into())));
        assert!(call.request(&policy, &bob).await.unwrap().denial().is_none());

        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(call.request(&policy, &alice).await.unwrap().denial().is_some());
        tokio::time::advance(Duration::from_millis(1)).await;
        let refilled = call.request(&policy, &alice).await.unwrap();
        assert!(refilled.denial().is_none());
        assert_eq!(refilled.header_set("x-ratelimit-remaining"), Some("0"));
    }

    #[tokio::test(start_paused = true)]
    async fn different_param_sets_use_different_limiters() {
        let policy = RateLimit::new(Backend::memory());
        let req = TestRequest::new("GET", "/").header("x-tenant", "t");
        let tight = call("1", "1").params(&[("requests_per_second", "1"), ("burst", "1"), ("key", "header:x-tenant")]);
        assert!(tight.request(&policy, &req).await.unwrap().denial().is_none());
        assert!(tight.request(&policy, &req).await.unwrap().denial().is_some());
        let loose = TestCall::new().params(&[("requests_per_second", "100"), ("key", "header:x-tenant")]);
        assert!(loose.request(&policy, &req).await.unwrap().denial().is_none());
    }

    #[tokio::test]
    async fn response_phase_copies_the_numbers() {
        let policy = RateLimit::new(Backend::memory());
        let call = call("5", "5")
            .metadata("ratelimit_limit", "5")
            .metadata("ratelimit_remaining", "3");
        let out = call
            .response(&policy, &TestRequest::new("GET", "/"), &TestResponse::new(200))
            .await
            .unwrap();
        assert_eq!(out.header_set("x-ratelimit-remaining"), Some("3"));
        assert_eq!(out.header_set("x-ratelimit-limit"), Some("5"));
    }

    #[tokio::test]
    async fn bad_params_are_errors() {
        let policy = RateLimit::new(Backend::memory());
        let req = TestRequest::new("GET", "/");
        for params in [
            vec![],
            vec![("requests_per_second", "0")],
            vec![("requests_per_second", "ten")],
            vec![("requests_per_second", "1"), ("burst", "0")],
            vec![("requests_per_second", "1"), ("key", "cookie:x")],
        ] {
            assert!(
                TestCall::new().params(&params).request(&policy, &req).await.is_err(),
                "{params:?}"
            );
        }
    }
}
