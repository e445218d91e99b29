//! What the admin server reads of a running gateway: the figures of
//! `/metrics` read when scraped ([`snapshot`]) and the whole state the page
//! shows ([`state`], `GET /api/state`).

use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{Value, json};
use sluice_core::format::timestamp;
use sluice_core::store::Brief;

use crate::gateway::Gateway;
use crate::metrics::{Outcome, Snapshot};

/// How many stored results the page lists (the most recently used).
pub const STORED_LISTED: usize = 50;

/// How many operations the page lists (the newest).
pub const OPERATIONS_LISTED: usize = 50;

/// How many sessions the page lists.
pub const SESSIONS_LISTED: usize = 200;

/// The figures other parts of sluice keep, as `/metrics` shows them.
pub async fn snapshot(gateway: &Arc<Gateway>) -> Snapshot {
    let store = gateway.governor().store().clone();
    // A store may do I/O (disk, Redis): off the runtime's threads.
    let (stored_results, store_bytes) = tokio::task::spawn_blocking(move || store.usage())
        .await
        .unwrap_or_default();
    let mut operations: Vec<(&'static str, u64)> = Vec::new();
    for op in gateway.operations().all() {
        let status = op.status().as_str();
        match operations.iter_mut().find(|(s, _)| *s == status) {
            Some((_, n)) => *n += 1,
            None => operations.push((status, 1)),
        }
    }
    let (cache, _) = gateway.cache().figures().await;
    let mut upstreams = Vec::new();
    for upstream in gateway.upstreams() {
        upstreams.push((
            upstream.name().to_owned(),
            upstream.current().await.is_some(),
            upstream.restarts(),
        ));
    }
    let jq = gateway.governor().jq().stats();
    Snapshot {
        stored_results: stored_results as u64,
        store_bytes,
        operations,
        cache_hits: cache.hits,
        cache_misses: cache.misses,
        cache_bytes: cache.bytes,
        upstreams,
        sessions: gateway.hub().session_count() as u64,
        store_healthy: gateway.governor().store().health().is_ok(),
        jq_busy: jq.workers_busy as u64,
        jq_idle: jq.workers_idle as u64,
    }
}

/// The page's data (`GET /api/state`): see the page for the shape.
pub async fn state(gateway: &Arc<Gateway>, started: SystemTime) -> Value {
    let now = crate::clock::wall();
    let since = |t: SystemTime| now.duration_since(t).map_or(0, |d| d.as_secs());
    let until = |t: SystemTime| t.duration_since(now).map_or(0, |d| d.as_secs());

    let mut upstreams = Vec::new();
    for upstream in gateway.upstreams() {
        let up = upstream.current().await.is_some();
        upstreams.push(json!({
            "name": upstream.name(),
            "transport": upstream.transport(),
            "up": up,
            "restarts": upstream.restarts(),
            "problem": if up { None } else { upstream.problem() },
        }));
    }

    let mut sessions = gateway.hub().sessions();
    sessions.sort_by_key(|(id, _)| *id);
    let sessions: Vec<Value> = sessions
        .iter()
        .take(SESSIONS_LISTED)
        .map(|(id, entry)| {
            json!({
                "id": id,
                "client": entry.seen.client,
                "version": entry.seen.version,
                "principal": entry.seen.principal.as_deref(),
                "age_s": since(entry.seen.opened),
            })
        })
        .collect();

    let store = gateway.governor().store().clone();
    let (newest, (results, bytes)) =
        tokio::task::spawn_blocking(move || (store.newest(STORED_LISTED), store.usage()))
            .await
            .unwrap_or_default();
    let store = gateway.governor().store();
    let health = store.health();
    // Pages at the default budget, from the tokens (a listing reads no
    // document).
    let page_tokens = u64::from(
        crate::govern::page_budget(gateway.governor().budget_for(None), None)
            .max_tokens
            .max(1),
    );
    let stored: Vec<Value> = newest
        .iter()
        .map(|b: &Brief| {
            json!({
                "handle": b.handle,
                "tool": b.source,
                "kind": b.kind.as_str(),
                "bytes": b.bytes,
                "tokens": b.tokens,
                "tokens_estimated": b.tokens_estimated,
                "pages": b.tokens.div_ceil(page_tokens).max(1),
                "age_s": since(b.created),
                "expires_in_s": until(b.expires_at),
            })
        })
        .collect();

    let operations: Vec<Value> = gateway
        .operations()
        .all()
        .iter()
        .take(OPERATIONS_LISTED)
        .map(|op| op.meta())
        .collect();

    let (total, by_tool) = gateway.cache().figures().await;
    let tools: serde_json::Map<String, Value> = by_tool
        .iter()
        .map(|(tool, f)| (tool.to_string(), f.json()))
        .collect();

    let metrics = gateway.governor().metrics();
    let calls = metrics.calls_by_outcome();
    let calls: serde_json::Map<String, Value> = Outcome::ALL
        .iter()
        .zip(calls)
        .map(|(o, n)| (o.as_str().to_owned(), json!(n)))
        .collect();
    let (pages_served, queries, searches) = metrics.reads();
    let jq = gateway.governor().jq().stats();
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "now": timestamp(now),
        "uptime_s": since(started),
        "upstreams": upstreams,
        "sessions": sessions,
        "store": {
            "backend": store.backend(),
            "healthy": health.is_ok(),
            "problem": health.err(),
            "results": results,
            "bytes": bytes,
            "newest": stored,
        },
        "operations": operations,
        "cache": {"total": total.json(), "tools": tools},
        "calls": calls,
        "refusals": metrics
            .refusals()
            .into_iter()
            .map(|(key, n)| (key.to_owned(), json!(n)))
            .collect::<serde_json::Map<String, Value>>(),
        "tokens_saved": metrics.tokens_saved(),
        "tokens_saved_history": metrics.history(),
        "pages_served": pages_served,
        "queries": queries,
        "searches": searches,
        "jq": {"busy": jq.workers_busy, "idle": jq.workers_idle},
    })
}
