//! Where stored results live, and for how long.
//!
//! A result is stored under an unguessable handle and bound to its owner
//! (the client session that received it): another owner gets "unknown
//! handle", never the data. Entries expire after a time-to-live counted from
//! their last use, and the store keeps under a byte bound by evicting the
//! least recently used entries. An entry's bytes are its document's
//! memory, indexes made while it is read included: they are counted again
//! whenever the store is used, so the bound holds as documents are read.
//! Expiry is lazy on access and swept by
//! [`Store::purge_expired`], which the embedding calls periodically (as
//! mini-redis's purge task does).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::document::Document;
pub use crate::summary::StoredInfo;

/// Who a stored result, an operation or a per-session cache entry belongs
/// to. Another owner is told "unknown handle", never shown the data.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Owner {
    /// A client without a session and without `[auth]` (2026-07-28 stateless
    /// HTTP requests, `sluice call`): the handle alone grants access, like a
    /// capability, so an anonymous owner's ids are never listed or hinted.
    Anonymous,
    /// A client session without `[auth]`: a stdio connection, or a
    /// 2025-11-25 HTTP session.
    Session(u64),
    /// An authenticated principal (`[auth]`), whichever session or stateless
    /// request it comes with.
    Principal(Arc<str>),
}

impl Owner {
    /// Whether this owner's ids may be listed back to it (in `sluice_info`,
    /// in hints of error texts): not for [`Owner::Anonymous`], whose ids are
    /// capabilities that anyone else without a session would also be shown.
    pub fn may_list(&self) -> bool {
        !matches!(self, Self::Anonymous)
    }

    /// A stable text for keys (the cache's per-session entries).
    pub fn key(&self) -> String {
        match self {
            Self::Anonymous => "anonymous".to_owned(),
            Self::Session(id) => format!("session:{id}"),
            Self::Principal(name) => format!("principal:{name}"),
        }
    }
}

/// A stored result.
#[derive(Debug)]
pub struct Stored {
    /// Its handle.
    pub handle: String,
    /// Its owner.
    pub owner: Owner,
    /// The document.
    pub doc: Document,
    /// What it is.
    pub info: StoredInfo,
    /// When it was stored.
    pub created: SystemTime,
}

/// A stored result as listed, with its expiry.
#[derive(Debug, Clone)]
pub struct Listed {
    /// The result.
    pub stored: Arc<Stored>,
    /// When it expires unless used again.
    pub expires_at: SystemTime,
}

/// Why a stored result is not available.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Never stored, or stored for someone else.
    #[error("unknown handle `{}`: it was never issued to this session", crate::format::quoted_cut(.0))]
    Unknown(String),
    /// Stored, but not used for longer than the time-to-live.
    #[error("handle `{}` expired {} ago (results are kept {} after their last use)", crate::format::quoted_cut(.handle), crate::format::age(*ago_s), crate::format::age(*ttl_s))]
    Expired {
        /// The handle.
        handle: String,
        /// Seconds since it expired.
        ago_s: u64,
        /// The time-to-live.
        ttl_s: u64,
    },
    /// Evicted to make room for newer results.
    #[error("handle `{}` was evicted to make room for newer results (the store is full)", crate::format::quoted_cut(.0))]
    Evicted(String),
    /// Larger than the whole store.
    #[error("the result ({}) is larger than the store's bound ({})", crate::format::bytes(*bytes), crate::format::bytes(*max))]
    TooLarge {
        /// Its size.
        bytes: u64,
        /// The store's bound.
        max: u64,
    },
}

/// Storage of results.
pub trait Store: Send + Sync {
    /// Stores `doc` for `owner`.
    fn put(
        &self,
        owner: &Owner,
        doc: Document,
        info: StoredInfo,
    ) -> Result<Arc<Stored>, StoreError>;
    /// The result `handle` of `owner`, its time-to-live restarted.
    fn get(&self, owner: &Owner, handle: &str) -> Result<Listed, StoreError>;
    /// `owner`'s results, most recently stored first, at most `limit`.
    fn list(&self, owner: &Owner, limit: usize) -> Vec<Listed>;
    /// Drops expired entries; returns how many.
    fn purge_expired(&self) -> usize;
    /// Entries and bytes held.
    fn usage(&self) -> (usize, u64);
}

/// Limits of a [`MemoryStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreLimits {
    /// Bytes of documents kept, at most.
    pub max_bytes: u64,
    /// How long an unused entry is kept.
    pub ttl: Duration,
}

impl Default for StoreLimits {
    /// 1 GiB, 30 minutes.
    fn default() -> Self {
        Self {
            max_bytes: 1 << 30,
            ttl: Duration::from_secs(30 * 60),
        }
    }
}

/// Where a [`MemoryStore`] reads the time: lifetimes by [`Clock::now`],
/// the times it shows (`expires_at`) by [`Clock::wall`]. The embedding may
/// give one that tests can stop and move (sluice reads tokio's clock).
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The monotonic time.
    fn now(&self) -> Instant;
    /// The time of day, moving with [`Clock::now`].
    fn wall(&self) -> SystemTime;
}

/// The operating system's clocks.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// Stored results in memory.
#[derive(Debug)]
pub struct MemoryStore {
    limits: StoreLimits,
    inner: Mutex<Inner>,
    clock: Arc<dyn Clock>,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    /// Entries by last use (tick → handle), least recent first.
    lru: BTreeMap<u64, String>,
    tick: u64,
    bytes: u64,
    /// Recently dropped handles, to say why they are gone.
    gone: HashMap<String, (Owner, Gone)>,
    gone_order: VecDeque<String>,
}

#[derive(Debug)]
struct Entry {
    stored: Arc<Stored>,
    tick: u64,
    expires: Instant,
    bytes: u64,
}

#[derive(Debug, Clone, Copy)]
enum Gone {
    Expired(Instant),
    Evicted,
}

/// How many dropped handles are remembered.
const GONE_KEPT: usize = 4096;

impl MemoryStore {
    /// An empty store on the system's clocks.
    pub fn new(limits: StoreLimits) -> Self {
        Self::with_clock(limits, Arc::new(SystemClock))
    }

    /// An empty store that reads the time from `clock`.
    pub fn with_clock(limits: StoreLimits, clock: Arc<dyn Clock>) -> Self {
        Self {
            limits,
            inner: Mutex::default(),
            clock,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Inner {
    fn remove(&mut self, handle: &str, why: Gone) {
        if let Some(entry) = self.entries.remove(handle) {
            self.lru.remove(&entry.tick);
            self.bytes -= entry.bytes;
            self.gone
                .insert(handle.to_owned(), (entry.stored.owner.clone(), why));
            self.gone_order.push_back(handle.to_owned());
            if self.gone_order.len() > GONE_KEPT
                && let Some(old) = self.gone_order.pop_front()
            {
                self.gone.remove(&old);
            }
        }
    }

    /// Counts `handle`'s bytes again: its document's indexes grow as it is
    /// read.
    fn recount(&mut self, handle: &str) {
        if let Some(entry) = self.entries.get_mut(handle) {
            let now = entry.stored.doc.memory() as u64;
            self.bytes = self.bytes - entry.bytes + now;
            entry.bytes = now;
        }
    }

    /// Counts every entry's bytes again.
    fn recount_all(&mut self) {
        let mut total = 0;
        for entry in self.entries.values_mut() {
            entry.bytes = entry.stored.doc.memory() as u64;
            total += entry.bytes;
        }
        self.bytes = total;
    }

    /// Evicts the least recently used entries other than `keep` until
    /// `room` more bytes fit under `max`.
    fn make_room(&mut self, max: u64, room: u64, keep: Option<&str>) {
        let mut kept = None;
        while self.bytes + room > max {
            let Some((tick, oldest)) = self.lru.pop_first() else {
                break;
            };
            if Some(oldest.as_str()) == keep {
                kept = Some((tick, oldest));
                continue;
            }
            self.remove(&oldest, Gone::Evicted);
        }
        if let Some((tick, handle)) = kept {
            self.lru.insert(tick, handle);
        }
    }

    fn touch(&mut self, handle: &str, expires: Instant) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(entry) = self.entries.get_mut(handle) {
            self.lru.remove(&entry.tick);
            entry.tick = tick;
            entry.expires = expires;
            self.lru.insert(tick, handle.to_owned());
        }
    }
}

impl Store for MemoryStore {
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
        let stored = Arc::new(Stored {
            handle: new_handle(),
            owner: owner.clone(),
            doc,
            info,
            created: self.clock.wall(),
        });
        let mut inner = self.lock();
        inner.recount_all();
        inner.make_room(self.limits.max_bytes, bytes, None);
        inner.tick += 1;
        let tick = inner.tick;
        inner.lru.insert(tick, stored.handle.clone());
        inner.bytes += bytes;
        inner.entries.insert(
            stored.handle.clone(),
            Entry {
                stored: stored.clone(),
                tick,
                expires: self.clock.now() + self.limits.ttl,
                bytes,
            },
        );
        Ok(stored)
    }

    fn get(&self, owner: &Owner, handle: &str) -> Result<Listed, StoreError> {
        let now = self.clock.now();
        let mut inner = self.lock();
        let found = inner
            .entries
            .get(handle)
            .filter(|e| e.stored.owner == *owner)
            .map(|e| (e.expires, e.stored.clone()));
        match found {
            Some((expires, _)) if expires <= now => {
                inner.remove(handle, Gone::Expired(expires));
                Err(StoreError::Expired {
                    handle: handle.to_owned(),
                    ago_s: now.duration_since(expires).as_secs(),
                    ttl_s: self.limits.ttl.as_secs(),
                })
            }
            Some((_, stored)) => {
                inner.touch(handle, now + self.limits.ttl);
                inner.recount(handle);
                inner.make_room(self.limits.max_bytes, 0, Some(handle));
                Ok(Listed {
                    stored,
                    expires_at: self.clock.wall() + self.limits.ttl,
                })
            }
            None => match inner.gone.get(handle) {
                Some((o, Gone::Expired(at))) if o == owner => Err(StoreError::Expired {
                    handle: handle.to_owned(),
                    ago_s: now.saturating_duration_since(*at).as_secs(),
                    ttl_s: self.limits.ttl.as_secs(),
                }),
                Some((o, Gone::Evicted)) if o == owner => {
                    Err(StoreError::Evicted(handle.to_owned()))
                }
                _ => Err(StoreError::Unknown(handle.to_owned())),
            },
        }
    }

    fn list(&self, owner: &Owner, limit: usize) -> Vec<Listed> {
        let now = self.clock.now();
        let wall = self.clock.wall();
        if !owner.may_list() {
            return Vec::new();
        }
        let inner = self.lock();
        let mut listed: Vec<Listed> = inner
            .entries
            .values()
            .filter(|e| e.stored.owner == *owner && e.expires > now)
            .map(|e| Listed {
                stored: e.stored.clone(),
                expires_at: wall + e.expires.duration_since(now),
            })
            .collect();
        listed.sort_by_key(|l| std::cmp::Reverse(l.stored.created));
        listed.truncate(limit);
        listed
    }

    fn purge_expired(&self) -> usize {
        let now = self.clock.now();
        let mut inner = self.lock();
        let expired: Vec<(String, Instant)> = inner
            .entries
            .iter()
            .filter(|(_, e)| e.expires <= now)
            .map(|(h, e)| (h.clone(), e.expires))
            .collect();
        for (handle, at) in &expired {
            inner.remove(handle, Gone::Expired(*at));
        }
        expired.len()
    }

    fn usage(&self) -> (usize, u64) {
        let mut inner = self.lock();
        inner.recount_all();
        let newest = inner.lru.last_key_value().map(|(_, h)| h.clone());
        inner.make_room(self.limits.max_bytes, 0, newest.as_deref());
        (inner.entries.len(), inner.bytes)
    }
}

/// A new handle: `h_` and 128 random bits.
pub fn new_handle() -> String {
    random_id("h_")
}

/// `prefix` and 128 random bits (URL-safe base64): an unguessable id.
pub fn random_id(prefix: &str) -> String {
    let mut bytes = [0u8; 16];
    random_bytes(&mut bytes);
    format!("{prefix}{}", URL_SAFE_NO_PAD.encode(bytes))
}

/// Fills `buf` from the operating system's random source.
pub fn random_bytes(buf: &mut [u8]) {
    // The OS source failing is unrecoverable: handles would be guessable.
    getrandom::fill(buf).expect("the operating system's random source failed");
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// A clock that moves only when told.
    #[derive(Debug)]
    struct ManualClock {
        start: (Instant, SystemTime),
        moved: Mutex<Duration>,
    }

    impl ManualClock {
        fn new() -> Arc<Self> {
            Arc::new(Self {
                start: (Instant::now(), SystemTime::now()),
                moved: Mutex::default(),
            })
        }

        fn advance(&self, by: Duration) {
            *self.moved.lock().unwrap() += by;
        }
    }

    impl Clock for ManualClock {
        fn now(&self) -> Instant {
            self.start.0 + *self.moved.lock().unwrap()
        }

        fn wall(&self) -> SystemTime {
            self.start.1 + *self.moved.lock().unwrap()
        }
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
