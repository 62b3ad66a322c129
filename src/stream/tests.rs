//! Splitting a response plan for streaming.

use std::sync::Arc;

use super::*;
use crate::snapshot::CompiledPolicy;

fn policy(name: &str, candidates: &[usize], body: &[usize], streams: &[usize]) -> CompiledPolicy {
    let proto = crate::proto::Policy {
        name: name.into(),
        ..Default::default()
    };
    CompiledPolicy {
        wire: crate::wire::encode_policy(&proto),
        proto,
        on_failure: None,
        preferred: None,
        candidates: candidates.to_vec(),
        problem: None,
        body_agents: body.to_vec(),
        stream_agents: streams.to_vec(),
        event_stream_agents: Vec::new(),
        cache: Vec::new(),
        cache_metrics: None,
    }
}

fn chain(policies: Vec<CompiledPolicy>) -> Chain {
    Chain {
        needs_body: policies.iter().any(|p| !p.body_agents.is_empty()),
        may_stream: policies.iter().any(|p| !p.stream_agents.is_empty()),
        policies,
    }
}

fn group(agent: usize, policies: std::ops::Range<usize>) -> Group {
    Group { agent, policies }
}

#[test]
fn header_policies_run_at_the_headers_and_streaming_ones_on_the_body() {
    // headers-only, pii (streams on 0), audit (streams on 0), header again.
    let c = chain(vec![
        policy("h1", &[0], &[], &[]),
        policy("pii", &[0], &[0], &[0]),
        policy("audit", &[0, 1], &[0, 1], &[0]),
        policy("h2", &[0], &[], &[]),
    ]);
    let plan = vec![group(0, 0..4)];
    let (head, body) = split_plan(&c, &plan).unwrap();
    assert_eq!(head, vec![group(0, 0..1), group(0, 3..4)]);
    assert_eq!(body, vec![group(0, 1..3)]);
}

#[test]
fn a_body_policy_that_cannot_stream_on_its_agent_keeps_the_response_buffered() {
    let c = chain(vec![policy("pii", &[0], &[0], &[0]), policy("audit", &[1], &[1], &[])]);
    assert_eq!(split_plan(&c, &vec![group(0, 0..1), group(1, 1..2)]), None);
    // The same policy planned on an agent that streams it: streamed.
    let c = chain(vec![policy("pii", &[0, 1], &[0, 1], &[0])]);
    assert!(split_plan(&c, &vec![group(0, 0..1)]).is_some());
    assert_eq!(split_plan(&c, &vec![group(1, 0..1)]), None);
}

#[test]
fn an_events_only_policy_buffers_other_bodies() {
    let mut sse_only = policy("filter", &[0, 1], &[0, 1], &[0, 1]);
    sse_only.event_stream_agents = vec![1];
    let c = chain(vec![policy("pii", &[0], &[0], &[0]), sse_only]);
    let (_, body) = split_plan(&c, &vec![group(0, 0..2)]).unwrap();
    assert!(!events_only(&c, &body), "agent 0 streams every body");
    let (_, body) = split_plan(&c, &vec![group(0, 0..1), group(1, 1..2)]).unwrap();
    assert!(events_only(&c, &body));
    let full = vec![group(0, 0..1), group(1, 1..2)];
    let mut s = Streamer::new(body).buffer_others(full.clone());
    let sse = ResponseCtx {
        headers: vec![("content-type".into(), "text/event-stream".into())],
        ..Default::default()
    };
    assert_eq!(s.fallback_for(&sse), None);
    let json = ResponseCtx {
        headers: vec![("content-type".into(), "application/json".into())],
        ..Default::default()
    };
    assert_eq!(s.fallback_for(&json), Some(full));
}

#[test]
fn without_streaming_candidates_nothing_is_split() {
    let c = chain(vec![policy("h", &[0], &[], &[])]);
    assert_eq!(split_plan(&c, &vec![group(0, 0..1)]), None);
    let _ = Arc::new(());
}
