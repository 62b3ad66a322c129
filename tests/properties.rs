//! Property tests: whatever agents reply, only mutations Envoy accepts come
//! out; path and query rewrites round-trip; the config loader never panics.

use bytes::Bytes;
use policy_kernel::aggregate::{
    convert_request_reply, convert_response_reply, Metadata, Mutations, RequestCtx, ResponseCtx,
};
use policy_kernel::envoy::translate::{check_envoy_accepts, common, Answer};
use policy_kernel::http::{parse_query, split_path, PathAndQuery};
use policy_kernel::proto::{self, request_instruction::Instruction as Rq, response_instruction::Instruction as Rs};
use proptest::prelude::*;

/// Strings that mix legal tokens with every troublesome byte.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9-]{0,8}",
        "[ -~]{0,10}",
        "[a-z]{0,3}[\r\n\0:/?&=% ]{1,3}[a-z]{0,3}",
        Just(":path".to_string()),
        Just("host".to_string()),
        Just("content-length".to_string()),
        Just("/a?x=1".to_string()),
    ]
}

fn request_instruction() -> impl Strategy<Value = Rq> {
    prop_oneof![
        (text(), text()).prop_map(|(name, value)| Rq::SetHeader(proto::SetHeader { name, value })),
        (text(), text()).prop_map(|(name, value)| Rq::AppendHeader(proto::AppendHeader { name, value })),
        text().prop_map(|name| Rq::RemoveHeader(proto::RemoveHeader { name })),
        (text(), text()).prop_map(|(b, content_type)| Rq::SetBody(proto::SetBody {
            body: Bytes::from(b),
            content_type
        })),
        text().prop_map(|path| Rq::SetPath(proto::SetPath { path })),
        (text(), text()).prop_map(|(name, value)| Rq::SetQueryParam(proto::SetQueryParam { name, value })),
        text().prop_map(|name| Rq::RemoveQueryParam(proto::RemoveQueryParam { name })),
        text().prop_map(|method| Rq::SetMethod(proto::SetMethod { method })),
        (any::<i32>(), text()).prop_map(|(status_code, reason)| Rq::ImmediateResponse(proto::ImmediateResponse {
            status_code,
            reason,
            ..Default::default()
        })),
        (text(), text()).prop_map(|(key, value)| Rq::SetMetadata(proto::SetMetadata { key, value })),
        Just(Rq::SkipRemainingPolicies(proto::SkipRemainingPolicies::default())),
    ]
}

fn response_instruction() -> impl Strategy<Value = Rs> {
    prop_oneof![
        (text(), text()).prop_map(|(name, value)| Rs::SetHeader(proto::SetHeader { name, value })),
        (text(), text()).prop_map(|(name, value)| Rs::AppendHeader(proto::AppendHeader { name, value })),
        text().prop_map(|name| Rs::RemoveHeader(proto::RemoveHeader { name })),
        (text(), text()).prop_map(|(b, content_type)| Rs::SetBody(proto::SetBody {
            body: Bytes::from(b),
            content_type
        })),
        prop_oneof![any::<i32>(), 100i32..700]
            .prop_map(|status_code| Rs::SetStatusCode(proto::SetStatusCode { status_code })),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn request_replies_yield_only_mutations_envoy_accepts(replies in prop::collection::vec(prop::collection::vec(request_instruction(), 0..8), 1..4)) {
        let mut ctx = RequestCtx { path: "/start?a=1".into(), method: "GET".into(), request_id: "r".into(), ..Default::default() };
        let mut muts = Mutations::default();
        let mut meta = Metadata::new();
        for (n, instrs) in replies.into_iter().enumerate() {
            let reply = proto::PolicyRequestResponse {
                request_id: "r".into(),
                instructions: instrs.into_iter().map(|i| proto::RequestInstruction { instruction: Some(i) }).collect(),
                ..Default::default()
            };
            // A refused reply changes nothing; an accepted one is applied.
            if let Ok(r) = convert_request_reply("r", reply) {
                ctx.apply(&r, &mut muts, &mut meta, n);
            }
        }
        for answer in [Answer::RequestHeaders, Answer::RequestBody] {
            if let Err(e) = check_envoy_accepts(&common(&muts, answer), false) {
                panic!("Envoy would refuse: {e}");
            }
        }
    }

    #[test]
    fn response_replies_yield_only_mutations_envoy_accepts(replies in prop::collection::vec(prop::collection::vec(response_instruction(), 0..8), 1..4)) {
        let mut ctx = ResponseCtx { status: 200, ..Default::default() };
        let mut muts = Mutations::default();
        let mut meta = Metadata::new();
        for (n, instrs) in replies.into_iter().enumerate() {
            let reply = proto::PolicyResponseResponse {
                request_id: "r".into(),
                instructions: instrs.into_iter().map(|i| proto::ResponseInstruction { instruction: Some(i) }).collect(),
                ..Default::default()
            };
            if let Ok(r) = convert_response_reply("r", reply) {
                ctx.apply(&r, &mut muts, &mut meta, n);
            }
        }
        if let Err(e) = check_envoy_accepts(&common(&muts, Answer::ResponseHeaders), true) {
            panic!("Envoy would refuse: {e}");
        }
    }

    #[test]
    fn query_parameters_round_trip(pairs in prop::collection::vec(("[^\u{0}]{1,8}", ".{0,8}"), 1..6), start in "/[a-z/]{0,8}(\\?[a-z]=[a-z0-9]{1,3}(&[a-z]=[a-z0-9]{1,3}){0,3})?") {
        let mut pq = PathAndQuery::parse(&start);
        let mut expected: Vec<(String, String)> = Vec::new();
        for (k, v) in &pairs {
            pq.set_param(k, v);
            expected.retain(|(ek, _)| ek != k);
            expected.push((k.clone(), v.clone()));
        }
        let out = pq.to_path();
        let (path, query) = split_path(&out);
        prop_assert_eq!(path, split_path(&start).0);
        let parsed = parse_query(query.unwrap_or(""));
        for (k, v) in &expected {
            let got: Vec<&String> = parsed.iter().filter(|(pk, _)| pk == k).map(|(_, pv)| pv).collect();
            prop_assert_eq!(got, vec![v], "param {:?} in {:?}", k, out);
        }
    }

    #[test]
    fn set_path_keeps_the_query_and_round_trips(p in "/[a-zA-Z0-9._~/-]{0,20}", start in "/[a-z]{0,5}\\?q=[a-z]{1,3}") {
        let mut pq = PathAndQuery::parse(&start);
        pq.set_path(&p);
        let out = pq.to_path();
        prop_assert_eq!(split_path(&out).0, p.as_str());
        prop_assert_eq!(split_path(&out).1, split_path(&start).1);
        prop_assert_eq!(PathAndQuery::parse(&out).to_path(), out.clone());
    }

    #[test]
    fn config_loader_never_panics_on_any_text(text in "\\PC{0,300}") {
        let _ = policy_kernel::config::parse(&text);
    }

    #[test]
    fn config_loader_never_panics_on_config_shaped_yaml(
        keys in prop::collection::vec(prop_oneof![
            Just("server"), Just("agents"), Just("route_policies"), Just("timeout_ms"), Just("name"),
            Just("socket_path"), Just("policy"), Just("params"), Just("on_failure"), Just("status_code"),
            Just("headers"), Just("retry"), Just("max_attempts"), Just("route_name"), Just("request_policy_chain"),
        ], 1..12),
        values in prop::collection::vec(prop_oneof![
            Just("1".to_string()), Just("-1".to_string()), Just("99999999999999999999".to_string()), Just("[]".to_string()),
            Just("{}".to_string()), Just("null".to_string()), Just("\"x\"".to_string()), Just("[{policy: p}]".to_string()),
            Just("!!binary AAAA".to_string()), Just("&a [*a]".to_string()), "[a-z ]{0,6}".prop_map(|s| s),
        ], 12),
        indents in prop::collection::vec(0usize..4, 12),
    ) {
        let mut text = String::from("policy_kernel:\n");
        for (i, k) in keys.iter().enumerate() {
            let pad = "  ".repeat(indents[i] + 1);
            let dash = if indents[i] % 2 == 1 { "- " } else { "" };
            text.push_str(&format!("{pad}{dash}{k}: {}\n", values[i]));
        }
        let _ = policy_kernel::config::parse(&text);
    }
}
