//! Cacheable outcomes over a real Unix socket: the declaration in discovery,
//! and the lifetime a call's reply asks for (the shortest any policy asked,
//! none after a failure).

mod common;

use std::time::Duration;

use common::*;
use policy_agents::proto;
use policy_agents::{Agent, Cacheable, Params, Policy, PolicyError, RequestContext, RequestOutcome};

/// Cacheable on `x-user`; its outcome asks for `ms` (when set), fails on
/// `fail`.
struct Keep(&'static str);

impl Policy for Keep {
    type Params = Params;
    fn name(&self) -> &str {
        self.0
    }
    fn version(&self) -> &str {
        "1"
    }
    fn param_schema(&self) -> &[&str] {
        &["ms", "fail"]
    }
    fn cache(&self) -> Option<Cacheable> {
        Some(
            Cacheable::for_at_most(Duration::from_secs(30))
                .header("X-User")
                .header_param("header_name", "X-Key")
                .metadata("roles")
                .body_field("/method"),
        )
    }
    async fn on_request(&self, p: &Params, _: &RequestContext<'_>) -> Result<RequestOutcome, PolicyError> {
        if p.get("fail").is_some() {
            return Err(PolicyError::new("failed on purpose"));
        }
        let out = RequestOutcome::proceed().set_header("x-kept", self.0);
        Ok(match p.get("ms") {
            Some(_) => out.cache_for_at_most(Duration::from_millis(p.parse_or("ms", 0u64)?)),
            None => out,
        })
    }
}

fn agent() -> policy_agents::AgentBuilder {
    Agent::builder("keeper", "1")
        .policy(Keep("a"))
        .policy(Keep("b"))
        .policy(Probe("plain"))
}

async fn reply(agent: &TestAgent, policies: Vec<proto::Policy>) -> proto::PolicyRequestResponse {
    agent
        .client()
        .await
        .execute_policy_request(request_call("r1", policies))
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test]
async fn discovery_carries_the_declaration() {
    let agent = TestAgent::start(agent()).await;
    let config = agent.config().await;
    let a = config.supported_policies[0].cache.clone().expect("declared");
    assert_eq!(a.max_age_ms, 30_000);
    assert_eq!(a.headers, ["x-user"]);
    assert_eq!(a.header_params.get("header_name").map(String::as_str), Some("x-key"));
    assert_eq!(a.metadata, ["roles"]);
    assert_eq!(a.body_fields, ["/method"]);
    assert!(
        config.supported_policies[2].cache.is_none(),
        "not declared: not cacheable"
    );
    agent.stop().await.unwrap();
}

#[tokio::test]
async fn a_reply_asks_for_the_shortest_lifetime_and_nothing_after_a_failure() {
    let agent = TestAgent::start(agent()).await;
    let none = reply(&agent, vec![policy("a", &[], ""), policy("b", &[], "")]).await;
    assert_eq!(none.cache_max_age_ms, None, "the declared lifetime holds");
    let shortest = reply(
        &agent,
        vec![policy("a", &[("ms", "900")], ""), policy("b", &[("ms", "400")], "")],
    )
    .await;
    assert_eq!(shortest.cache_max_age_ms, Some(400));
    let failed = reply(
        &agent,
        vec![
            policy("a", &[("ms", "900")], ""),
            policy("b", &[("fail", "1")], "continue"),
        ],
    )
    .await;
    assert_eq!(failed.cache_max_age_ms, Some(0), "a failure is never kept");
    agent.stop().await.unwrap();
}
