use super::*;
use crate::proto::{self, request_instruction::Instruction as Rq, response_instruction::Instruction as Rs};

fn rq(i: Rq) -> proto::RequestInstruction {
    proto::RequestInstruction { instruction: Some(i) }
}
fn set(n: &str, v: &str) -> Rq {
    Rq::SetHeader(proto::SetHeader {
        name: n.into(),
        value: v.into(),
    })
}
fn reply(id: &str, instrs: Vec<Rq>) -> proto::PolicyRequestResponse {
    proto::PolicyRequestResponse {
        request_id: id.into(),
        instructions: instrs.into_iter().map(rq).collect(),
        ..Default::default()
    }
}
fn ctx() -> RequestCtx {
    RequestCtx {
        headers: vec![("x-old".into(), Bytes::from_static(b"1"))],
        method: "GET".into(),
        path: "/a?x=1&debug=true".into(),
        request_id: "r1".into(),
        ..Default::default()
    }
}
fn apply_all(replies: Vec<Vec<Rq>>) -> (RequestCtx, Mutations, Metadata, Next) {
    let mut c = ctx();
    let mut m = Mutations::default();
    let mut meta = Metadata::new();
    let mut next = Next::Continue;
    for (n, r) in replies.into_iter().enumerate() {
        let checked = convert_request_reply("r1", reply("r1", r)).unwrap();
        next = c.apply(&checked, &mut m, &mut meta, n);
        if next != Next::Continue {
            break;
        }
    }
    (c, m, meta, next)
}

#[test]
fn last_set_wins_across_agents_and_is_a_conflict() {
    let (c, m, _, _) = apply_all(vec![vec![set("X-User-ID", "123")], vec![set("x-user-id", "456")]]);
    assert_eq!(
        m.headers,
        vec![("x-user-id".to_string(), HeaderOp::Set(vec![Bytes::from("456")]), 1)]
    );
    assert_eq!(m.conflicts.header, 1);
    assert!(c.headers.contains(&("x-user-id".into(), Bytes::from("456"))));
}

#[test]
fn remove_after_set_removes_and_set_after_remove_sets() {
    let rm = |n: &str| Rq::RemoveHeader(proto::RemoveHeader { name: n.into() });
    let (c, m, _, _) = apply_all(vec![vec![set("a", "1"), rm("a")]]);
    assert_eq!(m.headers, vec![("a".to_string(), HeaderOp::Remove, 0)]);
    assert!(!c.headers.iter().any(|(n, _)| n == "a"));
    let (_, m, _, _) = apply_all(vec![vec![rm("x-old")], vec![set("x-old", "2")]]);
    assert_eq!(m.headers[0].1, HeaderOp::Set(vec![Bytes::from("2")]));
}

#[test]
fn append_adds_values() {
    let app = |n: &str, v: &str| {
        Rq::AppendHeader(proto::AppendHeader {
            name: n.into(),
            value: v.into(),
        })
    };
    let (c, m, _, _) = apply_all(vec![vec![app("set-cookie", "a=1")], vec![app("set-cookie", "b=2")]]);
    assert_eq!(
        m.headers[0].1,
        HeaderOp::Append(vec![Bytes::from("a=1"), Bytes::from("b=2")])
    );
    assert_eq!(c.headers.iter().filter(|(n, _)| n == "set-cookie").count(), 2);
    let (_, m, _, _) = apply_all(vec![vec![set("v", "1"), app("v", "2")]]);
    assert_eq!(m.headers[0].1, HeaderOp::Set(vec![Bytes::from("1"), Bytes::from("2")]));
}

#[test]
fn path_query_and_method_rewrite_propagate_to_context() {
    let (c, m, _, _) = apply_all(vec![
        vec![Rq::SetPath(proto::SetPath { path: "/v2/a".into() })],
        vec![
            Rq::SetQueryParam(proto::SetQueryParam {
                name: "user".into(),
                value: "a b".into(),
            }),
            Rq::RemoveQueryParam(proto::RemoveQueryParam { name: "debug".into() }),
            Rq::SetMethod(proto::SetMethod { method: "POST".into() }),
        ],
    ]);
    assert_eq!(c.path, "/v2/a?x=1&user=a%20b");
    assert_eq!(m.path.as_ref().unwrap().0.to_path(), "/v2/a?x=1&user=a%20b");
    assert_eq!(c.method, "POST");
    assert_eq!(c.to_proto().query_params.unwrap().params["user"], "a b");
}

#[test]
fn body_sets_length_and_type_in_context() {
    let body = Rq::SetBody(proto::SetBody {
        body: Bytes::from("hello"),
        content_type: "text/plain".into(),
    });
    let (c, m, _, _) = apply_all(vec![vec![body]]);
    assert_eq!(c.body.as_deref(), Some(&b"hello"[..]));
    assert!(c.headers.contains(&("content-length".into(), Bytes::from("5"))));
    assert!(m
        .headers
        .iter()
        .any(|(n, op, _)| n == "content-type" && *op == HeaderOp::Set(vec![Bytes::from("text/plain")])));
}

#[test]
fn metadata_accumulates_and_immediate_short_circuits() {
    let meta = |k: &str, v: &str| {
        Rq::SetMetadata(proto::SetMetadata {
            key: k.into(),
            value: v.into(),
        })
    };
    let deny = Rq::ImmediateResponse(proto::ImmediateResponse {
        status_code: 401,
        reason: "auth".into(),
        ..Default::default()
    });
    let (_, m, md, next) = apply_all(vec![
        vec![meta("user", "1"), set("a", "1")],
        vec![meta("tier", "gold"), deny, set("b", "2")],
        vec![set("c", "3")],
    ]);
    assert_eq!(md.get("user").map(String::as_str), Some("1"));
    assert_eq!(md.get("tier").map(String::as_str), Some("gold"));
    assert!(matches!(next, Next::Immediate(ref i) if i.status == 401 && i.reason == "auth"));
    assert!(!m.headers.iter().any(|(n, _, _)| n == "b" || n == "c"));
}

#[test]
fn skip_keeps_the_reply_and_stops() {
    let skip = Rq::SkipRemainingPolicies(proto::SkipRemainingPolicies {
        reason: "trusted".into(),
    });
    let (_, m, _, next) = apply_all(vec![vec![set("a", "1"), skip, set("b", "2")], vec![set("c", "3")]]);
    assert_eq!(next, Next::Skip);
    let names: Vec<&str> = m.headers.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names, vec!["a", "b"]);
}

#[test]
fn composition_rules_first_control_flow_wins() {
    let imm = |s| {
        Rq::ImmediateResponse(proto::ImmediateResponse {
            status_code: s,
            ..Default::default()
        })
    };
    let r = convert_request_reply(
        "r1",
        reply(
            "r1",
            vec![imm(401), imm(403), Rq::SkipRemainingPolicies(Default::default())],
        ),
    )
    .unwrap();
    assert_eq!(r.instructions.len(), 1);
    let r = convert_request_reply(
        "r1",
        reply(
            "r1",
            vec![
                Rq::Continue(Default::default()),
                Rq::SkipRemainingPolicies(Default::default()),
                Rq::SkipRemainingPolicies(Default::default()),
            ],
        ),
    )
    .unwrap();
    assert_eq!(r.instructions, vec![Instr::Skip]);
}

#[test]
fn invalid_replies_are_refused() {
    let bad = |instrs: Vec<Rq>| convert_request_reply("r1", reply("r1", instrs)).unwrap_err();
    assert!(matches!(
        convert_request_reply("r1", reply("r2", vec![])),
        Err(InvalidReply::RequestId { .. })
    ));
    assert!(matches!(
        convert_request_reply("r1", reply("", vec![])),
        Err(InvalidReply::RequestId { .. })
    ));
    assert!(matches!(bad(vec![set("x", "a\r\nb")]), InvalidReply::HeaderValue(_)));
    assert!(matches!(bad(vec![set("x", "a\0")]), InvalidReply::HeaderValue(_)));
    assert!(matches!(bad(vec![set("", "v")]), InvalidReply::HeaderName(_)));
    assert!(matches!(bad(vec![set("bad name", "v")]), InvalidReply::HeaderName(_)));
    assert!(matches!(bad(vec![set(":path", "/x")]), InvalidReply::HeaderName(_)));
    assert!(matches!(
        bad(vec![set("content-length", "1")]),
        InvalidReply::HeaderName(_)
    ));
    assert!(matches!(
        bad(vec![Rq::RemoveHeader(proto::RemoveHeader { name: "Host".into() })]),
        InvalidReply::Unremovable(_)
    ));
    assert!(matches!(
        bad(vec![Rq::ImmediateResponse(proto::ImmediateResponse {
            status_code: 199,
            ..Default::default()
        })]),
        InvalidReply::Status(199)
    ));
    assert!(matches!(
        bad(vec![Rq::ImmediateResponse(proto::ImmediateResponse {
            status_code: 600,
            ..Default::default()
        })]),
        InvalidReply::Status(600)
    ));
    assert!(matches!(
        bad(vec![Rq::SetPath(proto::SetPath { path: "nope".into() })]),
        InvalidReply::Path(_)
    ));
    assert!(matches!(
        bad(vec![Rq::SetPath(proto::SetPath { path: "/a\r\n".into() })]),
        InvalidReply::Path(_)
    ));
    assert!(matches!(
        bad(vec![Rq::SetMethod(proto::SetMethod { method: "GE T".into() })]),
        InvalidReply::Method(_)
    ));
    let empty = proto::PolicyRequestResponse {
        request_id: "r1".into(),
        instructions: vec![proto::RequestInstruction { instruction: None }],
        ..Default::default()
    };
    assert!(matches!(convert_request_reply("r1", empty), Err(InvalidReply::Empty)));
}

#[test]
fn response_status_is_checked_and_applied() {
    let rs = |s| proto::PolicyResponseResponse {
        request_id: "r1".into(),
        instructions: vec![proto::ResponseInstruction {
            instruction: Some(Rs::SetStatusCode(proto::SetStatusCode { status_code: s })),
        }],
        ..Default::default()
    };
    assert!(matches!(
        convert_response_reply("r1", rs(700)),
        Err(InvalidReply::Status(700))
    ));
    let r = convert_response_reply("r1", rs(418)).unwrap();
    let mut resp = ResponseCtx {
        status: 200,
        ..Default::default()
    };
    let mut m = Mutations::default();
    resp.apply(&r, &mut m, &mut Metadata::new(), 0);
    assert_eq!(resp.status, 418);
    assert_eq!(m.status, Some((418, 0)));
}

#[test]
fn non_utf8_header_values_travel_as_raw_value() {
    let h = context::headers_to_proto(&[("x".into(), Bytes::from_static(&[0xff, 0x41]))]);
    assert_eq!(h.headers[0].value, "");
    assert_eq!(&h.headers[0].raw_value[..], &[0xff, 0x41]);
}
