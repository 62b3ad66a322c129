//! The approvals' Prometheus series, on the agent's `--metrics-addr`:
//!
//! | series | meaning |
//! |---|---|
//! | `policy_agent_approvals_pending` | requests waiting for a decision now |
//! | `policy_agent_approval_checks_total{outcome}` | calls an `approve` rule governed: `granted`, `pending` (waiting, first sight or again), `denied`, `limited` |
//! | `policy_agent_approval_decisions_total{grant}` | decisions, by grant (`allow_once`, ..., `deny`) |
//! | `policy_agent_approval_decision_seconds` | time from request to decision |
//! | `policy_agent_approvals_expired_total` | requests nobody decided in time |
//! | `policy_agent_approvals_auto_denied_total` | requests denied at expiry (`on_expiry: deny`) |
//! | `policy_agent_approval_notifications_total{format,outcome}` | notifications `delivered`, `failed` (after their tries) or `dropped` (queue full) |
//! | `policy_agent_approval_notification_retries_total{format}` | notification tries that failed and were tried again |

use std::sync::OnceLock;

use policy_agents::metrics::prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts};
use policy_agents::metrics::register;

use super::rule::GrantKind;
use super::store::Check;

struct Families {
    pending: IntGauge,
    checks: IntCounterVec,
    decisions: IntCounterVec,
    waited: Histogram,
    expired: IntCounter,
}

fn families() -> &'static Families {
    static F: OnceLock<Families> = OnceLock::new();
    F.get_or_init(|| Families {
        pending: register(
            IntGauge::new(
                "policy_agent_approvals_pending",
                "Approval requests waiting for a decision",
            )
            .expect("a valid metric definition"),
        ),
        checks: register(
            IntCounterVec::new(
                Opts::new(
                    "policy_agent_approval_checks_total",
                    "Calls an approve rule governed, by outcome (granted, pending, denied, limited)",
                ),
                &["outcome"],
            )
            .expect("a valid metric definition"),
        ),
        decisions: register(
            IntCounterVec::new(
                Opts::new("policy_agent_approval_decisions_total", "Approval decisions, by grant"),
                &["grant"],
            )
            .expect("a valid metric definition"),
        ),
        waited: register(
            Histogram::with_opts(
                HistogramOpts::new(
                    "policy_agent_approval_decision_seconds",
                    "Time from an approval request to its decision",
                )
                .buckets(vec![1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0]),
            )
            .expect("a valid metric definition"),
        ),
        expired: register(
            IntCounter::new(
                "policy_agent_approvals_expired_total",
                "Approval requests nobody decided in time",
            )
            .expect("a valid metric definition"),
        ),
    })
}

/// Registers the series now (the agent does at start).
pub fn register_all() {
    families();
    notifications();
    auto_denied_counter();
}

pub(super) fn pending(n: usize) {
    families().pending.set(n as i64);
}

pub(super) fn checked(c: &Check) {
    let outcome = match c {
        Check::Granted { .. } => "granted",
        Check::Pending { .. } => "pending",
        Check::Denied { .. } => "denied",
        Check::Limited(_) => "limited",
    };
    families().checks.with_label_values(&[outcome]).inc();
}

pub(super) fn decided(grant: GrantKind, waited_ms: u64) {
    let f = families();
    f.decisions.with_label_values(&[grant.as_str()]).inc();
    f.waited.observe(waited_ms as f64 / 1000.0);
}

pub(super) fn expired(n: usize) {
    if n > 0 {
        families().expired.inc_by(n as u64);
    }
}

fn notifications() -> &'static (IntCounterVec, IntCounterVec) {
    static F: OnceLock<(IntCounterVec, IntCounterVec)> = OnceLock::new();
    F.get_or_init(|| {
        (
            register(
                IntCounterVec::new(
                    Opts::new(
                        "policy_agent_approval_notifications_total",
                        "Approval notifications, by target format and outcome (delivered, failed, dropped)",
                    ),
                    &["format", "outcome"],
                )
                .expect("a valid metric definition"),
            ),
            register(
                IntCounterVec::new(
                    Opts::new(
                        "policy_agent_approval_notification_retries_total",
                        "Approval notification tries that failed and were tried again, by target format",
                    ),
                    &["format"],
                )
                .expect("a valid metric definition"),
            ),
        )
    })
}

pub(super) fn notified(format: &str, outcome: &str) {
    notifications().0.with_label_values(&[format, outcome]).inc();
}

pub(super) fn retried(format: &str) {
    notifications().1.with_label_values(&[format]).inc();
}

fn auto_denied_counter() -> &'static IntCounter {
    static C: OnceLock<IntCounter> = OnceLock::new();
    C.get_or_init(|| {
        register(
            IntCounter::new(
                "policy_agent_approvals_auto_denied_total",
                "Approval requests denied at expiry (on_expiry: deny)",
            )
            .expect("a valid metric definition"),
        )
    })
}

pub(super) fn auto_denied(n: usize) {
    if n > 0 {
        auto_denied_counter().inc_by(n as u64);
    }
}
