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

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::document::Document;
pub use crate::summary::StoredInfo;

mod disk;
pub mod framed;
mod ledger;
mod loaded;
mod memory;
mod reading;

pub use disk::{DiskStore, DiskStoreError, Side};
pub use loaded::{LOADED_BYTES, Loaded, Plans};
pub use memory::MemoryStore;
pub use reading::{FramedPlan, PLANS_PER_RESULT, PageAsk, ReadError, SAVED_PLAN_BYTES};

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

    /// The owner whose [`Owner::key`] is `key`.
    pub fn from_key(key: &str) -> Option<Owner> {
        if key == "anonymous" {
            return Some(Self::Anonymous);
        }
        if let Some(id) = key.strip_prefix("session:") {
            return id.parse().ok().map(Self::Session);
        }
        key.strip_prefix("principal:")
            .map(|name| Self::Principal(name.into()))
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

impl Stored {
    /// A new result of `owner`, stored at `created`, under a new handle.
    pub fn new(owner: &Owner, doc: Document, info: StoredInfo, created: SystemTime) -> Self {
        Self {
            handle: new_handle(),
            owner: owner.clone(),
            doc,
            info,
            created,
        }
    }
}

/// A stored result as listed, with its expiry.
#[derive(Debug, Clone)]
pub struct Listed {
    /// The result.
    pub stored: Arc<Stored>,
    /// When it expires unless used again.
    pub expires_at: SystemTime,
}

/// A stored result as listed: what is known of it, without its document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Brief {
    /// Its handle.
    pub handle: String,
    /// What produced it.
    pub source: String,
    /// What its document holds.
    pub kind: crate::document::Kind,
    /// Bytes of what the upstream sent.
    pub bytes: u64,
    /// Client tokens of what the upstream sent.
    pub tokens: u64,
    /// Whether `tokens` was extrapolated from samples.
    pub tokens_estimated: bool,
    /// When it was stored.
    pub created: SystemTime,
    /// When it expires unless used again.
    pub expires_at: SystemTime,
}

impl Brief {
    /// The brief of `stored`, expiring at `expires_at`.
    pub fn of(stored: &Stored, expires_at: SystemTime) -> Self {
        Self {
            handle: stored.handle.clone(),
            source: stored.info.source.clone(),
            kind: stored.doc.kind(),
            bytes: stored.info.bytes,
            tokens: stored.info.tokens,
            tokens_estimated: stored.info.tokens_estimated,
            created: stored.created,
            expires_at,
        }
    }
}

/// Why a stored result is not available.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Never stored, or stored for someone else.
    #[error("unknown handle `{}`: it was never issued to you", crate::format::quoted_cut(.0))]
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
    /// The backend cannot be read or written.
    #[error("the {backend} store is unavailable: {why}")]
    Unavailable {
        /// `disk` or `redis`.
        backend: &'static str,
        /// What failed.
        why: String,
    },
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
    /// The backend's name, as `[store] backend` spells it.
    fn backend(&self) -> &'static str;
    /// Its bounds: how much, and for how long.
    fn limits(&self) -> StoreLimits;
    /// Whether its calls are quick work in memory, which may run on an
    /// async thread (no I/O, no decompression): else the embedding calls
    /// it where blocking is allowed.
    fn in_place(&self) -> bool {
        false
    }
    /// Stores `doc` for `owner`.
    fn put(
        &self,
        owner: &Owner,
        doc: Document,
        info: StoredInfo,
    ) -> Result<Arc<Stored>, StoreError>;
    /// The result `handle` of `owner`, its time-to-live restarted.
    fn get(&self, owner: &Owner, handle: &str) -> Result<Listed, StoreError>;
    /// Renews `owner`'s result `handle` as [`Store::get`] does, without
    /// reading it; when it expires now.
    fn touch(&self, owner: &Owner, handle: &str) -> Result<SystemTime, StoreError> {
        self.get(owner, handle).map(|listed| listed.expires_at)
    }
    /// Page `ask` of `owner`'s result `handle`, its time-to-live restarted
    /// as [`Store::get`] does. A store that keeps documents outside memory
    /// serves it from the frames the page spans, by the plan saved with
    /// them, where it has one for that path and budget.
    fn page(
        &self,
        owner: &Owner,
        handle: &str,
        ask: &PageAsk,
    ) -> Result<crate::pager::Page, ReadError> {
        ask.serve(&self.get(owner, handle)?.stored.doc)
    }
    /// `owner`'s results, most recently stored first, at most `limit`
    /// (never an anonymous owner's: see [`Owner::may_list`]).
    fn list(&self, owner: &Owner, limit: usize) -> Vec<Brief>;
    /// Every owner's results not expired, the most recently used first, at
    /// most `limit`: for the operator's view, never for a client.
    fn newest(&self, limit: usize) -> Vec<Brief>;
    /// Drops expired entries; returns how many.
    fn purge_expired(&self) -> usize;
    /// Entries and bytes held.
    fn usage(&self) -> (usize, u64);
    /// `Err` with why while the backend fails (its last write failed).
    fn health(&self) -> Result<(), String> {
        Ok(())
    }
    /// Writes what is kept for later (renewed expiries), before an exit.
    fn flush(&self) {}
}

/// Limits of a store.
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

/// Where a store reads the time: lifetimes by [`Clock::now`],
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

/// A new handle: `h_` and 128 random bits.
pub fn new_handle() -> String {
    random_id("h_")
}

/// Whether `s` has the shape of a handle [`new_handle`] makes: a store
/// that keys something by it (a Redis key) refuses any other text first.
pub fn is_handle(s: &str) -> bool {
    s.len() == 24
        && s.starts_with("h_")
        && s[2..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
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

/// Where stored results live: `[store]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoreSettings {
    /// How much is kept, and for how long.
    pub limits: StoreLimits,
    /// Which backend keeps it.
    pub backend: StoreBackend,
    /// Whether documents are kept as zstd frames (`compress`; default true
    /// for disk and redis, which the memory backend ignores).
    pub compress: bool,
    /// The file holding the secret that seals cursors (`secret_file`),
    /// shared by every instance; without it, a key made at start (memory)
    /// or kept beside the disk store.
    pub secret_file: Option<PathBuf>,
}

/// Which backend keeps stored results: `[store] backend`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StoreBackend {
    /// This process's memory (the default): lost at exit.
    #[default]
    Memory,
    /// An embedded database in a directory: survives restarts and crashes.
    Disk {
        /// The directory (`[store] path`).
        path: PathBuf,
    },
    /// A Redis (or Valkey) server shared by several instances.
    Redis {
        /// `redis://` or `rediss://` (`[store] url`, or `SLUICE_REDIS_URL`).
        url: String,
    },
}

impl StoreBackend {
    /// Its name, as `[store] backend` spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Disk { .. } => "disk",
            Self::Redis { .. } => "redis",
        }
    }
}

/// What the stores' tests share.
#[cfg(test)]
pub(crate) mod testing {
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant, SystemTime};

    use super::Clock;

    /// A clock that moves only when told.
    #[derive(Debug)]
    pub(crate) struct ManualClock {
        start: (Instant, SystemTime),
        moved: Mutex<Duration>,
    }

    impl ManualClock {
        pub(crate) fn new() -> Arc<Self> {
            Arc::new(Self {
                start: (Instant::now(), SystemTime::now()),
                moved: Mutex::default(),
            })
        }

        pub(crate) fn advance(&self, by: Duration) {
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
}
