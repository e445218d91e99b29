//! The result cache: upstream results of idempotent tools, answered again
//! without calling the upstream. Which calls, for how long and under which
//! key is `sluice_core::cache`'s policy; this module keeps the entries.
//!
//! - An entry goes at its absolute lifetime (`ttl`) or when nobody read it
//!   for `idle`, whichever comes first (moka's per-entry expiry).
//! - The whole cache holds at most `[cache] max_bytes` of results, each
//!   weighed by its JSON size; the least recently used go first.
//! - Single flight: concurrent calls on a missing key wait for one upstream
//!   call and all get its answer (moka's `or_try_insert_with`).
//! - Refresh-ahead: a hit on an entry older than `refresh_at × ttl` is
//!   answered at once and starts one background refresh per key; a failed
//!   refresh keeps the old entry until its end, and is logged.
//! - Errors are never kept: an `isError` result or a failed call reaches
//!   the callers that waited for it, and the next call tries again.
//!
//! With `[store] backend = "redis"` the entries are shared by every
//! instance ([`crate::state::shared`]): one entry per key for all of them,
//! each instance keeping a copy it checks by the entry's stamp (a read of
//! a header) before answering with it; a miss takes a lock with a short
//! lease, so that concurrent misses on several instances make one
//! upstream call and all answer with its entry. While Redis is
//! unreachable each instance answers from its own copies and calls the
//! upstream on a miss, as without Redis.
//!
//! The cache stores the upstream's result before governing: each answer
//! from it is governed for its caller like a fresh one. An entry keeps the
//! bytes the upstream sent (a task's result too, `tasks/result`), never
//! decoded:
//! the call that fills it and every hit are governed from those bytes (a
//! hit's are a reference-counted clone), a hit marked as one in `_meta`.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use moka::notification::RemovalCause;
use rmcp::model::{CallToolResult, ServerResult};
use serde_json::{Value, json};
use sluice_core::cache::{CachePolicy, CacheSettings};

use crate::jsonrpc::Message;
use crate::state::backing::Backing;
use crate::state::shared::{Shared, SharedEntry, Written};
use crate::upstream::CallError;

/// How long a miss's lock lives unless its holder extends it (a third of
/// it at a time, while its call runs): how long others wait for an
/// instance that died holding it.
const LOCK_LEASE: Duration = Duration::from_secs(10);

/// The `_meta` key of an answer served from the cache: `{hit, age_s}`.
pub const META: &str = crate::contract::meta::CACHE;

/// What an upstream call answered.
pub type Answer = Result<Fetched, CallError>;

/// An upstream's answer to a cached tool's call.
#[derive(Debug, Clone)]
pub enum Fetched {
    /// A tool's result as the upstream sent it, in one plain response: its
    /// bytes read as a tool's result ([`crate::govern::SentCall`]), not
    /// decoded.
    Sent {
        /// The response, as received.
        response: Message,
        /// The result says it is an error (`isError`): it is not kept.
        is_error: bool,
    },
    /// A result sluice decoded: one whose bytes do not read as a tool's
    /// result (or a task call's immediate answer). Boxed: rmcp's results
    /// are large.
    Decoded(Box<ServerResult>),
}

/// Makes the upstream call, for the caller (`false`) or for a background
/// refresh (`true`), which no client waits for.
pub type Fetch = Box<dyn Fn(bool) -> BoxFuture<'static, Answer> + Send + Sync>;

/// One cached result.
#[derive(Debug)]
pub struct Entry {
    result: Kept,
    stored_at: Instant,
    /// Its weight: the result's size (as sent, or as JSON) plus the key's.
    bytes: u32,
    /// The tool, as the client names it (for the figures).
    tool: Arc<str>,
    policy: CachePolicy,
    /// When it was last read, in milliseconds after `stored_at`.
    last_read_ms: AtomicU64,
    /// The stored answers made of it, by owner and budget: a hit by the
    /// same owner with the same budget reuses one while its handle lives,
    /// instead of storing the result again.
    governed: Mutex<Vec<(String, CallToolResult)>>,
    /// The shared entry it is a copy of (its stamp), if it is shared.
    stamp: Option<String>,
    /// Made of the shared entry another call (here or on another
    /// instance) wrote, not of this call's upstream answer.
    elsewhere: bool,
}

/// Stored answers one entry keeps (owner × budget).
const GOVERNED_KEPT: usize = 16;

impl Entry {
    /// How long ago the upstream answered (on the runtime's clock).
    pub fn age(&self) -> Duration {
        crate::clock::now().saturating_duration_since(self.stored_at)
    }

    /// A copy of the upstream's result (decoded from the bytes it sent:
    /// only where they do not read as a tool's result, which cannot happen
    /// for an entry made of them).
    pub fn result(&self) -> CallToolResult {
        match &self.result {
            Kept::Decoded(result) => result.clone(),
            Kept::Sent(sent) => decode(sent).unwrap_or_else(|e| {
                // Not reachable: the same bytes were read as a tool's
                // result when the entry was made.
                tracing::error!(tool = %self.tool, "a cached result could not be read again: {e}");
                CallToolResult::error(vec![rmcp::model::ContentBlock::text(format!(
                    "sluice could not read the cached result of {} again ({e}). Call it with `_fresh: true`.",
                    self.tool
                ))])
            }),
        }
    }

    /// The response the result came in, as the upstream sent it.
    pub fn raw(&self) -> Option<&Message> {
        match &self.result {
            Kept::Sent(sent) => Some(sent),
            Kept::Decoded(_) => None,
        }
    }

    /// The stored answer made for `key` (owner and budget), if any.
    pub fn governed_for(&self, key: &str) -> Option<CallToolResult> {
        lock(&self.governed)
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, r)| r.clone())
    }

    /// Keeps the stored answer made for `key`, replacing an older one.
    pub fn keep_governed(&self, key: String, answer: CallToolResult) {
        let mut governed = lock(&self.governed);
        governed.retain(|(k, _)| *k != key);
        if governed.len() == GOVERNED_KEPT {
            governed.remove(0);
        }
        governed.push((key, answer));
    }

    /// The entry's result as an upstream answer.
    fn fetched(&self) -> Fetched {
        match &self.result {
            Kept::Sent(response) => Fetched::Sent {
                response: response.clone(),
                is_error: false,
            },
            Kept::Decoded(result) => {
                Fetched::Decoded(Box::new(ServerResult::CallToolResult(result.clone())))
            }
        }
    }

    fn read(&self) {
        self.last_read_ms
            .store(self.age().as_millis() as u64, Ordering::Relaxed);
    }

    /// Whether it is past its lifetime or idle expiry (moka reports an
    /// expired entry that a new one replaced as replaced).
    fn expired(&self) -> bool {
        let age = self.age();
        let idle = age.saturating_sub(Duration::from_millis(
            self.last_read_ms.load(Ordering::Relaxed),
        ));
        age >= self.policy.ttl || idle >= self.policy.idle
    }
}

/// Counts of one tool's entries, or of all.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Figures {
    /// Calls answered from the cache (waiting on another's call included).
    pub hits: u64,
    /// Calls that went upstream because no entry was there.
    pub misses: u64,
    /// Calls with `_fresh: true`.
    pub bypasses: u64,
    /// Background refreshes that replaced an entry.
    pub refreshes: u64,
    /// Background refreshes that failed (the old entry stayed).
    pub failed_refreshes: u64,
    /// Entries evicted for room.
    pub evictions: u64,
    /// Entries that reached their lifetime or idle expiry.
    pub expirations: u64,
    /// Entries held now.
    pub entries: u64,
    /// Bytes held now.
    pub bytes: u64,
}

impl Figures {
    /// Hits over hits and misses, if there were any.
    pub fn hit_ratio(&self) -> Option<f64> {
        let calls = self.hits + self.misses;
        (calls > 0).then(|| self.hits as f64 / calls as f64)
    }

    fn add(&mut self, o: &Figures) {
        self.hits += o.hits;
        self.misses += o.misses;
        self.bypasses += o.bypasses;
        self.refreshes += o.refreshes;
        self.failed_refreshes += o.failed_refreshes;
        self.evictions += o.evictions;
        self.expirations += o.expirations;
        self.entries += o.entries;
        self.bytes += o.bytes;
    }

    /// As in `sluice_info`'s `_meta`.
    pub fn json(&self) -> Value {
        json!({
            "hits": self.hits,
            "misses": self.misses,
            "bypasses": self.bypasses,
            "refreshes": self.refreshes,
            "failed_refreshes": self.failed_refreshes,
            "evictions": self.evictions,
            "expirations": self.expirations,
            "entries": self.entries,
            "bytes": self.bytes,
            "hit_ratio": self.hit_ratio().map(|r| (r * 1000.0).round() / 1000.0),
        })
    }

    /// "3 entries (12 kB); 10 hits, 3 misses (77 % hits), 1 refresh, 0 evictions".
    pub fn line(&self) -> String {
        let ratio = self
            .hit_ratio()
            .map(|r| format!(" ({:.0} % hits)", r * 100.0))
            .unwrap_or_default();
        format!(
            "{} entries ({}); {} hits, {} misses{ratio}, {} bypassed, {} refreshed ({} failed), {} evicted, {} expired",
            self.entries,
            sluice_core::format::bytes(self.bytes),
            self.hits,
            self.misses,
            self.bypasses,
            self.refreshes,
            self.failed_refreshes,
            self.evictions,
            self.expirations
        )
    }
}

type FiguresByTool = Arc<Mutex<BTreeMap<Arc<str>, Figures>>>;

/// What the cache answered a call with.
pub enum Served {
    /// An entry: the upstream was not called.
    Hit(Arc<Entry>),
    /// The upstream's answer, and the entry it made if it was cached.
    Fetched(Box<Answer>, Option<Arc<Entry>>),
}

/// The cache of one sluice, shared by its sessions.
pub struct ResultCache {
    entries: moka::future::Cache<String, Arc<Entry>>,
    figures: FiguresByTool,
    /// Keys being refreshed in the background (one refresh at a time).
    refreshing: Arc<Mutex<HashSet<String>>>,
    settings: CacheSettings,
    /// The entries every instance shares, if any.
    shared: Option<Backing>,
}

/// Each entry's lifetime and idle expiry, from its own policy.
struct PerEntryExpiry;

impl moka::Expiry<String, Arc<Entry>> for PerEntryExpiry {
    fn expire_after_create(&self, _: &String, entry: &Arc<Entry>, _: Instant) -> Option<Duration> {
        Some(entry.policy.ttl.min(entry.policy.idle))
    }

    fn expire_after_read(
        &self,
        _: &String,
        entry: &Arc<Entry>,
        read_at: Instant,
        _: Option<Duration>,
        _: Instant,
    ) -> Option<Duration> {
        let left = entry
            .policy
            .ttl
            .saturating_sub(read_at.saturating_duration_since(entry.stored_at));
        Some(left.min(entry.policy.idle))
    }

    fn expire_after_update(
        &self,
        key: &String,
        entry: &Arc<Entry>,
        updated_at: Instant,
        _: Option<Duration>,
    ) -> Option<Duration> {
        self.expire_after_create(key, entry, updated_at)
    }
}

impl ResultCache {
    /// An empty cache bounded by `settings.max_bytes`.
    pub fn new(settings: CacheSettings) -> Self {
        let figures: FiguresByTool = Arc::default();
        let counted = figures.clone();
        let entries = moka::future::Cache::builder()
            .max_capacity(settings.max_bytes)
            .weigher(|_: &String, entry: &Arc<Entry>| entry.bytes)
            // Every insert must stick (TinyLFU could refuse a new entry).
            .eviction_policy(moka::policy::EvictionPolicy::lru())
            .expire_after(PerEntryExpiry)
            .eviction_listener(move |_key, entry: Arc<Entry>, cause| {
                let mut figures = lock(&counted);
                let f = figures.entry(entry.tool.clone()).or_default();
                f.entries = f.entries.saturating_sub(1);
                f.bytes = f.bytes.saturating_sub(u64::from(entry.bytes));
                match cause {
                    RemovalCause::Size => f.evictions += 1,
                    RemovalCause::Expired => f.expirations += 1,
                    RemovalCause::Replaced if entry.expired() => f.expirations += 1,
                    RemovalCause::Explicit | RemovalCause::Replaced => {}
                }
            })
            .build();
        Self {
            entries,
            figures,
            refreshing: Arc::default(),
            settings,
            shared: None,
        }
    }

    /// The cache, its entries kept in `shared` too: shared with every
    /// instance (Redis), or kept across restarts (disk).
    pub fn shared(mut self, shared: Option<Backing>) -> Self {
        self.shared = shared;
        self
    }

    /// The `[cache]` settings.
    pub fn settings(&self) -> &CacheSettings {
        &self.settings
    }

    /// Answers a call of `tool` under `key`: from the entry if there is one
    /// (refreshing it in the background when due), else by one upstream
    /// call that every concurrent caller of the key waits for. `fresh`
    /// skips the entry and replaces it.
    pub async fn serve(
        &self,
        key: String,
        tool: &str,
        policy: CachePolicy,
        fresh: bool,
        fetch: Fetch,
    ) -> Served {
        let tool: Arc<str> = tool.into();
        if let Some(shared) = self.shared.clone() {
            return self
                .serve_shared(&shared, key, tool, policy, fresh, fetch)
                .await;
        }
        if fresh {
            let answer = fetch(false).await;
            self.count(&tool, |f| f.bypasses += 1);
            return match entry_of(answer, &key, &tool, policy) {
                Ok(entry) => {
                    let entry = Arc::new(entry);
                    self.insert(key, entry.clone()).await;
                    Served::Fetched(Box::new(Ok(entry.fetched())), Some(entry))
                }
                Err(answer) => Served::Fetched(answer, None),
            };
        }
        if let Some(entry) = self.local(&key, &tool).await {
            return self.hit(&key, entry, &fetch);
        }
        self.miss(key, tool, policy, fetch, None).await
    }

    /// This instance's entry of `key`, if it lives.
    async fn local(&self, key: &str, tool: &Arc<str>) -> Option<Arc<Entry>> {
        match self.entries.get(key).await {
            // moka expires entries by the system's clock; an entry past its
            // time on the runtime's (which tests move) goes now.
            Some(entry) if entry.expired() => {
                self.entries.invalidate(key).await;
                self.count(tool, |f| f.expirations += 1);
                None
            }
            found => found,
        }
    }

    /// Answers with `entry`, refreshing it in the background when due.
    fn hit(&self, key: &str, entry: Arc<Entry>, fetch: &Fetch) -> Served {
        entry.read();
        self.count(&entry.tool, |f| f.hits += 1);
        self.refresh_if_due(key, &entry, fetch);
        Served::Hit(entry)
    }

    /// [`Self::serve`] with entries shared through `shared`.
    async fn serve_shared(
        &self,
        shared: &Backing,
        key: String,
        tool: Arc<str>,
        policy: CachePolicy,
        fresh: bool,
        fetch: Fetch,
    ) -> Served {
        if fresh {
            let answer = fetch(false).await;
            self.count(&tool, |f| f.bypasses += 1);
            return match entry_of(answer, &key, &tool, policy) {
                Ok(mut entry) => {
                    if let Some(sent) = entry.raw()
                        && let Ok(Written::Kept(stamp)) = shared
                            .cache_put(&key, sent.as_bytes(), policy.ttl, policy.idle, true)
                            .await
                    {
                        entry.stamp = Some(stamp);
                    }
                    let entry = Arc::new(entry);
                    self.insert(key, entry.clone()).await;
                    Served::Fetched(Box::new(Ok(entry.fetched())), Some(entry))
                }
                Err(answer) => Served::Fetched(answer, None),
            };
        }
        let local = self.local(&key, &tool).await;
        // Only this process writes the entries (disk): its copy is current,
        // and an entry it lacks may be there from before a restart.
        if shared.exclusive() {
            if let Some(entry) = local {
                return self.hit(&key, entry, &fetch);
            }
            if let Ok(Some(entry)) = copied(shared, &key, &tool, policy).await {
                let entry = Arc::new(entry);
                self.insert(key.clone(), entry.clone()).await;
                return self.hit(&key, entry, &fetch);
            }
            return self
                .miss(key, tool, policy, fetch, Some(shared.clone()))
                .await;
        }
        match shared.cache_stamp(&key, policy.idle).await {
            Ok(Some(stamp)) => {
                // This instance's copy, if it is of the entry that lives.
                if let Some(entry) = local
                    .as_ref()
                    .filter(|e| e.stamp.as_deref() == Some(stamp.as_str()))
                {
                    return self.hit(&key, entry.clone(), &fetch);
                }
                // Not the entry that lives: never answered with again.
                if local.is_some() {
                    self.entries.invalidate(&key).await;
                }
                if let Ok(Some(entry)) = copied(shared, &key, &tool, policy).await {
                    let entry = Arc::new(entry);
                    self.insert(key.clone(), entry.clone()).await;
                    return self.hit(&key, entry, &fetch);
                }
            }
            // No entry lives for any instance: this one's copy is stale,
            // unless it is one only this instance keeps (a result made of
            // several messages, never written to Redis).
            Ok(None) => match local {
                Some(entry) if entry.raw().is_none() => {
                    return self.hit(&key, entry, &fetch);
                }
                Some(_) => self.entries.invalidate(&key).await,
                None => {}
            },
            // Redis is unreachable: as without it.
            Err(_) => {
                if let Some(entry) = local {
                    return self.hit(&key, entry, &fetch);
                }
                return self.miss(key, tool, policy, fetch, None).await;
            }
        }
        self.miss(key, tool, policy, fetch, Some(shared.clone()))
            .await
    }

    /// A miss on `key`: one upstream call that every concurrent caller of
    /// the key here waits for (and, with `shared`, every instance).
    async fn miss(
        &self,
        key: String,
        tool: Arc<str>,
        policy: CachePolicy,
        fetch: Fetch,
        shared: Option<Backing>,
    ) -> Served {
        // Only the caller whose call runs sees its answer moved into the
        // entry; the ones waiting on it get the entry (or the error).
        let made = self
            .entries
            .entry(key.clone())
            .or_try_insert_with(async {
                match &shared {
                    Some(shared) => fill_shared(shared, &key, &tool, policy, &fetch).await,
                    None => Ok(Arc::new(entry_of(fetch(false).await, &key, &tool, policy)?)),
                }
            })
            .await;
        match made {
            // Another instance's answer, copied here.
            Ok(entry) if entry.is_fresh() && entry.value().elsewhere => {
                let entry = entry.into_value();
                self.count(&tool, |f| {
                    f.hits += 1;
                    f.entries += 1;
                    f.bytes += u64::from(entry.bytes);
                });
                Served::Hit(entry)
            }
            Ok(entry) if entry.is_fresh() => {
                let entry = entry.into_value();
                self.count(&tool, |f| {
                    f.misses += 1;
                    f.entries += 1;
                    f.bytes += u64::from(entry.bytes);
                });
                Served::Fetched(Box::new(Ok(entry.fetched())), Some(entry))
            }
            Ok(entry) => {
                self.count(&tool, |f| f.hits += 1);
                Served::Hit(entry.into_value())
            }
            Err(answer) => {
                self.count(&tool, |f| f.misses += 1);
                Served::Fetched(Box::new((**answer).clone()), None)
            }
        }
    }

    async fn insert(&self, key: String, entry: Arc<Entry>) {
        let (tool, bytes) = (entry.tool.clone(), u64::from(entry.bytes));
        self.entries.insert(key, entry).await;
        self.count(&tool, |f| {
            f.entries += 1;
            f.bytes += bytes;
        });
    }

    /// Starts a background refresh of `key` if `entry` is old enough and
    /// no refresh of it runs.
    fn refresh_if_due(&self, key: &str, entry: &Arc<Entry>, fetch: &Fetch) {
        if entry.policy.refresh_at >= 1.0 || entry.age() < entry.policy.refresh_after() {
            return;
        }
        if !lock(&self.refreshing).insert(key.to_owned()) {
            return;
        }
        let call = fetch(true);
        let (key, tool, policy) = (key.to_owned(), entry.tool.clone(), entry.policy);
        let (entries, figures, refreshing, shared) = (
            self.entries.clone(),
            self.figures.clone(),
            self.refreshing.clone(),
            self.shared.clone(),
        );
        tokio::spawn(async move {
            let mut refreshed_stamp = None;
            // One instance refreshes a shared entry: the one that takes
            // its lock.
            let token = sluice_core::store::random_id("");
            if let Some(shared) = &shared
                && !matches!(shared.cache_lock(&key, &token, LOCK_LEASE).await, Ok(true))
            {
                lock(&refreshing).remove(&key);
                return;
            }
            let answer = match &shared {
                Some(shared) => holding(shared, &key, &token, call).await,
                None => call.await,
            };
            let refreshed = entry_of(answer, &key, &tool, policy);
            if let Ok(entry) = &refreshed
                && let Some(shared) = &shared
                && let Some(sent) = entry.raw()
                && let Ok(Written::Kept(stamp)) = shared
                    .cache_put(&key, sent.as_bytes(), policy.ttl, policy.idle, true)
                    .await
            {
                refreshed_stamp = Some(stamp);
            }
            // Released once the entry is written: a miss woken by it finds
            // the new one.
            if let Some(shared) = &shared {
                shared.cache_unlock(&key, &token).await;
            }
            match refreshed {
                Ok(mut entry) => {
                    if refreshed_stamp.is_some() {
                        entry.stamp = refreshed_stamp;
                    }
                    let bytes = u64::from(entry.bytes);
                    entries.insert(key.clone(), Arc::new(entry)).await;
                    let mut figures = lock(&figures);
                    let f = figures.entry(tool.clone()).or_default();
                    f.refreshes += 1;
                    f.entries += 1;
                    f.bytes += bytes;
                }
                Err(answer) => {
                    let why = match answer.as_ref() {
                        Ok(Fetched::Sent { response, .. }) => format!(
                            "an error result: {}",
                            response
                                .result()
                                .and_then(crate::govern::SentCall::read)
                                .and_then(|call| call.texts().next().map(str::to_owned))
                                .unwrap_or_default()
                        ),
                        Ok(Fetched::Decoded(decoded))
                            if let ServerResult::CallToolResult(r) = &**decoded =>
                        {
                            format!(
                                "an error result: {}",
                                r.content
                                    .first()
                                    .and_then(|c| c.as_text())
                                    .map_or("", |t| t.text.as_str())
                            )
                        }
                        Ok(Fetched::Decoded(_)) => "an answer that is not a tool result".to_owned(),
                        Err(e) => e.to_string(),
                    };
                    tracing::warn!(
                        tool = %tool,
                        "the cached result could not be refreshed ({why}); the cached one is kept until it expires"
                    );
                    lock(&figures)
                        .entry(tool.clone())
                        .or_default()
                        .failed_refreshes += 1;
                }
            }
            lock(&refreshing).remove(&key);
        });
    }

    fn count(&self, tool: &Arc<str>, update: impl FnOnce(&mut Figures)) {
        update(lock(&self.figures).entry(tool.clone()).or_default());
    }

    /// The figures of every tool that used the cache, and their total.
    pub async fn figures(&self) -> (Figures, BTreeMap<Arc<str>, Figures>) {
        // Expired and evicted entries are counted once moka has noticed.
        self.entries.run_pending_tasks().await;
        let by_tool = lock(&self.figures).clone();
        let mut total = Figures::default();
        for f in by_tool.values() {
            total.add(f);
        }
        (total, by_tool)
    }
}

/// What an entry keeps of its result.
#[derive(Debug)]
enum Kept {
    /// The response the upstream sent, as received.
    Sent(Message),
    /// The result, decoded (made of several messages: a task's).
    Decoded(CallToolResult),
}

/// The result of an upstream's response `sent`, decoded.
fn decode(sent: &Message) -> serde_json::Result<CallToolResult> {
    serde_json::from_str(sent.result().unwrap_or("{}"))
}

/// The entry `answer` makes, or the answer itself if it must not be
/// cached (an error, or not a tool's result).
fn entry_of(
    answer: Answer,
    key: &str,
    tool: &Arc<str>,
    policy: CachePolicy,
) -> Result<Entry, Box<Answer>> {
    let (kept, size) = match answer {
        Ok(Fetched::Sent {
            response,
            is_error: false,
        }) => {
            let size = response.result().map_or(0, |r| r.len() as u64);
            (Kept::Sent(response), size)
        }
        Ok(Fetched::Decoded(decoded)) => match *decoded {
            ServerResult::CallToolResult(result) if result.is_error != Some(true) => {
                let size = crate::govern::json_bytes(&result);
                (Kept::Decoded(result), size)
            }
            other => return Err(Box::new(Ok(Fetched::Decoded(Box::new(other))))),
        },
        other => return Err(Box::new(other)),
    };
    let bytes = size.saturating_add(key.len() as u64);
    Ok(Entry {
        result: kept,
        stored_at: crate::clock::now(),
        bytes: u32::try_from(bytes).unwrap_or(u32::MAX),
        tool: tool.clone(),
        policy,
        last_read_ms: AtomicU64::new(0),
        governed: Mutex::default(),
        stamp: None,
        elsewhere: false,
    })
}

/// The entry made of a shared one, `elsewhere` if not of this call's
/// answer; `None` if its bytes do not read as a response (the entry
/// counts as absent).
fn entry_of_shared(
    shared: SharedEntry,
    key: &str,
    tool: &Arc<str>,
    policy: CachePolicy,
    elsewhere: bool,
) -> Option<Entry> {
    let response = Message::parse(shared.response).ok()?;
    let size = response.result()?.len() as u64;
    let age = crate::clock::wall()
        .duration_since(shared.stored_at)
        .unwrap_or_default();
    let now = crate::clock::now();
    let bytes = size.saturating_add(key.len() as u64);
    Some(Entry {
        result: Kept::Sent(response),
        stored_at: now.checked_sub(age).unwrap_or(now),
        bytes: u32::try_from(bytes).unwrap_or(u32::MAX),
        tool: tool.clone(),
        policy,
        last_read_ms: AtomicU64::new(age.as_millis() as u64),
        governed: Mutex::default(),
        stamp: Some(shared.stamp),
        elsewhere,
    })
}

/// The answer of `call`, made while holding the lock of `key` under
/// `token`: extended every third of its lease while the call runs.
async fn holding(
    shared: &Backing,
    key: &str,
    token: &str,
    call: BoxFuture<'static, Answer>,
) -> Answer {
    tokio::pin!(call);
    loop {
        tokio::select! {
            answer = &mut call => return answer,
            () = tokio::time::sleep(LOCK_LEASE / 3) => {
                shared.cache_extend(key, token, LOCK_LEASE).await;
            }
        }
    }
}

/// The entry another call wrote under `key`, copied here; `None` if none
/// lives (or it does not read); `Err` if the backing cannot be read.
async fn copied(
    shared: &Backing,
    key: &str,
    tool: &Arc<str>,
    policy: CachePolicy,
) -> Result<Option<Entry>, String> {
    Ok(shared
        .cache_get(key, policy.idle)
        .await?
        .and_then(|written| entry_of_shared(written, key, tool, policy, true)))
}

/// A miss on a shared entry: the instance that takes the key's lock calls
/// the upstream (extending the lock while its call runs) and writes the
/// entry; the others wait for it, woken when the lock is released, and
/// take over if the lock lapses without an entry (its holder died, or the
/// answer was an error, which is never kept). If Redis fails, the call
/// goes upstream as without it.
async fn fill_shared(
    shared: &Backing,
    key: &str,
    tool: &Arc<str>,
    policy: CachePolicy,
    fetch: &Fetch,
) -> Result<Arc<Entry>, Box<Answer>> {
    let token = sluice_core::store::random_id("");
    let topic = Shared::cache_topic(key);
    loop {
        let released = shared.topic(&topic);
        let released = released.notified();
        tokio::pin!(released);
        released.as_mut().enable();
        match shared.cache_lock(key, &token, LOCK_LEASE).await {
            Ok(true) => {
                // Written between the look and the lock.
                if let Ok(Some(entry)) = copied(shared, key, tool, policy).await {
                    shared.cache_unlock(key, &token).await;
                    return Ok(Arc::new(entry));
                }
                let answer = holding(shared, key, &token, fetch(false)).await;
                let made = match entry_of(answer, key, tool, policy) {
                    Ok(mut entry) => {
                        let written = match entry.raw() {
                            Some(sent) => Some(
                                shared
                                    .cache_put(key, sent.as_bytes(), policy.ttl, policy.idle, false)
                                    .await,
                            ),
                            // A result made of several messages: kept here only.
                            None => None,
                        };
                        match written {
                            None => {}
                            Some(Ok(Written::Kept(stamp))) => entry.stamp = Some(stamp),
                            // Never two values in one entry's life: theirs.
                            Some(Ok(Written::Theirs(theirs))) => {
                                if let Some(theirs) =
                                    entry_of_shared(theirs, key, tool, policy, false)
                                {
                                    entry = theirs;
                                }
                            }
                            // Kept here only (logged by the link).
                            Some(Err(_)) => {}
                        }
                        Ok(Arc::new(entry))
                    }
                    Err(answer) => Err(answer),
                };
                shared.cache_unlock(key, &token).await;
                return made;
            }
            Ok(false) => {
                // Another call holds it: wait for its entry, or for the
                // lock to lapse.
                let _ = tokio::time::timeout(LOCK_LEASE, released).await;
                match copied(shared, key, tool, policy).await {
                    Ok(Some(entry)) => return Ok(Arc::new(entry)),
                    Ok(None) => {}
                    Err(_) => break,
                }
            }
            Err(_) => break,
        }
    }
    Ok(Arc::new(entry_of(fetch(false).await, key, tool, policy)?))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
