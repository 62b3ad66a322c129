//! The management API's JSON input (route bodies, If-Match, the state file)
//! never panics: bad input is an error naming what is wrong.
#![no_main]
use libfuzzer_sys::fuzz_target;
use policy_kernel::management::{changes, handlers, store, strict};

fuzz_target!(|data: &[u8]| {
    let _ = changes::parse_if_match(Some(data));
    let _ = serde_json::from_slice::<store::State>(data);
    for name in [None, Some("/r")] {
        if let Ok(route) = changes::parse_route(data, name) {
            let _ = handlers::masked(&route);
            let _ = strict::check_route(&route, &[]);
            let _ = store::routes_hash(&[route]);
        }
    }
});
