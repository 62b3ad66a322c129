//! Criterion micro-benchmarks of the kernel's hot path, without any process
//! or socket: snapshots are built against fake discovered agents, the way
//! `src/plan/tests.rs` does.
//!
//! - `route_lookup`: the per-stream `ArcSwap<Snapshot>` load (`load_full`,
//!   as `Kernel::snapshot` does) plus the route `HashMap` get and `Arc` clone,
//!   in a snapshot of 100 routes.
//! - `plan/{N}p_{A}a`: two-stage validation plus planning (`plan_route`) of a
//!   route with N policies in each phase over A agents; policy i is declared
//!   by agents i mod A and (i+1) mod A, so grouping has real choices to make.
//! - `aggregate/50_instructions`: checking a 50-instruction agent reply
//!   (`convert_request_reply`) and applying it to a `RequestCtx` of 15
//!   headers (`RequestCtx::apply`, the merge into `Mutations`).
//! - `translate/*`: merged mutations to the Envoy `ProcessingResponse`
//!   (`common` + `respond` + dynamic metadata), and that plus protobuf encoding.
//! - `query_rewrite`: parse a `:path`, set and remove query parameters, print.
//! - `session/k0_unknown_route`: a whole K0 stream inside the process
//!   (`Session::handle` of request headers and response headers for a route
//!   the configuration does not list), with no subscriber installed for logs.
//!
//! Run: `cargo bench --bench hot_path` (about a minute), or the same suite
//! as the workspace's release binary `pk-micro --bench` (what `make bench`
//! runs: built with the other release binaries, with their features, so no
//! second build with the test-only features of the kernel's dev-dependencies).

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use criterion::{criterion_group, BatchSize, BenchmarkId, Criterion};
use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue};
use envoy_types::pb::envoy::service::ext_proc::v3::{processing_request::Request, HttpHeaders, ProcessingRequest};
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
use policy_kernel::aggregate::{convert_request_reply, Metadata, Mutations, RequestCtx};
use policy_kernel::envoy::translate::{common, dynamic_metadata, respond, Answer};
use policy_kernel::http::PathAndQuery;
use policy_kernel::plan::plan_route;
use policy_kernel::proto::{self, request_instruction::Instruction as Rq, PolicyInfo, PolicyPhase};
use policy_kernel::registry::{AgentHandle, Discovered};
use policy_kernel::snapshot::Snapshot;
use prost::Message;

/// A kernel configuration with `agents` agents and the given routes YAML.
fn config_text(agents: usize, routes: &str) -> String {
    let agent_yaml: String = (0..agents)
        .map(|i| format!("    - name: agent{i}\n      socket_path: /nonexistent/agent{i}.sock\n"))
        .collect();
    format!("policy_kernel:\n  agents:\n{agent_yaml}  route_policies:\n{routes}")
}

/// A snapshot whose agents are discovered (declaring `declares[i]`) and
/// healthy, without any process behind them.
fn snapshot(routes: &str, declares: &[Vec<String>]) -> Snapshot {
    let cfg = policy_kernel::config::parse(&config_text(declares.len(), routes)).expect("bench config");
    let agents: Vec<Arc<AgentHandle>> = cfg
        .agents
        .iter()
        .zip(declares)
        .map(|(c, policies)| {
            let a = AgentHandle::new(c.clone());
            a.set_discovered(Discovered {
                call_stream: false,
                agent_name: c.name.clone(),
                agent_version: "bench".into(),
                policies: policies
                    .iter()
                    .map(|p| {
                        let info = PolicyInfo {
                            name: p.clone(),
                            param_schema: vec!["k".into()],
                            supported_phases: PolicyPhase::RequestResponse as i32,
                            ..Default::default()
                        };
                        (p.clone(), info)
                    })
                    .collect(),
            });
            a.set_healthy(true);
            a
        })
        .collect();
    Snapshot::build(Arc::new(cfg), agents, 1)
}

fn chain_yaml(name: &str, policies: usize) -> String {
    let entries = |prefix: &str| -> String {
        (0..policies)
            .map(|i| format!("        - policy: {prefix}{i}\n          params: {{k: {i}}}\n"))
            .collect()
    };
    format!(
        "    - route_name: {name}\n      request_policy_chain:\n{}      response_policy_chain:\n{}",
        entries("p"),
        entries("p")
    )
}

fn route_lookup(c: &mut Criterion) {
    let routes: String = (0..100).map(|i| chain_yaml(&format!("/api/v1/route{i}"), 1)).collect();
    let snap = snapshot(&routes, &[vec!["p0".into()]]);
    let swap = ArcSwap::from_pointee(snap);
    let mut g = c.benchmark_group("route_lookup");
    g.bench_function("hit", |b| {
        b.iter(|| {
            let s = swap.load_full();
            black_box(s.routes.get(black_box("/api/v1/route42")).cloned())
        })
    });
    g.bench_function("miss", |b| {
        b.iter(|| {
            let s = swap.load_full();
            black_box(s.routes.get(black_box("/unknown/route")).cloned())
        })
    });
    g.finish();
}

fn plan(c: &mut Criterion) {
    let mut g = c.benchmark_group("plan");
    for policies in [1usize, 3, 10] {
        for agents in [1usize, 2, 3] {
            let mut declares = vec![Vec::new(); agents];
            for i in 0..policies {
                declares[i % agents].push(format!("p{i}"));
                if agents > 1 {
                    declares[(i + 1) % agents].push(format!("p{i}"));
                }
            }
            let snap = snapshot(&chain_yaml("r", policies), &declares);
            let route = Arc::clone(&snap.routes["r"]);
            let mut rr = 0usize;
            g.bench_function(BenchmarkId::from_parameter(format!("{policies}p_{agents}a")), |b| {
                b.iter(|| {
                    rr = rr.wrapping_add(1);
                    black_box(plan_route(&route, &snap.agents, rr).expect("plannable"))
                })
            });
        }
    }
    g.finish();
}

fn request_ctx() -> RequestCtx {
    let headers = [
        (
            "user-agent",
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/126.0",
        ),
        ("accept", "application/json, text/plain, */*"),
        ("accept-encoding", "gzip, deflate, br"),
        ("accept-language", "en-US,en;q=0.9"),
        (
            "authorization",
            "Bearer eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NSJ9.c2ln",
        ),
        ("x-api-key", "k_live_4f9a8b7c6d5e4f3a2b1c0d9e"),
        ("cookie", "session=8b1f4c2a9e7d4b3c; theme=dark"),
        ("x-forwarded-for", "203.0.113.7"),
        ("x-forwarded-proto", "https"),
        ("x-request-id", "6f1c2a9e-7d4b-4c3a-9e8b-1f4c2a9e7d4b"),
        ("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
    ];
    RequestCtx {
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), bytes::Bytes::from_static(v.as_bytes())))
            .collect(),
        method: "GET".into(),
        path: "/api/v1/users/12345/orders?limit=20&offset=40&sort=created_at".into(),
        scheme: "https".into(),
        authority: "api.example.com".into(),
        client_ip: "203.0.113.7".into(),
        request_id: "6f1c2a9e-7d4b-4c3a-9e8b-1f4c2a9e7d4b".into(),
        body: None,
    }
}

/// An agent reply of 50 instructions of the kinds policies send.
fn reply_50(id: &str) -> proto::PolicyRequestResponse {
    let instructions = (0..50)
        .map(|i| {
            let instruction = match i % 5 {
                0 => Rq::SetHeader(proto::SetHeader {
                    name: format!("X-Policy-{}", i % 17),
                    value: format!("value-{i}"),
                }),
                1 => Rq::AppendHeader(proto::AppendHeader {
                    name: "x-trace-tags".into(),
                    value: format!("tag{i}"),
                }),
                2 => Rq::RemoveHeader(proto::RemoveHeader {
                    name: if i % 2 == 0 {
                        "cookie".into()
                    } else {
                        "x-api-key".into()
                    },
                }),
                3 => Rq::SetQueryParam(proto::SetQueryParam {
                    name: format!("q{}", i % 4),
                    value: format!("v {i}&x"),
                }),
                _ => Rq::SetMetadata(proto::SetMetadata {
                    key: format!("m{}", i % 7),
                    value: format!("{i}"),
                }),
            };
            proto::RequestInstruction {
                instruction: Some(instruction),
            }
        })
        .collect();
    proto::PolicyRequestResponse {
        request_id: id.into(),
        instructions,
        message: String::new(),
        policy_metadata: HashMap::from([("user".into(), "12345".into())]),
        cache_max_age_ms: None,
    }
}

fn aggregate(c: &mut Criterion) {
    let ctx = request_ctx();
    let reply = reply_50(&ctx.request_id);
    let mut g = c.benchmark_group("aggregate");
    g.bench_function("50_instructions", |b| {
        b.iter_batched(
            || (reply.clone(), ctx.clone()),
            |(reply, mut ctx)| {
                let checked = convert_request_reply(&ctx.request_id, reply).expect("valid reply");
                let mut muts = Mutations::default();
                let mut meta = Metadata::new();
                let next = ctx.apply(&checked, &mut muts, &mut meta, 0);
                black_box((next, muts, meta, ctx))
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn translate(c: &mut Criterion) {
    let mut ctx = request_ctx();
    let checked = convert_request_reply(&ctx.request_id.clone(), reply_50(&ctx.request_id)).expect("valid reply");
    let mut muts = Mutations::default();
    let mut meta = Metadata::new();
    ctx.apply(&checked, &mut muts, &mut meta, 0);
    let mut g = c.benchmark_group("translate");
    g.bench_function("mutations_to_processing_response", |b| {
        b.iter(|| {
            let mut resp = respond(
                Answer::RequestHeaders,
                Some(common(black_box(&muts), Answer::RequestHeaders)),
            );
            resp.dynamic_metadata = Some(dynamic_metadata("/api/v1/users", &meta));
            black_box(resp)
        })
    });
    g.bench_function("plus_protobuf_encode", |b| {
        b.iter(|| {
            let mut resp = respond(
                Answer::RequestHeaders,
                Some(common(black_box(&muts), Answer::RequestHeaders)),
            );
            resp.dynamic_metadata = Some(dynamic_metadata("/api/v1/users", &meta));
            black_box(resp.encode_to_vec())
        })
    });
    g.bench_function("plain_continue", |b| {
        b.iter(|| {
            let mut resp = respond(Answer::ResponseHeaders, None);
            resp.dynamic_metadata = Some(dynamic_metadata("/api/v1/users", &Metadata::new()));
            black_box(resp.encode_to_vec())
        })
    });
    g.finish();
}

fn query_rewrite(c: &mut Criterion) {
    c.bench_function("query_rewrite", |b| {
        b.iter(|| {
            let mut p = PathAndQuery::parse(black_box(
                "/api/v1/users/12345/orders?limit=20&offset=40&sort=created_at&q=a%20b&debug=1",
            ));
            p.set_param("limit", "50");
            p.set_param("tenant", "acme corp&co");
            p.remove_param("debug");
            black_box(p.to_path())
        })
    });
}

fn envoy_headers(pairs: &[(&str, &str)], end_of_stream: bool) -> HttpHeaders {
    HttpHeaders {
        headers: Some(HeaderMap {
            headers: pairs
                .iter()
                .map(|(k, v)| HeaderValue {
                    key: k.to_string(),
                    value: String::new(),
                    raw_value: v.as_bytes().to_vec(),
                })
                .collect(),
        }),
        end_of_stream,
        ..Default::default()
    }
}

fn session(c: &mut Criterion) {
    use policy_kernel::envoy::session::Session;
    use policy_kernel::kernel::Kernel;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let cfg = policy_kernel::config::parse(&config_text(0, "    - route_name: k1\n")).expect("bench config");
    let kernel = rt.block_on(Kernel::start(cfg));
    let request_headers = {
        let mut attrs = Struct::default();
        attrs.fields.insert(
            "xds.route_name".into(),
            Value {
                kind: Some(Kind::StringValue("k0-unknown".into())),
            },
        );
        let ctx = request_ctx();
        let mut pairs: Vec<(&str, &str)> = vec![
            (":authority", "api.example.com"),
            (":path", "/api/v1/users/12345/orders?limit=20"),
            (":method", "GET"),
            (":scheme", "https"),
        ];
        for (k, v) in &ctx.headers {
            pairs.push((k.as_str(), std::str::from_utf8(v).unwrap_or("")));
        }
        ProcessingRequest {
            request: Some(Request::RequestHeaders(envoy_headers(&pairs, true))),
            attributes: HashMap::from([("envoy.filters.http.ext_proc".to_string(), attrs)]),
            ..Default::default()
        }
    };
    let response_headers = ProcessingRequest {
        request: Some(Request::ResponseHeaders(envoy_headers(
            &[(":status", "200"), ("content-type", "application/json")],
            false,
        ))),
        ..Default::default()
    };
    let mut g = c.benchmark_group("session");
    g.bench_function("k0_unknown_route", |b| {
        b.iter_batched(
            || (request_headers.clone(), response_headers.clone()),
            |(rq, rs)| {
                rt.block_on(async {
                    let mut s = Session::new(Arc::clone(&kernel), None, kernel.try_stream());
                    let a = s.handle(rq).await;
                    let b = s.handle(rs).await;
                    black_box((a, b))
                })
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

/// The decision cache: a key of one policy on one header and the path, a
/// hit, and the insert of a new entry (a miss's cost besides the call).
fn decision_cache(c: &mut Criterion) {
    use policy_kernel::decisions::{key, CacheSpec, DecisionCache};
    let ctx = request_ctx();
    let meta = policy_kernel::aggregate::Metadata::new();
    let decl = proto::DecisionCache {
        max_age_ms: 60_000,
        headers: vec!["x-api-key".into(), ":path".into()],
        ..Default::default()
    };
    let spec = CacheSpec::resolve(Some(&decl), &Default::default())
        .ok()
        .flatten()
        .expect("a valid declaration");
    let wire = b"\n\napiKeyAuth";
    let scope = key::Scope {
        version: 1,
        route: "users",
        agent: 0,
        epoch: 1,
    };
    let reply = policy_kernel::aggregate::Reply {
        instructions: vec![],
        metadata: vec![("consumer".into(), "alice".into())],
        cache_max_age_ms: None,
    };
    let cache = DecisionCache::new(&Default::default());
    let k = key::key(scope, std::iter::once((&wire[..], &spec)), &ctx, &meta).expect("a key");
    cache.put(k, reply.clone(), Duration::from_secs(60));
    let mut g = c.benchmark_group("decision_cache");
    g.bench_function("key", |b| {
        b.iter(|| key::key(scope, std::iter::once((&wire[..], &spec)), &ctx, &meta))
    });
    g.bench_function("hit", |b| b.iter(|| cache.get(&k)));
    let mut n = 0u64;
    g.bench_function("insert_new", |b| {
        b.iter(|| {
            n += 1;
            let mut key = [0u8; 32];
            key[..8].copy_from_slice(&n.to_le_bytes());
            cache.put(key, reply.clone(), Duration::from_secs(60));
        })
    });
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
}

criterion_group! {
    name = benches;
    config = config();
    targets = route_lookup, plan, aggregate, translate, query_rewrite, session, decision_cache
}
