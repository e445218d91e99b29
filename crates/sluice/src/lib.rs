//! sluice: an MCP gateway. It sits between an MCP client and the MCP
//! servers the user runs, and keeps every tool result within the client's
//! context budget without losing a byte.
//!
//! # Layout
//!
//! - [`auth`]: bearer tokens (static or JWT) on the HTTP listener, and who
//!   each request is from ([`auth::Principal`]).
//! - [`cli`]: the command line, parsed then validated into a [`cli::Command`].
//! - [`serve`]: serving clients over stdio or Streamable HTTP; [`client_lines`]:
//!   the stdio framing, with JSON-RPC errors for malformed lines.
//! - [`http_guard`], [`http_sessions`]: the HTTP listener's limits (`[http]`):
//!   body size, sessions, and forgetting sessions that ended.
//! - [`session`]: one client session, the MCP server face of sluice.
//! - [`gateway`]: routing client requests to upstreams and merging lists.
//! - [`govern`]: measuring every result against the client's budget; storing
//!   those over it and answering with a summary; [`builtins`]: the
//!   `sluice_read` / `sluice_info` tools and `sluice://result/` resources.
//! - [`hub`]: what sessions and upstream connections share (routes, events).
//! - [`upstream`]: one supervised upstream server (child process or HTTP).
//! - [`jq_pool`]: warm jq worker processes that `sluice_query` runs filters in.
//! - [`jq_worker`]: `sluice jq-worker`, the process that runs filters under limits.
//! - [`operations`]: calls that outlived their timeout, going on in the background.
//! - [`cache`]: results of idempotent tools, answered again without the upstream.
//! - [`input`]: answering a 2026-07-28 upstream's `input_required` for older clients.
//! - [`jsonrpc`]: sluice's own JSON-RPC layer: messages kept as the bytes
//!   received, framing (lines, SSE, HTTP bodies) and request correlation.
//! - [`cancel`]: waiting for a peer while honouring cancellation.
//! - [`call`], [`demo`], [`sample_server`]: `sluice call`, `sluice demo`,
//!   and the built-in server they use.
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

pub mod auth;
pub mod builtins;
pub mod cache;
pub mod call;
pub mod cancel;
pub mod cli;
pub mod client_lines;
pub mod demo;
pub mod gateway;
pub mod govern;
pub mod http_guard;
pub mod http_sessions;
pub mod hub;
pub mod input;
pub mod jq_pool;
pub mod jq_worker;
pub mod jsonrpc;
pub mod operations;
pub mod sample_server;
pub mod serve;
pub mod session;
pub mod upstream;
