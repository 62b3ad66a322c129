//! A `governor` clock that reads tokio's clock, so that
//! `#[tokio::test(start_paused = true)]` tests control rate-limit time.

use governor::clock::Clock;

/// Reads [`tokio::time::Instant::now`] (real time outside paused tests).
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioClock;

impl Clock for TokioClock {
    type Instant = std::time::Instant;

    fn now(&self) -> Self::Instant {
        tokio::time::Instant::now().into_std()
    }
}
