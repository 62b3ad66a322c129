//! Agent reply -> Envoy mutation: any bytes an agent could send, decoded as
//! replies, checked, merged and translated, yield only mutations Envoy
//! accepts (policy_kernel::envoy::translate::check_envoy_accepts).
#![no_main]
use libfuzzer_sys::fuzz_target;
use policy_kernel::aggregate::{
    convert_request_reply, convert_response_reply, Metadata, Mutations, RequestCtx, ResponseCtx,
};
use policy_kernel::envoy::translate::{check_envoy_accepts, common, Answer};
use policy_kernel::proto::{PolicyRequestResponse, PolicyResponseResponse};
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let mut req = RequestCtx {
        path: "/p?a=1&b=2".into(),
        method: "GET".into(),
        request_id: "id".into(),
        ..Default::default()
    };
    let mut resp = ResponseCtx {
        status: 200,
        ..Default::default()
    };
    let (mut rm, mut sm, mut meta) = (Mutations::default(), Mutations::default(), Metadata::new());
    for (n, chunk) in data.split(|&b| b == 0xFF).enumerate() {
        if n % 2 == 0 {
            if let Ok(mut r) = PolicyRequestResponse::decode(chunk) {
                r.request_id = "id".into();
                if let Ok(r) = convert_request_reply("id", r) {
                    req.apply(&r, &mut rm, &mut meta, n);
                }
            }
        } else if let Ok(mut r) = PolicyResponseResponse::decode(chunk) {
            r.request_id = "id".into();
            if let Ok(r) = convert_response_reply("id", r) {
                resp.apply(&r, &mut sm, &mut meta, n);
            }
        }
    }
    for answer in [Answer::RequestHeaders, Answer::RequestBody] {
        if let Err(e) = check_envoy_accepts(&common(&rm, answer), false) {
            panic!("request mutation Envoy would refuse: {e}");
        }
    }
    if let Err(e) = check_envoy_accepts(&common(&sm, Answer::ResponseHeaders), true) {
        panic!("response mutation Envoy would refuse: {e}");
    }
});
