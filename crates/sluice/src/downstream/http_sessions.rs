//! The table of 2025-11-25 HTTP sessions: each session's [`Front`] by its
//! `Mcp-Session-Id`, counted (for `[http] max_sessions`), closed when idle,
//! and emptied as sessions end.
//!
//! A session is made when its `initialize` arrives, within
//! `[http] max_sessions` ([`SessionTable::insert_within`]), and is kept
//! once that is answered ([`super::http_endpoint`]); it ends when its client deletes it (HTTP
//! `DELETE`), when no request names it for `[http] session_idle_s`
//! ([`SessionTable::close_idle`]), or when sluice stops
//! ([`SessionTable::close_all`]). Ending it ends its front: its calls stop,
//! its GET stream ends, and the Hub forgets it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::front::Front;
use crate::FastMap;

/// A session's `Mcp-Session-Id`: 128 random bits, so that an id tells a
/// stranger nothing and cannot be guessed.
pub type SessionId = Arc<str>;

/// The sessions of the HTTP listener.
pub struct SessionTable {
    entries: Mutex<FastMap<SessionId, Entry>>,
    /// How long an unused session stays open.
    idle: Duration,
}

struct Entry {
    front: Arc<Front>,
    /// When a request last named it.
    seen: Instant,
    /// The principal whose `initialize` opened it, with `[auth]`.
    principal: Option<Arc<str>>,
}

/// Why a new session is refused: every session allowed is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// sluice's (`[http] max_sessions`): how many are open.
    All(usize),
    /// The principal's (`[http] max_sessions_per_principal`): how many of
    /// theirs are open.
    Principal(usize),
}

impl Default for SessionTable {
    fn default() -> Self {
        Self::new(sluice_core::http::HttpLimits::default().session_idle)
    }
}

impl SessionTable {
    /// A table whose sessions end after `idle` without a request (once
    /// [`Self::close_idle`] runs).
    pub fn new(idle: Duration) -> Self {
        Self {
            entries: Mutex::default(),
            idle,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FastMap<SessionId, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sessions open now.
    pub fn open(&self) -> usize {
        self.lock().len()
    }

    /// A new session answered by `front`, opened by `principal` (with
    /// `[auth]`): its id; `Err` when `max` sessions are open, or `per_principal`
    /// of the principal's (checked under the table's lock, so that
    /// `initialize`s arriving together cannot pass either).
    pub fn insert_within(
        &self,
        front: Arc<Front>,
        principal: Option<&Arc<str>>,
        (max, per_principal): (usize, usize),
    ) -> Result<SessionId, Full> {
        let id: SessionId = sluice_core::store::random_id("").into();
        let mut entries = self.lock();
        if entries.len() >= max {
            return Err(Full::All(entries.len()));
        }
        if let Some(principal) = principal {
            let theirs = entries
                .values()
                .filter(|e| e.principal.as_ref() == Some(principal))
                .count();
            if theirs >= per_principal {
                return Err(Full::Principal(theirs));
            }
        }
        entries.insert(
            id.clone(),
            Entry {
                front,
                seen: Instant::now(),
                principal: principal.cloned(),
            },
        );
        Ok(id)
    }

    /// Whether session `id` is open.
    pub fn has(&self, id: &str) -> bool {
        self.lock().contains_key(id)
    }

    /// Notes that a request named session `id` now; gives its front, if
    /// the session is open.
    pub fn touch(&self, id: &str) -> Option<Arc<Front>> {
        let mut entries = self.lock();
        let entry = entries.get_mut(id)?;
        entry.seen = Instant::now();
        Some(entry.front.clone())
    }

    /// Ends session `id` (its client deleted it, or it idled): its front
    /// ends. Whether it was open.
    pub fn forget(&self, id: &str) -> bool {
        let removed = self.lock().remove(id);
        match removed {
            Some(entry) => {
                entry.front.end();
                true
            }
            None => false,
        }
    }

    /// Ends every session (sluice stops): their GET streams end, so that
    /// the connections that hold them close.
    pub fn close_all(&self) {
        let entries: Vec<Entry> = self.lock().drain().map(|(_, entry)| entry).collect();
        for entry in entries {
            entry.front.end();
        }
    }

    /// Closes, every so often until `stop` fires, the sessions no request
    /// named for longer than the idle time. The HTTP listener runs it.
    pub async fn close_idle(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let period = (self.idle / 4).clamp(Duration::from_millis(250), Duration::from_secs(30));
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
            let idle: Vec<SessionId> = self
                .lock()
                .iter()
                .filter(|(_, entry)| entry.seen.elapsed() >= self.idle)
                .map(|(id, _)| id.clone())
                .collect();
            for id in idle {
                tracing::info!(session = %id, "closing a session unused for {} s (`[http] session_idle_s`)", self.idle.as_secs());
                self.forget(&id);
            }
        }
    }
}
