//! The names sluice adds to MCP, which clients, models and scripts depend
//! on: its tools, its `_meta` keys, its resource URIs and the arguments it
//! adds to upstream tools. They are fixed by `DESIGN.md` and README; this
//! is the one place the code spells them. (A leaf module: it depends on
//! nothing, so the governor and the tools can both use it.)

/// sluice's own tools, by name.
pub mod tool {
    /// A page of a stored result.
    pub const READ: &str = "sluice_read";
    /// Grep a stored result.
    pub const SEARCH: &str = "sluice_search";
    /// A jq filter over a stored result.
    pub const QUERY: &str = "sluice_query";
    /// A stored result's metadata, or the caller's stored results.
    pub const INFO: &str = "sluice_info";
    /// An operation's status and result.
    pub const RESULT: &str = "sluice_result";
    /// Stops an operation.
    pub const CANCEL: &str = "sluice_cancel";
}

/// The `_meta` keys of sluice's answers.
pub mod meta {
    /// A stored result's answer: handle, sizes, pages, expiry.
    pub const STORED: &str = "sluice/stored";
    /// A page of `sluice_read` (or of a `sluice://result/` read).
    pub const PAGE: &str = "sluice/page";
    /// A page of `sluice_search` hits.
    pub const SEARCH: &str = "sluice/search";
    /// A `sluice_query` answer.
    pub const QUERY: &str = "sluice/query";
    /// `sluice_info`'s list of the caller's stored results.
    pub const HANDLES: &str = "sluice/handles";
    /// An operation's status (a call that became one, `sluice_result`,
    /// `sluice_cancel`, `tasks/get`).
    pub const OPERATION: &str = "sluice/operation";
    /// `sluice_info`'s list of the caller's operations.
    pub const OPERATIONS: &str = "sluice/operations";
    /// A result answered from the cache.
    pub const CACHE: &str = "sluice/cache";
    /// `sluice_info`'s cache figures.
    pub const CACHE_FIGURES: &str = "sluice/cache_figures";
    /// A jq worker's figures in `sluice_query`'s answer.
    /// `sluice_info {}`: the store's backend and health.
    pub const STORE: &str = "sluice/store";
    pub const JQ: &str = "sluice/jq";
}

/// The URI prefix of stored results (`sluice://result/<handle>`).
pub const RESULT_URI: &str = "sluice://result/";

/// The argument sluice adds to every upstream tool: how long to wait before
/// the call becomes an operation.
pub const TIMEOUT_ARG: &str = sluice_core::operation::TIMEOUT_ARG;

/// The argument sluice adds to the tools it caches: skip the cache.
pub const FRESH_ARG: &str = sluice_core::cache::FRESH_ARG;
