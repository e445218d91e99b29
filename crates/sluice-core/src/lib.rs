//! The part of sluice that knows nothing of the MCP wire protocol.
//!
//! # Layout
//!
//! - [`config`]: the configuration file (`sluice.toml`) and the one-upstream
//!   command line, parsed and validated into [`config::Config`] before anything runs;
//!   [`vars`]: the `${NAME}` its secret-holding values take from the environment.
//! - [`naming`]: how the tools and prompts of several upstreams share one
//!   namespace (`<upstream>__<tool>`), and how a prefixed name is routed back.
//! - [`backoff`]: when a crashed upstream may be restarted.
//! - [`tail`]: the last lines an upstream wrote to stderr, for error messages.
//! - [`operation`]: `[operations]` settings and how long a call waits before
//!   it goes on in the background.
//! - [`cache`]: which tool results are cached, for how long, under which key.
//!
//! Governing large results, in the order a result meets them:
//! - [`budget`]: how much a client takes, and how text is measured (o200k
//!   tokens × a factor, characters, lines).
//! - [`check`]: JSON checked against its grammar in one pass (a message's,
//!   a stored document's), nothing built.
//! - [`document`]: a stored result (JSON minified, or text) and its index;
//!   [`scan`] is the structural JSON scanner behind it; [`parallel`] makes
//!   two reads of a large one at once.
//! - [`shape`]: the inferred schema and the depth-cut preview of a result.
//! - [`summary`]: the answer a model gets instead of a result too large.
//! - [`pager`]: page plans and pages, lossless and O(page).
//! - [`cursor`]: sealed (HMAC) positions of the next page.
//! - [`store`]: where results live: handles, owners, expiry, LRU bound; in
//!   memory or on disk (an embedded database, zstd frames).
//! - [`search`]: literal / regex search over stored documents.
//! - [`format`]: numbers, sizes and times for people.
//! - [`http`]: `[http]`, the limits of the HTTP listener.
//! - [`limits`]: `[limits]`, the bound on every message in every direction.
//!
//! The MCP adapter (the `sluice` crate) is the only crate that knows `rmcp`;
//! everything here is plain data and policy, usable by any embedding.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms, missing_docs)]

pub mod backoff;
pub mod budget;
pub mod cache;
pub mod check;
pub mod config;
pub mod cursor;
pub mod document;
pub mod format;
pub mod http;
pub mod limits;
pub mod naming;
pub mod operation;
pub mod pager;
pub mod parallel;
pub mod query;
pub mod scan;
pub mod search;
pub mod shape;
pub mod store;
pub mod summary;
pub mod tail;
pub mod vars;
