//! The part of sluice that knows nothing of the MCP wire protocol.
//!
//! # Layout
//!
//! - [`config`]: the configuration file (`sluice.toml`) and the one-upstream
//!   command line, parsed and validated into [`config::Config`] before anything runs.
//! - [`naming`]: how the tools and prompts of several upstreams share one
//!   namespace (`<upstream>__<tool>`), and how a prefixed name is routed back.
//! - [`backoff`]: when a crashed upstream may be restarted.
//! - [`tail`]: the last lines an upstream wrote to stderr, for error messages.
//!
//! The MCP adapter (the `sluice` crate) is the only crate that knows `rmcp`;
//! everything here is plain data and policy, usable by any embedding.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms, missing_docs)]

pub mod backoff;
pub mod config;
pub mod naming;
pub mod tail;
