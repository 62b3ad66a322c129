//! Helpers of the upgrade and restart tests (`tests/upgrade.rs`): the
//! generations of a kernel run by `policy-kernel supervise` and the
//! `upgrade` command. (Two kernels behind one Envoy:
//! [`super::stack::StackBuilder::two_kernels`].)

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The generation header the upgrade tests configure
/// (`server.generations.header`), kept on each answer (`load::hit`).
pub const GENERATION_HEADER: &str = "x-policy-kernel-generation";

/// The headers `load::hit` keeps on each answer (`Answer::tag`), read
/// from the response or from the upstream's echo of the request.
pub const TAGGED: [&str; 5] = ["x-gate", "x-lat", "x-body-included", "x-seen", GENERATION_HEADER];

/// The child processes of `pid` (the generations of a `supervise` parent).
pub fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Runs `policy-kernel upgrade --config=...`: whether it succeeded, and
/// what it printed.
pub fn upgrade(config: &Path) -> (bool, String) {
    upgrade_with(&format!("--config={}", config.display()))
}

/// Runs `policy-kernel upgrade ARG` (`--config=...` or `--control-socket=...`).
pub fn upgrade_with(arg: &str) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_policy-kernel"))
        .arg("upgrade")
        .arg(arg)
        .output()
        .expect("run policy-kernel upgrade");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text.trim().to_string())
}

/// Waits until the parent `pid` has exactly one child (the draining
/// generations have exited); returns it.
pub fn single_generation(pid: u32, timeout: Duration) -> Option<u32> {
    let deadline = Instant::now() + timeout;
    loop {
        let c = children(pid);
        if c.len() == 1 {
            return Some(c[0]);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[allow(unused_imports)]
pub use super::envoy::{TWO_KERNEL_OUTLIER, TWO_KERNEL_RETRY_ON};
