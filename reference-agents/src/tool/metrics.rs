//! The MCP policies' Prometheus series, on the agent's `--metrics-addr`:
//!
//! | series | meaning |
//! |---|---|
//! | `policy_agent_mcp_server_questions_total{revision, decision}` | questions a server put to the client, decided by `mcpServerRequestGuard`: `revision` `2025-11-25` (a request on the stream) or `2026-07-28` (an `inputRequests` entry); `decision` `allow` or `deny` |
//! | `policy_agent_mcp_input_responses_refused_total` | retries refused for answering a question this caller was not asked for this call |

use std::sync::OnceLock;

use policy_agents::metrics::prometheus::{IntCounter, IntCounterVec, Opts};
use policy_agents::metrics::register;

struct Families {
    questions: IntCounterVec,
    unsolicited: IntCounter,
}

fn families() -> &'static Families {
    static F: OnceLock<Families> = OnceLock::new();
    F.get_or_init(|| Families {
        questions: register(
            IntCounterVec::new(
                Opts::new(
                    "policy_agent_mcp_server_questions_total",
                    "Questions MCP servers put to clients, by protocol revision and decision",
                ),
                &["revision", "decision"],
            )
            .expect("a valid metric definition"),
        ),
        unsolicited: register(
            IntCounter::new(
                "policy_agent_mcp_input_responses_refused_total",
                "MCP retries refused for answering a question not asked of the caller for the call",
            )
            .expect("a valid metric definition"),
        ),
    })
}

/// One question decided: asked the 2026-07-28 way or not, allowed or not.
pub fn question(in_result: bool, allowed: bool) {
    let revision = if in_result { "2026-07-28" } else { "2025-11-25" };
    let decision = if allowed { "allow" } else { "deny" };
    families().questions.with_label_values(&[revision, decision]).inc();
}

/// A retry refused for an unsolicited answer.
pub fn unsolicited_input_response() {
    families().unsolicited.inc();
}
