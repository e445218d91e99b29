//! Stored results in Redis (or Valkey), shared by every sluice instance
//! that uses the same server (`[store] backend = "redis"`).
//!
//! Keys, under `sluice:`:
//! - `r:{handle}`: a hash: `meta` (what is known of the result, JSON:
//!   [`Meta`]) and `f0`, `f1`, … (its document in 64 KiB frames, zstd
//!   unless `compress = false`); it expires `ttl_s` after its last use
//!   (Redis's own TTL, renewed on every read);
//! - `g:{handle}`: `owner|expiry ms`, kept a day longer, to say that a
//!   handle expired rather than never existed;
//! - `o:{owner}`: a sorted set of the owner's handles by when they were
//!   stored, for `sluice_info {}` (never for anonymous owners);
//! - `all`: every handle by expiry and `weights`: each one's bytes, for
//!   the figures (`usage`), trimmed as entries expire.
//!
//! A page read fetches the whole hash of a document the first time (then
//! it is kept decoded among the documents read lately, as the disk store
//! does). Every write of a result is one `MULTI` pipeline. Redis bounds
//! its memory itself (`maxmemory` with a `volatile-*` policy): `max_bytes`
//! is the most one result may weigh.
//!
//! The trait is synchronous; sluice calls a store that does I/O on a
//! blocking thread, where this one runs its async commands on the
//! runtime it was opened on ([`tokio::runtime::Handle::block_on`]). The
//! connection is made on first use and remade by redis's connection
//! manager; while Redis is unreachable every call fails at once with
//! [`StoreError::Unavailable`], and [`Store::health`] says why.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use sluice_core::document::Document;
use sluice_core::pager::Page;
use sluice_core::store::PLANS_PER_RESULT;
use sluice_core::store::framed::{self, Encoded, Meta, at_millis, millis};
use sluice_core::store::{
    Brief, FramedPlan, Listed, Loaded, Owner, PageAsk, Plans, ReadError, Store, StoreError,
    StoreLimits, Stored, StoredInfo,
};

/// Saves a plan (`ARGV[1]` → `ARGV[2]`) into a result's hash (`KEYS[1]`)
/// only while it exists (one that expired meanwhile is not made again) and
/// holds fewer than `ARGV[3]` plans.
const SAVE_PLAN: &str = "if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end \
    local n = 0 \
    for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do \
      if string.sub(f, 1, 2) == 'p:' then n = n + 1 end \
    end \
    if n >= tonumber(ARGV[3]) then return 0 end \
    return redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])";

/// The prefix of every key sluice writes.
const PREFIX: &str = "sluice:";
/// How long a handle is remembered as expired after it expired.
const GONE_KEPT: Duration = Duration::from_secs(24 * 3600);
/// How long to wait for Redis to connect, and to answer one command.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest one store call (a few commands) may take: past it, the
/// call fails as the store being unavailable.
const CALL_TIMEOUT: Duration = Duration::from_secs(6);
/// The most one result may weigh in Redis, whatever `max_bytes` says: it
/// is written in one command, within Redis's 1 GB query buffer.
const MAX_RESULT_BYTES: u64 = 256 << 20;

/// Stored results in Redis.
pub struct RedisStore {
    /// Where to reach it (without credentials), for messages.
    shown: String,
    limits: StoreLimits,
    compress: bool,
    runtime: tokio::runtime::Handle,
    /// Connects on first use, and again by itself after a failure.
    manager: ConnectionManager,
    loaded: Loaded,
    /// Page plans read back lately.
    plans: Plans,
    failing: Mutex<Option<String>>,
}

fn key(parts: &[&str]) -> String {
    let mut key = PREFIX.to_owned();
    key.push_str(&parts.concat());
    key
}

/// A client of the Redis at `url`, and a connection manager that connects
/// on first use (and again by itself after a failure).
pub(super) fn connect_lazily(url: &str) -> Result<(redis::Client, ConnectionManager), String> {
    let client = redis::Client::open(url).map_err(|e| format!("{}: {e}", crate::shown_url(url)))?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_number_of_retries(1);
    let manager = ConnectionManager::new_lazy_with_config(client.clone(), config)
        .map_err(|e| format!("{}: {e}", crate::shown_url(url)))?;
    Ok((client, manager))
}

/// `call`, failed as a lost connection past [`CALL_TIMEOUT`].
pub(super) async fn within_call_timeout<T>(
    call: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> redis::RedisResult<T> {
    tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .unwrap_or_else(|_| {
            Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "no answer",
                format!("within {} s", CALL_TIMEOUT.as_secs()),
            )))
        })
}

impl RedisStore {
    /// A store on the Redis at `url`; it connects on first use.
    pub fn new(url: &str, limits: StoreLimits, compress: bool) -> Result<Self, String> {
        let (_, manager) = connect_lazily(url)?;
        Ok(Self {
            shown: crate::shown_url(url),
            limits,
            compress,
            runtime: tokio::runtime::Handle::current(),
            manager,
            loaded: Loaded::new(limits.max_bytes),
            plans: Plans::default(),
            failing: Mutex::default(),
        })
    }

    /// Where it is, without credentials.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Runs `f` with a connection, on the runtime, from a blocking thread;
    /// notes how it went.
    fn run<T, F>(&self, f: impl FnOnce(ConnectionManager) -> F) -> Result<T, StoreError>
    where
        F: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let outcome = self
            .runtime
            .block_on(within_call_timeout(f(self.manager.clone())));
        *self.failing.lock().unwrap_or_else(|p| p.into_inner()) =
            outcome.as_ref().err().map(|e| e.to_string());
        outcome.map_err(|e| StoreError::Unavailable {
            backend: "redis",
            why: format!("{} ({e})", self.shown),
        })
    }

    /// `owner`'s `handle`, its life renewed: its meta, and when it expires.
    fn use_entry(&self, owner: &Owner, handle: &str) -> Result<(Meta, SystemTime), StoreError> {
        // A client's text goes into no key unless it is shaped as a handle.
        if !sluice_core::store::is_handle(handle) {
            return Err(StoreError::Unknown(handle.to_owned()));
        }
        let ttl = self.limits.ttl;
        let expires_at = crate::clock::wall() + ttl;
        let result = key(&["r:", handle]);
        let gone = key(&["g:", handle]);
        let meta: Option<Vec<u8>> = self.run(|mut c| {
            let result = result.clone();
            async move {
                redis::cmd("HGET")
                    .arg(&result)
                    .arg("meta")
                    .query_async(&mut c)
                    .await
            }
        })?;
        let meta = meta.as_deref().and_then(Meta::parse);
        let Some(meta) = meta.filter(|m| m.owner == owner.key()) else {
            self.loaded.forget(&[handle.to_owned()]);
            return Err(self.why_gone(owner, handle));
        };
        let owner_key = owner.key();
        let listed = owner.may_list().then(|| key(&["o:", &owner_key]));
        let all = key(&["all"]);
        let handle_owned = handle.to_owned();
        self.run(|mut c| async move {
            let mut pipe = redis::pipe();
            pipe.cmd("PEXPIRE")
                .arg(&result)
                .arg(ttl.as_millis() as u64)
                .ignore()
                .cmd("SET")
                .arg(&gone)
                .arg(format!("{owner_key}|{}", millis(expires_at)))
                .arg("PX")
                .arg((ttl + GONE_KEPT).as_millis() as u64)
                .ignore()
                .cmd("ZADD")
                .arg(&all)
                .arg("XX")
                .arg(millis(expires_at))
                .arg(&handle_owned)
                .ignore();
            if let Some(listed) = &listed {
                pipe.cmd("PEXPIRE")
                    .arg(listed)
                    .arg(ttl.as_millis() as u64)
                    .ignore();
            }
            pipe.query_async::<()>(&mut c).await
        })?;
        Ok((meta, expires_at))
    }

    /// Why `owner` cannot read `handle`: expired (when it did), or never
    /// its.
    fn why_gone(&self, owner: &Owner, handle: &str) -> StoreError {
        let gone = key(&["g:", handle]);
        let mark: Result<Option<String>, StoreError> =
            self.run(|mut c| async move { redis::cmd("GET").arg(&gone).query_async(&mut c).await });
        let mark = match mark {
            Ok(mark) => mark,
            Err(e) => return e,
        };
        match mark.as_deref().and_then(|m| m.rsplit_once('|')) {
            Some((who, ms)) if who == owner.key() => {
                let at = ms
                    .parse()
                    .map(at_millis)
                    .unwrap_or_else(|_| crate::clock::wall());
                StoreError::Expired {
                    handle: handle.to_owned(),
                    ago_s: crate::clock::wall()
                        .duration_since(at)
                        .unwrap_or_default()
                        .as_secs(),
                    ttl_s: self.limits.ttl.as_secs(),
                }
            }
            _ => StoreError::Unknown(handle.to_owned()),
        }
    }

    /// Page `ask` served from `doc`, the document of `handle`; a plan it
    /// made for the page is saved as `plan_key` in the result's hash
    /// (while it exists, within the plans' bounds) for the next first read
    /// anywhere. A failure to save only costs that read its plan.
    fn served_and_saved(
        &self,
        handle: &str,
        plan_key: &str,
        doc: &Document,
        ask: &PageAsk,
    ) -> Result<Page, ReadError> {
        let (page, saved) = ask.serve_and_save(doc)?;
        if let Some(saved) = saved {
            let (result, field) = (key(&["r:", handle]), format!("p:{plan_key}"));
            let _ = self.run(|mut c| async move {
                redis::cmd("EVAL")
                    .arg(SAVE_PLAN)
                    .arg(1)
                    .arg(&result)
                    .arg(&field)
                    .arg(saved)
                    .arg(PLANS_PER_RESULT)
                    .query_async::<()>(&mut c)
                    .await
            });
        }
        Ok(page)
    }

    /// Why frames of `handle` did not read back: it expired since its
    /// meta was read (said as expired), or it lost them (damaged).
    fn frames_missing(&self, owner: &Owner, handle: &str) -> StoreError {
        let result = key(&["r:", handle]);
        let exists: Result<bool, StoreError> = self.run(|mut c| async move {
            redis::cmd("HEXISTS")
                .arg(&result)
                .arg("meta")
                .query_async(&mut c)
                .await
        });
        match exists {
            Ok(true) => StoreError::Unavailable {
                backend: "redis",
                why: format!(
                    "{}: frames of {handle} are missing (the result is damaged); call the tool again",
                    self.shown
                ),
            },
            Ok(false) => self.why_gone(owner, handle),
            Err(e) => e,
        }
    }

    /// Reads `handle`'s document back.
    fn read(&self, owner: &Owner, handle: &str, meta: Meta) -> Result<Arc<Stored>, StoreError> {
        let result = key(&["r:", handle]);
        let fields: Vec<String> = (0..meta.frames).map(|n| format!("f{n}")).collect();
        let frames: Vec<Option<Vec<u8>>> = if fields.is_empty() {
            Vec::new()
        } else {
            self.run(|mut c| async move {
                redis::cmd("HMGET")
                    .arg(&result)
                    .arg(&fields)
                    .query_async(&mut c)
                    .await
            })?
        };
        let Some(frames) = frames.into_iter().collect::<Option<Vec<Vec<u8>>>>() else {
            return Err(self.frames_missing(owner, handle));
        };
        framed::decode(handle, meta, &frames)
            .map(Arc::new)
            .map_err(|why| StoreError::Unavailable {
                backend: "redis",
                why: format!("{}: {why}", self.shown),
            })
    }
}

impl Store for RedisStore {
    fn backend(&self) -> &'static str {
        "redis"
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
        let stored = Arc::new(Stored::new(owner, doc, info, crate::clock::wall()));
        let Encoded {
            meta,
            frames,
            weight,
            plans,
        } = framed::encode(&stored, self.compress).map_err(|e| StoreError::Unavailable {
            backend: "redis",
            why: e.to_string(),
        })?;
        let max = self.limits.max_bytes.min(MAX_RESULT_BYTES);
        if weight > max {
            return Err(StoreError::TooLarge { bytes: weight, max });
        }
        let ttl = self.limits.ttl;
        let expires_at = crate::clock::wall() + ttl;
        let handle = stored.handle.clone();
        let owner_key = owner.key();
        let listed = owner.may_list().then(|| key(&["o:", &owner_key]));
        let created = millis(stored.created);
        self.run(|mut c| async move {
            let result = key(&["r:", &handle]);
            let mut pipe = redis::pipe();
            pipe.atomic();
            let mut hset = redis::cmd("HSET");
            hset.arg(&result).arg("meta").arg(&meta);
            for (n, frame) in frames.iter().enumerate() {
                hset.arg(format!("f{n}")).arg(frame.as_slice());
            }
            for (plan_key, plan) in &plans {
                hset.arg(format!("p:{plan_key}")).arg(plan.as_slice());
            }
            pipe.add_command(hset)
                .ignore()
                .cmd("PEXPIRE")
                .arg(&result)
                .arg(ttl.as_millis() as u64)
                .ignore()
                .cmd("SET")
                .arg(key(&["g:", &handle]))
                .arg(format!("{owner_key}|{}", millis(expires_at)))
                .arg("PX")
                .arg((ttl + GONE_KEPT).as_millis() as u64)
                .ignore()
                .cmd("ZADD")
                .arg(key(&["all"]))
                .arg(millis(expires_at))
                .arg(&handle)
                .ignore()
                .cmd("HSET")
                .arg(key(&["weights"]))
                .arg(&handle)
                .arg(weight)
                .ignore()
                .cmd("INCRBY")
                .arg(key(&["bytes"]))
                .arg(weight)
                .ignore();
            if let Some(listed) = &listed {
                pipe.cmd("ZADD")
                    .arg(listed)
                    .arg(created)
                    .arg(&handle)
                    .ignore()
                    .cmd("PEXPIRE")
                    .arg(listed)
                    .arg(ttl.as_millis() as u64)
                    .ignore();
            }
            pipe.query_async::<()>(&mut c).await
        })?;
        self.loaded.keep(stored.clone());
        Ok(stored)
    }

    fn get(&self, owner: &Owner, handle: &str) -> Result<Listed, StoreError> {
        let (meta, expires_at) = self.use_entry(owner, handle)?;
        let stored = match self.loaded.get(handle) {
            Some(stored) => stored,
            None => self.read(owner, handle, meta)?,
        };
        self.loaded.keep(stored.clone());
        Ok(Listed { stored, expires_at })
    }

    fn page(&self, owner: &Owner, handle: &str, ask: &PageAsk) -> Result<Page, ReadError> {
        let (meta, _) = self.use_entry(owner, handle)?;
        let Some(plan_key) = ask.key() else {
            return ask.serve(&self.get(owner, handle)?.stored.doc);
        };
        if let Some(stored) = self.loaded.get(handle) {
            // Held decoded here: served from it, and a plan made now is
            // saved for the next first read anywhere.
            return self.served_and_saved(handle, &plan_key, &stored.doc, ask);
        }
        let result = key(&["r:", handle]);
        let plan = match self.plans.get(handle, &plan_key) {
            Some(plan) => Some(plan),
            None => {
                let field = format!("p:{plan_key}");
                let saved: Option<Vec<u8>> = self.run(|mut c| {
                    let result = result.clone();
                    async move {
                        redis::cmd("HGET")
                            .arg(&result)
                            .arg(&field)
                            .query_async(&mut c)
                            .await
                    }
                })?;
                let plan = saved
                    .and_then(|saved| FramedPlan::of(&meta, &saved))
                    .map(Arc::new);
                if let Some(plan) = &plan {
                    self.plans.keep(handle, &plan_key, plan.clone());
                }
                plan
            }
        };
        let Some(plan) = plan else {
            // No plan of this path and budget yet: planned from the whole
            // document, once, and saved for the next first read anywhere.
            let stored = self.read(owner, handle, meta)?;
            self.loaded.keep(stored.clone());
            return self.served_and_saved(handle, &plan_key, &stored.doc, ask);
        };
        plan.page(ask.start, "redis", |numbers| {
            let fields: Vec<String> = numbers.iter().map(|n| format!("f{n}")).collect();
            let frames: Vec<Option<Vec<u8>>> = self.run(|mut c| async move {
                redis::cmd("HMGET")
                    .arg(&result)
                    .arg(&fields)
                    .query_async(&mut c)
                    .await
            })?;
            frames
                .into_iter()
                .collect::<Option<Vec<Vec<u8>>>>()
                .ok_or_else(|| self.frames_missing(owner, handle))
        })
    }

    fn touch(&self, owner: &Owner, handle: &str) -> Result<SystemTime, StoreError> {
        self.use_entry(owner, handle)
            .map(|(_, expires_at)| expires_at)
    }

    fn list(&self, owner: &Owner, limit: usize) -> Vec<Brief> {
        if !owner.may_list() || limit == 0 {
            return Vec::new();
        }
        self.briefs_in(key(&["o:", &owner.key()]), Some(owner), limit)
    }

    fn newest(&self, limit: usize) -> Vec<Brief> {
        if limit == 0 {
            return Vec::new();
        }
        // Scored by expiry: the most recently used first.
        self.briefs_in(key(&["all"]), None, limit)
    }

    fn purge_expired(&self) -> usize {
        // Redis expires the results; the figures and the owners' sets are
        // trimmed here (by any instance: each step is idempotent but the
        // total, taken down by what this instance removed).
        let now = millis(crate::clock::wall());
        self.run(|mut c| async move {
            let all = key(&["all"]);
            let expired: Vec<String> = redis::cmd("ZRANGEBYSCORE")
                .arg(&all)
                .arg("-inf")
                .arg(now)
                .arg("LIMIT")
                .arg(0)
                .arg(1_000)
                .query_async(&mut c)
                .await?;
            if expired.is_empty() {
                return Ok(0);
            }
            let mut read = redis::pipe();
            read.cmd("HMGET").arg(key(&["weights"])).arg(&expired);
            for handle in &expired {
                read.cmd("GET").arg(key(&["g:", handle]));
            }
            let mut replies: Vec<redis::Value> = read.query_async(&mut c).await?;
            let weights: Vec<Option<u64>> =
                redis::from_redis_value(replies.remove(0)).unwrap_or_default();
            let mut trim = redis::pipe();
            for (handle, mark) in expired.iter().zip(replies) {
                let owner = redis::from_redis_value::<Option<String>>(mark)
                    .ok()
                    .flatten()
                    .and_then(|m| m.rsplit_once('|').map(|(o, _)| o.to_owned()));
                if let Some(owner) = owner {
                    trim.cmd("ZREM")
                        .arg(key(&["o:", &owner]))
                        .arg(handle)
                        .ignore();
                }
            }
            trim.cmd("ZREM").arg(&all).arg(&expired);
            trim.cmd("HDEL")
                .arg(key(&["weights"]))
                .arg(&expired)
                .ignore();
            let (removed,): (usize,) = trim.query_async(&mut c).await?;
            // Only what this instance removed (another may have raced it).
            if removed > 0 {
                let freed: u64 = weights.iter().flatten().sum();
                let share = if removed == expired.len() { freed } else { 0 };
                redis::cmd("DECRBY")
                    .arg(key(&["bytes"]))
                    .arg(share)
                    .query_async::<()>(&mut c)
                    .await?;
            }
            Ok(removed)
        })
        .unwrap_or(0)
    }

    fn usage(&self) -> (usize, u64) {
        self.run(|mut c| async move {
            let (entries, bytes): (usize, Option<i64>) = redis::pipe()
                .cmd("ZCARD")
                .arg(key(&["all"]))
                .cmd("GET")
                .arg(key(&["bytes"]))
                .query_async(&mut c)
                .await?;
            Ok((entries, bytes.unwrap_or(0).max(0) as u64))
        })
        .unwrap_or((0, 0))
    }

    fn health(&self) -> Result<(), String> {
        match &*self.failing.lock().unwrap_or_else(|p| p.into_inner()) {
            None => Ok(()),
            Some(why) => Err(format!("{}: {why}", self.shown)),
        }
    }
}

impl RedisStore {
    /// The results listed in the sorted set `listed`, highest scores
    /// first, at most `limit`: `owner`'s (whose set it is: the handles of
    /// results gone are taken out of it), or anyone's.
    fn briefs_in(&self, listed: String, owner: Option<&Owner>, limit: usize) -> Vec<Brief> {
        let handles: Vec<String> = match self.run(|mut c| {
            let listed = listed.clone();
            async move {
                redis::cmd("ZREVRANGE")
                    .arg(&listed)
                    .arg(0)
                    .arg(4 * limit as isize - 1)
                    .query_async(&mut c)
                    .await
            }
        }) {
            Ok(handles) => handles,
            Err(_) => return Vec::new(),
        };
        let metas: Vec<(Option<Vec<u8>>, i64)> = match self.run(|mut c| {
            let handles = handles.clone();
            async move {
                let mut pipe = redis::pipe();
                for handle in &handles {
                    let result = key(&["r:", handle]);
                    pipe.cmd("HGET").arg(&result).arg("meta");
                    pipe.cmd("PTTL").arg(&result);
                }
                let flat: Vec<redis::Value> = pipe.query_async(&mut c).await?;
                Ok(flat
                    .chunks(2)
                    .map(|pair| {
                        let meta = redis::from_redis_value::<Option<Vec<u8>>>(pair[0].clone())
                            .unwrap_or(None);
                        let ttl = redis::from_redis_value::<i64>(pair[1].clone()).unwrap_or(-2);
                        (meta, ttl)
                    })
                    .collect())
            }
        }) {
            Ok(metas) => metas,
            Err(_) => return Vec::new(),
        };
        let now = crate::clock::wall();
        let mut briefs = Vec::new();
        let mut gone = Vec::new();
        for (handle, (meta, ttl_ms)) in handles.iter().zip(metas) {
            let brief = meta
                .as_deref()
                .and_then(Meta::parse)
                .filter(|m| owner.is_none_or(|o| m.owner == o.key()))
                .and_then(|m| {
                    let expires = now + Duration::from_millis(ttl_ms.max(0) as u64);
                    m.brief(handle, expires).map(|(_, b)| b)
                });
            match brief {
                Some(brief) if ttl_ms > 0 => briefs.push(brief),
                _ => gone.push(handle.clone()),
            }
        }
        if owner.is_some() && !gone.is_empty() {
            let _ = self.run(|mut c| async move {
                redis::cmd("ZREM")
                    .arg(&listed)
                    .arg(&gone)
                    .query_async::<()>(&mut c)
                    .await
            });
        }
        briefs.truncate(limit);
        briefs
    }
}
