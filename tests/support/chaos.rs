//! Shared parts of the reliability suite (`tests/reliability*.rs`,
//! `tests/upgrade.rs`): the fail-closed gate policy and its requests, the
//! wait until a stack serves them, and what the answers tell.

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ext_proc::v3::{processing_response::Response as PResp, ProcessingResponse};

use super::load::*;
#[allow(unused_imports)]
pub use super::stack::tail;
use super::stack::StackBuilder;
use super::{Envoy, Stack};

/// `kind` of a request that carries no token and must be denied.
pub const DENY: u8 = 1;
/// `kind` of a request with a token.
pub const ALLOW: u8 = 0;

/// The fail-closed gate: 401 without `x-token`, else tags the request.
pub const GATE: &str = r#"policies:
  - name: gate
    rules:
      - when: {header_absent: x-token}
        request:
          - immediate: {status: 401, body: "no token", reason: authentication_failed}
    request:
      - set_header: {name: x-gate, value: passed}
"#;

/// The route of the gate tests: `gate`, fail closed.
pub const GATE_ROUTE: &str =
    "  route_policies:\n    - route_name: gate\n      request_policy_chain: [{policy: gate, on_failure: deny}]\n";

/// A stack as the suite runs it: Envoy configured like `deploy/envoy.yaml`
/// with these routes, and the load client.
pub fn suite(routes: &[&str]) -> StackBuilder {
    Stack::builder()
        .deployed_envoy(EnvoyOpts::deployed(routes))
        .client(client())
}

/// Requests of the kill tests: one in three without a token.
pub fn gate_request(i: usize) -> Req {
    if i.is_multiple_of(3) {
        Req::get(format!("/gate/{i}"), DENY)
    } else {
        Req::get(format!("/gate/{i}"), ALLOW).header("x-token", "t")
    }
}

/// Whether an answer is right for a gate request: a request without a token
/// is never let through, one with a token is never denied by the policy.
pub fn gate_answer_consistent(a: &Answer) -> bool {
    match (a.kind, a.cause) {
        (DENY, Cause::Upstream) => false,
        (ALLOW, Cause::AgentDenied) => false,
        (ALLOW, Cause::Upstream) => a.tag("x-gate") == Some("passed"),
        _ => true,
    }
}

/// Requests without a token that were let through (answered 2xx): the
/// fail-closed gate lets none through, whatever happens to the kernel.
pub fn denied_let_through(answers: &[Answer]) -> usize {
    answers
        .iter()
        .filter(|a| a.kind == DENY && (200..300).contains(&a.status))
        .count()
}

/// Requests, rate and kill times of the kernel-kill tests: test 2 of
/// `tests/reliability.rs` (a plain kernel, restarted) and test 10 of
/// `tests/upgrade.rs` (a generation under `policy-kernel supervise`) run
/// the same schedule, so that their outages compare like for like.
pub fn kill_schedule() -> (usize, f64, Vec<Duration>) {
    pick(
        (2400, 200.0, vec![Duration::from_secs(3), Duration::from_secs(8)]),
        (
            15_000,
            500.0,
            vec![Duration::from_secs(8), Duration::from_secs(16), Duration::from_secs(24)],
        ),
    )
}

/// Waits until `path` (with a token) gets through `stack`'s Envoy to the
/// upstream.
pub async fn warm(stack: &Stack, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let a = hit(
            &stack.client,
            &stack.base,
            0,
            Req::get(path, ALLOW).header("x-token", "t"),
            Instant::now(),
        )
        .await;
        if a.cause == Cause::Upstream {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{path} never succeeded: {a:?}\n{}",
            tail(&stack.kernel.log(), 30)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Counts of Envoy's RESPONSE_CODE_DETAILS over the non-2xx answers.
pub fn details_of(envoy: &Envoy, answers: &[Answer]) -> (String, usize) {
    let ids: Vec<u64> = answers
        .iter()
        .filter(|a| !(200..300).contains(&a.status))
        .map(|a| a.id)
        .collect();
    let log = access_log_with(envoy, &ids, Duration::from_secs(5));
    let mut m = std::collections::BTreeMap::<String, usize>::new();
    let mut missing = 0;
    for a in answers.iter().filter(|a| !(200..300).contains(&a.status)) {
        match log.get(&a.id) {
            Some(l) => *m.entry(format!("{}:{}", l.status, l.details)).or_insert(0) += 1,
            None => missing += 1,
        }
    }
    (
        m.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "),
        missing,
    )
}

pub fn immediate_status(r: &ProcessingResponse) -> Option<i32> {
    match &r.response {
        Some(PResp::ImmediateResponse(i)) => i.status.as_ref().map(|s| s.code),
        _ => None,
    }
}

/// Names of the headers a response sets.
pub fn set_headers(r: &ProcessingResponse) -> Vec<String> {
    let common = match &r.response {
        Some(PResp::RequestHeaders(h)) | Some(PResp::ResponseHeaders(h)) => h.response.as_ref(),
        Some(PResp::RequestBody(b)) | Some(PResp::ResponseBody(b)) => b.response.as_ref(),
        _ => None,
    };
    common
        .and_then(|c| c.header_mutation.as_ref())
        .map(|m| {
            m.set_headers
                .iter()
                .filter_map(|h| h.header.as_ref().map(|h| h.key.clone()))
                .collect()
        })
        .unwrap_or_default()
}
