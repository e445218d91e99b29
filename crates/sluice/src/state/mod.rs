//! Where sluice keeps what outlives a call (`[store]`): the configured
//! result store, opened before anything is served, and the key that seals
//! cursors.
//!
//! The key comes from `[store] secret_file` when it is given (every
//! instance that shares a store must seal with the same key); else the
//! disk store keeps one beside its database (`secret`, made on first
//! start), so that cursors survive a restart; else it is made at start.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluice_core::cursor::CursorKey;

pub mod backing;
pub mod redis_store;
pub mod shared;
use sluice_core::store::{
    DiskStore, DiskStoreError, MemoryStore, Store, StoreBackend, StoreSettings,
};

/// The file in the disk store's directory holding its cursor key.
pub const SECRET_FILE: &str = "secret";
/// The fewest bytes a secret may have.
pub const SECRET_MIN_BYTES: usize = 32;

/// Why the configured store cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The disk store cannot be opened.
    #[error(transparent)]
    Disk(#[from] DiskStoreError),
    /// The secret file (`[store] secret_file`, or the disk store's own
    /// `secret`) cannot be read or made.
    #[error("the key that seals cursors, {}: {why}", .path.display())]
    Secret {
        /// The file.
        path: PathBuf,
        /// What is wrong, and what to do.
        why: String,
    },
    /// The Redis URL does not read.
    #[error("[store] url {0}")]
    Redis(String),
}

/// Runs `f` on `store`: here for a store whose calls are quick work in
/// memory (the memory store, uncompressed: no hop on the pass-through
/// path), on the runtime's blocking pool for one that does I/O or
/// decompresses (a file, a Redis server: never on a runtime thread, which
/// the Redis store's commands also run on); `failed` makes what to give
/// if that thread was lost.
pub async fn on_store<T: Send + 'static>(
    store: &Arc<dyn Store>,
    f: impl FnOnce(&dyn Store) -> T + Send + 'static,
    failed: impl FnOnce(String) -> T,
) -> T {
    if store.in_place() {
        return f(&**store);
    }
    let store = store.clone();
    match tokio::task::spawn_blocking(move || f(&*store)).await {
        Ok(done) => done,
        Err(lost) => failed(lost.to_string()),
    }
}

/// The configured store and cursor key, opened.
pub struct State {
    /// Where stored results live.
    pub store: Arc<dyn Store>,
    /// The key that seals cursors.
    pub key: CursorKey,
    /// Where cache entries and operations' records are kept beyond memory
    /// (Redis, or the disk store's file), if anywhere.
    pub backing: Option<backing::Backing>,
    /// The cancellations other instances ask of this one's operations
    /// (with Redis).
    pub asked: Option<tokio::sync::mpsc::Receiver<String>>,
}

/// Opens the store `settings` configure; the cache's entries kept beside
/// results are bounded to `cache_bytes`.
pub fn open(settings: &StoreSettings, cache_bytes: u64) -> Result<State, StateError> {
    let clock = Arc::new(crate::clock::RuntimeClock);
    let (mut backing, mut asked) = (None, None);
    let (store, kept_secret): (Arc<dyn Store>, Option<PathBuf>) = match &settings.backend {
        StoreBackend::Memory => (
            Arc::new(MemoryStore::with_clock(settings.limits, clock).compressed(settings.compress)),
            None,
        ),
        StoreBackend::Disk { path } => {
            let store =
                DiskStore::open_with_clock(path, settings.limits, settings.compress, clock)?;
            let (results, bytes) = store.usage();
            tracing::info!(
                "stored results are kept on disk in {} ({results} there, {})",
                store.path().display(),
                sluice_core::format::bytes(bytes)
            );
            if store.dropped_at_open() > 0 {
                tracing::warn!(
                    "{}: dropped {} stored results another version of sluice wrote, which this one does not read",
                    store.path().display(),
                    store.dropped_at_open()
                );
            }
            store.bound_cache(cache_bytes);
            let store = Arc::new(store);
            backing = Some(backing::Backing::Disk(Arc::new(backing::DiskSide::new(
                store.clone(),
                settings.compress,
            ))));
            (store, Some(path.join(SECRET_FILE)))
        }
        StoreBackend::Redis { url } => {
            let store = redis_store::RedisStore::new(url, settings.limits, settings.compress)
                .map_err(StateError::Redis)?;
            tracing::info!(
                "stored results are kept in Redis at {} (shared with every sluice using it)",
                store.shown()
            );
            let (shared, cancels) =
                shared::Shared::new(url, settings.compress).map_err(StateError::Redis)?;
            backing = Some(backing::Backing::Shared(shared));
            asked = Some(cancels);
            (Arc::new(store), None)
        }
    };
    let key = match (&settings.secret_file, kept_secret) {
        (Some(file), _) => read_secret(file)?,
        (None, Some(file)) => kept_or_made(&file)?,
        (None, None) => CursorKey::random(),
    };
    Ok(State {
        store,
        key,
        backing,
        asked,
    })
}

/// The key sealed by the secret in `file`: at least
/// [`SECRET_MIN_BYTES`], a trailing line break not counted.
fn read_secret(file: &Path) -> Result<CursorKey, StateError> {
    let secret = std::fs::read(file).map_err(|e| StateError::Secret {
        path: file.to_owned(),
        why: format!("cannot read it: {e}"),
    })?;
    let secret = secret.strip_suffix(b"\n").unwrap_or(&secret);
    if secret.len() < SECRET_MIN_BYTES {
        return Err(StateError::Secret {
            path: file.to_owned(),
            why: format!(
                "it holds {} bytes; a secret has at least {SECRET_MIN_BYTES} (e.g. `head -c 32 /dev/urandom > {}`)",
                secret.len(),
                file.display()
            ),
        });
    }
    Ok(CursorKey::from_secret(secret))
}

/// The key in the disk store's `file`, made (readable by its owner only)
/// if it is not there yet. It is written whole to a file beside and
/// renamed, so a crash never leaves half a secret.
fn kept_or_made(file: &Path) -> Result<CursorKey, StateError> {
    let failed = |e: std::io::Error| StateError::Secret {
        path: file.to_owned(),
        why: format!("the disk store's key cannot be made: {e}"),
    };
    if file.try_exists().map_err(failed)? {
        return read_secret(file);
    }
    let secret = new_secret(sluice_core::store::random_bytes);
    let partial = file.with_extension(format!("partial-{}", std::process::id()));
    // A new file, never one (or a link) already there.
    let _ = std::fs::remove_file(&partial);
    let mut made = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode_owner_only()
        .open(&partial)
        .map_err(failed)?;
    made.write_all(&secret)
        .and_then(|()| made.sync_all())
        .and_then(|()| std::fs::rename(&partial, file))
        .map_err(failed)?;
    // The rename itself is durable once the directory is synced.
    if let Some(dir) = file.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(failed)?;
    }
    Ok(CursorKey::from_secret(&secret))
}

/// A secret of random bytes from `fill`, drawn again while it ends with a
/// line break: [`read_secret`] does not count one, so such a secret would
/// read back a byte short, and sluice would refuse to start on its own
/// store (one start in 256).
fn new_secret(mut fill: impl FnMut(&mut [u8])) -> [u8; SECRET_MIN_BYTES] {
    let mut secret = [b'\n'; SECRET_MIN_BYTES];
    while secret.ends_with(b"\n") {
        fill(&mut secret);
    }
    secret
}

/// Files only their owner may read (on Unix).
trait OwnerOnly {
    fn mode_owner_only(&mut self) -> &mut Self;
}

impl OwnerOnly for std::fs::OpenOptions {
    fn mode_owner_only(&mut self) -> &mut Self {
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(self, 0o600);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_made_secret_reads_back_whole_even_when_drawn_ending_with_a_line_break() {
        // The first draw ends with a line break; the second does not.
        let draws = [[b'\n'; SECRET_MIN_BYTES], [b'k'; SECRET_MIN_BYTES]];
        let mut next = draws.iter();
        let secret = new_secret(|buf| buf.copy_from_slice(next.next().unwrap()));
        assert_eq!(secret, [b'k'; SECRET_MIN_BYTES]);
        // And made through the store's path, it reads back as made.
        let dir = std::env::temp_dir().join(format!("sluice-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(SECRET_FILE);
        let _ = std::fs::remove_file(&file);
        let made = kept_or_made(&file).unwrap();
        assert_eq!(std::fs::read(&file).unwrap().len(), SECRET_MIN_BYTES);
        assert!(read_secret(&file).is_ok());
        // A cursor sealed before a restart opens after it.
        let cursor = sluice_core::cursor::Cursor {
            handle: "h_abcdefghijklmnopqrstuv".into(),
            path: None,
            budget: sluice_core::budget::Budget::default(),
            at: sluice_core::pager::Position {
                seg: 0,
                unit: 0,
                byte: 0,
                char: 0,
            },
        };
        let again = kept_or_made(&file).unwrap();
        assert_eq!(again.open(&made.seal(&cursor)), Ok(cursor));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
