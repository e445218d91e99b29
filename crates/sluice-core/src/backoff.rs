//! When a failed upstream may be started again.
//!
//! A crashed upstream is restarted by the next call that needs it, but not
//! in a tight loop: each consecutive failure doubles the wait (from
//! `initial` up to `max`), and a connection that stayed up for `max` resets it.

use std::time::{Duration, Instant};

/// Restart policy and state for one upstream.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    failures: u32,
    not_before: Option<Instant>,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(Duration::from_millis(250), Duration::from_secs(30))
    }
}

impl Backoff {
    /// A policy waiting `initial` after the first failure, doubling to `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            failures: 0,
            not_before: None,
        }
    }

    /// Records a failure (a failed start, or a crash) at `now`.
    pub fn failed(&mut self, now: Instant) {
        let wait = self
            .initial
            .saturating_mul(1u32 << self.failures.min(16))
            .min(self.max);
        self.failures = self.failures.saturating_add(1);
        self.not_before = Some(now + wait);
    }

    /// Records that a connection which started at `since` is up at `now`;
    /// a long enough healthy run forgets earlier failures.
    pub fn healthy(&mut self, since: Instant, now: Instant) {
        if now.saturating_duration_since(since) >= self.max {
            self.failures = 0;
        }
        self.not_before = None;
    }

    /// How long a start must still wait at `now` (zero if it may go).
    pub fn wait(&self, now: Instant) -> Duration {
        self.not_before
            .map_or(Duration::ZERO, |t| t.saturating_duration_since(now))
    }

    /// Consecutive failures so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets_after_a_healthy_run() {
        let start = Instant::now();
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(350));
        assert_eq!(b.wait(start), Duration::ZERO);
        b.failed(start);
        assert_eq!(b.wait(start), Duration::from_millis(100));
        b.failed(start);
        assert_eq!(b.wait(start), Duration::from_millis(200));
        b.failed(start);
        assert_eq!(b.wait(start), Duration::from_millis(350));
        assert_eq!(b.wait(start + Duration::from_secs(1)), Duration::ZERO);
        b.healthy(start, start + Duration::from_millis(10));
        assert_eq!(b.failures(), 3);
        b.healthy(start, start + Duration::from_secs(1));
        assert_eq!(b.failures(), 0);
    }
}
