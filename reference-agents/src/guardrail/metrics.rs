//! `promptInjectionGuard`'s Prometheus series on tool output, on the
//! agent's `--metrics-addr`:
//!
//! | series | meaning |
//! |---|---|
//! | `policy_agent_guard_tool_lists_total{decision}` | `tools/list` results read by the guard: `pass` (no poisoned tool), `removed` (poisoned tools taken out), `refused` (the list answered with a JSON-RPC error), `flagged` (`action: flag`) |
//! | `policy_agent_guard_poisoned_tools_total{category}` | poisoned tools found, once per category of each |
//! | `policy_agent_guard_tool_declarations_total{decision}` | model calls that declare tools, read by the guard on the request side: `pass`, `refused` (a poisoned declaration, `action: block`), `flagged` |
//! | `policy_agent_guard_responses_blocked_total{kind}` | responses blocked for an injection: `jsonrpc` (replaced by a JSON-RPC error) or `other` (denied) |

use std::sync::OnceLock;

use policy_agents::metrics::prometheus::{IntCounterVec, Opts};
use policy_agents::metrics::register;

struct Families {
    lists: IntCounterVec,
    declarations: IntCounterVec,
    poisoned: IntCounterVec,
    blocked: IntCounterVec,
}

fn counter(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    register(IntCounterVec::new(Opts::new(name, help), labels).expect("a valid metric definition"))
}

fn families() -> &'static Families {
    static F: OnceLock<Families> = OnceLock::new();
    F.get_or_init(|| Families {
        lists: counter(
            "policy_agent_guard_tool_lists_total",
            "MCP tools/list results read by promptInjectionGuard, by decision (pass, removed, refused, flagged)",
            &["decision"],
        ),
        declarations: counter(
            "policy_agent_guard_tool_declarations_total",
            "Model calls declaring tools read by promptInjectionGuard, by decision (pass, refused, flagged)",
            &["decision"],
        ),
        poisoned: counter(
            "policy_agent_guard_poisoned_tools_total",
            "Poisoned tool definitions (tools/list results, model calls' declarations) found by promptInjectionGuard, by category",
            &["category"],
        ),
        blocked: counter(
            "policy_agent_guard_responses_blocked_total",
            "Responses blocked by promptInjectionGuard for an injection, by kind (jsonrpc, other)",
            &["kind"],
        ),
    })
}

/// Registers the series now, so a bad definition stops the agent at start.
pub fn register_all() {
    families();
}

/// One `tools/list` result decided.
pub fn tool_list(decision: &str, categories: &[&str]) {
    let f = families();
    f.lists.with_label_values(&[decision]).inc();
    for c in categories {
        f.poisoned.with_label_values(&[c]).inc();
    }
}

/// One model call's tool declarations decided.
pub fn tool_declarations(decision: &str, categories: &[&str]) {
    let f = families();
    f.declarations.with_label_values(&[decision]).inc();
    for c in categories {
        f.poisoned.with_label_values(&[c]).inc();
    }
}

/// The count of model calls whose declarations were decided `decision`
/// (for tests).
#[cfg(test)]
pub fn tool_declaration_calls(decision: &str) -> u64 {
    families().declarations.with_label_values(&[decision]).get()
}

/// A response blocked.
pub fn blocked(kind: &str) {
    families().blocked.with_label_values(&[kind]).inc();
}

/// The count of `tools/list` results with `decision` (for tests).
#[cfg(test)]
pub fn tool_lists(decision: &str) -> u64 {
    families().lists.with_label_values(&[decision]).get()
}
