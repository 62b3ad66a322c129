//! The config loader never panics, whatever the file holds.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = policy_kernel::config::parse(text);
    }
});
