//! The planner's tool-call assembler never panics on any sequence of
//! streamed events, and what it keeps holds: every call has a distinct
//! position below the call limit, argument text stays within its limit,
//! the state survives a round trip, and the end of the stream completes
//! every call into something the critic can read.
#![no_main]
use libfuzzer_sys::fuzz_target;
use reference_agents::planner::assembler::{Assembler, MAX_ARGUMENTS_BYTES, MAX_CALLS};

fuzz_target!(|data: &[u8]| {
    let mut asm = Assembler::new();
    // One event per line: its data as JSON (invalid UTF-8 taints the calls).
    for line in data.split(|&b| b == b'\n') {
        let utf8 = std::str::from_utf8(line).is_ok();
        let text = String::from_utf8_lossy(line);
        let Ok(doc) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        if asm.feed(&doc, utf8).is_err() {
            assert!(asm.calls.len() >= MAX_CALLS);
            break;
        }
    }
    let mut seen = std::collections::HashSet::new();
    for p in asm.calls.values() {
        assert!(p.index < MAX_CALLS && seen.insert(p.index));
        assert!(p.args.len() <= MAX_ARGUMENTS_BYTES);
    }
    let text = serde_json::to_vec(&asm).expect("the state serializes");
    let back: Assembler = serde_json::from_slice(&text).expect("the state reads back");
    assert_eq!(back, asm);
    asm.finish();
    for (k, p) in &asm.calls {
        assert!(p.done);
        assert!(asm.call(k).is_some());
    }
});
