//! Stored results in an embedded database on disk (`[store] backend =
//! "disk"`): they survive a restart, and a crash (`kill -9`) too.
//!
//! The database is one [redb] file, `store.redb`, in the store's directory.
//! redb commits are atomic and, at the durability used for results,
//! synced to disk before [`Store::put`] returns: a handle a client was
//! given is never lost by a crash that follows. The file is checked whole
//! when it is opened, so a damaged or truncated file is refused with an
//! error that names it, never trusted.
//!
//! Three tables:
//! - `results`: handle → what is known of the result ([`Meta`], JSON);
//! - `frames`: (handle, n) → the n-th 64 KiB of its document's text,
//!   compressed with zstd (one frame each, with zstd's checksum) unless
//!   `[store] compress = false`;
//! - `expiry`: handle → when it expires (Unix milliseconds): renewed
//!   expiries are written in batches, when expired entries are purged.
//!
//! And what else sluice keeps beside results ([`Side`]): `cache` (the
//! result cache's entries, written without a sync: a crash may lose the
//! last ones, which are only a cache) and `operations` (operations'
//! records, synced), by key, with `side_index`: key → (expiry, bytes), for
//! purging them and bounding the cache's.
//!
//! After an I/O error (a full disk, say) redb refuses every later
//! operation until the database is opened again: the store then closes it
//! and opens it again on its next use (at most once a second), so that it
//! works again by itself once the disk does; meanwhile every call fails as
//! [`StoreError::Unavailable`].
//!
//! What is in memory is the ledger (owner, size and expiry of every entry,
//! a few bytes each) and the documents read lately (at most
//! [`super::LOADED_BYTES`], and at least the last one): what the store holds does
//! not grow the process. A document is read back whole when it is first
//! used after a restart or after it left that set; its index and overview
//! are made again then.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use redb::{Database, ReadableDatabase as _, ReadableTable as _, TableDefinition};

use super::PLANS_PER_RESULT;
use super::framed::{self, Encoded, Meta, at_millis, millis};
use super::ledger::{Held, Ledger};
use super::{
    Brief, Clock, FramedPlan, Listed, Loaded, Owner, PageAsk, Plans, ReadError, Store, StoreError,
    StoreLimits, Stored, SystemClock,
};
use crate::document::Document;
use crate::pager::Page;
use crate::summary::StoredInfo;

/// handle → [`Meta`] as JSON.
const RESULTS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("results");
/// (handle, frame number) → the frame.
const FRAMES: TableDefinition<'_, (&str, u32), &[u8]> = TableDefinition::new("frames");
/// handle → when it expires, in Unix milliseconds.
const EXPIRY: TableDefinition<'_, &str, u64> = TableDefinition::new("expiry");
/// `{handle}/{plan key}` → a page plan of the document, saved
/// ([`crate::pager::save`]): what makes its pages O(page) to read back.
const PLANS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("plans");
/// Cache entries, by key.
const CACHE: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("cache");
/// Operations' records, by id.
const OPERATIONS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("operations");
/// `c:{key}` or `o:{id}` → (expiry in Unix ms, bytes).
const SIDE_INDEX: TableDefinition<'_, &str, (u64, u64)> = TableDefinition::new("side_index");

/// State kept beside results in the store's file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The result cache's entries: written without a sync, bounded by
    /// [`DiskStore::bound_cache`] (the entries nearest their end go first).
    Cache,
    /// Operations' records: synced when written.
    Operations,
}

impl Side {
    fn table(self) -> TableDefinition<'static, &'static str, &'static [u8]> {
        match self {
            Side::Cache => CACHE,
            Side::Operations => OPERATIONS,
        }
    }

    fn index_key(self, key: &str) -> String {
        match self {
            Side::Cache => format!("c:{key}"),
            Side::Operations => format!("o:{key}"),
        }
    }
}

/// The database file in the store's directory.
pub const FILE: &str = "store.redb";
/// redb's page cache (its default is 1 GiB, filled by the check at open:
/// the process would grow with the store). Frames are read once per
/// document read back, which is then kept decoded.
const DB_CACHE_BYTES: usize = 16 << 20;
/// The least time between two attempts to open the database again.
const REOPEN_EVERY: Duration = Duration::from_secs(1);

/// Opens the database, checking the whole file first (`true`: at start) or
/// not (opened again after an I/O error: redb repairs what a failed
/// commit left, and a check that reads the whole file would hold up every
/// call meanwhile).
type Opener = Box<dyn Fn(bool) -> Result<Database, redb::DatabaseError> + Send + Sync>;

/// Why the disk store cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum DiskStoreError {
    /// The directory cannot be made or used.
    #[error("[store] path {}: cannot use the directory: {source}", .path.display())]
    Directory {
        /// The directory.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// Another process has the file open.
    #[error(
        "[store] path {}: the store is in use by another sluice process; give each instance its own `[store] path`, or share results between instances with `backend = \"redis\"`",
        .path.display()
    )]
    InUse {
        /// The file.
        path: PathBuf,
    },
    /// The file is damaged, truncated or not a store.
    #[error(
        "[store] path {}: the store file is damaged or is not a sluice store ({why}); move it away to start with an empty store",
        .path.display()
    )]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What the database said.
        why: String,
    },
}

/// A ledger entry: what it weighs on disk, and what a listing shows.
#[derive(Debug)]
struct OnDisk {
    owner: Owner,
    stored_bytes: u64,
    /// Its brief (`expires_at` aside: the ledger keeps the expiry).
    brief: Brief,
}

impl Held for OnDisk {
    fn owner(&self) -> &Owner {
        &self.owner
    }

    fn bytes(&self) -> u64 {
        self.stored_bytes
    }
}

/// Stored results on disk.
pub struct DiskStore {
    limits: StoreLimits,
    compress: bool,
    path: PathBuf,
    /// The database; `None` once an I/O error closed it, until it is
    /// opened again.
    db: RwLock<Option<Database>>,
    /// Opens the database (again).
    opener: Opener,
    /// When it was last opened again (or tried to be).
    reopened: Mutex<Option<std::time::Instant>>,
    /// The most bytes of cache entries kept ([`DiskStore::bound_cache`]).
    cache_bytes: std::sync::atomic::AtomicU64,
    /// Cache entries were written without a sync since the last one.
    unsynced: std::sync::atomic::AtomicBool,
    ledger: Mutex<Ledger<OnDisk>>,
    /// Documents read back lately, the most recent last.
    loaded: Loaded,
    /// Page plans read back lately.
    plans: Plans,
    /// Expiries renewed since they were last written, by handle.
    renewed: Mutex<HashMap<String, u64>>,
    /// The last write that failed, until one succeeds.
    failing: Mutex<Option<String>>,
    /// See [`DiskStore::dropped_at_open`].
    dropped_at_open: std::sync::atomic::AtomicUsize,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for DiskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl DiskStore {
    /// Opens (or creates) the store in directory `dir`, on the system's
    /// clocks.
    pub fn open(dir: &Path, limits: StoreLimits, compress: bool) -> Result<Self, DiskStoreError> {
        Self::open_with_clock(dir, limits, compress, Arc::new(SystemClock))
    }

    /// [`Self::open`], reading the time from `clock`.
    pub fn open_with_clock(
        dir: &Path,
        limits: StoreLimits,
        compress: bool,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, DiskStoreError> {
        let path = dir.join(FILE);
        owner_only(dir, &path).map_err(|source| DiskStoreError::Directory {
            path: dir.to_owned(),
            source,
        })?;
        let file = path.clone();
        let opener: Opener = Box::new(move |check| {
            Database::builder()
                .set_cache_size(DB_CACHE_BYTES)
                .set_check_integrity_on_open(check)
                .create(&file)
        });
        Self::with_opener(path, limits, compress, clock, opener)
    }

    /// The store of the database `opener` opens (the file `path`, as
    /// messages name it).
    fn with_opener(
        path: PathBuf,
        limits: StoreLimits,
        compress: bool,
        clock: Arc<dyn Clock>,
        opener: Opener,
    ) -> Result<Self, DiskStoreError> {
        let damaged = |why: String| DiskStoreError::Damaged {
            path: path.clone(),
            why,
        };
        // A damaged file fails the check as `Corrupted`; a plain open may
        // panic on one, so the check is caught too.
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| opener(true)));
        let db = match opened {
            Ok(Ok(db)) => db,
            Ok(Err(redb::DatabaseError::DatabaseAlreadyOpen)) => {
                return Err(DiskStoreError::InUse { path });
            }
            Ok(Err(redb::DatabaseError::Storage(redb::StorageError::Io(source))))
                if !matches!(
                    source.kind(),
                    std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof
                ) =>
            {
                return Err(DiskStoreError::Directory { path, source });
            }
            Ok(Err(e)) => return Err(damaged(e.to_string())),
            Err(_) => return Err(damaged("reading it failed".into())),
        };
        let store = Self {
            limits,
            compress,
            path: path.clone(),
            db: RwLock::new(Some(db)),
            opener,
            reopened: Mutex::default(),
            cache_bytes: std::sync::atomic::AtomicU64::new(256 << 20),
            unsynced: Default::default(),
            ledger: Mutex::default(),
            loaded: Loaded::new(limits.max_bytes),
            plans: Plans::default(),
            renewed: Mutex::default(),
            failing: Mutex::default(),
            dropped_at_open: Default::default(),
            clock,
        };
        store.load().map_err(damaged)?;
        Ok(store)
    }

    /// Reads the ledger back from the file, in the order the entries were
    /// last used (their expiry is last use + ttl), and keeps it within
    /// `max_bytes`; drops what expired meanwhile, and the entries another
    /// version of sluice wrote that this one does not read.
    fn load(&self) -> Result<(), String> {
        let db = self.db.read().unwrap_or_else(|p| p.into_inner());
        let Some(db) = db.as_ref() else {
            return Err("the database is closed".into());
        };
        let txn = db.begin_write().map_err(|e| e.to_string())?;
        let now = self.clock.now();
        let wall = self.clock.wall();
        let mut dropped = Vec::new();
        let mut kept = Vec::new();
        {
            let results = txn.open_table(RESULTS).map_err(|e| e.to_string())?;
            let expiry = txn.open_table(EXPIRY).map_err(|e| e.to_string())?;
            txn.open_table(FRAMES).map_err(|e| e.to_string())?;
            txn.open_table(PLANS).map_err(|e| e.to_string())?;
            for row in results.iter().map_err(|e| e.to_string())? {
                let (handle, meta) = row.map_err(|e| e.to_string())?;
                let handle = handle.value().to_owned();
                let expires_ms = expiry
                    .get(handle.as_str())
                    .map_err(|e| e.to_string())?
                    .map_or(0, |v| v.value());
                let expires = at_millis(expires_ms);
                let meta_bytes = meta.value().len() as u64;
                let entry = Meta::parse(meta.value()).and_then(|meta| {
                    let (owner, brief) = meta.brief(&handle, expires)?;
                    Some(OnDisk {
                        owner,
                        stored_bytes: meta.stored_bytes + meta_bytes,
                        brief,
                    })
                });
                match (entry, expires.duration_since(wall)) {
                    (Some(entry), Ok(left)) => kept.push((expires_ms, handle, entry, left)),
                    (None, _) => {
                        self.dropped_at_open
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        dropped.push(handle);
                    }
                    (Some(_), Err(_)) => dropped.push(handle),
                }
            }
        }
        kept.sort_by_key(|(expires_ms, ..)| *expires_ms);
        {
            let mut ledger = self.lock();
            for (_, handle, entry, left) in kept {
                // Never longer than a ttl from now: the clock may have gone
                // back, or `ttl_s` been lowered, since it was written.
                ledger.insert(handle, entry, now + left.min(self.limits.ttl));
            }
            dropped.extend(
                ledger
                    .make_room(self.limits.max_bytes, 0, None)
                    .into_iter()
                    .map(|(handle, _)| handle),
            );
        }
        for handle in &dropped {
            delete(&txn, handle).map_err(|e| e.to_string())?;
        }
        txn.commit().map_err(|e| e.to_string())?;
        Ok(())
    }

    /// How many entries the store dropped when it was opened because this
    /// version of sluice does not read them (written by another).
    pub fn dropped_at_open(&self) -> usize {
        self.dropped_at_open
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Where the store's file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records how the last write went (see [`Store::health`]).
    fn note(&self, outcome: Result<(), String>) {
        *self.failing.lock().unwrap_or_else(|p| p.into_inner()) = outcome.err();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ledger<OnDisk>> {
        self.ledger.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the database. An I/O error closes it (redb would refuse
    /// everything after one): the next use opens it again, at most once
    /// every [`REOPEN_EVERY`].
    fn with_db<T>(&self, f: impl FnOnce(&Database) -> Result<T, redb::Error>) -> Result<T, String> {
        if self.db.read().unwrap_or_else(|p| p.into_inner()).is_none() {
            self.reopen()?;
        }
        let outcome = match &*self.db.read().unwrap_or_else(|p| p.into_inner()) {
            Some(db) => f(db),
            None => return Err("the database is closed after an I/O error".into()),
        };
        outcome.map_err(|e| {
            if matches!(e, redb::Error::Io(_) | redb::Error::PreviousIo) {
                // Dropped once every reader is done with it.
                *self.db.write().unwrap_or_else(|p| p.into_inner()) = None;
            }
            e.to_string()
        })
    }

    /// Bounds the cache entries kept ([`Side::Cache`]) to `bytes`.
    pub fn bound_cache(&self, bytes: u64) {
        self.cache_bytes
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// The value under `key` in `side`, unless it expired.
    pub fn side_get(&self, side: Side, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let now = millis(self.clock.wall());
        let index_key = side.index_key(key);
        self.with_db(|db| {
            let txn = db.begin_read()?;
            let index = match txn.open_table(SIDE_INDEX) {
                Ok(index) => index,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            let live = index
                .get(index_key.as_str())?
                .is_some_and(|entry| entry.value().0 > now);
            if !live {
                return Ok(None);
            }
            Ok(txn
                .open_table(side.table())?
                .get(key)?
                .map(|v| v.value().to_vec()))
        })
        .map_err(|e| self.unavailable(e))
    }

    /// Keeps `value` under `key` in `side` until `expires`, replacing what
    /// was there.
    pub fn side_put(
        &self,
        side: Side,
        key: &str,
        value: &[u8],
        expires: SystemTime,
    ) -> Result<(), StoreError> {
        let index_key = side.index_key(key);
        self.with_db(|db| {
            let mut txn = db.begin_write()?;
            if side == Side::Cache {
                txn.set_durability(redb::Durability::None)?;
            }
            txn.open_table(side.table())?.insert(key, value)?;
            txn.open_table(SIDE_INDEX)?
                .insert(index_key.as_str(), (millis(expires), value.len() as u64))?;
            txn.commit()?;
            Ok(())
        })
        .map_err(|e| self.unavailable(e))?;
        if side == Side::Cache {
            self.unsynced
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }

    /// Drops the side entries that expired, and the cache entries nearest
    /// their end beyond the cache's bound.
    fn purge_side(&self) -> Result<(), String> {
        let now = millis(self.clock.wall());
        let bound = self.cache_bytes.load(std::sync::atomic::Ordering::Relaxed);
        self.with_db(|db| {
            let txn = db.begin_write()?;
            {
                let mut index = txn.open_table(SIDE_INDEX)?;
                let mut cache: Vec<(u64, u64, String)> = Vec::new();
                let mut gone = Vec::new();
                for row in index.iter()? {
                    let (key, entry) = row?;
                    let (expires, bytes) = entry.value();
                    let key = key.value().to_owned();
                    if expires <= now {
                        gone.push(key);
                    } else if key.starts_with("c:") {
                        cache.push((expires, bytes, key));
                    }
                }
                let mut held: u64 = cache.iter().map(|(_, bytes, _)| bytes).sum();
                cache.sort();
                for (_, bytes, key) in cache {
                    if held <= bound {
                        break;
                    }
                    held -= bytes;
                    gone.push(key);
                }
                let mut cached = txn.open_table(CACHE)?;
                let mut operations = txn.open_table(OPERATIONS)?;
                for key in &gone {
                    index.remove(key.as_str())?;
                    if let Some(key) = key.strip_prefix("c:") {
                        cached.remove(key)?;
                    } else if let Some(key) = key.strip_prefix("o:") {
                        operations.remove(key)?;
                    }
                }
            }
            txn.commit()?;
            Ok(())
        })
    }

    /// Opens the database again after an I/O error closed it.
    fn reopen(&self) -> Result<(), String> {
        let now = self.clock.now();
        {
            let mut last = self.reopened.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|at| now.saturating_duration_since(at) < REOPEN_EVERY) {
                return Err(
                    "the database is closed after an I/O error; it is opened again shortly".into(),
                );
            }
            *last = Some(now);
        }
        let mut db = self.db.write().unwrap_or_else(|p| p.into_inner());
        if db.is_none() {
            let opened =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.opener)(false)))
                    .map_err(|_| "opening it again failed: it does not read".to_owned())?
                    .map_err(|e| format!("opening it again failed: {e}"))?;
            *db = Some(opened);
        }
        Ok(())
    }

    fn unavailable(&self, why: impl std::fmt::Display) -> StoreError {
        StoreError::Unavailable {
            backend: "disk",
            why: format!("{} ({why})", self.path.display()),
        }
    }

    /// Deletes `handles` from the file (evicted or expired).
    fn delete_all(&self, handles: &[String]) {
        if handles.is_empty() {
            return;
        }
        let deleted = self.with_db(|db| {
            let txn = db.begin_write()?;
            for handle in handles {
                delete(&txn, handle)?;
            }
            txn.commit()?;
            Ok(())
        });
        // Out of the ledger either way: a later start finds what was not
        // deleted and, expired, deletes it then.
        self.note(deleted.map_err(|e| format!("deleting {} results failed: {e}", handles.len())));
        self.loaded.forget(handles);
        self.plans.forget(handles);
    }

    /// Why `handle` is gone, if it left the ledger (evicted) after it was
    /// found there.
    fn gone_meanwhile(&self, owner: &Owner, handle: &str) -> Option<StoreError> {
        let now = self.clock.now();
        let mut ledger = self.lock();
        if ledger.has(handle) {
            return None;
        }
        ledger
            .use_entry(owner, handle, now, now, self.limits.ttl.as_secs())
            .err()
            .map(|(e, _)| e)
    }

    /// Reads `handle` back from the file.
    fn read(&self, handle: &str) -> Result<Arc<Stored>, StoreError> {
        let (meta, frames) = self
            .with_db(|db| {
                let txn = db.begin_read()?;
                let meta = txn
                    .open_table(RESULTS)?
                    .get(handle)?
                    .map(|meta| meta.value().to_vec());
                let Some(meta) = meta else {
                    return Ok(None);
                };
                let table = txn.open_table(FRAMES)?;
                let mut frames = Vec::new();
                while let Some(frame) = table.get((handle, frames.len() as u32))? {
                    frames.push(frame.value().to_vec());
                }
                Ok(Some((meta, frames)))
            })
            .map_err(|e| self.unavailable(e))?
            .ok_or_else(|| self.unavailable(format!("{handle} is missing from the file")))?;
        let meta = Meta::parse(&meta)
            .ok_or_else(|| self.unavailable(format!("the entry of {handle} does not read")))?;
        framed::decode(handle, meta, &frames)
            .map(Arc::new)
            .map_err(|e| self.unavailable(e))
    }

    /// Page `ask` served from `doc`, the document of `handle`; a plan it
    /// made for the page is saved as `key` beside the result (while it is
    /// still there, within the plans' bounds) for the next first read.
    fn served_and_saved(
        &self,
        handle: &str,
        key: &str,
        doc: &Document,
        ask: &PageAsk,
    ) -> Result<Page, ReadError> {
        let (page, saved) = ask.serve_and_save(doc)?;
        let Some(saved) = saved else {
            return Ok(page);
        };
        let written = self.with_db(|db| {
            let txn = db.begin_write()?;
            {
                let mut plans = txn.open_table(PLANS)?;
                let (from, to) = (format!("{handle}/"), format!("{handle}0"));
                let kept = plans.range(from.as_str()..to.as_str())?.count();
                // Only beside a result still there (not evicted or expired
                // meanwhile: its rows are gone).
                if txn.open_table(RESULTS)?.get(handle)?.is_some() && kept < PLANS_PER_RESULT {
                    plans.insert(plan_row(handle, key).as_str(), saved.as_slice())?;
                }
            }
            txn.commit()?;
            Ok(())
        });
        self.note(written.map_err(|e| format!("saving a page plan failed: {e}")));
        Ok(page)
    }

    /// `handle`'s saved plan `key`, read back (and kept), if it has one
    /// that reads.
    fn read_plan(&self, handle: &str, key: &str) -> Result<Option<Arc<FramedPlan>>, StoreError> {
        let rows = self
            .with_db(|db| {
                let txn = db.begin_read()?;
                let plan = txn
                    .open_table(PLANS)?
                    .get(plan_row(handle, key).as_str())?
                    .map(|p| p.value().to_vec());
                let Some(plan) = plan else {
                    return Ok(None);
                };
                let meta = txn
                    .open_table(RESULTS)?
                    .get(handle)?
                    .map(|m| m.value().to_vec());
                Ok(meta.map(|meta| (meta, plan)))
            })
            .map_err(|e| self.unavailable(e))?;
        let Some((meta, plan)) = rows else {
            return Ok(None);
        };
        let plan = Meta::parse(&meta)
            .and_then(|meta| FramedPlan::of(&meta, &plan))
            .map(Arc::new);
        if let Some(plan) = &plan {
            self.plans.keep(handle, key, plan.clone());
        }
        Ok(plan)
    }

    /// Writes `stored` to the file, synced: its frames, what is known of
    /// it, and its expiry.
    fn write(&self, stored: &Stored, expires: SystemTime) -> Result<u64, StoreError> {
        let Encoded {
            meta,
            frames,
            weight,
            plans,
        } = framed::encode(stored, self.compress).map_err(|e| self.unavailable(e))?;
        if weight > self.limits.max_bytes {
            return Err(StoreError::TooLarge {
                bytes: weight,
                max: self.limits.max_bytes,
            });
        }
        let written = self.with_db(|db| {
            let txn = db.begin_write()?;
            {
                let mut table = txn.open_table(FRAMES)?;
                for (n, frame) in frames.iter().enumerate() {
                    table.insert((stored.handle.as_str(), n as u32), frame.as_slice())?;
                }
                let mut table = txn.open_table(PLANS)?;
                for (key, plan) in &plans {
                    table.insert(plan_row(&stored.handle, key).as_str(), plan.as_slice())?;
                }
                txn.open_table(RESULTS)?
                    .insert(stored.handle.as_str(), meta.as_slice())?;
                txn.open_table(EXPIRY)?
                    .insert(stored.handle.as_str(), millis(expires))?;
            }
            txn.commit()?;
            Ok(())
        });
        self.note(
            written
                .as_ref()
                .map(|_| ())
                .map_err(|e| format!("storing a result failed: {e}")),
        );
        written.map_err(|e| self.unavailable(e))?;
        Ok(weight)
    }

    /// Writes the expiries renewed since the last time, synced with the
    /// cache entries written since the last sync.
    pub fn flush(&self) {
        let renewed = std::mem::take(&mut *self.renewed.lock().unwrap_or_else(|p| p.into_inner()));
        let unsynced = self
            .unsynced
            .swap(false, std::sync::atomic::Ordering::Relaxed);
        if renewed.is_empty() && !unsynced {
            return;
        }
        let written = self.with_db(|db| {
            let txn = db.begin_write()?;
            {
                let results = txn.open_table(RESULTS)?;
                let mut expiry = txn.open_table(EXPIRY)?;
                for (handle, ms) in &renewed {
                    // Not one deleted meanwhile.
                    if results.get(handle.as_str())?.is_some() {
                        expiry.insert(handle.as_str(), *ms)?;
                    }
                }
            }
            txn.commit()?;
            Ok(())
        });
        if written.is_err() {
            if unsynced {
                self.unsynced
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            }
            // Kept for the next time, unless renewed again meanwhile.
            let mut later = self.renewed.lock().unwrap_or_else(|p| p.into_inner());
            for (handle, ms) in renewed {
                let at = later.entry(handle).or_insert(ms);
                *at = (*at).max(ms);
            }
        }
        self.note(written.map_err(|e| format!("writing renewed expiries failed: {e}")));
    }
}

/// Makes the store's directory (and its file, if new) readable by their
/// owner only: they hold every stored tool result.
fn owner_only(dir: &Path, file: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(file) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes `handle`'s rows: every frame of it, whatever its entry says.
fn delete(txn: &redb::WriteTransaction, handle: &str) -> Result<(), redb::Error> {
    txn.open_table(RESULTS)?.remove(handle)?;
    txn.open_table(FRAMES)?
        .retain_in((handle, 0)..=(handle, u32::MAX), |_, _| false)?;
    txn.open_table(EXPIRY)?.remove(handle)?;
    // Every `{handle}/…` row: `0` follows `/`.
    let (from, to) = (format!("{handle}/"), format!("{handle}0"));
    txn.open_table(PLANS)?
        .retain_in(from.as_str()..to.as_str(), |_, _| false)?;
    Ok(())
}

/// The row of `handle`'s plan `key` in [`PLANS`].
fn plan_row(handle: &str, key: &str) -> String {
    format!("{handle}/{key}")
}

impl Store for DiskStore {
    fn backend(&self) -> &'static str {
        "disk"
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
        let stored = Arc::new(Stored::new(owner, doc, info, self.clock.wall()));
        let stored_bytes = self.write(&stored, self.clock.wall() + self.limits.ttl)?;
        let evicted = {
            let mut ledger = self.lock();
            let evicted = ledger.make_room(self.limits.max_bytes, stored_bytes, None);
            ledger.insert(
                stored.handle.clone(),
                OnDisk {
                    owner: owner.clone(),
                    stored_bytes,
                    brief: Brief::of(&stored, stored.created),
                },
                self.clock.now() + self.limits.ttl,
            );
            evicted
        };
        let evicted: Vec<String> = evicted.into_iter().map(|(h, _)| h).collect();
        self.delete_all(&evicted);
        self.loaded.keep(stored.clone());
        Ok(stored)
    }

    fn get(&self, owner: &Owner, handle: &str) -> Result<Listed, StoreError> {
        let expires_at = self.touch(owner, handle)?;
        let stored = match self.loaded.get(handle) {
            Some(stored) => stored,
            None => match self.read(handle) {
                Ok(stored) => stored,
                // Evicted by another put since it was found: say so.
                Err(e) => return Err(self.gone_meanwhile(owner, handle).unwrap_or(e)),
            },
        };
        // Not kept if it was evicted while it was read.
        if self.lock().has(handle) {
            self.loaded.keep(stored.clone());
        }
        Ok(Listed { stored, expires_at })
    }

    fn touch(&self, owner: &Owner, handle: &str) -> Result<SystemTime, StoreError> {
        let now = self.clock.now();
        let used = self
            .lock()
            .use_entry(
                owner,
                handle,
                now,
                now + self.limits.ttl,
                self.limits.ttl.as_secs(),
            )
            .map(|_| ())
            .map_err(|(e, dropped)| (e, dropped.is_some()));
        if let Err((e, dropped)) = used {
            if dropped {
                self.delete_all(&[handle.to_owned()]);
            }
            return Err(e);
        }
        let expires_at = self.clock.wall() + self.limits.ttl;
        self.renewed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(handle.to_owned(), millis(expires_at));
        Ok(expires_at)
    }

    fn page(&self, owner: &Owner, handle: &str, ask: &PageAsk) -> Result<Page, ReadError> {
        let Some(key) = ask.key() else {
            return ask.serve(&self.get(owner, handle)?.stored.doc);
        };
        if self.loaded.get(handle).is_some() {
            // Held decoded here: served from it, and a plan made now is
            // saved for the next first read.
            let stored = self.get(owner, handle)?.stored;
            return self.served_and_saved(handle, &key, &stored.doc, ask);
        }
        self.touch(owner, handle)?;
        let plan = match self.plans.get(handle, &key) {
            Some(plan) => Some(plan),
            None => self.read_plan(handle, &key)?,
        };
        let Some(plan) = plan else {
            // No plan of this path and budget yet: planned from the whole
            // document, once, and saved for the next first read.
            let stored = self.get(owner, handle)?.stored;
            return self.served_and_saved(handle, &key, &stored.doc, ask);
        };
        plan.page(ask.start, "disk", |numbers| {
            let frames = self
                .with_db(|db| {
                    let txn = db.begin_read()?;
                    let table = txn.open_table(FRAMES)?;
                    let mut frames = Vec::with_capacity(numbers.len());
                    for &n in numbers {
                        match table.get((handle, n))? {
                            Some(frame) => frames.push(frame.value().to_vec()),
                            None => break,
                        }
                    }
                    Ok(frames)
                })
                .map_err(|e| self.unavailable(e))?;
            match (frames.len() < numbers.len())
                .then(|| self.gone_meanwhile(owner, handle))
                .flatten()
            {
                // Evicted or expired since it was found: say so.
                Some(gone) => Err(gone),
                None => Ok(frames),
            }
        })
    }

    fn list(&self, owner: &Owner, limit: usize) -> Vec<Brief> {
        let when = (self.clock.now(), self.clock.wall());
        self.lock()
            .briefs(owner, when, limit, |entry, expires_at| Brief {
                expires_at,
                ..entry.brief.clone()
            })
    }

    fn newest(&self, limit: usize) -> Vec<Brief> {
        let when = (self.clock.now(), self.clock.wall());
        self.lock()
            .recently_used(when, limit, |entry, expires_at| Brief {
                expires_at,
                ..entry.brief.clone()
            })
    }

    fn purge_expired(&self) -> usize {
        let now = self.clock.now();
        let purged: Vec<String> = self.lock().purge(now).into_iter().map(|(h, _)| h).collect();
        self.delete_all(&purged);
        self.flush();
        if let Err(why) = self.purge_side() {
            self.note(Err(format!(
                "dropping expired cache entries and operations failed: {why}"
            )));
        }
        purged.len()
    }

    fn usage(&self) -> (usize, u64) {
        self.lock().usage()
    }

    fn health(&self) -> Result<(), String> {
        match &*self.failing.lock().unwrap_or_else(|p| p.into_inner()) {
            None => Ok(()),
            Some(why) => Err(format!("{}: {why}", self.path.display())),
        }
    }

    fn flush(&self) {
        DiskStore::flush(self);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::document::Kind;
    use crate::store::framed::FRAME_BYTES;
    use crate::store::testing::ManualClock;
    use crate::summary::Overview;

    /// A directory of its own for one test, removed when dropped.
    struct Dir(PathBuf);

    impl Dir {
        fn new() -> Self {
            Self(std::env::temp_dir().join(super::super::random_id("sluice-disk-test-")))
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn limits(max_bytes: u64) -> StoreLimits {
        StoreLimits {
            max_bytes,
            ttl: Duration::from_secs(30),
        }
    }

    fn info(source: &str, doc: &Document) -> StoredInfo {
        StoredInfo {
            source: source.into(),
            bytes: 1234,
            chars: 1200,
            tokens: 300,
            tokens_estimated: true,
            is_error: false,
            sent_twice: true,
            overview: Overview::of(doc),
        }
    }

    fn rows(n: usize) -> Document {
        let rows: Vec<String> = (0..n)
            .map(|i| format!(r#"{{"id": {i}, "name": "row {i}", "tags": ["a", "b"]}}"#))
            .collect();
        Document::json(format!(r#"{{"rows": [{}], "n": {n}}}"#, rows.join(", "))).unwrap()
    }

    fn put(store: &DiskStore, owner: &Owner, doc: Document) -> Arc<Stored> {
        let info = info("t", &doc);
        store.put(owner, doc, info).unwrap()
    }

    /// A database in memory whose writes fail (as on a full disk) while
    /// `full` is set; what it holds outlives a reopening.
    #[derive(Debug)]
    struct FillingDisk {
        bytes: Arc<redb::backends::InMemoryBackend>,
        full: Arc<std::sync::atomic::AtomicBool>,
    }

    impl FillingDisk {
        fn check(&self) -> std::io::Result<()> {
            if self.full.load(std::sync::atomic::Ordering::Relaxed) {
                return Err(std::io::Error::from(std::io::ErrorKind::StorageFull));
            }
            Ok(())
        }
    }

    impl redb::StorageBackend for FillingDisk {
        fn len(&self) -> std::io::Result<u64> {
            self.bytes.len()
        }
        fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
            self.bytes.read(offset, out)
        }
        fn set_len(&self, len: u64) -> std::io::Result<()> {
            self.check()?;
            self.bytes.set_len(len)
        }
        fn sync_data(&self) -> std::io::Result<()> {
            self.check()?;
            self.bytes.sync_data()
        }
        fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
            self.check()?;
            self.bytes.write(offset, data)
        }
    }

    #[test]
    fn a_full_disk_fails_what_must_be_written_and_the_store_recovers_by_itself() {
        let bytes = Arc::new(redb::backends::InMemoryBackend::new());
        let full = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let disk = (bytes.clone(), full.clone());
        let opener: Opener = Box::new(move |_| {
            Database::builder().create_with_backend(FillingDisk {
                bytes: disk.0.clone(),
                full: disk.1.clone(),
            })
        });
        let clock = ManualClock::new();
        let store = DiskStore::with_opener(
            PathBuf::from("/var/lib/sluice/store.redb"),
            limits(1 << 30),
            true,
            clock.clone(),
            opener,
        )
        .unwrap();
        let owner = Owner::Principal("alice".into());
        let before = put(&store, &owner, rows(2000));
        assert_eq!(store.health(), Ok(()));

        full.store(true, std::sync::atomic::Ordering::Relaxed);
        let doc = rows(10);
        let about = info("t", &doc);
        let failed = store.put(&owner, doc, about).unwrap_err();
        assert!(
            matches!(&failed, StoreError::Unavailable { backend: "disk", why } if why.contains("/var/lib/sluice/store.redb")),
            "{failed:?}"
        );
        let problem = store.health().unwrap_err();
        assert!(problem.contains("storing a result failed"), "{problem}");
        // Nothing half-stored: only the result from before is held.
        assert_eq!(store.usage().0, 1);
        // Still full a while later: opened again, and the write fails again.
        clock.advance(Duration::from_secs(2));
        let doc = rows(10);
        let about = info("t", &doc);
        assert!(matches!(
            store.put(&owner, doc, about),
            Err(StoreError::Unavailable { .. })
        ));
        assert!(store.health().is_err());

        // The disk has room again: the next write opens the database again
        // (after a second) and works; what was stored before reads back.
        full.store(false, std::sync::atomic::Ordering::Relaxed);
        clock.advance(Duration::from_secs(2));
        let after = put(&store, &owner, rows(20));
        assert_eq!(store.health(), Ok(()));
        store.loaded.forget(std::slice::from_ref(&before.handle));
        let read = store.get(&owner, &before.handle).unwrap().stored;
        assert_eq!(read.doc.text_str(), before.doc.text_str());
        assert!(store.get(&owner, &after.handle).is_ok());
        assert_eq!(store.usage().0, 2);
    }

    /// The pages of `doc` for `budget`, by number, served from the whole
    /// document.
    fn reference_pages(doc: &Document, budget: crate::budget::Budget) -> Vec<Page> {
        let plan = doc.plan(None, budget).unwrap();
        (1..=plan.pages() as u64)
            .map(|n| plan.serve(doc, plan.start_of(n).unwrap()))
            .collect()
    }

    #[test]
    fn pages_read_back_from_the_frames_they_span_by_the_plan_saved() {
        use crate::pager::Start;
        let dir = Dir::new();
        let clock = ManualClock::new();
        let open =
            || DiskStore::open_with_clock(&dir.0, limits(1 << 30), true, clock.clone()).unwrap();
        let owner = Owner::Principal("alice".into());
        let budget = |tokens| crate::budget::Budget {
            max_tokens: tokens,
            max_chars: tokens * 4,
            max_lines: None,
            token_factor: 1.0,
        };
        let doc = rows(20_000);
        let text = doc.text_str().to_owned();
        assert!(text.len() > 8 * FRAME_BYTES, "{}", text.len());
        // Planned for its caller before it is stored, as the governor does.
        doc.plan(None, budget(2000)).unwrap();
        let handle = put(&open(), &owner, doc).handle.clone();
        let reference = Document::json(text).unwrap();
        let expected = reference_pages(&reference, budget(2000));
        assert!(expected.len() > 20, "{}", expected.len());

        // After a restart: every page by number and along the cursors, each
        // read from its frames, never the whole document.
        let store = open();
        let ask = |start, tokens| PageAsk {
            path: None,
            budget: budget(tokens),
            start,
        };
        for (n, want) in expected.iter().enumerate() {
            let page = store
                .page(&owner, &handle, &ask(Start::Page(n as u64 + 1), 2000))
                .unwrap();
            assert_eq!(&page, want, "page {}", n + 1);
        }
        let mut at = expected[0].next;
        let mut followed = 1;
        while let Some(from) = at {
            let page = store
                .page(&owner, &handle, &ask(Start::At(from), 2000))
                .unwrap();
            at = page.next;
            followed += 1;
        }
        assert!(followed >= expected.len());
        assert!(store.loaded.get(&handle).is_none(), "read whole");

        // What cannot be served says why, as from a whole document.
        assert!(matches!(
            store.page(&owner, &handle, &ask(Start::Page(10_000), 2000)),
            Err(ReadError::Page(crate::pager::PageError::OutOfRange { .. }))
        ));
        let nowhere = crate::pager::Position {
            seg: 1,
            unit: 0,
            byte: 3,
            char: 0,
        };
        assert_eq!(
            store.page(&owner, &handle, &ask(Start::At(nowhere), 2000)),
            Err(ReadError::Cursor)
        );
        // A path too long to key a plan by is planned each time: a path
        // that leads nowhere says so, and the store goes on serving.
        let long = PageAsk {
            path: Some(format!("/rows/{}", "9".repeat(2000))),
            budget: budget(2000),
            start: Start::Page(1),
        };
        assert!(long.key().is_none());
        assert!(matches!(
            store.page(&owner, &handle, &long),
            Err(ReadError::Page(crate::pager::PageError::Pointer(_)))
        ));
        store.loaded.forget(std::slice::from_ref(&handle));
        let mallory = Owner::Principal("mallory".into());
        assert!(matches!(
            store.page(&mallory, &handle, &ask(Start::Page(1), 2000)),
            Err(ReadError::Store(StoreError::Unknown(_)))
        ));

        // Another budget has no plan yet: planned from the whole document
        // once, and saved, so the next first read is from frames again.
        let other = reference_pages(&reference, budget(700));
        assert_eq!(
            store
                .page(&owner, &handle, &ask(Start::Page(2), 700))
                .unwrap(),
            other[1]
        );
        assert!(store.loaded.get(&handle).is_some(), "read whole, once");
        // A plan made while the document is held decoded is saved too.
        let third = reference_pages(&reference, budget(650));
        assert_eq!(
            store
                .page(&owner, &handle, &ask(Start::Page(3), 650))
                .unwrap(),
            third[2]
        );
        drop(store);
        let store = open();
        assert_eq!(
            store
                .page(&owner, &handle, &ask(Start::Page(5), 700))
                .unwrap(),
            other[4]
        );
        assert_eq!(
            store
                .page(&owner, &handle, &ask(Start::Page(2), 650))
                .unwrap(),
            third[1]
        );
        assert!(store.loaded.get(&handle).is_none(), "read from frames");

        // Plans saved per result are bounded: more budgets read whole.
        let mut store = store;
        for tokens in [600, 800, 900, 1000, 1100] {
            drop(store);
            store = open();
            store
                .page(&owner, &handle, &ask(Start::Page(1), tokens))
                .unwrap();
        }
        let (from, to) = (format!("{handle}/"), format!("{handle}0"));
        let saved = store
            .with_db(|db| {
                let txn = db.begin_read()?;
                let table = txn.open_table(PLANS)?;
                Ok(table.range(from.as_str()..to.as_str())?.count())
            })
            .unwrap();
        assert_eq!(saved, PLANS_PER_RESULT);
    }

    #[test]
    fn side_entries_survive_reopening_expire_and_the_cache_is_bounded() {
        let dir = Dir::new();
        let clock = ManualClock::new();
        let open = || DiskStore::open_with_clock(&dir.0, limits(1 << 30), true, clock.clone());
        let store = open().unwrap();
        let soon = clock.wall() + Duration::from_secs(10);
        let later = clock.wall() + Duration::from_secs(100);
        store.side_put(Side::Cache, "a", b"entry a", soon).unwrap();
        store
            .side_put(Side::Cache, "b", &[b'b'; 600], later)
            .unwrap();
        store
            .side_put(Side::Operations, "op", b"{\"status\":\"completed\"}", later)
            .unwrap();
        // The same key in the other table is another entry.
        assert_eq!(store.side_get(Side::Operations, "a").unwrap(), None);
        store.flush();
        drop(store);

        let store = open().unwrap();
        assert_eq!(
            store.side_get(Side::Cache, "a").unwrap().as_deref(),
            Some(&b"entry a"[..])
        );
        assert!(store.side_get(Side::Operations, "op").unwrap().is_some());
        // Past its end: absent at once, and gone at the next sweep.
        clock.advance(Duration::from_secs(20));
        assert_eq!(store.side_get(Side::Cache, "a").unwrap(), None);
        store.purge_expired();
        // Beyond the cache's bound, the entries nearest their end go; the
        // operations' records are not the cache's.
        store
            .side_put(
                Side::Cache,
                "c",
                &[b'c'; 600],
                later + Duration::from_secs(1),
            )
            .unwrap();
        store.bound_cache(1000);
        store.purge_expired();
        assert_eq!(store.side_get(Side::Cache, "b").unwrap(), None);
        assert!(store.side_get(Side::Cache, "c").unwrap().is_some());
        assert!(store.side_get(Side::Operations, "op").unwrap().is_some());
        assert_eq!(store.health(), Ok(()));
    }

    #[test]
    fn results_survive_reopening_with_their_owner_and_what_is_known_of_them() {
        let dir = Dir::new();
        let alice = Owner::Principal("alice".into());
        let clock = ManualClock::new();
        let open = |compress| {
            DiskStore::open_with_clock(&dir.0, limits(1 << 30), compress, clock.clone()).unwrap()
        };
        for compress in [true, false] {
            let store = open(compress);
            // Over several frames.
            let json = put(&store, &alice, rows(5000));
            assert!(json.doc.bytes() > 3 * FRAME_BYTES);
            let text = put(
                &store,
                &Owner::Anonymous,
                Document::text("é line\n".repeat(20_000)),
            );
            let (json_handle, text_handle) = (json.handle.clone(), text.handle.clone());
            let (json_text, text_text) = (
                json.doc.text_str().to_owned(),
                text.doc.text_str().to_owned(),
            );
            let on_disk = store.usage().1;
            drop((store, json, text));

            let store = open(compress);
            assert_eq!(store.usage(), (2, on_disk));
            let again = store.get(&alice, &json_handle).unwrap().stored;
            assert_eq!(again.doc.text_str(), json_text);
            assert_eq!(again.doc.kind(), Kind::Json);
            assert_eq!(again.owner, alice);
            assert_eq!(again.info.source, "t");
            assert_eq!((again.info.bytes, again.info.tokens), (1234, 300));
            assert!(again.info.tokens_estimated && again.info.sent_twice);
            assert_eq!(again.info.overview, Overview::of(&rows(5000)));
            assert_eq!(again.doc.items("/rows").unwrap().unwrap().len(), 5000);
            let text_again = store.get(&Owner::Anonymous, &text_handle).unwrap().stored;
            assert_eq!(text_again.doc.text_str(), text_text);
            assert_eq!(text_again.doc.kind(), Kind::Text);
            // Still bound to its owner.
            assert!(matches!(
                store.get(&Owner::Principal("bob".into()), &json_handle),
                Err(StoreError::Unknown(_))
            ));
            assert_eq!(store.list(&alice, 10).len(), 1);
            if compress {
                assert!(
                    on_disk * 4 < (json_text.len() + text_text.len()) as u64,
                    "{on_disk} bytes on disk"
                );
            } else {
                // The texts, and what is known of each.
                let texts = (json_text.len() + text_text.len()) as u64;
                assert!(
                    on_disk > texts && on_disk < texts + 8192,
                    "{on_disk} vs {texts}"
                );
            }
            drop(store);
            std::fs::remove_file(dir.0.join(FILE)).unwrap();
        }
    }

    #[test]
    fn a_damaged_truncated_or_foreign_file_is_refused_when_opened() {
        let dir = Dir::new();
        let clock = ManualClock::new();
        // Uncompressed, so that the document can be found in the file.
        let store =
            DiskStore::open_with_clock(&dir.0, limits(1 << 30), false, clock.clone()).unwrap();
        put(&store, &Owner::Anonymous, rows(3000));
        drop(store);
        let file = dir.0.join(FILE);
        let whole = std::fs::read(&file).unwrap();
        let damaged = |bytes: &[u8]| {
            std::fs::write(&file, bytes).unwrap();
            match DiskStore::open_with_clock(&dir.0, limits(1 << 30), false, clock.clone()) {
                Err(e @ DiskStoreError::Damaged { .. }) => e.to_string(),
                Err(e) => panic!("not refused as damaged: {e}"),
                Ok(_) => panic!("a damaged file was opened"),
            }
        };
        // Bytes of the stored document itself changed.
        let needle = br#"{"id":1500,"name":"row 1500""#;
        let at = whole
            .windows(needle.len())
            .position(|w| w == needle)
            .expect("the document is in the file");
        let mut flipped = whole.clone();
        for byte in &mut flipped[at..at + needle.len()] {
            *byte ^= 0x5a;
        }
        let message = damaged(&flipped);
        assert!(
            message.contains("store.redb") && message.contains("move it away"),
            "{message}"
        );
        damaged(&whole[..whole.len() / 2]);
        damaged(b"this is not a database, it is a text file that happens to sit here");
        // The file as it was opens again, and reads.
        std::fs::write(&file, &whole).unwrap();
        let store = DiskStore::open_with_clock(&dir.0, limits(1 << 30), false, clock).unwrap();
        assert_eq!(store.usage().0, 1);
    }

    #[test]
    fn one_process_at_a_time_uses_a_directory() {
        let dir = Dir::new();
        let _first = DiskStore::open(&dir.0, limits(1 << 30), true).unwrap();
        let second = DiskStore::open(&dir.0, limits(1 << 30), true).unwrap_err();
        assert!(matches!(second, DiskStoreError::InUse { .. }), "{second}");
        assert!(second.to_string().contains("backend = \"redis\""));
    }

    #[test]
    fn expired_and_evicted_results_leave_the_file_and_renewals_are_kept() {
        let dir = Dir::new();
        let clock = ManualClock::new();
        let one = {
            let probe = Dir::new();
            let store = DiskStore::open(&probe.0, limits(1 << 30), false).unwrap();
            put(&store, &Owner::Anonymous, rows(100));
            store.usage().1
        };
        let open = || {
            DiskStore::open_with_clock(&dir.0, limits(2 * one + one / 2), false, clock.clone())
                .unwrap()
        };
        let store = open();
        let owner = Owner::Session(7);
        let a = put(&store, &owner, rows(100)).handle.clone();
        let b = put(&store, &owner, rows(100)).handle.clone();
        clock.advance(Duration::from_secs(20));
        // A use renews a's life; written when expired results are purged.
        store.get(&owner, &a).unwrap();
        assert_eq!(store.purge_expired(), 0);
        let c = put(&store, &owner, rows(100)).handle.clone();
        assert_eq!(
            store.get(&owner, &b).unwrap_err(),
            StoreError::Evicted(b.clone()),
            "b was used least recently"
        );
        drop(store);
        // 35 s after a and b were stored, 15 s after a was used.
        clock.advance(Duration::from_secs(15));
        let store = open();
        assert_eq!(store.usage().0, 2, "a and c; b was evicted from the file");
        assert!(store.get(&owner, &a).is_ok(), "its renewal was kept");
        assert!(matches!(store.get(&owner, &b), Err(StoreError::Unknown(_))));
        clock.advance(Duration::from_secs(31));
        assert_eq!(store.purge_expired(), 2);
        drop(store);
        let store = open();
        assert_eq!(store.usage(), (0, 0));
        assert!(matches!(store.get(&owner, &c), Err(StoreError::Unknown(_))));
    }

    #[test]
    fn reopened_entries_keep_their_use_order_and_no_more_than_a_ttl() {
        let dir = Dir::new();
        let clock = ManualClock::new();
        let owner = Owner::Anonymous;
        let one = {
            let probe = Dir::new();
            let store = DiskStore::open(&probe.0, limits(1 << 30), false).unwrap();
            put(&store, &owner, rows(100));
            store.usage().1
        };
        let open = |max_bytes, ttl_s| {
            let limits = StoreLimits {
                max_bytes,
                ttl: Duration::from_secs(ttl_s),
            };
            DiskStore::open_with_clock(&dir.0, limits, false, clock.clone()).unwrap()
        };
        let store = open(1 << 30, 30);
        let handles: Vec<String> = (0..6)
            .map(|_| {
                clock.advance(Duration::from_secs(1));
                put(&store, &owner, rows(100)).handle.clone()
            })
            .collect();
        // The first is now the most recently used.
        store.get(&owner, &handles[0]).unwrap();
        store.purge_expired();
        drop(store);
        // Room for four: the two least recently used go, whatever their handles.
        let store = open(4 * one + one / 2, 30);
        assert_eq!(store.usage().0, 4);
        for gone in &handles[1..3] {
            assert!(
                store.get(&owner, gone).is_err(),
                "{gone} was used least recently"
            );
        }
        for kept in [&handles[0], &handles[3], &handles[4], &handles[5]] {
            assert!(store.get(&owner, kept).is_ok());
        }
        drop(store);
        // A lower ttl_s holds for what was stored under a higher one.
        let store = open(1 << 30, 5);
        clock.advance(Duration::from_secs(6));
        assert_eq!(store.purge_expired(), 4);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&dir.0), 0o700);
            assert_eq!(mode(&dir.0.join(FILE)), 0o600);
        }
    }

    #[test]
    fn a_result_larger_than_the_store_is_refused_before_it_is_written() {
        let dir = Dir::new();
        let store = DiskStore::open(&dir.0, limits(4096), false).unwrap();
        let doc = rows(100);
        let info = info("t", &doc);
        assert!(matches!(
            store.put(&Owner::Anonymous, doc, info),
            Err(StoreError::TooLarge { .. })
        ));
        drop(store);
        let store = DiskStore::open(&dir.0, limits(1 << 30), false).unwrap();
        assert_eq!(store.usage(), (0, 0), "nothing of it was written");
    }
}
