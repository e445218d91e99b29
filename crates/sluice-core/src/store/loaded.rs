//! The documents a store that keeps them outside memory (disk, Redis) has
//! read back lately, kept decoded so that the pages that follow are O(page):
//! at most [`LOADED_BYTES`] (or the store's `max_bytes`, if less), and
//! always the last one read, whatever its size.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::Stored;

/// The bytes of documents kept decoded.
pub const LOADED_BYTES: u64 = 256 << 20;

/// Documents read back lately, the most recent last.
#[derive(Debug)]
pub struct Loaded {
    docs: Mutex<VecDeque<Arc<Stored>>>,
    bound: u64,
}

impl Loaded {
    /// An empty set for a store of `max_bytes`.
    pub fn new(max_bytes: u64) -> Self {
        Self {
            docs: Mutex::default(),
            bound: LOADED_BYTES.min(max_bytes),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Arc<Stored>>> {
        self.docs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `handle`'s document, if it is kept.
    pub fn get(&self, handle: &str) -> Option<Arc<Stored>> {
        self.lock().iter().find(|s| s.handle == handle).cloned()
    }

    /// Keeps `stored`, the most recent; drops the oldest beyond the bound.
    pub fn keep(&self, stored: Arc<Stored>) {
        let mut docs = self.lock();
        docs.retain(|s| s.handle != stored.handle);
        docs.push_back(stored);
        let mut total: u64 = docs.iter().map(|s| s.doc.memory() as u64).sum();
        while total > self.bound && docs.len() > 1 {
            if let Some(old) = docs.pop_front() {
                total -= old.doc.memory() as u64;
            }
        }
    }

    /// The bytes of the documents kept.
    pub fn held(&self) -> u64 {
        self.lock().iter().map(|s| s.doc.memory() as u64).sum()
    }

    /// Drops the documents of `handles`.
    pub fn forget(&self, handles: &[String]) {
        self.lock().retain(|s| !handles.contains(&s.handle));
    }

    /// Drops every document.
    pub fn clear(&self) {
        self.lock().clear();
    }
}

/// The most saved page plans a store keeps read back, and the most bytes
/// they may hold.
const PLANS_KEPT: usize = 32;
const PLANS_BYTES: usize = 64 << 20;

/// Page plans a store read back lately, by handle and key: a document
/// read page by page reads its plan once.
#[derive(Debug, Default)]
pub struct Plans {
    /// The most recent last.
    plans: Mutex<VecDeque<(String, String, Arc<super::FramedPlan>)>>,
}

impl Plans {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, VecDeque<(String, String, Arc<super::FramedPlan>)>> {
        self.plans.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The plan `key` of `handle`, if it is kept.
    pub fn get(&self, handle: &str, key: &str) -> Option<Arc<super::FramedPlan>> {
        self.lock()
            .iter()
            .find(|(h, k, _)| h == handle && k == key)
            .map(|(_, _, p)| p.clone())
    }

    /// Keeps `plan`, the most recent; drops the oldest beyond the bound.
    pub fn keep(&self, handle: &str, key: &str, plan: Arc<super::FramedPlan>) {
        let mut plans = self.lock();
        plans.retain(|(h, k, _)| !(h == handle && k == key));
        plans.push_back((handle.to_owned(), key.to_owned(), plan));
        let mut bytes: usize = plans.iter().map(|(_, _, p)| p.memory()).sum();
        while plans.len() > 1 && (plans.len() > PLANS_KEPT || bytes > PLANS_BYTES) {
            if let Some((_, _, old)) = plans.pop_front() {
                bytes -= old.memory();
            }
        }
    }

    /// Drops the plans of `handles`.
    pub fn forget(&self, handles: &[String]) {
        self.lock().retain(|(h, _, _)| !handles.contains(h));
    }
}
