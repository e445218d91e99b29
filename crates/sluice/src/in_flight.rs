//! How many requests sluice is answering at once for each client over
//! HTTP: at most `[limits] max_requests_in_flight` (as for a stdio client,
//! whose connection counts its own in `downstream::lines`).
//!
//! Over HTTP every request is an HTTP request of its own, so one client
//! (a principal, a session, an anonymous client's address) could have as
//! many answered at once as it opens connections (`[http]
//! max_connections`, 10,000): each holding its body (up to `[http]
//! max_body_mb`) and a request to a shared upstream, which every other
//! client then waits behind. Counted per client, one more is refused at
//! once, with an error naming the key, and the others' requests go on.

use std::sync::{Arc, Mutex};

use crate::FastMap;
use crate::caller::Quota;

type Counts = Arc<Mutex<FastMap<Quota, Count>>>;

/// One client's requests being answered, and whether its last was refused
/// (said in the log once per run of refusals).
#[derive(Debug, Default)]
struct Count {
    answering: usize,
    refusing: bool,
}

/// The requests being answered, per client.
#[derive(Debug)]
pub struct InFlight {
    max: usize,
    counts: Counts,
}

/// One request being answered: counted until dropped.
#[derive(Debug)]
pub struct Slot {
    counts: Counts,
    client: Quota,
}

fn lock(counts: &Counts) -> std::sync::MutexGuard<'_, FastMap<Quota, Count>> {
    // Each update is one insert, increment or removal: a panic elsewhere
    // leaves the map consistent.
    counts.lock().unwrap_or_else(|p| p.into_inner())
}

impl InFlight {
    /// At most `max` requests of one client answered at once.
    pub fn new(max: usize) -> InFlight {
        InFlight {
            max,
            counts: Arc::default(),
        }
    }

    /// Counts one more request of `client`, until the slot is dropped;
    /// `Err(max)` if `max` of its requests are already being answered.
    pub fn admit(&self, client: Quota) -> Result<Slot, usize> {
        let mut counts = lock(&self.counts);
        let count = counts.entry(client.clone()).or_default();
        if count.answering >= self.max {
            if !std::mem::replace(&mut count.refusing, true) {
                tracing::warn!(
                    in_flight = self.max,
                    "refusing the requests of {} until some are answered: [limits] max_requests_in_flight reached",
                    described(&client)
                );
            }
            return Err(self.max);
        }
        count.answering += 1;
        count.refusing = false;
        drop(counts);
        Ok(Slot {
            counts: self.counts.clone(),
            client,
        })
    }

    /// How many clients have requests being answered (none are kept for a
    /// client whose requests all ended).
    pub fn clients(&self) -> usize {
        lock(&self.counts).len()
    }
}

/// `client` for the operator's log: a principal by name (escaped), an
/// anonymous client by its address; a session's owner is a number that
/// says nothing.
pub(crate) fn described(client: &Quota) -> String {
    use sluice_core::store::Owner;
    match client {
        Quota::Owner(Owner::Principal(principal)) => format!("principal {principal:?}"),
        Quota::Owner(Owner::Session(_)) => "an HTTP session".into(),
        Quota::Owner(Owner::Anonymous) => "an anonymous client".into(),
        Quota::Address(address) => format!("the anonymous clients at {address}"),
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = lock(&self.counts);
        if let Some(count) = counts.get_mut(&self.client) {
            count.answering -= 1;
            if count.answering == 0 {
                counts.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::store::Owner;

    /// Each client has its own `max`; a slot given back makes room; a
    /// client whose requests all ended is forgotten.
    #[test]
    fn each_client_has_its_own_share_and_gets_it_back() {
        let in_flight = InFlight::new(2);
        let alice = || Quota::Owner(Owner::Principal("alice".into()));
        let bob = || Quota::Owner(Owner::Principal("bob".into()));
        let local = Quota::Address(std::net::Ipv4Addr::LOCALHOST.into());
        let first = in_flight.admit(alice()).unwrap();
        let second = in_flight.admit(alice()).unwrap();
        assert_eq!(in_flight.admit(alice()).unwrap_err(), 2);
        // Another client's share is untouched.
        let bobs = in_flight.admit(bob()).unwrap();
        let locals = in_flight.admit(local.clone()).unwrap();
        assert_eq!(in_flight.clients(), 3);
        drop(first);
        let third = in_flight.admit(alice()).unwrap();
        assert_eq!(in_flight.admit(alice()).unwrap_err(), 2);
        drop((second, third, bobs, locals));
        assert_eq!(in_flight.clients(), 0, "nothing kept for clients with none");
        assert!(in_flight.admit(local).is_ok());
    }
}
