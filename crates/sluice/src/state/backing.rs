//! Where the result cache and operations keep what outlives this
//! process's memory: Redis, shared with every instance that uses it
//! ([`Shared`], `backend = "redis"`), or the disk store's file, this
//! process's alone ([`DiskSide`], `backend = "disk"`). The memory store
//! has none: the cache and operations then live in memory only.
//!
//! The cache and operations speak to either through [`Backing`], the same
//! calls for both; on disk the calls that coordinate instances (locks,
//! heartbeats, cancellation requests) have nothing to do.

use std::sync::Arc;
use std::time::Duration;

use sluice_core::store::{DiskStore, Side};
use tokio::sync::Notify;

use super::shared::{Shared, SharedEntry, Written, digest, entry_value, is_operation_id};

/// The cache's and operations' durable state.
#[derive(Clone)]
pub enum Backing {
    /// Redis, shared with the other instances.
    Shared(Arc<Shared>),
    /// The disk store's file, this process's alone.
    Disk(Arc<DiskSide>),
}

/// The cache's entries and operations' records in the disk store's file.
pub struct DiskSide {
    store: Arc<DiskStore>,
    /// This process's name, in the records of its operations: a record
    /// that says "running" under another name was left by an earlier
    /// process, whose call ended with it.
    instance: String,
    compress: bool,
}

impl DiskSide {
    /// The side tables of `store`.
    pub fn new(store: Arc<DiskStore>, compress: bool) -> Self {
        Self {
            store,
            instance: sluice_core::store::random_id("i_"),
            compress,
        }
    }

    /// Runs `f` on the store, on a blocking thread (it reads and writes
    /// the file).
    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&DiskStore) -> Result<T, sluice_core::store::StoreError> + Send + 'static,
    ) -> Result<T, String> {
        let store = self.store.clone();
        match tokio::task::spawn_blocking(move || f(&store)).await {
            Ok(done) => done.map_err(|e| e.to_string()),
            Err(lost) => Err(lost.to_string()),
        }
    }
}

impl Backing {
    /// No other instance writes it: a copy this one holds is current.
    pub fn exclusive(&self) -> bool {
        matches!(self, Backing::Disk(_))
    }

    /// This instance's name.
    pub fn instance(&self) -> &str {
        match self {
            Backing::Shared(shared) => shared.instance(),
            Backing::Disk(disk) => &disk.instance,
        }
    }

    /// The notifier of `topic` (see [`Shared::topic`]); on disk nothing
    /// else announces anything, so it is never woken.
    pub fn topic(&self, topic: &str) -> Arc<Notify> {
        match self {
            Backing::Shared(shared) => shared.topic(topic),
            Backing::Disk(_) => Arc::new(Notify::new()),
        }
    }

    /// The stamp of the entry under `cache_key`, if one lives.
    pub async fn cache_stamp(
        &self,
        cache_key: &str,
        idle: Duration,
    ) -> Result<Option<String>, String> {
        match self {
            Backing::Shared(shared) => shared.cache_stamp(cache_key, idle).await,
            Backing::Disk(_) => Ok(self.cache_get(cache_key, idle).await?.map(|e| e.stamp)),
        }
    }

    /// The entry under `cache_key`, if one lives (on disk, its idle expiry
    /// is not renewed: an entry read back after a restart lives to its
    /// lifetime's end).
    pub async fn cache_get(
        &self,
        cache_key: &str,
        idle: Duration,
    ) -> Result<Option<SharedEntry>, String> {
        match self {
            Backing::Shared(shared) => shared.cache_get(cache_key, idle).await,
            Backing::Disk(disk) => {
                let key = digest(cache_key);
                disk.run(move |s| {
                    Ok(s.side_get(Side::Cache, &key)?
                        .and_then(|v| SharedEntry::parse(&v)))
                })
                .await
            }
        }
    }

    /// Writes the entry `response` under `cache_key` (see
    /// [`Shared::cache_put`]; on disk it always replaces: only this process
    /// writes).
    pub async fn cache_put(
        &self,
        cache_key: &str,
        response: &[u8],
        ttl: Duration,
        idle: Duration,
        replace: bool,
    ) -> Result<Written, String> {
        match self {
            Backing::Shared(shared) => {
                shared
                    .cache_put(cache_key, response, ttl, idle, replace)
                    .await
            }
            Backing::Disk(disk) => {
                let (key, response, compress) =
                    (digest(cache_key), response.to_vec(), disk.compress);
                let expires = crate::clock::wall() + ttl;
                disk.run(move |s| {
                    let (stamp, value) = entry_value(&response, ttl, compress);
                    s.side_put(Side::Cache, &key, &value, expires)?;
                    Ok(Written::Kept(stamp))
                })
                .await
            }
        }
    }

    /// Takes the lock of a miss on `cache_key` (on disk, the local single
    /// flight is the only one there is: always taken).
    pub async fn cache_lock(
        &self,
        cache_key: &str,
        token: &str,
        lease: Duration,
    ) -> Result<bool, String> {
        match self {
            Backing::Shared(shared) => shared.cache_lock(cache_key, token, lease).await,
            Backing::Disk(_) => Ok(true),
        }
    }

    /// Extends the lock of `cache_key`.
    pub async fn cache_extend(&self, cache_key: &str, token: &str, lease: Duration) {
        if let Backing::Shared(shared) = self {
            shared.cache_extend(cache_key, token, lease).await;
        }
    }

    /// Releases the lock of `cache_key`.
    pub async fn cache_unlock(&self, cache_key: &str, token: &str) {
        if let Backing::Shared(shared) = self {
            shared.cache_unlock(cache_key, token).await;
        }
    }

    /// Writes operation `id`'s record, to live `life`.
    pub async fn operation_write(
        &self,
        id: &str,
        record: String,
        life: Duration,
    ) -> Result<(), String> {
        match self {
            Backing::Shared(shared) => shared.operation_write(id, record, life).await,
            Backing::Disk(disk) => {
                let id = id.to_owned();
                let expires = crate::clock::wall() + life;
                disk.run(move |s| s.side_put(Side::Operations, &id, record.as_bytes(), expires))
                    .await
                    .inspect_err(|why| {
                        tracing::warn!("an operation's record could not be kept: {why}");
                    })
            }
        }
    }

    /// Operation `id`'s record, if one was written (none for a text that
    /// is not an operation id).
    pub async fn operation_read(&self, id: &str) -> Result<Option<String>, String> {
        match self {
            Backing::Shared(shared) => shared.operation_read(id).await,
            Backing::Disk(disk) => {
                if !is_operation_id(id) {
                    return Ok(None);
                }
                let id = id.to_owned();
                let value = disk.run(move |s| s.side_get(Side::Operations, &id)).await?;
                Ok(value.and_then(|v| String::from_utf8(v).ok()))
            }
        }
    }

    /// Why `instance`, which a running operation's record names, cannot
    /// be running it any more; `None` if it can.
    pub async fn lost(&self, instance: &str) -> Result<Option<String>, String> {
        match self {
            Backing::Shared(shared) => Ok((!shared.alive(instance).await?).then(|| {
                format!(
                    "the sluice instance that ran it ({instance}) stopped: its heartbeat lapsed, so its call is lost. Call the tool again"
                )
            })),
            Backing::Disk(disk) => Ok((instance != disk.instance).then(|| {
                "sluice stopped while it ran (it has started again since), so its call is lost. Call the tool again".to_owned()
            })),
        }
    }

    /// Renews this instance's heartbeat (none on disk).
    pub async fn heartbeat(&self) -> Result<(), String> {
        match self {
            Backing::Shared(shared) => shared.heartbeat().await,
            Backing::Disk(_) => Ok(()),
        }
    }

    /// Asks `instance` to cancel its operation `id` (nothing on disk: no
    /// other process runs one).
    pub async fn ask_cancel(&self, instance: &str, id: &str) -> Result<(), String> {
        match self {
            Backing::Shared(shared) => shared.ask_cancel(instance, id).await,
            Backing::Disk(_) => Ok(()),
        }
    }

    /// Which of operations `ids` (this instance's, running) another
    /// instance asked to cancel (none on disk).
    pub async fn cancels_asked(&self, ids: &[String]) -> Result<Vec<String>, String> {
        match self {
            Backing::Shared(shared) => shared.cancels_asked(ids).await,
            Backing::Disk(_) => Ok(Vec::new()),
        }
    }
}
