//! The tool agent's JSON-RPC parsing and authorization never panic, whatever
//! the body: it parses into messages or gives -32700 / -32600, and a parsed
//! body always gets a decision with its metadata.
#![no_main]
use libfuzzer_sys::fuzz_target;
use policy_agents::Params;
use reference_agents::jsonrpc;
use reference_agents::rules::Caller;
use reference_agents::tool::{authorize, AuthzConfig};

fuzz_target!(|data: &[u8]| {
    match jsonrpc::parse(data) {
        Err(e) => assert!(e.code == jsonrpc::PARSE_ERROR || e.code == jsonrpc::INVALID_REQUEST),
        Ok(env) => {
            assert!(!env.messages.is_empty() && env.messages.len() <= jsonrpc::MAX_BATCH);
            let params: Params = [
                ("rules", r#"[{"effect":"deny","tools":["rm*"]},{"effect":"allow","methods":["*"],"when":{"roles_any":["admin"]}}]"#),
                ("denial", "jsonrpc_error"),
            ]
            .into_iter()
            .collect();
            let cfg = AuthzConfig::parse(&params).expect("valid rules");
            let caller = Caller {
                roles: vec!["admin".into()],
                ..Caller::default()
            };
            let out = authorize(&cfg, &caller, &env);
            assert!(out.metadata_value("mcp.decision").is_some());
        }
    }
});
