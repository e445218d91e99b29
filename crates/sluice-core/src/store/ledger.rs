//! The bookkeeping every store shares: which handles exist, whose they
//! are, when they expire, which was used least recently, how many bytes
//! they hold, and why a handle that is gone went (expired or evicted).
//!
//! The ledger holds a small value per entry (`P`): the stored result
//! itself for [`super::MemoryStore`], where its bytes lie for
//! [`super::DiskStore`]. It never does I/O: what it drops, it returns, and
//! the store deletes it from wherever it lives.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Instant, SystemTime};

use super::{Brief, Owner, StoreError};

/// What a ledger entry holds.
pub(crate) trait Held {
    /// Who may read it.
    fn owner(&self) -> &Owner;
    /// The bytes it holds now (a document's grow as it is read).
    fn bytes(&self) -> u64;
}

/// How many dropped handles are remembered, to say why they are gone.
const GONE_KEPT: usize = 4096;

#[derive(Debug, Clone, Copy)]
enum Gone {
    Expired(Instant),
    Evicted,
}

#[derive(Debug)]
struct Entry<P> {
    held: P,
    tick: u64,
    expires: Instant,
    bytes: u64,
}

/// Entries by handle, with their expiry and last use.
#[derive(Debug)]
pub(crate) struct Ledger<P> {
    entries: HashMap<String, Entry<P>>,
    /// Entries by last use (tick → handle), least recent first.
    lru: BTreeMap<u64, String>,
    tick: u64,
    bytes: u64,
    gone: HashMap<String, (Owner, Gone)>,
    gone_order: VecDeque<String>,
}

impl<P> Default for Ledger<P> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            lru: BTreeMap::new(),
            tick: 0,
            bytes: 0,
            gone: HashMap::new(),
            gone_order: VecDeque::new(),
        }
    }
}

impl<P: Held> Ledger<P> {
    /// Whether `handle` is held.
    pub(crate) fn has(&self, handle: &str) -> bool {
        self.entries.contains_key(handle)
    }

    /// Entries and bytes held.
    pub(crate) fn usage(&self) -> (usize, u64) {
        (self.entries.len(), self.bytes)
    }

    /// Adds `held` under `handle`, the most recently used, until `expires`.
    /// Room is made first ([`Self::make_room`]).
    pub(crate) fn insert(&mut self, handle: String, held: P, expires: Instant) {
        let bytes = held.bytes();
        self.tick += 1;
        let tick = self.tick;
        self.lru.insert(tick, handle.clone());
        self.bytes += bytes;
        if let Some(old) = self.entries.insert(
            handle,
            Entry {
                held,
                tick,
                expires,
                bytes,
            },
        ) {
            self.lru.remove(&old.tick);
            self.bytes -= old.bytes;
        }
    }

    fn remove(&mut self, handle: &str, why: Gone) -> Option<P> {
        let entry = self.entries.remove(handle)?;
        self.lru.remove(&entry.tick);
        self.bytes -= entry.bytes;
        self.gone
            .insert(handle.to_owned(), (entry.held.owner().clone(), why));
        self.gone_order.push_back(handle.to_owned());
        if self.gone_order.len() > GONE_KEPT
            && let Some(old) = self.gone_order.pop_front()
        {
            self.gone.remove(&old);
        }
        Some(entry.held)
    }

    /// Counts `handle`'s bytes again.
    pub(crate) fn recount(&mut self, handle: &str) {
        if let Some(entry) = self.entries.get_mut(handle) {
            let now = entry.held.bytes();
            self.bytes = self.bytes - entry.bytes + now;
            entry.bytes = now;
        }
    }

    /// Counts every entry's bytes again.
    pub(crate) fn recount_all(&mut self) {
        let mut total = 0;
        for entry in self.entries.values_mut() {
            entry.bytes = entry.held.bytes();
            total += entry.bytes;
        }
        self.bytes = total;
    }

    /// Evicts the least recently used entries other than `keep` until
    /// `room` more bytes fit under `max`; returns what it evicted.
    pub(crate) fn make_room(
        &mut self,
        max: u64,
        room: u64,
        keep: Option<&str>,
    ) -> Vec<(String, P)> {
        let mut kept = None;
        let mut evicted = Vec::new();
        while self.bytes + room > max {
            let Some((tick, oldest)) = self.lru.pop_first() else {
                break;
            };
            if Some(oldest.as_str()) == keep {
                kept = Some((tick, oldest));
                continue;
            }
            // Out of the LRU order already: `remove` finds no tick to drop.
            if let Some(held) = self.remove(&oldest, Gone::Evicted) {
                evicted.push((oldest, held));
            }
        }
        if let Some((tick, handle)) = kept {
            self.lru.insert(tick, handle);
        }
        evicted
    }

    /// The most recently used handle.
    pub(crate) fn newest(&self) -> Option<String> {
        self.lru.last_key_value().map(|(_, h)| h.clone())
    }

    /// `handle`, used now: it expires at `expires` instead.
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

    /// `owner`'s entry `handle`, used at `now` (its life renewed until
    /// `renewed`); or why it cannot be read: never issued to `owner`,
    /// expired (`ttl_s` after its last use: the expired entry is dropped and
    /// returned in `Err`'s second part), or evicted.
    pub(crate) fn use_entry(
        &mut self,
        owner: &Owner,
        handle: &str,
        now: Instant,
        renewed: Instant,
        ttl_s: u64,
    ) -> Result<&P, (StoreError, Option<P>)> {
        let found = self
            .entries
            .get(handle)
            .filter(|e| e.held.owner() == owner)
            .map(|e| e.expires);
        match found {
            Some(expires) if expires <= now => {
                let dropped = self.remove(handle, Gone::Expired(expires));
                Err((
                    StoreError::Expired {
                        handle: handle.to_owned(),
                        ago_s: now.duration_since(expires).as_secs(),
                        ttl_s,
                    },
                    dropped,
                ))
            }
            Some(_) => {
                self.touch(handle, renewed);
                Ok(&self.entries[handle].held)
            }
            None => Err((
                match self.gone.get(handle) {
                    Some((o, Gone::Expired(at))) if o == owner => StoreError::Expired {
                        handle: handle.to_owned(),
                        ago_s: now.saturating_duration_since(*at).as_secs(),
                        ttl_s,
                    },
                    Some((o, Gone::Evicted)) if o == owner => {
                        StoreError::Evicted(handle.to_owned())
                    }
                    _ => StoreError::Unknown(handle.to_owned()),
                },
                None,
            )),
        }
    }

    /// `owner`'s entries not expired at `now`, with their expiry.
    pub(crate) fn owned(&self, owner: &Owner, now: Instant) -> Vec<(&str, &P, Instant)> {
        self.entries
            .iter()
            .filter(|(_, e)| e.held.owner() == owner && e.expires > now)
            .map(|(h, e)| (h.as_str(), &e.held, e.expires))
            .collect()
    }

    /// `owner`'s entries not expired at `now` (`wall` on the clock of
    /// day), as `brief` describes them, most recently stored first, at most
    /// `limit`; none for an owner whose ids are never listed.
    pub(crate) fn briefs(
        &self,
        owner: &Owner,
        (now, wall): (Instant, SystemTime),
        limit: usize,
        brief: impl Fn(&P, SystemTime) -> Brief,
    ) -> Vec<Brief> {
        if !owner.may_list() {
            return Vec::new();
        }
        let mut listed: Vec<Brief> = self
            .owned(owner, now)
            .into_iter()
            .map(|(_, held, expires)| brief(held, wall + expires.duration_since(now)))
            .collect();
        listed.sort_by_key(|l| std::cmp::Reverse(l.created));
        listed.truncate(limit);
        listed
    }

    /// Every owner's entries not expired at `now`, as `brief` describes
    /// them, the most recently used first (the latest expiry), at most
    /// `limit`: for the operator's view.
    pub(crate) fn recently_used(
        &self,
        (now, wall): (Instant, SystemTime),
        limit: usize,
        brief: impl Fn(&P, SystemTime) -> Brief,
    ) -> Vec<Brief> {
        let mut live: Vec<(&P, Instant)> = self
            .entries
            .values()
            .filter(|e| e.expires > now)
            .map(|e| (&e.held, e.expires))
            .collect();
        live.sort_by_key(|(_, expires)| std::cmp::Reverse(*expires));
        live.into_iter()
            .take(limit)
            .map(|(held, expires)| brief(held, wall + expires.duration_since(now)))
            .collect()
    }

    /// Drops the entries expired at `now`; returns them.
    pub(crate) fn purge(&mut self, now: Instant) -> Vec<(String, P)> {
        let expired: Vec<(String, Instant)> = self
            .entries
            .iter()
            .filter(|(_, e)| e.expires <= now)
            .map(|(h, e)| (h.clone(), e.expires))
            .collect();
        expired
            .into_iter()
            .filter_map(|(handle, at)| {
                let held = self.remove(&handle, Gone::Expired(at))?;
                Some((handle, held))
            })
            .collect()
    }
}
