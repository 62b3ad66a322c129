use super::*;
use crate::http::PathAndQuery;
use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response;

fn b(s: &str) -> Bytes {
    Bytes::from(s.to_string())
}

#[allow(deprecated)]
fn sets(h: &HeaderMutation) -> Vec<(String, String, bool)> {
    h.set_headers
        .iter()
        .map(|o| {
            let hv = o.header.as_ref().unwrap();
            assert!(hv.value.is_empty(), "values travel in raw_value only");
            (
                hv.key.clone(),
                String::from_utf8(hv.raw_value.clone()).unwrap(),
                o.append.is_some_and(|a| a.value),
            )
        })
        .collect()
}

#[test]
fn header_ops_translate_with_raw_value_and_append_flag() {
    let m = Mutations {
        headers: vec![
            ("a".into(), HeaderOp::Set(vec![b("1"), b("2")]), 0),
            ("c".into(), HeaderOp::Append(vec![b("3")]), 0),
            ("d".into(), HeaderOp::Remove, 0),
        ],
        ..Default::default()
    };
    let h = header_mutation(&m).unwrap();
    assert_eq!(
        sets(&h),
        vec![
            ("a".into(), "1".into(), false),
            ("a".into(), "2".into(), true),
            ("c".into(), "3".into(), true)
        ]
    );
    assert_eq!(h.remove_headers, vec!["d".to_string()]);
}

#[test]
fn path_method_status_and_body_become_pseudo_headers_and_length() {
    let m = Mutations {
        path: Some((PathAndQuery::parse("/v2?x=1"), 0)),
        method: Some(("POST".into(), 0)),
        status: Some((418, 0)),
        body: Some((b("hello"), None, 0)),
        ..Default::default()
    };
    let h = header_mutation(&m).unwrap();
    let s = sets(&h);
    assert!(s.contains(&(":path".into(), "/v2?x=1".into(), false)));
    assert!(s.contains(&(":method".into(), "POST".into(), false)));
    assert!(s.contains(&(":status".into(), "418".into(), false)));
    assert!(s.contains(&("content-length".into(), "5".into(), false)));
    let at_headers = common(&m, Answer::RequestHeaders);
    assert_eq!(at_headers.status, ResponseStatus::ContinueAndReplace as i32);
    let at_body = common(&m, Answer::RequestBody);
    assert_eq!(at_body.status, ResponseStatus::Continue as i32);
    assert!(
        matches!(at_body.body_mutation.unwrap().mutation, Some(body_mutation::Mutation::Body(ref v)) if v == b"hello")
    );
}

#[test]
fn request_changes_clear_the_route_cache_and_nothing_else_does() {
    let path = Mutations {
        path: Some((PathAndQuery::parse("/v2/users"), 0)),
        ..Default::default()
    };
    let method = Mutations {
        method: Some(("POST".into(), 0)),
        ..Default::default()
    };
    let header = Mutations {
        headers: vec![("x-variant".into(), HeaderOp::Set(vec![b("b")]), 0)],
        ..Default::default()
    };
    for (what, m) in [("path", &path), ("method", &method), ("header", &header)] {
        for answer in [Answer::RequestHeaders, Answer::RequestBody] {
            assert!(common(m, answer).clear_route_cache, "{what} at {answer:?}");
        }
        // Envoy ignores the flag on responses: it is never sent there.
        for answer in [Answer::ResponseHeaders, Answer::ResponseBody] {
            assert!(!common(m, answer).clear_route_cache, "{what} at {answer:?}");
        }
    }
    // A body replaced alone (its content-length is not a routing change),
    // and no change at all, keep the route.
    let body = Mutations {
        body: Some((b("new"), None, 0)),
        ..Default::default()
    };
    assert!(!common(&body, Answer::RequestBody).clear_route_cache);
    assert!(!common(&Mutations::default(), Answer::RequestHeaders).clear_route_cache);
}

#[test]
fn empty_mutations_have_no_header_mutation() {
    assert!(header_mutation(&Mutations::default()).is_none());
    let r = respond(Answer::ResponseHeaders, None);
    assert!(matches!(
        r.response,
        Some(Response::ResponseHeaders(HeadersResponse { response: None }))
    ));
}

#[test]
fn immediate_carries_status_headers_body_and_details() {
    let r = immediate(&Immediate {
        status: 401,
        headers: vec![("content-type".into(), b("application/json"))],
        body: b("{}"),
        reason: "auth failed!".into(),
    });
    let Some(Response::ImmediateResponse(i)) = r.response else {
        panic!("not immediate")
    };
    assert_eq!(i.status.unwrap().code, 401);
    assert_eq!(i.body, b"{}");
    assert_eq!(i.details, "policy_kernel_auth_failed_");
    assert_eq!(
        sets(&i.headers.unwrap()),
        vec![("content-type".into(), "application/json".into(), false)]
    );
}

#[test]
fn mode_override_sets_every_mode() {
    use processing_mode::{BodySendMode, HeaderSendMode};
    let m = mode_override(true, false, false);
    assert_eq!(m.request_body_mode, BodySendMode::Buffered as i32);
    assert_eq!(m.response_body_mode, BodySendMode::None as i32);
    assert_eq!(m.response_header_mode, HeaderSendMode::Skip as i32);
    assert_eq!(m.response_trailer_mode, HeaderSendMode::Skip as i32);
    let m = mode_override(false, false, true);
    assert_eq!(m.response_header_mode, HeaderSendMode::Send as i32);
    assert_eq!(m.request_body_mode, BodySendMode::None as i32);
    // A response body policy needs the response headers message first.
    let m = mode_override(false, true, false);
    assert_eq!(m.response_header_mode, HeaderSendMode::Send as i32);
    assert_eq!(m.response_body_mode, BodySendMode::Buffered as i32);
}

#[test]
fn metadata_goes_under_the_namespace() {
    let mut meta = Metadata::new();
    meta.insert("user".into(), "42".into());
    let s = dynamic_metadata("users", &meta);
    let Some(Kind::StructValue(inner)) = &s.fields[METADATA_NAMESPACE].kind else {
        panic!()
    };
    assert!(matches!(&inner.fields["user"].kind, Some(Kind::StringValue(v)) if v == "42"));
    assert!(matches!(&inner.fields["route"].kind, Some(Kind::StringValue(v)) if v == "users"));
}

#[test]
fn envoy_acceptance_check_rejects_each_violation() {
    let with = |key: &str, value: &[u8]| CommonResponse {
        header_mutation: Some(HeaderMutation {
            set_headers: vec![option(key, Bytes::copy_from_slice(value), false)],
            remove_headers: vec![],
        }),
        ..Default::default()
    };
    assert!(check_envoy_accepts(&with("x-ok", b"fine"), false).is_ok());
    assert!(check_envoy_accepts(&with("x-bad", b"a\r\nb"), false).is_err());
    assert!(check_envoy_accepts(&with("X-Upper", b"v"), false).is_err());
    assert!(check_envoy_accepts(&with(":status", b"700"), true).is_err());
    assert!(
        check_envoy_accepts(&with(":status", b"418"), false).is_err(),
        ":status in the request phase"
    );
    assert!(check_envoy_accepts(&with(":path", b"nope"), false).is_err());
    assert!(
        check_envoy_accepts(&with("content-length", b"3"), false).is_err(),
        "length without a body"
    );
    let mut body = with("content-length", b"5");
    body.body_mutation = Some(BodyMutation {
        mutation: Some(body_mutation::Mutation::Body(b"hello".to_vec())),
    });
    assert!(check_envoy_accepts(&body, false).is_ok());
    body.body_mutation = Some(BodyMutation {
        mutation: Some(body_mutation::Mutation::Body(b"hi".to_vec())),
    });
    assert!(check_envoy_accepts(&body, false).is_err());
    let remove = CommonResponse {
        header_mutation: Some(HeaderMutation {
            set_headers: vec![],
            remove_headers: vec!["host".into()],
        }),
        ..Default::default()
    };
    assert!(check_envoy_accepts(&remove, false).is_err());
}
