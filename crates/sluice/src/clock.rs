//! sluice's clocks are tokio's: lifetimes (stored results, cache entries),
//! operations' ages and their retention are measured with the runtime's
//! clock, which is the system's in the binary and stops under
//! `#[tokio::test(start_paused = true)]` (moving only when every task
//! waits). Timing is then tested with exact durations and no real sleeps
//! ([`crate::testing`]).

use std::time::{Instant, SystemTime};

/// The runtime's monotonic time (the system's outside a runtime).
pub fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// The time of day on the runtime's clock: the system's, moved by as much
/// as a paused clock has been advanced beyond real time.
pub fn wall() -> SystemTime {
    let runtime = now();
    let real = Instant::now();
    let wall = SystemTime::now();
    match runtime.checked_duration_since(real) {
        Some(ahead) => wall + ahead,
        None => wall - real.duration_since(runtime),
    }
}

/// The store's clock ([`sluice_core::store::Clock`]): the runtime's.
#[derive(Debug, Default, Clone, Copy)]
pub struct RuntimeClock;

impl sluice_core::store::Clock for RuntimeClock {
    fn now(&self) -> Instant {
        now()
    }

    fn wall(&self) -> SystemTime {
        wall()
    }
}
