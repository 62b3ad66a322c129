//! A per-agent circuit breaker, as the agent runtimes apply it to their
//! workers: after `failure_threshold` consecutive failed calls the circuit
//! opens for `cooldown_ms`; while open the agent counts as unavailable
//! (planning answers `agent_unavailable_response`, a call already planned
//! fails at once and follows `on_failure`), without waiting for timeouts.
//! After the cool-down one probe call is let through (half-open); its
//! success closes the circuit, its failure opens it again.
//!
//! Lock-free: the state is one atomic word.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// Circuit states, as exported by `policy_kernel_agent_circuit_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CircuitState {
    /// Calls flow.
    Closed = 0,
    /// Calls fail at once until the cool-down ends.
    Open = 1,
    /// One probe call is in flight.
    HalfOpen = 2,
}

/// The breaker of one agent.
#[derive(Debug)]
pub struct Circuit {
    threshold: u32,
    cooldown: Duration,
    epoch: Instant,
    failures: AtomicU32,
    /// 0: closed; 1: half-open; otherwise open until `until_ms - 2` ms after `epoch`.
    state: AtomicU64,
}

const CLOSED: u64 = 0;
const HALF_OPEN: u64 = 1;

impl Circuit {
    /// A closed breaker; `threshold` 0 disables it.
    pub fn new(threshold: u32, cooldown: Duration) -> Self {
        Self {
            threshold,
            cooldown,
            epoch: Instant::now(),
            failures: AtomicU32::new(0),
            state: AtomicU64::new(CLOSED),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The current state.
    pub fn state(&self) -> CircuitState {
        match self.state.load(Ordering::Acquire) {
            CLOSED => CircuitState::Closed,
            HALF_OPEN => CircuitState::HalfOpen,
            _ => CircuitState::Open,
        }
    }

    /// True while calls would be refused: open and cooling down, or a probe
    /// in flight. Planning treats such an agent as unavailable.
    pub fn blocks(&self) -> bool {
        match self.state.load(Ordering::Acquire) {
            CLOSED => false,
            HALF_OPEN => true,
            until => self.now_ms() + 2 < until,
        }
    }

    /// Asks to make a call: `true` when it may go (closed, or this call is
    /// the half-open probe).
    pub fn try_call(&self) -> bool {
        match self.state.load(Ordering::Acquire) {
            CLOSED => true,
            HALF_OPEN => false,
            until if self.now_ms() + 2 >= until => self
                .state
                .compare_exchange(until, HALF_OPEN, Ordering::AcqRel, Ordering::Acquire)
                .is_ok(),
            _ => false,
        }
    }

    /// A health check passed: an open circuit's cool-down ends now, so the
    /// next call is the probe (which still decides). Recovery then takes a
    /// health-check interval, not the whole cool-down.
    pub fn health_passed(&self) {
        let now = self.now_ms();
        let state = self.state.load(Ordering::Acquire);
        if state > HALF_OPEN && now + 2 < state {
            let _ = self
                .state
                .compare_exchange(state, now + 2, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// The probe call was abandoned (its stream was reset) before it ended:
    /// open the circuit again rather than stay half-open for ever.
    pub fn probe_abandoned(&self) {
        let open_until = self.now_ms() + u64::try_from(self.cooldown.as_millis()).unwrap_or(u64::MAX / 2) + 2;
        let _ = self
            .state
            .compare_exchange(HALF_OPEN, open_until, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Records a successful call.
    pub fn success(&self) {
        self.failures.store(0, Ordering::Release);
        if self.state.load(Ordering::Acquire) != CLOSED {
            self.state.store(CLOSED, Ordering::Release);
        }
    }

    /// Records a failed call; returns true when this failure opened the circuit.
    pub fn failure(&self) -> bool {
        if self.threshold == 0 {
            return false;
        }
        let open_until = self.now_ms() + u64::try_from(self.cooldown.as_millis()).unwrap_or(u64::MAX / 2) + 2;
        if self.state.load(Ordering::Acquire) == HALF_OPEN {
            self.state.store(open_until, Ordering::Release);
            return true;
        }
        let n = self.failures.fetch_add(1, Ordering::AcqRel) + 1;
        if n >= self.threshold {
            return self
                .state
                .compare_exchange(CLOSED, open_until, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn opens_after_threshold_and_probes_after_cooldown() {
        let c = Circuit::new(3, Duration::from_secs(30));
        assert!(!c.failure() && !c.failure());
        assert!(c.try_call(), "still closed after 2 failures");
        assert!(c.failure(), "third consecutive failure opens");
        assert_eq!(c.state(), CircuitState::Open);
        assert!(c.blocks() && !c.try_call());
        tokio::time::advance(Duration::from_secs(29)).await;
        assert!(c.blocks() && !c.try_call());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(!c.blocks(), "cool-down over: planning may use the agent");
        assert!(c.try_call(), "first caller is the probe");
        assert_eq!(c.state(), CircuitState::HalfOpen);
        assert!(!c.try_call(), "only one probe");
        assert!(c.blocks());
        c.success();
        assert_eq!(c.state(), CircuitState::Closed);
        assert!(c.try_call());
    }

    #[tokio::test(start_paused = true)]
    async fn failed_probe_reopens_and_success_resets_the_count() {
        let c = Circuit::new(2, Duration::from_secs(5));
        c.failure();
        c.success();
        assert!(!c.failure(), "the count restarted after a success");
        assert!(c.failure());
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(c.try_call());
        assert!(c.failure(), "a failed probe opens again");
        assert_eq!(c.state(), CircuitState::Open);
        assert!(!c.try_call());
    }

    #[tokio::test(start_paused = true)]
    async fn health_ends_the_cooldown_and_an_abandoned_probe_reopens() {
        let c = Circuit::new(1, Duration::from_secs(30));
        assert!(c.failure());
        assert!(!c.try_call());
        c.health_passed();
        assert!(!c.blocks(), "a passing health check ends the cool-down");
        assert!(c.try_call(), "the next call is the probe");
        c.probe_abandoned();
        assert_eq!(c.state(), CircuitState::Open, "not stuck half-open");
        tokio::time::advance(Duration::from_secs(31)).await;
        assert!(c.try_call());
        c.success();
        assert_eq!(c.state(), CircuitState::Closed);
        c.health_passed();
        assert_eq!(c.state(), CircuitState::Closed, "no effect when closed");
    }

    #[test]
    fn threshold_zero_never_opens() {
        let c = Circuit::new(0, Duration::from_secs(1));
        for _ in 0..100 {
            assert!(!c.failure());
        }
        assert!(c.try_call() && !c.blocks());
    }
}
