//! The upstream credentials' Prometheus series, on the agent's
//! `--metrics-addr`:
//!
//! | series | meaning |
//! |---|---|
//! | `policy_agent_upstream_credentials_total{upstream,outcome}` | `injected` (a call got the user's credential), `asked` (a connect link given), `connected`, `refreshed`, `refresh_refused` (the grant was gone: asked again), `refresh_failed`, `expired`, `evicted` (the upstream answered 401), `revoked`, `refused` (a link opened by another user, or a failed sign-in) |

use std::sync::OnceLock;

use policy_agents::metrics::prometheus::{IntCounterVec, Opts};
use policy_agents::metrics::register;

fn family() -> &'static IntCounterVec {
    static F: OnceLock<IntCounterVec> = OnceLock::new();
    F.get_or_init(|| {
        register(
            IntCounterVec::new(
                Opts::new(
                    "policy_agent_upstream_credentials_total",
                    "Upstream credentials used, asked for, connected, refreshed, evicted, revoked or refused, by upstream",
                ),
                &["upstream", "outcome"],
            )
            .expect("a valid metric definition"),
        )
    })
}

/// Registers the series now (the agent does at start).
pub fn register_all() {
    family();
}

/// Counts `outcome` for `upstream`.
pub fn count(upstream: &str, outcome: &str) {
    family().with_label_values(&[upstream, outcome]).inc();
}
