//! Stored results in this process's memory: the default backend.
//!
//! Each result is kept as its document (`compress = false`, the default:
//! every read is in place), or as the disk store keeps it
//! (`compress = true`): its text in zstd frames of 64 KiB and what is
//! known of it, beside the documents read lately, kept decoded
//! ([`Loaded`], at most an eighth of `max_bytes` and 16 MiB, and always
//! the last one read). JSON shrinks 4–10×, for a first read that
//! decompresses the whole document.

use std::sync::{Arc, Mutex};

use super::PLANS_PER_RESULT;
use super::framed::{self, Meta};
use super::ledger::{Held, Ledger};
use super::{
    Brief, Clock, FramedPlan, Listed, Loaded, Owner, PageAsk, ReadError, Store, StoreError,
    StoreLimits, Stored, SystemClock,
};
use crate::document::Document;
use crate::pager::Page;
use crate::summary::StoredInfo;

/// The most bytes of documents a compressed memory store keeps decoded.
const LOADED_BYTES: u64 = 16 << 20;

/// Stored results in memory.
#[derive(Debug)]
pub struct MemoryStore {
    limits: StoreLimits,
    ledger: Mutex<Ledger<Kept>>,
    clock: Arc<dyn Clock>,
    /// Results are kept in zstd frames.
    compress: bool,
    /// Compressed results read lately, decoded.
    loaded: Loaded,
}

/// How a result is kept.
#[derive(Debug)]
enum Kept {
    /// As its document.
    Whole(Arc<Stored>),
    /// In frames (shared, so that a read decodes them outside the lock).
    Framed(Arc<Frames>),
}

/// A result in zstd frames.
#[derive(Debug)]
struct Frames {
    owner: Owner,
    /// What is known of it, as [`framed::encode`] wrote it.
    meta: Vec<u8>,
    frames: Vec<Vec<u8>>,
    /// The frames' and the meta's bytes.
    weight: u64,
    /// Its brief (`expires_at` aside: the ledger keeps the expiry).
    brief: Brief,
    /// Its page plans, by key: its pages are served from the frames they
    /// span.
    plans: Mutex<Vec<(String, Arc<FramedPlan>)>>,
}

impl Held for Kept {
    fn owner(&self) -> &Owner {
        match self {
            Kept::Whole(stored) => &stored.owner,
            Kept::Framed(frames) => &frames.owner,
        }
    }

    /// A document's bytes are its memory, indexes made while it is read
    /// included: counted again whenever the store is used, so the bound
    /// holds as documents are read. Frames weigh what they hold.
    fn bytes(&self) -> u64 {
        match self {
            Kept::Whole(stored) => stored.doc.memory() as u64,
            Kept::Framed(frames) => frames.weight,
        }
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
            compress: false,
            loaded: Loaded::new(0),
        }
    }

    /// The store, its results kept in zstd frames (`compress`) or not.
    pub fn compressed(mut self, compress: bool) -> Self {
        self.compress = compress;
        self.loaded = Loaded::new(LOADED_BYTES.min(self.limits.max_bytes / 8));
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ledger<Kept>> {
        self.ledger.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `stored`, in frames.
    fn framed(&self, stored: &Stored) -> Result<Kept, StoreError> {
        let encoded = framed::encode(stored, true).map_err(|e| StoreError::Unavailable {
            backend: "memory",
            why: format!("the result could not be compressed: {e}"),
        })?;
        let plans = Meta::parse(&encoded.meta)
            .map(|meta| {
                encoded
                    .plans
                    .iter()
                    .filter_map(|(key, plan)| {
                        Some((key.clone(), Arc::new(FramedPlan::of(&meta, plan)?)))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(Kept::Framed(Arc::new(Frames {
            owner: stored.owner.clone(),
            meta: encoded.meta,
            frames: encoded.frames,
            weight: encoded.weight,
            brief: Brief::of(stored, stored.created),
            plans: Mutex::new(plans),
        })))
    }

    /// Lets go of the documents kept decoded (a bench's cold read).
    pub fn forget_decoded(&self) {
        self.loaded.clear();
    }

    /// `owner`'s result `handle`, its time-to-live restarted.
    fn used(&self, owner: &Owner, handle: &str) -> Result<Kept, StoreError> {
        let now = self.clock.now();
        let mut ledger = self.lock();
        let kept = match ledger
            .use_entry(
                owner,
                handle,
                now,
                now + self.limits.ttl,
                self.limits.ttl.as_secs(),
            )
            .map_err(|(e, _)| e)?
        {
            Kept::Whole(stored) => Kept::Whole(stored.clone()),
            Kept::Framed(frames) => Kept::Framed(frames.clone()),
        };
        ledger.recount(handle);
        ledger.make_room(self.limits.max_bytes, 0, Some(handle));
        Ok(kept)
    }

    /// The document of `handle`, kept in `frames`: decoded lately, or now.
    fn decoded(&self, handle: &str, frames: &Frames) -> Result<Arc<Stored>, StoreError> {
        if let Some(stored) = self.loaded.get(handle) {
            return Ok(stored);
        }
        let unreadable = |why: String| StoreError::Unavailable {
            backend: "memory",
            why: format!("{handle} does not read back: {why}"),
        };
        let meta = Meta::parse(&frames.meta).ok_or_else(|| unreadable("its meta".into()))?;
        let stored = Arc::new(framed::decode(handle, meta, &frames.frames).map_err(unreadable)?);
        if self.lock().has(handle) {
            self.loaded.keep(stored.clone());
        }
        Ok(stored)
    }
}

impl Store for MemoryStore {
    fn backend(&self) -> &'static str {
        "memory"
    }

    fn limits(&self) -> StoreLimits {
        self.limits
    }

    fn in_place(&self) -> bool {
        !self.compress
    }

    fn put(
        &self,
        owner: &Owner,
        doc: Document,
        info: StoredInfo,
    ) -> Result<Arc<Stored>, StoreError> {
        if !self.compress && doc.memory() as u64 > self.limits.max_bytes {
            return Err(StoreError::TooLarge {
                bytes: doc.memory() as u64,
                max: self.limits.max_bytes,
            });
        }
        let stored = Arc::new(Stored::new(owner, doc, info, self.clock.wall()));
        let kept = if self.compress {
            self.framed(&stored)?
        } else {
            Kept::Whole(stored.clone())
        };
        let bytes = kept.bytes();
        if bytes > self.limits.max_bytes {
            return Err(StoreError::TooLarge {
                bytes,
                max: self.limits.max_bytes,
            });
        }
        let evicted = {
            let mut ledger = self.lock();
            ledger.recount_all();
            let evicted = ledger.make_room(self.limits.max_bytes, bytes, None);
            ledger.insert(
                stored.handle.clone(),
                kept,
                self.clock.now() + self.limits.ttl,
            );
            evicted
        };
        if self.compress {
            let evicted: Vec<String> = evicted.into_iter().map(|(h, _)| h).collect();
            self.loaded.forget(&evicted);
            // Its next page is likely read soon.
            self.loaded.keep(stored.clone());
        }
        Ok(stored)
    }

    fn get(&self, owner: &Owner, handle: &str) -> Result<Listed, StoreError> {
        let stored = match self.used(owner, handle)? {
            Kept::Whole(stored) => stored,
            Kept::Framed(frames) => self.decoded(handle, &frames)?,
        };
        Ok(Listed {
            stored,
            expires_at: self.clock.wall() + self.limits.ttl,
        })
    }

    fn page(&self, owner: &Owner, handle: &str, ask: &PageAsk) -> Result<Page, ReadError> {
        let (frames, key) = match (self.used(owner, handle)?, ask.key()) {
            (Kept::Framed(frames), Some(key)) => (frames, key),
            (Kept::Whole(stored), _) => return ask.serve(&stored.doc),
            (Kept::Framed(frames), None) => return ask.serve(&self.decoded(handle, &frames)?.doc),
        };
        let plan = {
            let plans = frames.plans.lock().unwrap_or_else(|p| p.into_inner());
            plans
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, p)| p.clone())
        };
        let plan = match plan {
            Some(plan) if self.loaded.get(handle).is_none() => plan,
            _ => {
                // Decoded here lately, or no plan of this path and budget
                // yet (then planned from the whole document, once): a plan
                // made now is kept for the next first read.
                let stored = self.decoded(handle, &frames)?;
                let (page, saved) = ask.serve_and_save(&stored.doc)?;
                let meta = Meta::parse(&frames.meta);
                if let (Some(saved), Some(meta)) = (saved, meta) {
                    let mut plans = frames.plans.lock().unwrap_or_else(|p| p.into_inner());
                    if plans.len() < PLANS_PER_RESULT
                        && !plans.iter().any(|(k, _)| *k == key)
                        && let Some(plan) = FramedPlan::of(&meta, &saved)
                    {
                        plans.push((key, Arc::new(plan)));
                    }
                }
                return Ok(page);
            }
        };
        plan.page(ask.start, "memory", |numbers| {
            Ok(numbers
                .iter()
                .map_while(|&n| frames.frames.get(n as usize).cloned())
                .collect())
        })
    }

    fn list(&self, owner: &Owner, limit: usize) -> Vec<Brief> {
        let when = (self.clock.now(), self.clock.wall());
        self.lock().briefs(owner, when, limit, described)
    }

    fn newest(&self, limit: usize) -> Vec<Brief> {
        let when = (self.clock.now(), self.clock.wall());
        self.lock().recently_used(when, limit, described)
    }

    fn purge_expired(&self) -> usize {
        let now = self.clock.now();
        let purged: Vec<String> = self.lock().purge(now).into_iter().map(|(h, _)| h).collect();
        self.loaded.forget(&purged);
        purged.len()
    }

    fn usage(&self) -> (usize, u64) {
        let mut ledger = self.lock();
        ledger.recount_all();
        let newest = ledger.newest();
        ledger.make_room(self.limits.max_bytes, 0, newest.as_deref());
        ledger.usage()
    }
}

/// What a listing says of a result kept until `expires_at`.
fn described(kept: &Kept, expires_at: std::time::SystemTime) -> Brief {
    match kept {
        Kept::Whole(stored) => Brief::of(stored, expires_at),
        Kept::Framed(frames) => Brief {
            expires_at,
            ..frames.brief.clone()
        },
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

    /// A store of 1 MiB whose entries live 30 s, on a clock the test moves.
    fn clocked() -> (Arc<ManualClock>, MemoryStore) {
        let clock = ManualClock::new();
        let store = MemoryStore::with_clock(
            StoreLimits {
                max_bytes: 1 << 20,
                ttl: Duration::from_secs(30),
            },
            clock.clone(),
        );
        (clock, store)
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
        // Many reads of paths and budgets on `b` (12 arrays, with the two
        // split while it was indexed: within what is kept).
        for i in 0..2000 {
            let read = store.get(&session(1), &b.handle).unwrap().stored;
            read.doc.items(&format!("/{}", i % 12)).unwrap();
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
        // `a` (still `bare`) gives way only if it no longer fits beside `b`.
        if big.doc.memory() as u64 + bare > 3 * bare {
            assert_eq!(entries, 1);
            assert!(matches!(
                store.get(&session(1), &a.handle),
                Err(StoreError::Evicted(_))
            ));
        } else {
            assert_eq!((entries, held), (2, bare + big.doc.memory() as u64));
        }
    }

    #[test]
    fn compressed_results_serve_pages_from_the_frames_they_span() {
        use crate::pager::Start;
        let budget = crate::budget::Budget {
            max_tokens: 1500,
            max_chars: 6000,
            max_lines: None,
            token_factor: 1.0,
        };
        let store = MemoryStore::new(StoreLimits::default()).compressed(true);
        let owner = Owner::Session(7);
        let rows: Vec<String> = (0..20_000)
            .map(|i| format!(r#"{{"id":{i},"name":"row {i}"}}"#))
            .collect();
        let doc = Document::json(format!(r#"{{"rows":[{}]}}"#, rows.join(","))).unwrap();
        let reference = Document::json(doc.text_str().to_owned()).unwrap();
        doc.plan(None, budget).unwrap();
        let handle = store.put(&owner, doc, info()).unwrap().handle.clone();
        store.loaded.forget(std::slice::from_ref(&handle));
        let plan = reference.plan(None, budget).unwrap();
        for n in [1, 7, plan.pages() as u64] {
            let ask = PageAsk {
                path: None,
                budget,
                start: Start::Page(n),
            };
            let want = plan.serve(&reference, plan.start_of(n).unwrap());
            assert_eq!(store.page(&owner, &handle, &ask).unwrap(), want, "page {n}");
        }
        assert!(store.loaded.get(&handle).is_none(), "read whole");
    }

    #[test]
    fn compressed_results_weigh_their_frames_and_read_back_whole() {
        let rows = |n: usize| {
            let rows: Vec<String> = (0..n)
                .map(|i| {
                    format!(
                        "{{\"id\":\"SKU-{i:05}\",\"name\":\"item {i}\",\"stock\":{}}}",
                        i % 97
                    )
                })
                .collect();
            Document::json(format!("[{}]", rows.join(","))).unwrap()
        };
        let whole = rows(20_000).memory() as u64;
        let store = MemoryStore::new(StoreLimits {
            max_bytes: whole * 2,
            ttl: Duration::from_secs(60),
        })
        .compressed(true);
        assert!(
            !store.in_place(),
            "decompressing is no work for an async thread"
        );
        let a = store.put(&session(1), rows(20_000), info()).unwrap();
        let (entries, held) = store.usage();
        assert_eq!(entries, 1);
        assert!(held * 4 < whole, "frames: {held} bytes for {whole}");
        // Read back from its frames once the decoded copy is gone: the
        // same text, index and owner.
        store.loaded.forget(std::slice::from_ref(&a.handle));
        let read = store.get(&session(1), &a.handle).unwrap().stored;
        assert!(!Arc::ptr_eq(&read, &a), "decoded anew");
        assert_eq!(read.doc.text_str(), a.doc.text_str());
        assert_eq!(read.owner, session(1));
        assert_eq!(
            store.get(&session(2), &a.handle).unwrap_err(),
            StoreError::Unknown(a.handle.clone())
        );
        assert_eq!(store.list(&session(1), 10)[0].handle, a.handle);
        // Many fit where two documents would: the bound counts frames.
        let more: Vec<_> = (0..6)
            .map(|_| store.put(&session(1), rows(20_000), info()).unwrap())
            .collect();
        assert_eq!(store.usage().0, 7);
        assert!(store.get(&session(1), &more[5].handle).is_ok());
        // Decoded copies stay within their bound (the last one read aside).
        let decoded: u64 = store.loaded.held();
        assert!(decoded <= (whole * 2 / 8).max(whole), "{decoded}");
    }

    #[test]
    fn unknown_handles_are_quoted_cut() {
        let store = MemoryStore::new(StoreLimits::default());
        let bogus = format!("h_{}", "A".repeat(1 << 20));
        let message = store.get(&session(1), &bogus).unwrap_err().to_string();
        assert!(message.len() < 200, "{}", message.len());
    }

    #[test]
    fn the_operators_listing_holds_every_owners_results_most_recently_used_first() {
        let (clock, store) = clocked();
        let alice = store
            .put(&Owner::Principal("alice".into()), doc(10), info())
            .unwrap();
        clock.advance(Duration::from_secs(1));
        let anonymous = store.put(&Owner::Anonymous, doc(10), info()).unwrap();
        clock.advance(Duration::from_secs(1));
        let session = store.put(&session(3), doc(10), info()).unwrap();
        let handles =
            |limit| -> Vec<String> { store.newest(limit).into_iter().map(|b| b.handle).collect() };
        assert_eq!(
            handles(10),
            [&*session.handle, &anonymous.handle, &alice.handle]
        );
        // A use makes it the most recent; the limit keeps the first.
        clock.advance(Duration::from_secs(1));
        store
            .get(&Owner::Principal("alice".into()), &alice.handle)
            .unwrap();
        assert_eq!(handles(2), [&*alice.handle, &session.handle]);
        assert!(handles(0).is_empty());
        // Expired results are not listed.
        clock.advance(Duration::from_millis(29_500));
        assert_eq!(handles(10), [&*alice.handle]);
    }

    #[test]
    fn unused_entries_expire_at_their_ttl_from_last_use_and_say_so() {
        let (clock, store) = clocked();
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
