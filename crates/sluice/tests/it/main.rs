//! Integration tests: the `sluice` binary between real MCP clients and
//! real MCP servers. One test binary (as in casey/just), one file per
//! concern; `support` holds the builders that keep each test short.

#![allow(deprecated)] // logging is SEP-2577-deprecated, and still forwarded

mod support;

mod admin;
mod auth;
mod cache;
mod config_errors;
mod conformance;
mod durable;
mod eras;
mod faults;
mod framing_fuzz;
mod govern;
mod http;
mod http_limits;
mod inproc;
mod jsonrpc_fuzz;
mod logs;
mod notifications;
mod operations;
mod owners;
mod peers;
mod query;
mod recursive;
mod relay;
mod search;
mod shared;
mod stalls;
mod stdio;
mod streamable;
mod tasks;
mod tls;
mod tool_list;
