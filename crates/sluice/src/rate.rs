//! How often each client may send requests: `[limits]
//! requests_per_minute`, when set.
//!
//! `max_requests_in_flight` bounds how many of a client's requests are
//! answered at once, not how many it sends: quick ones, one after another,
//! pass it at any rate, and each may cost a shared upstream (a paid API,
//! a database) a call. Each client (a stdio connection; over HTTP a
//! principal with `[auth]`, else a session, else an anonymous client's
//! address: the same as for `max_requests_in_flight`) has a bucket of
//! `requests_per_minute` requests, refilled at that many a minute; a
//! request finding it empty is refused at once with an error that names
//! the key and says when the next one is taken, and the others' requests
//! go on.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::FastMap;
use crate::caller::Quota;

/// Past this many clients' buckets, the full ones are forgotten (a full
/// bucket is what a client never seen gets): the map holds the clients of
/// about the last minute.
const SWEEP_AT: usize = 4096;

/// Each client's bucket.
#[derive(Debug)]
pub struct Rate {
    per_minute: u32,
    buckets: Mutex<FastMap<Quota, Bucket>>,
}

/// What is left of one client's minute.
#[derive(Debug)]
struct Bucket {
    /// Requests it may send now (fractions refill between requests).
    left: f64,
    /// When `left` was last brought up to date.
    at: Instant,
    /// Whether its last request was refused (said once per run of them).
    refusing: bool,
}

impl Bucket {
    /// Refills it at `per_minute` up to `per_minute`, as of `now`.
    fn refill(&mut self, per_minute: u32, now: Instant) {
        let earned = now.duration_since(self.at).as_secs_f64() * f64::from(per_minute) / 60.0;
        self.left = (self.left + earned).min(f64::from(per_minute));
        self.at = now;
    }
}

impl Rate {
    /// At most `per_minute` requests of one client in any minute (and
    /// that many at once after a minute of none).
    pub fn new(per_minute: u32) -> Rate {
        Rate {
            per_minute,
            buckets: Mutex::default(),
        }
    }

    /// The limit, per minute.
    pub fn per_minute(&self) -> u32 {
        self.per_minute
    }

    /// Takes one request of `client` from its bucket; `Err` with how long
    /// until one more would be taken when it is empty.
    pub fn take(&self, client: &Quota) -> Result<(), Duration> {
        let now = Instant::now();
        let full = f64::from(self.per_minute);
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= SWEEP_AT && !buckets.contains_key(client) {
            buckets.retain(|_, bucket| {
                bucket.refill(self.per_minute, now);
                bucket.left < full
            });
        }
        let bucket = buckets.entry(client.clone()).or_insert(Bucket {
            left: full,
            at: now,
            refusing: false,
        });
        bucket.refill(self.per_minute, now);
        if bucket.left >= 1.0 {
            bucket.left -= 1.0;
            bucket.refusing = false;
            return Ok(());
        }
        if !std::mem::replace(&mut bucket.refusing, true) {
            tracing::warn!(
                per_minute = self.per_minute,
                "refusing the requests of {} for a while: [limits] requests_per_minute reached",
                crate::in_flight::described(client)
            );
        }
        Err(Duration::from_secs_f64(
            (1.0 - bucket.left) * 60.0 / f64::from(self.per_minute),
        ))
    }

    /// How many clients' buckets are kept.
    pub fn clients(&self) -> usize {
        self.buckets.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// The refusal of a request when its client's bucket is empty and the next
/// is taken after `wait`.
pub fn too_fast(per_minute: u32, wait: Duration) -> rmcp::model::ErrorData {
    rmcp::model::ErrorData::new(
        rmcp::model::ErrorCode(crate::downstream::SERVER_BUSY),
        format!(
            "too many requests: this client may send {per_minute} a minute (`[limits] requests_per_minute`); the next is taken in {:.1} s",
            wait.as_secs_f64().max(0.1)
        ),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::store::Owner;

    /// A bucket of 3 a minute: three at once, then one every 20 s; each
    /// client has its own; a refusal says how long to wait; full buckets
    /// are forgotten once there are many.
    #[tokio::test(start_paused = true)]
    async fn each_client_sends_its_own_minute_s_worth() {
        let rate = Rate::new(3);
        let alice = Quota::Owner(Owner::Principal("alice".into()));
        let bob = Quota::Owner(Owner::Principal("bob".into()));
        for _ in 0..3 {
            assert!(rate.take(&alice).is_ok());
        }
        assert_eq!(rate.take(&alice), Err(Duration::from_secs(20)));
        assert!(rate.take(&bob).is_ok(), "bob's bucket is his own");
        tokio::time::advance(Duration::from_secs(15)).await;
        assert_eq!(rate.take(&alice), Err(Duration::from_secs(5)));
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(rate.take(&alice).is_ok());
        assert!(rate.take(&alice).is_err());
        // A minute of none fills it, and no more.
        tokio::time::advance(Duration::from_secs(600)).await;
        for _ in 0..3 {
            assert!(rate.take(&alice).is_ok());
        }
        assert!(rate.take(&alice).is_err());
        assert_eq!(
            too_fast(3, Duration::from_secs(20)).message,
            "too many requests: this client may send 3 a minute (`[limits] requests_per_minute`); the next is taken in 20.0 s"
        );

        let address = |i: u32| Quota::Address(std::net::Ipv4Addr::from(i).into());
        for i in 0..SWEEP_AT as u32 {
            assert!(rate.take(&address(i)).is_ok());
        }
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(rate.take(&address(u32::MAX)).is_ok());
        assert_eq!(rate.clients(), 1, "the full buckets were forgotten");
    }
}
