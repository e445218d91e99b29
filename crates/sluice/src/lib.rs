//! sluice: an MCP gateway. It sits between an MCP client and the MCP
//! servers the user runs, and keeps every tool result within the client's
//! context budget without losing a byte.
//!
//! # Layout
//!
//! A request travels down this list and its answer back up:
//!
//! - [`cli`]: the command line, parsed then validated into a [`cli::Command`].
//! - [`downstream`]: the client side. [`downstream::stdio`] (framed by
//!   [`downstream::lines`]) or [`downstream::http`] (the endpoint
//!   [`downstream::http_endpoint`], behind [`downstream::auth`] and
//!   [`downstream::http_guard`], its sessions in
//!   [`downstream::http_sessions`]). Every request is answered by sluice's
//!   own layer: a [`downstream::front`] per connection or session (and
//!   [`downstream::http_front`], HTTP's fast path), with what goes to the
//!   client beside the answers ([`downstream::link`]); rmcp's server serves
//!   no client (only the sample server).
//! - [`gateway`]: routing and merging, one concern per file: `lists`
//!   (initialize / discover and the merged lists), `call` (`tools/call`:
//!   sluice's tools, operations, cache, governing), `routes` (prompts,
//!   resources, completions, log levels), `forwarding` (one request
//!   upstream with its progress and cancellation), `task_call` and [`gateway::input`] (bridging task-only tools and
//!   `input_required` across eras).
//! - [`tools`]: sluice's own tools, one file each, and [`tools::Builtin`],
//!   the only dispatch to them; [`tools::ToolError`] tells the model's
//!   mistakes (error results) from protocol errors.
//! - [`govern`]: measuring every result against the client's budget; storing
//!   those over it and answering with a summary.
//! - [`operations`]: calls that outlived their timeout, going on in the
//!   background; [`cache`]: results of idempotent tools.
//! - [`jq`]: warm `sluice jq-worker` processes that `sluice_query` runs in.
//! - [`jsonrpc`]: sluice's own JSON-RPC layer (messages kept as their bytes,
//!   only the envelope parsed; framing, SSE, bounded bodies, correlation,
//!   splices), which every upstream connection and the requests
//!   [`downstream::front`] takes go through.
//! - [`hub`]: what sessions and upstream connections share (routes, events).
//! - [`in_flight`]: how many requests each HTTP client has answered at once;
//!   [`rate`]: how many it may send a minute.
//! - [`upstream`]: one supervised upstream server: sluice's JSON-RPC engine
//!   ([`upstream::rpc`]) over one transport per file (`lines`:
//!   a child's stdio or an in-memory pipe; [`upstream::streamable`]:
//!   Streamable HTTP), its [`upstream::Connection`].
//! - [`caller`]: who asks, carried with every request; [`era`]: the two
//!   protocol eras; [`contract`]: the names sluice adds to
//!   MCP (tools, `_meta` keys, URIs, arguments), spelled once.
//! - [`cancel`]: waiting for a peer while honouring cancellation;
//!   [`deadlines`]: every call's timeout kept by one timer.
//! - [`call`], [`demo`], [`sample_server`]: `sluice call`, `sluice demo`,
//!   and the built-in server they use.
//! - [`state`]: `[store]` opened at start: the result store's backend and
//!   the key that seals cursors.
//! - [`metrics`]: what sluice counts for its operators; [`admin`]: the
//!   `--admin` server (`/metrics`, the live page, `/api/state`).
//! - [`clock`]: the runtime's clocks, which every lifetime is measured by
//!   (a paused test clock moves them); `testing` (hidden from the docs):
//!   the in-process test harness.
//!
//! This crate is the only one that knows `rmcp` (the MCP SDK); the policy
//! and data it applies live in `sluice-core`.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
// sluice forwards every MCP feature, including those SEP-2577 deprecates
// (logging, sampling, roots, resources/subscribe): clients still use them.
#![allow(deprecated)]

/// Installs the TLS crypto provider (ring) that HTTPS upstreams use. Call
/// once before any HTTP client is built; later calls do nothing.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// `url` without the credentials it may carry (`scheme://user:secret@host/…`
/// shown as `scheme://host/…`), for messages and logs.
pub fn shown_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|at| at + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    match authority.rfind('@') {
        Some(at) => format!("{}{}", &url[..scheme_end], &rest[at + 1..]),
        None => url.to_owned(),
    }
}

pub mod admin;
pub mod cache;
pub mod call;
pub mod caller;
pub mod cancel;
pub mod cli;
pub mod clock;
pub mod contract;
pub mod deadlines;
pub mod demo;
pub mod downstream;
pub mod era;
pub mod gateway;
pub mod govern;
pub mod http_client;
pub mod hub;
pub mod in_flight;
pub mod jq;
pub mod jsonrpc;
pub mod metrics;
pub mod operations;
pub mod param_headers;
pub mod rate;
pub mod sample_server;
pub mod state;
#[cfg(test)]
mod test_support;
#[doc(hidden)]
pub mod testing;
pub mod tools;
pub mod upstream;

/// The hash map of sluice's own tables on every call's path (sessions,
/// calls under way and their routes, waiters): foldhash, seeded at random
/// per process (hashbrown's default hasher), where std's SipHash cost about
/// 200 instructions for each of the ten-odd lookups of a small call. A key
/// a client chooses (a request id) cannot be aimed at collisions without
/// the seed; every such table is bounded besides.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
