//! The setup the end-to-end tests of the reference agents repeat: a
//! reference agent binary started on `<dir>/<name>.sock` (its kernel config
//! entry ready), the wait until the kernel finds every agent healthy, and the
//! kernel and Envoy logs for a failure message.

#[allow(unused_imports)]
pub use super::agents::RefAgent;
use super::{Envoy, KernelProc};

/// The `agents:` section for `agents`.
pub fn agents_section(agents: &[&RefAgent]) -> String {
    let mut out = String::from("  agents:\n");
    for a in agents {
        out += &a.entry();
    }
    out
}

/// Waits until the kernel has discovered `count` agents, all healthy.
pub async fn until_agents_healthy(kernel: &KernelProc, count: usize) {
    kernel.until_agents_healthy(count).await;
}

/// The kernel's and Envoy's logs, for a failure message.
pub fn logs(kernel: &KernelProc, envoy: &Envoy) -> String {
    format!("--- kernel ---\n{}\n--- envoy ---\n{}", kernel.log(), envoy.log())
}

/// `contextBudget`'s verdict on one answer: its `x-context-budget` header
/// on a 200, `"429"` on the hard limit (whose reason it checks); any other
/// status fails the test with `diag`.
pub fn budget_verdict(got: &super::Got, diag: impl FnOnce() -> String) -> String {
    match got.status {
        200 => got.header("x-context-budget").unwrap_or("-").to_string(),
        429 => {
            assert_eq!(got.json()["reason"], "context_budget_exceeded", "{}", got.body);
            "429".to_string()
        }
        other => panic!("{other}: {}\n{}", got.body, diag()),
    }
}
