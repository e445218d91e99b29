//! What sluice instances sharing one Redis share besides stored results:
//! cache entries, operations, and the messages between instances
//! (`[store] backend = "redis"`).
//!
//! Keys, under `sluice:` (beside the stored results' of
//! [`super::redis_store`]):
//! - `c:{digest}`: a cache entry: a header line (`v1 stamp stored-ms
//!   deadline-ms z|p`) then the upstream's response, zstd (`z`) or plain
//!   (`p`). Its Redis TTL is the idle expiry, renewed on every read; past
//!   its deadline (the entry's lifetime) it counts as absent. `stamp`
//!   names one entry's life: an instance holding a copy checks it with a
//!   read of the header only, so every instance answers with the same
//!   value while the entry lives.
//! - `cl:{digest}`: the lock of a cache miss: the instance that set it
//!   (`SET NX` with a short lease, extended while its call runs) calls the
//!   upstream; the others wait for the entry.
//! - `op:{id}`: an operation's record (JSON, see
//!   [`crate::operations`]), written by the instance that runs it, kept
//!   `retention_h` after it ends.
//! - `i:{instance}`: an instance's heartbeat, which lapses within
//!   [`HEARTBEAT_LEASE`] of its death: its running operations are then
//!   reported failed.
//! - `cx:{id}`: a request to cancel operation `id`, kept [`CANCEL_KEPT`]:
//!   the owner looks for requests for its running operations on every
//!   tick, so one published while its listener was reconnecting is not
//!   lost.
//!
//! Channels, `sluice:n:{topic}`: `c:{digest}` when a miss's lock is
//! released, `op:{id}` when an operation's record changes, and
//! `cancel:{instance}` (the operation id as payload) to ask the instance
//! running an operation to cancel it. One connection per instance listens
//! to all of them (`PSUBSCRIBE sluice:n:*`) and wakes the local waiters of
//! a topic: nobody polls. After a reconnection every waiter is woken, to
//! read again what it may have missed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::StreamExt as _;
use redis::aio::ConnectionManager;
use sha2::Digest as _;
use sluice_core::store::framed::{at_millis, millis};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::{CancellationToken, DropGuard};

use super::redis_store::{CONNECT_TIMEOUT, connect_lazily, within_call_timeout};

const PREFIX: &str = "sluice:";
const CHANNELS: &str = "sluice:n:";
/// How long an instance's heartbeat lives: renewed every
/// [`HEARTBEAT_EVERY`], it outlives two renewals that each wait out a
/// call's timeout (6 s).
pub const HEARTBEAT_LEASE: Duration = Duration::from_secs(15);
/// How often an instance renews its heartbeat.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(3);
/// Cache entries larger than this are compressed (when `compress`).
const COMPRESS_FROM: usize = 4096;
/// Cancellation requests waiting for the operations' task.
const CANCELS_QUEUED: usize = 256;
/// How long a cancellation request is kept for its owner to find.
const CANCEL_KEPT: Duration = Duration::from_secs(60);

/// Compare-and-delete and compare-and-extend of a lock.
const UNLOCK: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
const EXTEND: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0";

/// A cache entry as another instance (or this one) wrote it.
#[derive(Debug, Clone)]
pub struct SharedEntry {
    /// Names the entry's life.
    pub stamp: String,
    /// When the upstream answered.
    pub stored_at: SystemTime,
    /// The upstream's response, as it sent it.
    pub response: Bytes,
}

/// What writing a cache entry did.
#[derive(Debug)]
pub enum Written {
    /// It is the entry, under this stamp.
    Kept(String),
    /// Another instance's entry was there first: every caller gets that one.
    Theirs(SharedEntry),
}

/// One instance's link to the state it shares.
pub struct Shared {
    shown: String,
    /// This instance's name among those sharing the Redis.
    instance: String,
    manager: ConnectionManager,
    compress: bool,
    /// Who waits for which topic.
    topics: Mutex<HashMap<String, Weak<Notify>>>,
    /// Why the last call failed, if it did (logged once per outage).
    failing: Mutex<Option<String>>,
    /// Stops the listener when the last handle goes.
    _listening: DropGuard,
}

fn key(parts: &[&str]) -> String {
    let mut key = PREFIX.to_owned();
    key.push_str(&parts.concat());
    key
}

/// The digest a cache key (which holds a call's arguments, any length) is
/// known by in Redis and on disk.
pub fn digest(cache_key: &str) -> String {
    let sum = sha2::Sha256::digest(cache_key.as_bytes());
    sum.iter().take(20).map(|b| format!("{b:02x}")).collect()
}

/// Whether `s` has the shape of an operation id (`op_` and 22 URL-safe
/// characters): a client's text goes into no key unless it is.
pub fn is_operation_id(s: &str) -> bool {
    s.len() == 25
        && s.starts_with("op_")
        && s[3..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl Shared {
    /// The link to the Redis at `url` (connected on first use), and the
    /// cancellation requests other instances send this one (operation ids).
    /// Must be called within the runtime: it starts the listener.
    pub fn new(url: &str, compress: bool) -> Result<(Arc<Self>, mpsc::Receiver<String>), String> {
        let (client, manager) = connect_lazily(url)?;
        let stop = CancellationToken::new();
        let (cancels, asked) = mpsc::channel(CANCELS_QUEUED);
        let shared = Arc::new(Self {
            shown: crate::shown_url(url),
            instance: sluice_core::store::random_id("i_"),
            manager,
            compress,
            topics: Mutex::default(),
            failing: Mutex::default(),
            _listening: stop.clone().drop_guard(),
        });
        tokio::spawn(listen(Arc::downgrade(&shared), client, cancels, stop));
        Ok((shared, asked))
    }

    /// This instance's name among those sharing the Redis.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Runs `f` with a connection, within the call timeout; logs once when
    /// calls start failing and once when they work again.
    async fn run<T, F>(&self, f: impl FnOnce(ConnectionManager) -> F) -> Result<T, String>
    where
        F: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let outcome = within_call_timeout(f(self.manager.clone()))
            .await
            .map_err(|e| format!("the Redis at {} is unavailable ({e})", self.shown));
        let mut failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        match (&outcome, failing.is_some()) {
            (Err(why), false) => {
                tracing::warn!("shared cache and operations: {why}");
                *failing = Some(why.clone());
            }
            (Ok(_), true) => {
                tracing::info!(
                    "shared cache and operations: the Redis at {} works again",
                    self.shown
                );
                *failing = None;
            }
            _ => {}
        }
        outcome
    }

    /// The notifier of `topic`: [`Notify::notified`] ends when a message on
    /// it arrives (or the listener reconnected). Enable it before reading
    /// what it announces, so nothing falls between.
    pub fn topic(&self, topic: &str) -> Arc<Notify> {
        let mut topics = self.topics.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(notify) = topics.get(topic).and_then(Weak::upgrade) {
            return notify;
        }
        if topics.len() >= 1024 {
            topics.retain(|_, w| w.strong_count() > 0);
        }
        let notify = Arc::new(Notify::new());
        topics.insert(topic.to_owned(), Arc::downgrade(&notify));
        notify
    }

    fn wake(&self, topic: &str) {
        let notify = self
            .topics
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(topic)
            .and_then(Weak::upgrade);
        if let Some(notify) = notify {
            notify.notify_waiters();
        }
    }

    fn wake_all(&self) {
        let all: Vec<Arc<Notify>> = self
            .topics
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for notify in all {
            notify.notify_waiters();
        }
    }

    /// The topic a cache miss's waiters listen to.
    pub fn cache_topic(cache_key: &str) -> String {
        format!("c:{}", digest(cache_key))
    }

    /// The stamp of the entry under `cache_key`, if one lives; the read
    /// renews its idle expiry (`idle`).
    pub async fn cache_stamp(
        &self,
        cache_key: &str,
        idle: Duration,
    ) -> Result<Option<String>, String> {
        let header = self.cache_read(cache_key, idle, false).await?;
        Ok(header
            .and_then(|h| Header::parse(&h))
            .filter(Header::alive)
            .map(|h| h.stamp))
    }

    /// The entry under `cache_key`, if one lives; the read renews its idle
    /// expiry.
    pub async fn cache_get(
        &self,
        cache_key: &str,
        idle: Duration,
    ) -> Result<Option<SharedEntry>, String> {
        let Some(value) = self.cache_read(cache_key, idle, true).await? else {
            return Ok(None);
        };
        Ok(sized(value.len(), move || SharedEntry::parse(&value))
            .await
            .flatten())
    }

    /// The entry under `cache_key` (`whole`, or its header's room), its
    /// idle expiry renewed in the same round trip.
    async fn cache_read(
        &self,
        cache_key: &str,
        idle: Duration,
        whole: bool,
    ) -> Result<Option<Vec<u8>>, String> {
        let entry = key(&["c:", &digest(cache_key)]);
        let (value, _): (Option<Vec<u8>>, redis::Value) = self
            .run(|mut c| async move {
                let mut pipe = redis::pipe();
                if whole {
                    pipe.cmd("GET").arg(&entry);
                } else {
                    pipe.cmd("GETRANGE").arg(&entry).arg(0).arg(127);
                }
                pipe.cmd("PEXPIRE")
                    .arg(&entry)
                    .arg(idle.as_millis() as u64)
                    .query_async(&mut c)
                    .await
            })
            .await?;
        Ok(value)
    }

    /// Writes the entry `response` under `cache_key`, to live `ttl` (idle
    /// after `idle`): replacing any (`replace`, a refresh or `_fresh`), or
    /// only if none lives, else giving the one that does.
    pub async fn cache_put(
        &self,
        cache_key: &str,
        response: &[u8],
        ttl: Duration,
        idle: Duration,
        replace: bool,
    ) -> Result<Written, String> {
        let (stamp, value) = {
            let (response, compress) = (response.to_vec(), self.compress);
            sized(response.len(), move || {
                entry_value(&response, ttl, compress)
            })
            .await
            .ok_or_else(|| "the cache entry could not be made".to_owned())?
        };
        let entry = key(&["c:", &digest(cache_key)]);
        let life = ttl.min(idle).as_millis().max(1) as u64;
        let set: Option<String> = self
            .run(|mut c| async move {
                let mut set = redis::cmd("SET");
                set.arg(&entry).arg(value).arg("PX").arg(life);
                if !replace {
                    set.arg("NX");
                }
                set.query_async(&mut c).await
            })
            .await?;
        if set.is_some() {
            return Ok(Written::Kept(stamp));
        }
        match self.cache_get(cache_key, idle).await? {
            Some(theirs) => Ok(Written::Theirs(theirs)),
            // Past its deadline but not yet gone: replaced.
            None => Box::pin(self.cache_put(cache_key, response, ttl, idle, true)).await,
        }
    }

    /// Takes the lock of a miss on `cache_key` for `lease`, under `token`.
    pub async fn cache_lock(
        &self,
        cache_key: &str,
        token: &str,
        lease: Duration,
    ) -> Result<bool, String> {
        let lock = key(&["cl:", &digest(cache_key)]);
        let token = token.to_owned();
        let set: Option<String> = self
            .run(|mut c| async move {
                redis::cmd("SET")
                    .arg(&lock)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(lease.as_millis() as u64)
                    .query_async(&mut c)
                    .await
            })
            .await?;
        Ok(set.is_some())
    }

    /// Extends the lock of `cache_key` if `token` still holds it.
    pub async fn cache_extend(&self, cache_key: &str, token: &str, lease: Duration) {
        let lock = key(&["cl:", &digest(cache_key)]);
        let token = token.to_owned();
        let _ = self
            .run(|mut c| async move {
                redis::cmd("EVAL")
                    .arg(EXTEND)
                    .arg(1)
                    .arg(&lock)
                    .arg(&token)
                    .arg(lease.as_millis() as u64)
                    .query_async::<i64>(&mut c)
                    .await
            })
            .await;
    }

    /// Releases the lock of `cache_key` if `token` holds it, and wakes
    /// whoever waits for the entry (everywhere).
    pub async fn cache_unlock(&self, cache_key: &str, token: &str) {
        let digest = digest(cache_key);
        let mut unlock = redis::cmd("EVAL");
        unlock
            .arg(UNLOCK)
            .arg(1)
            .arg(key(&["cl:", &digest]))
            .arg(token);
        // Not released: it lapses with its lease.
        let _ = self.announced(unlock, &format!("c:{digest}")).await;
    }

    /// Runs `command`, then announces `topic` to every instance, in one
    /// round trip; a failure is logged by [`Self::run`].
    async fn announced(&self, command: redis::Cmd, topic: &str) -> Result<(), String> {
        let channel = format!("{CHANNELS}{topic}");
        self.run(|mut c| async move {
            redis::pipe()
                .add_command(command)
                .ignore()
                .cmd("PUBLISH")
                .arg(&channel)
                .arg("")
                .ignore()
                .query_async::<()>(&mut c)
                .await
        })
        .await
    }

    /// The topic of operation `id`'s changes.
    pub fn operation_topic(id: &str) -> String {
        format!("op:{id}")
    }

    /// Writes operation `id`'s record, to live `life`, and announces it.
    pub async fn operation_write(
        &self,
        id: &str,
        record: String,
        life: Duration,
    ) -> Result<(), String> {
        let mut set = redis::cmd("SET");
        set.arg(key(&["op:", id]))
            .arg(record)
            .arg("PX")
            .arg(life.as_millis().max(1) as u64);
        self.announced(set, &Self::operation_topic(id)).await
    }

    /// Operation `id`'s record, if any instance wrote one (none for a
    /// text that is not an operation id).
    pub async fn operation_read(&self, id: &str) -> Result<Option<String>, String> {
        if !is_operation_id(id) {
            return Ok(None);
        }
        let op = key(&["op:", id]);
        self.run(|mut c| async move { redis::cmd("GET").arg(&op).query_async(&mut c).await })
            .await
    }

    /// Whether `instance`'s heartbeat lives.
    pub async fn alive(&self, instance: &str) -> Result<bool, String> {
        let beat = key(&["i:", instance]);
        self.run(|mut c| async move { redis::cmd("EXISTS").arg(&beat).query_async(&mut c).await })
            .await
    }

    /// Renews this instance's heartbeat.
    pub async fn heartbeat(&self) -> Result<(), String> {
        let beat = key(&["i:", &self.instance]);
        let now = millis(crate::clock::wall());
        self.run(|mut c| async move {
            redis::cmd("SET")
                .arg(&beat)
                .arg(now)
                .arg("PX")
                .arg(HEARTBEAT_LEASE.as_millis() as u64)
                .query_async::<()>(&mut c)
                .await
        })
        .await
    }

    /// Asks `instance` to cancel its operation `id`: a message, for the
    /// owner to act at once, and a request kept [`CANCEL_KEPT`], which the
    /// owner finds on its next tick if the message was lost (its listener
    /// reconnecting just then).
    pub async fn ask_cancel(&self, instance: &str, id: &str) -> Result<(), String> {
        let channel = format!("{CHANNELS}cancel:{instance}");
        let request = key(&["cx:", id]);
        let id = id.to_owned();
        self.run(|mut c| async move {
            redis::pipe()
                .cmd("SET")
                .arg(&request)
                .arg(1)
                .arg("PX")
                .arg(CANCEL_KEPT.as_millis() as u64)
                .ignore()
                .cmd("PUBLISH")
                .arg(&channel)
                .arg(&id)
                .ignore()
                .query_async::<()>(&mut c)
                .await
        })
        .await
    }

    /// Which of operations `ids` another instance asked to cancel.
    pub async fn cancels_asked(&self, ids: &[String]) -> Result<Vec<String>, String> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = ids.iter().map(|id| key(&["cx:", id])).collect();
        let asked: Vec<Option<String>> = self
            .run(|mut c| async move { redis::cmd("MGET").arg(&keys).query_async(&mut c).await })
            .await?;
        Ok(ids
            .iter()
            .zip(asked)
            .filter_map(|(id, asked)| asked.map(|_| id.clone()))
            .collect())
    }
}

/// `f`, here for an input of a few `bytes`; on the blocking pool for a
/// larger one (zstd over a whole response is no work for an async
/// thread). `None` if that thread was lost.
async fn sized<T: Send + 'static>(
    bytes: usize,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    if bytes < sluice_core::limits::BLOCKING_BYTES {
        return Some(f());
    }
    tokio::task::spawn_blocking(f).await.ok()
}

/// A new cache entry of `response`, to live `ttl`: its stamp, and the
/// bytes kept (a header line, then the response, zstd if `compress` and
/// it is large enough to gain).
pub fn entry_value(response: &[u8], ttl: Duration, compress: bool) -> (String, Vec<u8>) {
    let stamp = sluice_core::store::random_id("");
    let now = crate::clock::wall();
    let compressed = (compress && response.len() >= COMPRESS_FROM)
        .then(|| zstd::bulk::compress(response, 3).ok())
        .flatten();
    let mut value = format!(
        "v1 {stamp} {} {} {}\n",
        millis(now),
        millis(now + ttl),
        if compressed.is_some() { 'z' } else { 'p' }
    )
    .into_bytes();
    value.extend_from_slice(compressed.as_deref().unwrap_or(response));
    (stamp, value)
}

/// A cache entry's header line.
struct Header {
    stamp: String,
    stored_at: SystemTime,
    deadline: SystemTime,
    compressed: bool,
}

impl Header {
    fn parse(bytes: &[u8]) -> Option<Header> {
        let end = memchr::memchr(b'\n', bytes)?;
        let line = std::str::from_utf8(&bytes[..end]).ok()?;
        let mut fields = line.split(' ');
        if fields.next()? != "v1" {
            return None;
        }
        let stamp = fields.next()?.to_owned();
        let stored_at = at_millis(fields.next()?.parse().ok()?);
        let deadline = at_millis(fields.next()?.parse().ok()?);
        let compressed = match fields.next()? {
            "z" => true,
            "p" => false,
            _ => return None,
        };
        Some(Header {
            stamp,
            stored_at,
            deadline,
            compressed,
        })
    }

    fn alive(&self) -> bool {
        crate::clock::wall() < self.deadline
    }
}

impl SharedEntry {
    /// The entry `value` holds, unless it is past its deadline or does not
    /// read (then it counts as absent).
    pub fn parse(value: &[u8]) -> Option<SharedEntry> {
        let header = Header::parse(value).filter(Header::alive)?;
        let body = &value[memchr::memchr(b'\n', value)? + 1..];
        let response = if header.compressed {
            zstd::stream::decode_all(body).ok()?
        } else {
            body.to_vec()
        };
        Some(SharedEntry {
            stamp: header.stamp,
            stored_at: header.stored_at,
            response: Bytes::from(response),
        })
    }
}

/// Listens to every instance's messages until `stop`: wakes the waiters
/// of each topic, and passes on the cancellation requests addressed to
/// this instance. Reconnects by itself, and wakes every waiter when it did.
async fn listen(
    shared: Weak<Shared>,
    client: redis::Client,
    cancels: mpsc::Sender<String>,
    stop: CancellationToken,
) {
    let Some(instance) = shared.upgrade().map(|s| s.instance.clone()) else {
        return;
    };
    let mine = format!("{CHANNELS}cancel:{instance}");
    let mut backoff = Duration::from_millis(250);
    loop {
        let subscribed = async {
            let mut pubsub = tokio::time::timeout(CONNECT_TIMEOUT, client.get_async_pubsub())
                .await
                .map_err(|_| "no connection within 1 s".to_owned())?
                .map_err(|e| e.to_string())?;
            tokio::time::timeout(
                CONNECT_TIMEOUT * 5,
                pubsub.psubscribe(format!("{CHANNELS}*")),
            )
            .await
            .map_err(|_| "no answer to PSUBSCRIBE within 5 s".to_owned())?
            .map_err(|e| e.to_string())?;
            Ok::<_, String>(pubsub)
        };
        let pubsub = tokio::select! {
            () = stop.cancelled() => return,
            subscribed = subscribed => subscribed,
        };
        match pubsub {
            Ok(pubsub) => {
                backoff = Duration::from_millis(250);
                let Some(s) = shared.upgrade() else { return };
                // Whatever was announced while nobody listened.
                s.wake_all();
                drop(s);
                let mut messages = pubsub.into_on_message();
                loop {
                    let message = tokio::select! {
                        () = stop.cancelled() => return,
                        message = messages.next() => message,
                    };
                    let Some(message) = message else { break };
                    let Some(s) = shared.upgrade() else { return };
                    let channel = message.get_channel_name();
                    if channel == mine {
                        if let Ok(id) = message.get_payload::<String>()
                            && is_operation_id(&id)
                        {
                            let _ = cancels.try_send(id);
                        }
                    } else if let Some(topic) = channel.strip_prefix(CHANNELS) {
                        s.wake(topic);
                    }
                }
                tracing::debug!("the shared state's listener lost its connection; reconnecting");
            }
            Err(why) => tracing::debug!("the shared state's listener cannot subscribe: {why}"),
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_reads_back_and_a_damaged_one_is_absent() {
        let far = millis(crate::clock::wall() + Duration::from_secs(60));
        let value = format!("v1 abc 1 {far} p\n{{\"jsonrpc\":\"2.0\"}}");
        let entry = SharedEntry::parse(value.as_bytes()).expect("reads");
        assert_eq!(entry.stamp, "abc");
        assert_eq!(&entry.response[..], b"{\"jsonrpc\":\"2.0\"}");
        // Past its deadline, a foreign header, or a frame that does not
        // decompress: absent, never a wrong value.
        assert!(SharedEntry::parse(b"v1 abc 1 2 p\n{}").is_none());
        assert!(SharedEntry::parse(b"v9 abc 1 2 p\n{}").is_none());
        assert!(SharedEntry::parse(format!("v1 abc 1 {far} z\nnot zstd").as_bytes()).is_none());
    }

    #[test]
    fn only_operation_ids_go_into_keys() {
        assert!(is_operation_id(&sluice_core::store::random_id("op_")));
        assert!(!is_operation_id("op_x"));
        assert!(!is_operation_id("op_aaaaaaaaaaaaaaaaaaaa\r\n"));
        assert!(!is_operation_id("h_aaaaaaaaaaaaaaaaaaaaaa"));
    }
}
