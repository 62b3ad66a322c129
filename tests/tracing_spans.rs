//! The span tree of a 3-group chain (spec §10.3), recorded with an in-memory
//! exporter: the kernel runs in this process, the agents are real
//! `policy-test-agent` processes on Unix sockets.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response;
use opentelemetry::trace::SpanId;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use policy_kernel::{config, kernel::Kernel, server, telemetry};
use support::extproc::{self, Stream};
use support::*;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";

fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_group_chain_span_tree() {
    let exporter = InMemorySpanExporter::default();
    // Rate 0: only requests whose caller sampled them are traced.
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .with_sampler(telemetry::tracing::sampler(0.0))
        .build();
    telemetry::tracing::install(provider);

    let dir = workdir();
    let a1 = TestAgent::start(
        dir.path(),
        "agent1",
        "policies:\n  - name: first\n    request:\n      - set_header: {name: x-a1, value: one}\n  - name: last\n    request:\n      - set_header: {name: x-a1, value: two}\n",
    );
    let a2 = TestAgent::start(
        dir.path(),
        "agent2",
        "policies:\n  - name: middle\n    request:\n      - set_header: {name: x-traceparent, value: \"${traceparent}\"}\n",
    );
    let socket = dir.path().join("kernel.sock");
    let cfg = config::parse(&format!(
        "policy_kernel:\n  agents:\n{}{}  route_policies:\n    - route_name: chain\n      request_policy_chain: [{{policy: first}}, {{policy: middle}}, {{policy: last}}]\n",
        agent_entry("agent1", &a1, ""),
        agent_entry("agent2", &a2, "")
    ))
    .expect("config");
    let kernel = Kernel::start(cfg).await;
    let listeners = server::Listeners::bind(Some("127.0.0.1:0".parse().unwrap()), Some(&socket))
        .await
        .expect("bind");
    tokio::spawn(server::serve(kernel, listeners, std::future::pending()));

    let mut client = extproc::connect(&socket).await;
    // Not sampled by the caller, rate 0: no spans.
    let mut s = Stream::open(&mut client, None).await;
    s.exchange(extproc::request_headers(Some("chain"), &[])).await;
    drop(s);
    // Sampled by the caller: the kernel's spans join its trace.
    let traceparent = format!("00-{TRACE_ID}-{PARENT_ID}-01");
    let mut s = Stream::open(&mut client, None).await;
    let r = s
        .exchange(extproc::request_headers(
            Some("chain"),
            &[("traceparent", &traceparent)],
        ))
        .await;
    s.exchange(extproc::response_headers(200)).await;
    drop(s);

    let deadline = Instant::now() + Duration::from_secs(5);
    let spans = loop {
        let spans = exporter.get_finished_spans().expect("spans");
        if spans.iter().any(|s| s.name == "kernel.process_request") {
            break spans;
        }
        assert!(
            Instant::now() < deadline,
            "no root span exported: {:?}",
            spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let by_name: HashMap<&str, &SpanData> = spans.iter().map(|s| (s.name.as_ref(), s)).collect();
    let id = |name: &str| {
        by_name
            .get(name)
            .unwrap_or_else(|| panic!("span {name} missing; have {:?}", by_name.keys()))
            .span_context
            .span_id()
    };
    let parent = |name: &str| by_name[name].parent_span_id;

    assert_eq!(spans.len(), 12, "exactly one traced request: {:?}", by_name.keys());
    for s in &spans {
        assert_eq!(
            s.span_context.trace_id().to_string(),
            TRACE_ID,
            "{} is in another trace",
            s.name
        );
    }
    let root = id("kernel.process_request");
    assert_eq!(parent("kernel.process_request"), SpanId::from_hex(PARENT_ID).unwrap());
    for child in [
        "kernel.route_lookup",
        "kernel.create_execution_plan",
        "kernel.execute_policy_chain",
        "kernel.aggregate_responses",
        "kernel.response_conversion",
    ] {
        assert_eq!(parent(child), root, "{child} is not a child of the root");
    }
    let chain = id("kernel.execute_policy_chain");
    for n in 1..=3 {
        assert_eq!(parent(&format!("kernel.agent_call.{n}")), chain);
        assert_eq!(parent(&format!("kernel.context_update.{n}")), chain);
        assert_eq!(
            attr(by_name[format!("kernel.agent_call.{n}").as_str()], "group.index").as_deref(),
            Some(n.to_string().as_str())
        );
    }
    assert_eq!(
        attr(by_name["kernel.agent_call.1"], "agent.name").as_deref(),
        Some("agent1")
    );
    assert_eq!(
        attr(by_name["kernel.agent_call.2"], "agent.name").as_deref(),
        Some("agent2")
    );
    assert_eq!(
        attr(by_name["kernel.agent_call.3"], "agent.name").as_deref(),
        Some("agent1")
    );
    assert_eq!(
        attr(by_name["kernel.agent_call.2"], "policies").as_deref(),
        Some("[\"middle\"]")
    );
    let plan = by_name["kernel.create_execution_plan"];
    assert_eq!(attr(plan, "total.policies").as_deref(), Some("3"));
    assert_eq!(attr(plan, "total.agents").as_deref(), Some("2"));
    assert_eq!(attr(plan, "execution.groups").as_deref(), Some("3"));
    let rootspan = by_name["kernel.process_request"];
    assert_eq!(attr(rootspan, "route.name").as_deref(), Some("chain"));
    assert_eq!(attr(rootspan, "execution.mode").as_deref(), Some("multi-agent"));
    assert_eq!(attr(rootspan, "agent.count").as_deref(), Some("2"));
    assert_eq!(attr(rootspan, "partial.failure").as_deref(), Some("false"));
    assert_eq!(
        attr(by_name["kernel.aggregate_responses"], "response.count").as_deref(),
        Some("3")
    );
    assert_eq!(
        attr(by_name["kernel.aggregate_responses"], "conflicts.detected").as_deref(),
        Some("1")
    );

    // The agent received the trace context of its own call span.
    let Some(Response::RequestHeaders(h)) = &r.response else {
        panic!("not a headers answer: {r:?}")
    };
    let seen = h
        .response
        .as_ref()
        .and_then(|c| c.header_mutation.as_ref())
        .and_then(|m| {
            m.set_headers
                .iter()
                .filter_map(|o| o.header.as_ref())
                .find(|h| h.key == "x-traceparent")
                .map(|h| String::from_utf8_lossy(&h.raw_value).into_owned())
        });
    assert_eq!(seen, Some(format!("00-{TRACE_ID}-{}-01", id("kernel.agent_call.2"))));
}
