//! The identity policies' Prometheus series, on the agent's `--metrics-addr`
//! ([`policy_agents::metrics`]). Labelled by key source (the issuer, or the
//! `jwks_uri`) or introspection endpoint: one series per configured
//! provider, never per token.
//!
//! | series | meaning |
//! |---|---|
//! | `policy_agent_jwks_fetches_total{source, result}` | key set fetches, `ok` or `error` (discovery or JWK set) |
//! | `policy_agent_jwks_unknown_kid_total{source, result}` | tokens naming a `kid` the fresh set lacks: `refreshed` (a refetch started), `rate_limited` (refused without one: not the limiter's turn) or `remembered` (refused without one: a recent refresh lacked that `kid`) |
//! | `policy_agent_jwks_stale_verifications_total{source}` | tokens verified with keys past their lifetime while the provider was unreachable |
//! | `policy_agent_jwks_unavailable_total{source}` | tokens refused because no usable key set was there (503 `keys_unavailable`) |
//! | `policy_agent_jwks_keys{source}` | keys in the last set fetched |
//! | `policy_agent_jwks_last_fetch_timestamp_seconds{source}` | when the last set was fetched (Unix time) |
//! | `policy_agent_introspection_total{endpoint, result}` | introspection calls: `active`, `inactive`, `refused` (the provider's 400 for the token: `unsupported_token_type`, `unknown_token`) or `error` |
//! | `policy_agent_introspection_limited_total{endpoint, limit}` | tokens refused without a call (503 `introspection_rate_limited`), by the bound reached: `route`, `total` or `in_flight` |
//! | `policy_agent_token_exchange_total{endpoint, outcome}` | `tokenExchange` requests by outcome: `hit` (cached token), `miss` (this request's exchange), `shared` (another request's exchange in flight), or the error (`unavailable`, `invalid_grant`, `invalid_request`, `invalid_target`, `invalid_scope`, `unauthorized_client`, `invalid_client`, `invalid_response`, `client_credentials_unavailable`) |
//! | `policy_agent_token_exchange_provider_seconds{endpoint}` | time the token endpoint took per exchange |
//! | `policy_agent_token_exchange_cache_entries` | exchanged tokens and refusals cached |

use std::sync::OnceLock;

use policy_agents::metrics::prometheus::{
    Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
};
use policy_agents::metrics::register;

struct Families {
    fetches: IntCounterVec,
    unknown_kid: IntCounterVec,
    stale: IntCounterVec,
    unavailable: IntCounterVec,
    keys: IntGaugeVec,
    fetched_at: GaugeVec,
    introspection: IntCounterVec,
    introspection_limited: IntCounterVec,
}

fn counter(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    register(IntCounterVec::new(Opts::new(name, help), labels).expect("a valid metric definition"))
}

/// Registers the series now (`auth-agent` does at start), so that a bad
/// definition stops the agent at start rather than on a request.
pub fn register_all() {
    families();
    exchange_families();
}

struct ExchangeFamilies {
    total: IntCounterVec,
    latency: HistogramVec,
    entries: IntGauge,
}

fn exchange_families() -> &'static ExchangeFamilies {
    static F: OnceLock<ExchangeFamilies> = OnceLock::new();
    F.get_or_init(|| ExchangeFamilies {
        total: counter(
            "policy_agent_token_exchange_total",
            "tokenExchange requests by outcome (hit, miss, shared, or the error)",
            &["endpoint", "outcome"],
        ),
        latency: register(
            HistogramVec::new(
                HistogramOpts::new(
                    "policy_agent_token_exchange_provider_seconds",
                    "Time the token endpoint took per token exchange",
                )
                .buckets(vec![0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]),
                &["endpoint"],
            )
            .expect("a valid metric definition"),
        ),
        entries: register(
            IntGauge::new(
                "policy_agent_token_exchange_cache_entries",
                "Exchanged tokens and refusals cached by tokenExchange",
            )
            .expect("a valid metric definition"),
        ),
    })
}

/// Counts one `tokenExchange` request of `endpoint` with `outcome`.
pub(crate) fn exchange(endpoint: &str, outcome: &str) {
    exchange_families().total.with_label_values(&[endpoint, outcome]).inc();
}

/// The count of `outcome` for `endpoint` so far.
#[cfg(test)]
pub(crate) fn exchanges(endpoint: &str, outcome: &str) -> u64 {
    exchange_families().total.with_label_values(&[endpoint, outcome]).get()
}

/// Records how long one call to the token endpoint took.
pub(crate) fn exchange_latency(endpoint: &str, seconds: f64) {
    exchange_families()
        .latency
        .with_label_values(&[endpoint])
        .observe(seconds);
}

/// Sets the number of cached exchange entries.
pub(crate) fn exchange_cache_entries(n: usize) {
    exchange_families().entries.set(i64::try_from(n).unwrap_or(i64::MAX));
}

fn families() -> &'static Families {
    static F: OnceLock<Families> = OnceLock::new();
    F.get_or_init(|| Families {
        fetches: counter(
            "policy_agent_jwks_fetches_total",
            "Key set fetches from identity providers, by result (ok, error)",
            &["source", "result"],
        ),
        unknown_kid: counter(
            "policy_agent_jwks_unknown_kid_total",
            "Tokens naming a key id the fresh key set lacks: refreshed (a refetch started), rate_limited or remembered (refused without one)",
            &["source", "result"],
        ),
        stale: counter(
            "policy_agent_jwks_stale_verifications_total",
            "Tokens verified with keys past their lifetime while the provider was unreachable",
            &["source"],
        ),
        unavailable: counter(
            "policy_agent_jwks_unavailable_total",
            "Tokens refused because no usable key set was there",
            &["source"],
        ),
        keys: register(
            IntGaugeVec::new(
                Opts::new("policy_agent_jwks_keys", "Keys in the last key set fetched"),
                &["source"],
            )
            .expect("a valid metric definition"),
        ),
        fetched_at: register(
            GaugeVec::new(
                Opts::new(
                    "policy_agent_jwks_last_fetch_timestamp_seconds",
                    "When the last key set was fetched (Unix time)",
                ),
                &["source"],
            )
            .expect("a valid metric definition"),
        ),
        introspection: counter(
            "policy_agent_introspection_total",
            "Token introspection calls, by result (active, inactive, refused, error)",
            &["endpoint", "result"],
        ),
        introspection_limited: counter(
            "policy_agent_introspection_limited_total",
            "Tokens refused without an introspection call, by the bound reached (route, total, in_flight)",
            &["endpoint", "limit"],
        ),
    })
}

/// The series of one key source; the counters also go into its log lines.
#[derive(Debug)]
pub(crate) struct Stats {
    /// Successful fetches of the JWK set.
    pub(crate) fetches: IntCounter,
    /// Failed fetches (discovery or JWK set).
    pub(crate) failures: IntCounter,
    /// Refreshes triggered by an unknown `kid`.
    pub(crate) kid_refreshes: IntCounter,
    /// Unknown `kid`s refused without a refresh (the interval had not passed).
    pub(crate) kid_refreshes_limited: IntCounter,
    /// Unknown `kid`s refused without a refresh: a recent refresh lacked them.
    pub(crate) kid_remembered: IntCounter,
    /// Tokens verified with keys past their lifetime.
    pub(crate) stale_used: IntCounter,
    /// Tokens refused because no usable key set was there.
    pub(crate) unavailable: IntCounter,
    /// Keys in the last set.
    pub(crate) keys: IntGauge,
    /// When the last set was fetched.
    pub(crate) fetched_at: Gauge,
}

impl Stats {
    /// The series of `source`.
    pub(crate) fn new(source: &str) -> Stats {
        let f = families();
        Stats {
            fetches: f.fetches.with_label_values(&[source, "ok"]),
            failures: f.fetches.with_label_values(&[source, "error"]),
            kid_refreshes: f.unknown_kid.with_label_values(&[source, "refreshed"]),
            kid_refreshes_limited: f.unknown_kid.with_label_values(&[source, "rate_limited"]),
            kid_remembered: f.unknown_kid.with_label_values(&[source, "remembered"]),
            stale_used: f.stale.with_label_values(&[source]),
            unavailable: f.unavailable.with_label_values(&[source]),
            keys: f.keys.with_label_values(&[source]),
            fetched_at: f.fetched_at.with_label_values(&[source]),
        }
    }

    /// Records a fetched set of `count` keys.
    pub(crate) fn fetched(&self, count: usize) {
        self.fetches.inc();
        self.keys.set(i64::try_from(count).unwrap_or(i64::MAX));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.fetched_at.set(now);
    }
}

/// Counts one introspection call of `endpoint`: `active`, `inactive` or `error`.
pub(crate) fn introspected(endpoint: &str, result: &str) {
    families().introspection.with_label_values(&[endpoint, result]).inc();
}

/// Counts one token of `endpoint` refused without a call at `limit`; the count so far.
pub(crate) fn introspection_limited(endpoint: &str, limit: &str) -> u64 {
    bump(&families().introspection_limited.with_label_values(&[endpoint, limit]))
}

/// Adds one to `c` and returns the new count.
pub(crate) fn bump(c: &IntCounter) -> u64 {
    c.inc();
    c.get()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_has_its_series() {
        let s = Stats::new("https://idp.metrics-test.example");
        s.fetched(3);
        bump(&s.kid_refreshes_limited);
        introspected("https://idp.metrics-test.example/introspect", "active");
        let text = policy_agents::metrics::render();
        for line in [
            "policy_agent_jwks_fetches_total{result=\"ok\",source=\"https://idp.metrics-test.example\"} 1",
            "policy_agent_jwks_keys{source=\"https://idp.metrics-test.example\"} 3",
            "policy_agent_jwks_unknown_kid_total{result=\"rate_limited\",source=\"https://idp.metrics-test.example\"} 1",
            "policy_agent_introspection_total{endpoint=\"https://idp.metrics-test.example/introspect\",result=\"active\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }
}
