//! sluice's own tools, one file each (its arguments, its schema, its run),
//! and [`Builtin`], the only dispatch to them:
//!
//! - [`read`]: `sluice_read {handle, page?, path?, max_tokens?}` or `{cursor}`;
//! - [`search`]: `sluice_search {handle, pattern, …}` or `{cursor}`;
//! - [`query`]: `sluice_query {handle, filter}`, jq in a worker process;
//! - [`info`]: `sluice_info {handle?}`, everything sluice can say about a
//!   stored result, or the caller's results, operations and the cache;
//! - [`result`], [`cancel`]: `sluice_result` / `sluice_cancel` on operations;
//! - [`resource`]: `sluice://result/<handle>` reads, the same pages.
//!
//! A tool fails with a [`ToolError`]: a mistake the model can fix (an
//! unknown handle, a page past the end, a path that is not an array) is an
//! error *result* that says what exists; a protocol error (a cursor that was
//! altered or belongs to another owner) is a JSON-RPC error (`-32602`), as
//! the contract asks.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, ErrorData, JsonObject, Tool};
use serde_json::{Value, json};
use sluice_core::budget::Budget;

use crate::caller::Caller;
use crate::contract::tool::{CANCEL, INFO, QUERY, READ, RESULT, SEARCH};
use crate::govern::{Governor, ToolAnswer};
use crate::operations::Operations;

pub mod cancel;
pub mod info;
mod lenient;
pub mod query;
pub mod read;
pub mod resource;
pub mod result;
pub mod search;

/// Hits per search page unless `max_matches` says otherwise.
const DEFAULT_MATCHES: u32 = 50;
/// Context lines each side of a text hit unless `context`, `before` or
/// `after` say otherwise.
const DEFAULT_CONTEXT: u8 = 2;
/// The most handles `sluice_info` lists.
const LISTED: usize = 20;

/// One of sluice's own tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    /// `sluice_read`.
    Read,
    /// `sluice_search`.
    Search,
    /// `sluice_query`.
    Query,
    /// `sluice_info`.
    Info,
    /// `sluice_result`.
    Result,
    /// `sluice_cancel`.
    Cancel,
}

impl Builtin {
    /// Every built-in tool, in the order they are listed.
    pub const ALL: [Builtin; 6] = [
        Builtin::Read,
        Builtin::Search,
        Builtin::Query,
        Builtin::Info,
        Builtin::Result,
        Builtin::Cancel,
    ];

    /// The tool called `name`, if it is one of sluice's.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|b| b.name() == name)
    }

    /// The tool's name, as clients call it.
    pub fn name(self) -> &'static str {
        match self {
            Builtin::Read => READ,
            Builtin::Search => SEARCH,
            Builtin::Query => QUERY,
            Builtin::Info => INFO,
            Builtin::Result => RESULT,
            Builtin::Cancel => CANCEL,
        }
    }

    /// The tool as listed (`settings`: the waits `sluice_result` announces).
    pub fn tool(self, settings: &sluice_core::operation::OperationSettings) -> Tool {
        match self {
            Builtin::Read => read::tool(),
            Builtin::Search => search::tool(),
            Builtin::Query => query::tool(),
            Builtin::Info => info::tool(),
            Builtin::Result => result::tool(settings),
            Builtin::Cancel => cancel::tool(),
        }
    }

    /// Runs the tool for `caller`, within `budget`: its answer (an
    /// operation's result as the upstream sent it, for `sluice_result`).
    pub async fn run(
        self,
        context: &Context<'_>,
        arguments: Option<JsonObject>,
        caller: &Caller,
        budget: Budget,
    ) -> Result<ToolAnswer, ErrorData> {
        let governor = context.governor;
        let owner = &caller.owner;
        let made = match self {
            Builtin::Read => governor
                .read(arguments, owner, budget)
                .await
                .map(ToolAnswer::Made),
            Builtin::Search => governor
                .search(arguments, owner, budget)
                .await
                .map(ToolAnswer::Made),
            Builtin::Query => query::run(governor, arguments, caller, budget)
                .await
                .map(ToolAnswer::Made),
            Builtin::Info => info::run(context, arguments, owner, budget)
                .await
                .map(ToolAnswer::Made),
            Builtin::Result => result::run(context.operations, arguments, caller).await,
            Builtin::Cancel => cancel::run(context.operations, arguments, owner).await,
        };
        made.or_else(|e| e.into_result().map(ToolAnswer::Made))
    }
}

/// What sluice's tools work on: the gateway's parts, lent for one call
/// (the tools do not know the gateway).
pub struct Context<'a> {
    /// Budgets and stored results.
    pub governor: &'a Governor,
    /// Calls that outlived their timeout.
    pub operations: &'a Operations,
    /// The cache of idempotent tools' results.
    pub cache: &'a crate::cache::ResultCache,
    /// Whether any tool is cached (`sluice_info` says how to turn it on
    /// when none is).
    pub caches_anything: bool,
}

/// sluice's own tools, as listed.
///
/// Every client reads this list on every turn: each word must change
/// what a model does, and what `_timeout_s` and `_fresh` mean is said once,
/// here (in `sluice_result`), not on every upstream tool.
pub fn list(settings: &sluice_core::operation::OperationSettings) -> Vec<Tool> {
    Builtin::ALL.iter().map(|b| b.tool(settings)).collect()
}

/// Why a tool did not answer.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// A mistake the model can fix: answered as an error result
    /// (`isError: true`) whose text says what exists and how to call.
    #[error("{0}")]
    Model(String),
    /// A protocol error (an altered or foreign cursor, a cancelled call):
    /// answered as a JSON-RPC error.
    #[error("{}", .0.message)]
    Protocol(ErrorData),
}

impl From<ErrorData> for ToolError {
    fn from(error: ErrorData) -> Self {
        ToolError::Protocol(error)
    }
}

impl ToolError {
    /// The answer a client gets: an error result for the model's
    /// mistakes, a JSON-RPC error otherwise.
    pub fn into_result(self) -> Result<CallToolResult, ErrorData> {
        match self {
            ToolError::Model(message) => {
                Ok(CallToolResult::error(vec![ContentBlock::text(message)]))
            }
            ToolError::Protocol(error) => Err(error),
        }
    }
}

/// `_timeout_s`, as added to every upstream tool's input schema: its type
/// alone (`sluice_result`'s description says what it does).
pub fn timeout_property() -> Value {
    json!({"type": "number"})
}

/// The `_fresh` argument sluice adds to the tools it caches: its type alone
/// (`sluice_result`'s description says what it does).
pub fn fresh_property() -> Value {
    json!({"type": "boolean"})
}

fn object(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::default(),
    }
}

/// A tool's arguments, or the message that says how to call it.
fn parse_args<T: serde::de::DeserializeOwned>(
    tool: &str,
    arguments: Option<JsonObject>,
    example: &str,
) -> Result<T, String> {
    // The parser's message may quote the value it refused: cut.
    serde_json::from_value(Value::Object(arguments.unwrap_or_default())).map_err(|e| {
        format!(
            "{tool}: {}. Call it as {example}.",
            sluice_core::format::cut(&e.to_string(), 200)
        )
    })
}

/// `budget` with the `max_tokens` a call asked for (never more than the
/// client's; at least 500, room for a page's wrapper).
fn smaller(tool: &str, budget: Budget, max_tokens: Option<u32>) -> Result<Budget, String> {
    match max_tokens {
        Some(t) if t < 500 => Err(format!(
            "{tool}: `max_tokens` must be at least 500 (an answer needs room for its header)."
        )),
        Some(t) => Ok(Budget {
            max_tokens: t.min(budget.max_tokens),
            ..budget
        }),
        None => Ok(budget),
    }
}
