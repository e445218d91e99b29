//! Stored results in this process's memory: the default backend.

use std::sync::{Arc, Mutex};

use super::ledger::{Held, Ledger};
use super::{Brief, Clock, Listed, Owner, Store, StoreError, StoreLimits, Stored, SystemClock};
use crate::document::Document;
use crate::summary::StoredInfo;

/// Stored results in memory.
#[derive(Debug)]
pub struct MemoryStore {
    limits: StoreLimits,
    ledger: Mutex<Ledger<Arc<Stored>>>,
    clock: Arc<dyn Clock>,
}

impl Held for Arc<Stored> {
    fn owner(&self) -> &Owner {
        &self.owner
    }

    /// An entry's bytes are its document's memory, indexes made while it
    /// is read included: counted again whenever the store is used, so the
    /// bound holds as documents are read.
    fn bytes(&self) -> u64 {
        self.doc.memory() as u64
    }
}

impl MemoryStore {
    /// An empty store on the system's clocks.
    pub fn new(limits: StoreLimits) -> Self {
        Self::with_clock(limits, Arc::new(SystemClock))
    }

    /// An empty store that reads the time from `clock`.
    pub fn with_clock(limits: StoreLimits, clock: Arc<dyn Clock>) -> Self {
        Self {
            limits,
            ledger: Mutex::default(),
            clock,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ledger<Arc<Stored>>> {
        self.ledger.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Store for MemoryStore {
    fn backend(&self) -> &'static str {
        "memory"
    }

    fn limits(&self) -> StoreLimits {
        self.limits
    }

    fn put(
        &self,
        owner: &Owner,
        doc: Document,
        info: StoredInfo,
    ) -> Result<Arc<Stored>, StoreError> {
        let bytes = doc.memory() as u64;
        if bytes > self.limits.max_bytes {
            return Err(StoreError::TooLarge {
                bytes,
                max: self.limits.max_bytes,
            });
        }
        let stored = Arc::new(Stored::new(owner, doc, info, self.clock.wall()));
        let mut ledger = self.lock();
        ledger.recount_all();
        ledger.make_room(self.limits.max_bytes, bytes, None);
        ledger.insert(
            stored.handle.clone(),
            stored.clone(),
            self.clock.now() + self.limits.ttl,
        );
        Ok(stored)
    }

    fn get(&self, owner: &Owner, handle: &str) -> Result<Listed, StoreError> {
        let now = self.clock.now();
        let mut ledger = self.lock();
        let stored = ledger
            .use_entry(
                owner,
                handle,
                now,
                now + self.limits.ttl,
                self.limits.ttl.as_secs(),
            )
            .map_err(|(e, _)| e)?
            .clone();
        ledger.recount(handle);
        ledger.make_room(self.limits.max_bytes, 0, Some(handle));
        Ok(Listed {
            stored,
            expires_at: self.clock.wall() + self.limits.ttl,
        })
    }

    fn list(&self, owner: &Owner, limit: usize) -> Vec<Brief> {
        let when = (self.clock.now(), self.clock.wall());
        self.lock()
            .briefs(owner, when, limit, |stored, expires_at| {
                Brief::of(stored, expires_at)
            })
    }

    fn purge_expired(&self) -> usize {
        let now = self.clock.now();
        self.lock().purge(now).len()
    }

    fn usage(&self) -> (usize, u64) {
        let mut ledger = self.lock();
        ledger.recount_all();
        let newest = ledger.newest();
        ledger.make_room(self.limits.max_bytes, 0, newest.as_deref());
        ledger.usage()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::ManualClock;
    use std::time::Duration;

    fn info() -> StoredInfo {
        StoredInfo {
            source: "t".into(),
            bytes: 0,
            chars: 0,
            tokens: 0,
            tokens_estimated: false,
            is_error: false,
            sent_twice: false,
            overview: crate::summary::Overview::of(&Document::text(String::new())),
        }
    }

    fn session(id: u64) -> Owner {
        Owner::Session(id)
    }

    fn doc(n: usize) -> Document {
        Document::text("x".repeat(n))
    }

    #[test]
    fn handles_are_bound_to_their_owner() {
        let store = MemoryStore::new(StoreLimits::default());
        let stored = store.put(&session(7), doc(10), info()).unwrap();
        assert!(stored.handle.starts_with("h_") && stored.handle.len() == 24);
        assert!(crate::store::is_handle(&stored.handle));
        for not in [
            "h_nope",
            "",
            "h_AAAAAAAAAAAAAAAAAAAAA{",
            "x_AAAAAAAAAAAAAAAAAAAAAA",
        ] {
            assert!(!crate::store::is_handle(not), "{not}");
        }
        assert_eq!(
            store
                .get(&session(7), &stored.handle)
                .unwrap()
                .stored
                .handle,
            stored.handle
        );
        assert_eq!(
            store.get(&session(8), &stored.handle).unwrap_err(),
            StoreError::Unknown(stored.handle.clone())
        );
        assert!(matches!(
            store.get(&session(7), "h_nope"),
            Err(StoreError::Unknown(_))
        ));
        assert_eq!(store.list(&session(7), 10).len(), 1);
        assert!(store.list(&session(8), 10).is_empty());
    }

    #[test]
    fn principals_own_what_they_store_and_anonymous_ids_are_never_listed() {
        let store = MemoryStore::new(StoreLimits::default());
        let alice = Owner::Principal("alice".into());
        let bob = Owner::Principal("bob".into());
        let mine = store.put(&alice, doc(10), info()).unwrap();
        assert!(
            store
                .get(&Owner::Principal("alice".into()), &mine.handle)
                .is_ok()
        );
        assert_eq!(
            store.get(&bob, &mine.handle).unwrap_err(),
            StoreError::Unknown(mine.handle.clone())
        );
        assert!(store.get(&Owner::Anonymous, &mine.handle).is_err());
        assert!(store.list(&bob, 10).is_empty());
        // An anonymous result is reachable by its handle alone, and listed
        // to no one: every sessionless client is "anonymous".
        let capability = store.put(&Owner::Anonymous, doc(10), info()).unwrap();
        assert!(store.get(&Owner::Anonymous, &capability.handle).is_ok());
        assert!(store.list(&Owner::Anonymous, 10).is_empty());
        assert!(store.get(&alice, &capability.handle).is_err());
    }

    #[test]
    fn the_least_recently_used_entry_is_evicted() {
        let one = doc(100).memory() as u64;
        let store = MemoryStore::new(StoreLimits {
            max_bytes: one * 2 + one / 2,
            ttl: Duration::from_secs(60),
        });
        let a = store.put(&session(1), doc(100), info()).unwrap();
        let b = store.put(&session(1), doc(100), info()).unwrap();
        store.get(&session(1), &a.handle).unwrap(); // a is now the most recent
        let c = store.put(&session(1), doc(100), info()).unwrap();
        assert_eq!(
            store.get(&session(1), &b.handle).unwrap_err(),
            StoreError::Evicted(b.handle.clone())
        );
        assert!(store.get(&session(1), &a.handle).is_ok());
        assert!(store.get(&session(1), &c.handle).is_ok());
        assert_eq!(store.usage().0, 2);
        assert!(matches!(
            store.put(&session(1), doc(10_000), info()),
            Err(StoreError::TooLarge { .. })
        ));
    }

    #[test]
    fn indexes_made_while_reading_count_in_the_bound() {
        let rows = |n: usize| {
            let rows: Vec<String> = (0..n).map(|i| format!("[{i},{i},{i},{i}]")).collect();
            Document::json(format!("[{}]", rows.join(","))).unwrap()
        };
        let bare = rows(2000).memory() as u64;
        let store = MemoryStore::new(StoreLimits {
            max_bytes: bare * 3,
            ttl: Duration::from_secs(60),
        });
        let a = store.put(&session(1), rows(2000), info()).unwrap();
        let b = store.put(&session(1), rows(2000), info()).unwrap();
        assert_eq!(store.usage(), (2, 2 * bare));
        // Many distinct paths and budgets read on `b`.
        for i in 0..2000 {
            let read = store.get(&session(1), &b.handle).unwrap().stored;
            read.doc.items(&format!("/{i}")).unwrap();
            let budget = crate::budget::Budget {
                max_tokens: 500 + i as u32,
                ..Default::default()
            };
            read.doc
                .plan(Some(&format!("/{}", i % 50)), budget)
                .unwrap();
        }
        let (_, held) = store.usage();
        assert_eq!(held, a.doc.memory() as u64 + b.doc.memory() as u64);
        assert!(held > 2 * bare, "b's indexes are counted: {held} vs {bare}");
        assert!(held <= 3 * bare, "and bounded: {held} vs {bare}");
        // Past the bound, the least recently used entry gives way.
        let big = store.get(&session(1), &b.handle).unwrap().stored;
        big.doc.items("").unwrap();
        big.doc
            .plan(
                None,
                crate::budget::Budget {
                    max_tokens: 100,
                    ..Default::default()
                },
            )
            .unwrap();
        let (entries, held) = store.usage();
        assert!(held <= 3 * bare, "{held} vs {}", 3 * bare);
        if held + bare > 3 * bare {
            assert_eq!(entries, 1);
            assert!(matches!(
                store.get(&session(1), &a.handle),
                Err(StoreError::Evicted(_))
            ));
        }
    }

    #[test]
    fn unknown_handles_are_quoted_cut() {
        let store = MemoryStore::new(StoreLimits::default());
        let bogus = format!("h_{}", "A".repeat(1 << 20));
        let message = store.get(&session(1), &bogus).unwrap_err().to_string();
        assert!(message.len() < 200, "{}", message.len());
    }

    #[test]
    fn unused_entries_expire_at_their_ttl_from_last_use_and_say_so() {
        let clock = ManualClock::new();
        let store = MemoryStore::with_clock(
            StoreLimits {
                max_bytes: 1 << 20,
                ttl: Duration::from_secs(30),
            },
            clock.clone(),
        );
        let a = store.put(&session(1), doc(10), info()).unwrap();
        let b = store.put(&session(1), doc(10), info()).unwrap();
        clock.advance(Duration::from_millis(29_999));
        // A use renews the lifetime, and says until when.
        let used = store.get(&session(1), &b.handle).unwrap();
        assert_eq!(
            used.expires_at,
            clock.wall() + Duration::from_secs(30),
            "30 s from its last use"
        );
        clock.advance(Duration::from_millis(1));
        assert_eq!(
            store.get(&session(1), &a.handle).unwrap_err(),
            StoreError::Expired {
                handle: a.handle.clone(),
                ago_s: 0,
                ttl_s: 30
            }
        );
        assert_eq!(store.purge_expired(), 0, "b was used 1 ms ago");
        assert_eq!(store.list(&session(1), 10).len(), 1);
        clock.advance(Duration::from_secs(32));
        assert_eq!(store.purge_expired(), 1);
        assert_eq!(
            store.get(&session(1), &b.handle).unwrap_err().to_string(),
            format!(
                "handle `{}` expired 2 s ago (results are kept 30 s after their last use)",
                b.handle
            )
        );
        assert!(matches!(
            store.get(&session(2), &b.handle),
            Err(StoreError::Unknown(_))
        ));
        assert_eq!(store.usage(), (0, 0));
    }
}
