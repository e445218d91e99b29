//! sluice's own tools and resources: reading stored results.
//!
//! - `sluice_read {handle, page?, path?, max_tokens?}` or `{cursor}`: one page.
//! - `sluice_info {handle?}`: a handle's metadata, shape and page plan; or
//!   this session's handles.
//! - `sluice://result/<handle>[?page=N&path=/p&cursor=c]` with
//!   `resources/read`: the same pages.
//!
//! Mistakes a model can fix (an unknown handle, a page past the end, a path
//! that is not an array) come back as error *results* that say what exists;
//! a cursor that was altered or belongs to another session is a JSON-RPC
//! `-32602` error, as the contract asks.

use std::sync::Arc;
use std::time::SystemTime;

use rmcp::model::{
    CallToolResult, ContentBlock, ErrorData, JsonObject, ReadResourceResult, ResourceContents,
    ResourceTemplate, Tool,
};
use serde::Deserialize;
use serde_json::{Value, json};
use sluice_core::budget::Budget;
use sluice_core::cursor::{Cursor, SearchCursor};
use sluice_core::format::{age, bytes, group, quoted_cut, timestamp};
use sluice_core::pager::{Page, PageError, Position};
use sluice_core::search::{self, Hits, Matcher, Query};
use sluice_core::store::{Listed, Owner, StoreError, Stored};

use crate::govern::{
    Governor, RESULT_URI, bulk_path, mime_of, page_budget, stored_meta, with_meta,
};

/// The read tool's name.
pub const READ: &str = "sluice_read";
/// The info tool's name.
pub const INFO: &str = "sluice_info";
/// The search tool's name.
pub const SEARCH: &str = "sluice_search";
/// The jq tool's name.
pub const QUERY: &str = "sluice_query";
/// The tool that reads an operation's status and result.
pub const RESULT: &str = "sluice_result";
/// The tool that stops an operation.
pub const CANCEL: &str = "sluice_cancel";
/// The argument of every upstream tool that bounds the wait.
const TIMEOUT: &str = sluice_core::operation::TIMEOUT_ARG;
/// The argument of cached tools that skips the cache.
const FRESH: &str = sluice_core::cache::FRESH_ARG;
/// Hits per search page unless `max_matches` says otherwise.
const DEFAULT_MATCHES: u32 = 50;
/// Context lines each side of a text hit unless `context`, `before` or
/// `after` say otherwise.
const DEFAULT_CONTEXT: u8 = 2;
/// The most handles `sluice_info` lists.
const LISTED: usize = 20;

/// Whether `name` is one of sluice's own tools.
pub fn is_builtin(name: &str) -> bool {
    [READ, INFO, SEARCH, QUERY, RESULT, CANCEL].contains(&name)
}

/// sluice's own tools, as listed (`settings`: the waits `sluice_result`
/// announces).
///
/// Every client reads this list on every turn: each word must change
/// what a model does, and what `_timeout_s` and `_fresh` mean is said once,
/// here (in `sluice_result`), not on every upstream tool.
pub fn tools(settings: &sluice_core::operation::OperationSettings) -> Vec<Tool> {
    let string = json!({"type": "string"});
    let integer = json!({"type": "integer"});
    let boolean = json!({"type": "boolean"});
    let read = json!({
        "type": "object",
        "properties": {
            "handle": {"type": "string", "description": "from a stored answer"},
            "page": integer,
            "path": {"type": "string", "description": "JSON Pointer of the array or object to page, e.g. \"/rows\""},
            "max_tokens": integer,
            "cursor": {"type": "string", "description": "a page's next_cursor"}
        }
    });
    let search = json!({
        "type": "object",
        "properties": {
            "handle": string,
            "pattern": {"type": "string", "description": "literal unless regex"},
            "regex": boolean,
            "case_sensitive": boolean,
            "context": integer,
            "before": integer,
            "after": integer,
            "max_matches": integer,
            "cursor": string
        }
    });
    let query = json!({
        "type": "object",
        "properties": {"handle": string, "filter": string, "max_tokens": integer},
        "required": ["handle", "filter"]
    });
    let operation = json!({
        "type": "object",
        "properties": {"operation": string},
        "required": ["operation"]
    });
    let result = json!({
        "type": "object",
        "properties": {"operation": string, "wait_s": {"type": "number"}},
        "required": ["operation"]
    });
    vec![
        Tool::new(
            READ,
            "A page of a stored result: {handle, page?} or {cursor}. content[0] is the data, content[1] where it is and the next call.",
            object(read),
        ),
        Tool::new(
            SEARCH,
            format!(
                "Grep a stored result: text lines with context (0–{max} lines: context both sides, default {DEFAULT_CONTEXT}, or before/after), or JSON strings (keys, values) with their paths. {{handle, pattern}} or {{cursor}}.",
                max = search::MAX_CONTEXT
            ),
            object(search),
        ),
        Tool::new(
            QUERY,
            "Run a jq filter (jaq) over a stored result; one JSON value per line. A text is an array of lines. A large answer is stored in turn.",
            object(query),
        ),
        Tool::new(
            INFO,
            "A stored result's shape, size, pages and expiry; without handle, this session's stored results and operations.",
            object(json!({"type": "object", "properties": {"handle": string}})),
        ),
        Tool::new(
            RESULT,
            format!(
                "An operation's status, then its result. A call running past {TIMEOUT} (an argument of every tool: seconds, default {}, at most {}) goes on in the background as an operation. wait_s: seconds to wait for the end. Cached tools take {FRESH}: true to skip the cache.",
                settings.default_timeout.as_secs_f64(),
                settings.max_timeout.as_secs_f64(),
            ),
            object(result),
        ),
        Tool::new(
            CANCEL,
            "Stop an operation; answers with what it reported so far.",
            object(operation),
        ),
    ]
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

/// The resource template of stored results.
pub fn template() -> ResourceTemplate {
    let mut template = ResourceTemplate::new(format!("{RESULT_URI}{{handle}}"), "sluice-result");
    template.description = Some(
        "A result stored by sluice. Add ?page=N, ?path=/json/pointer or ?cursor=… to read other pages.".into(),
    );
    template
}

fn object(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::default(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    handle: Option<String>,
    page: Option<u64>,
    path: Option<String>,
    max_tokens: Option<u32>,
    cursor: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    handle: Option<String>,
    pattern: Option<String>,
    regex: Option<bool>,
    case_sensitive: Option<bool>,
    // Any JSON: checked by `context_lines`, whose message names the
    // argument and its range (serde's would not).
    context: Option<Value>,
    before: Option<Value>,
    after: Option<Value>,
    max_matches: Option<u32>,
    cursor: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QueryArgs {
    handle: String,
    filter: String,
    max_tokens: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InfoArgs {
    handle: Option<String>,
}

/// Where a read starts.
#[derive(Clone)]
enum From {
    Page(u64),
    At(Position),
}

/// A page request, validated.
#[derive(Clone)]
struct PageRequest {
    handle: String,
    path: Option<String>,
    budget: Budget,
    from: From,
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

/// A `context`, `before` or `after` argument: a whole number of lines from
/// 0 to [`search::MAX_CONTEXT`], or a message that says so.
fn context_lines(name: &str, value: Option<&Value>) -> Result<Option<u8>, String> {
    let Some(value) = value else {
        return Ok(None);
    };
    value
        .as_u64()
        .filter(|&n| n <= search::MAX_CONTEXT as u64)
        .map(|n| Some(n as u8))
        .ok_or_else(|| {
            format!(
                "{SEARCH}: `{name}` must be a whole number of lines from 0 to {}, not {}.",
                search::MAX_CONTEXT,
                quoted_cut(&value.to_string())
            )
        })
}

fn error_result(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

fn invalid_cursor(why: impl std::fmt::Display) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "{why}. Cursors are only valid in the session that received them; to start again, call {READ} with the handle from the stored result's answer (and \"page\" to jump)."
        ),
        None,
    )
}

/// A search cursor that cannot be used: `-32602`, as for page cursors.
fn invalid_search_cursor(why: impl std::fmt::Display) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "{why}. Cursors are only valid in the session that received them; to start again, call {SEARCH} with the handle and the pattern."
        ),
        None,
    )
}

impl Governor {
    /// `sluice_read`.
    pub async fn read(
        &self,
        arguments: Option<JsonObject>,
        owner: &Owner,
        budget: Budget,
    ) -> Result<CallToolResult, ErrorData> {
        let args: ReadArgs = match parse_args(
            READ,
            arguments,
            "{{\"handle\":\"h_…\",\"page\":2}} or {{\"cursor\":\"c1_…\"}}",
        ) {
            Ok(args) => args,
            Err(message) => return Ok(error_result(message)),
        };
        let request = match (args.cursor, args.handle) {
            (Some(_), Some(_)) => {
                return Ok(error_result(format!(
                    "{READ}: give either `cursor` or `handle`, not both: a cursor already names its handle, page and size."
                )));
            }
            (Some(cursor), None) => {
                if args.page.is_some() || args.path.is_some() || args.max_tokens.is_some() {
                    return Ok(error_result(format!(
                        "{READ}: a `cursor` carries its page, path and size: call {READ} {{\"cursor\":\"…\"}} alone, or use `handle` with `page`, `path` and `max_tokens`."
                    )));
                }
                self.open_cursor(&cursor)?
            }
            (None, Some(handle)) => {
                if args.page == Some(0) {
                    return Ok(error_result(format!("{READ}: pages are numbered from 1.")));
                }
                let budget = match smaller(READ, budget, args.max_tokens) {
                    Ok(budget) => budget,
                    Err(message) => return Ok(error_result(message)),
                };
                PageRequest {
                    handle,
                    path: args.path,
                    budget,
                    from: From::Page(args.page.unwrap_or(1)),
                }
            }
            (None, None) => {
                return Ok(error_result(format!(
                    "{READ} needs a `handle` (from a stored result's answer) or a `cursor` (from a page's next_cursor). {}",
                    self.handles_hint(owner)
                )));
            }
        };
        let via_cursor = matches!(request.from, From::At(_));
        let stored = match self.store().get(owner, &request.handle) {
            Ok(listed) => listed.stored,
            Err(StoreError::Unknown(_)) if via_cursor => {
                return Err(invalid_cursor(
                    "this cursor belongs to a result this session does not have",
                ));
            }
            Err(e) => return Ok(error_result(format!("{e}. {}", self.handles_hint(owner)))),
        };
        match page_off_thread(&stored, &request).await {
            Ok(page) => Ok(self.page_result(&stored, &request, &page)),
            Err(PageFailure::Model(message)) => Ok(error_result(message)),
            Err(PageFailure::Cursor) => {
                Err(invalid_cursor("this cursor does not point into its result"))
            }
        }
    }

    fn open_cursor(&self, sealed: &str) -> Result<PageRequest, ErrorData> {
        let Cursor {
            handle,
            path,
            budget,
            at,
        } = self.key().open(sealed).map_err(invalid_cursor)?;
        Ok(PageRequest {
            handle,
            path,
            budget,
            from: From::At(at),
        })
    }
}

/// Documents larger than this have their pages planned on a blocking
/// thread: a first plan of a path scans the value paged (and may tokenize up
/// to 4 MB of it), which a request thread must not wait for.
const BLOCKING_BYTES: usize = 256 * 1024;

/// The page `request` asks of `stored`, planned off the request threads
/// when the document is large.
async fn page_off_thread(stored: &Arc<Stored>, request: &PageRequest) -> Result<Page, PageFailure> {
    if stored.doc.bytes() <= BLOCKING_BYTES {
        return page_of(stored, request);
    }
    let (stored, request) = (stored.clone(), request.clone());
    tokio::task::spawn_blocking(move || page_of(&stored, &request))
        .await
        .unwrap_or_else(|e| {
            Err(PageFailure::Model(format!(
                "sluice failed to plan the page: {e}. Call {READ} again."
            )))
        })
}

/// The page `request` asks of `stored`.
fn page_of(stored: &Stored, request: &PageRequest) -> Result<Page, PageFailure> {
    let page_budget = page_budget(request.budget, request.path.as_deref());
    let plan = stored
        .doc
        .plan(request.path.as_deref(), page_budget)
        .map_err(|e| PageFailure::Model(page_error(stored, &e)))?;
    let from = match request.from {
        From::Page(n) => plan
            .start_of(n)
            .map_err(|e| PageFailure::Model(page_error(stored, &e)))?,
        From::At(at) => {
            if !plan.holds(&stored.doc, at) {
                return Err(PageFailure::Cursor);
            }
            at
        }
    };
    Ok(plan.serve(&stored.doc, from))
}

impl Governor {
    fn next_cursor(&self, stored: &Stored, request: &PageRequest, page: &Page) -> Option<String> {
        page.next.map(|at| {
            self.key().seal(&Cursor {
                handle: stored.handle.clone(),
                path: request.path.clone(),
                budget: request.budget,
                at,
            })
        })
    }

    fn page_meta(&self, stored: &Stored, page: &Page, next: Option<&str>) -> Value {
        let mut meta = json!({
            "handle": stored.handle,
            "page": page.page,
            "pages": page.pages,
            "form": page.form.as_str(),
            "start": page.start,
            "end": page.end,
            "total": page.total,
            "next_cursor": next,
        });
        if let Some(path) = &page.path {
            meta["path"] = Value::String(path.clone());
        }
        if !page.around.is_empty() {
            // The members of the objects around this page's value, shown
            // once (the header says the same for the model).
            meta["around"] = page
                .around
                .iter()
                .map(|a| {
                    json!({
                        "path": a.pointer,
                        "key": a.key,
                        "index": a.index,
                        "members": serde_json::from_str::<Value>(&a.members).unwrap_or(Value::Null),
                    })
                })
                .collect();
        }
        meta
    }

    fn page_result(&self, stored: &Stored, request: &PageRequest, page: &Page) -> CallToolResult {
        let next = self.next_cursor(stored, request, page);
        let call = next
            .as_ref()
            .map(|c| format!("{READ} {{\"cursor\":\"{c}\"}}"));
        let header = page.header(call.as_deref());
        let meta = self.page_meta(stored, page, next.as_deref());
        let mut result = CallToolResult::success(vec![
            ContentBlock::text(page.data.clone()),
            ContentBlock::text(header),
        ]);
        result.meta = Some(with_meta(None, "sluice/page", meta));
        result
    }

    /// `resources/read sluice://result/<handle>[?page=N&path=…&cursor=…]`.
    pub async fn read_result_resource(
        &self,
        uri: &str,
        owner: &Owner,
        budget: Budget,
    ) -> Result<ReadResourceResult, ErrorData> {
        let rest = uri.strip_prefix(RESULT_URI).unwrap_or_default();
        let (handle, query) = rest.split_once('?').unwrap_or((rest, ""));
        let mut page = None;
        let mut path = None;
        let mut cursor = None;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode(value);
            match key {
                "page" => {
                    page = Some(
                        value
                            .parse::<u64>()
                            .ok()
                            .filter(|&p| p > 0)
                            .ok_or_else(|| {
                                ErrorData::invalid_params(
                                    format!(
                                        "`page={}` in {}: pages are numbered from 1",
                                        quoted_cut(&value),
                                        quoted_cut(uri)
                                    ),
                                    None,
                                )
                            })?,
                    )
                }
                "path" => path = Some(value),
                "cursor" => cursor = Some(value),
                other => {
                    return Err(ErrorData::invalid_params(
                        format!(
                            "unknown parameter `{}` in {}: use page, path or cursor",
                            quoted_cut(other),
                            quoted_cut(uri)
                        ),
                        None,
                    ));
                }
            }
        }
        let request = match cursor {
            Some(c) => self.open_cursor(&c)?,
            None => PageRequest {
                handle: handle.to_owned(),
                path,
                budget,
                from: From::Page(page.unwrap_or(1)),
            },
        };
        let not_found = |e: StoreError| {
            ErrorData::resource_not_found(
                format!("{e}. {}", self.handles_hint(owner)),
                Some(json!({"uri": quoted_cut(uri)})),
            )
        };
        let stored = self
            .store()
            .get(owner, &request.handle)
            .map_err(not_found)?
            .stored;
        let page = page_off_thread(&stored, &request)
            .await
            .map_err(|e| match e {
                PageFailure::Model(message) => ErrorData::invalid_params(message, None),
                PageFailure::Cursor => invalid_cursor("this cursor does not point into its result"),
            })?;
        let next = self.next_cursor(&stored, &request, &page);
        let mut meta = self.page_meta(&stored, &page, next.as_deref());
        let next_uri = next
            .as_ref()
            .map(|c| format!("{RESULT_URI}{}?cursor={c}", stored.handle));
        meta["header"] = Value::String(page.header(next_uri.as_deref()));
        let mut result =
            ReadResourceResult::new(vec![ResourceContents::text(page.data, uri).with_mime_type(
                if page.form != sluice_core::pager::Form::Text {
                    "application/json"
                } else {
                    mime_of(stored.doc.kind())
                },
            )]);
        result.meta = Some(with_meta(None, "sluice/page", meta));
        Ok(result)
    }

    /// `sluice_search`.
    pub async fn search(
        &self,
        arguments: Option<JsonObject>,
        owner: &Owner,
        budget: Budget,
    ) -> Result<CallToolResult, ErrorData> {
        let args: SearchArgs = match parse_args(
            SEARCH,
            arguments,
            "{\"handle\":\"h_…\",\"pattern\":\"error\"} or {\"cursor\":\"s2_…\"}",
        ) {
            Ok(args) => args,
            Err(message) => return Ok(error_result(message)),
        };
        let cursor = match (args.cursor, args.handle, args.pattern) {
            (Some(sealed), None, None) => {
                if args.regex.is_some()
                    || args.case_sensitive.is_some()
                    || args.context.is_some()
                    || args.before.is_some()
                    || args.after.is_some()
                    || args.max_matches.is_some()
                {
                    return Ok(error_result(format!(
                        "{SEARCH}: a `cursor` carries its pattern and options: call {SEARCH} {{\"cursor\":\"…\"}} alone."
                    )));
                }
                self.key()
                    .open_search(&sealed)
                    .map_err(invalid_search_cursor)?
            }
            (None, Some(handle), Some(pattern)) => {
                // `before` and `after` win over `context` for their side.
                let lines = |name, value: &Option<Value>| context_lines(name, value.as_ref());
                let (context, before, after) = match (
                    lines("context", &args.context),
                    lines("before", &args.before),
                    lines("after", &args.after),
                ) {
                    (Ok(context), Ok(before), Ok(after)) => (context, before, after),
                    (Err(message), _, _) | (_, Err(message), _) | (_, _, Err(message)) => {
                        return Ok(error_result(message));
                    }
                };
                let context = context.unwrap_or(DEFAULT_CONTEXT);
                if pattern.len() > search::MAX_PATTERN_BYTES {
                    return Ok(error_result(format!(
                        "{SEARCH}: {}.",
                        search::SearchError::TooLong(pattern.len())
                    )));
                }
                if args.max_matches == Some(0) {
                    return Ok(error_result(format!(
                        "{SEARCH}: `max_matches` must be at least 1."
                    )));
                }
                SearchCursor {
                    handle,
                    query: Query {
                        pattern,
                        regex: args.regex.unwrap_or(false),
                        case_sensitive: args.case_sensitive.unwrap_or(false),
                    },
                    before: before.unwrap_or(context),
                    after: after.unwrap_or(context),
                    max_matches: args.max_matches.unwrap_or(DEFAULT_MATCHES),
                    budget,
                    start: 0,
                }
            }
            (Some(_), _, _) => {
                return Ok(error_result(format!(
                    "{SEARCH}: give either `cursor` alone or `handle` and `pattern`."
                )));
            }
            _ => {
                return Ok(error_result(format!(
                    "{SEARCH} needs a `handle` and a `pattern` (or a `cursor` from a previous page). {}",
                    self.handles_hint(owner)
                )));
            }
        };
        let via_cursor = cursor.start > 0;
        let stored = match self.store().get(owner, &cursor.handle) {
            Ok(listed) => listed.stored,
            Err(StoreError::Unknown(_)) if via_cursor => {
                return Err(invalid_search_cursor(
                    "this cursor belongs to a result this session does not have",
                ));
            }
            Err(e) => return Ok(error_result(format!("{e}. {}", self.handles_hint(owner)))),
        };
        // Compiling is bounded (8 KiB of pattern, the regex crate's size
        // limits) but may take a while: off the request threads.
        let (query, kind) = (cursor.query.clone(), stored.doc.kind());
        let compiled = tokio::task::spawn_blocking(move || Matcher::new(&query, kind))
            .await
            .map_err(|e| ErrorData::internal_error(format!("search failed: {e}"), None))?;
        let matcher = match compiled {
            Ok(m) => m,
            Err(e) => {
                return Ok(error_result(format!(
                    "{SEARCH}: {e}. Use \"regex\": false to search the text literally."
                )));
            }
        };
        let key = (owner.clone(), cursor.handle.clone(), cursor.query.clone());
        let hits = match self.recent_hits(&key) {
            Some(hits) => hits,
            None => {
                let (doc, m) = (stored.clone(), matcher.clone());
                let hits = Arc::new(
                    tokio::task::spawn_blocking(move || search::search(&doc.doc, &m))
                        .await
                        .map_err(|e| {
                            ErrorData::internal_error(format!("search failed: {e}"), None)
                        })?,
                );
                self.keep_hits(key, hits.clone());
                hits
            }
        };
        if cursor.start as usize > hits.hits.len() {
            return Err(invalid_search_cursor(
                "this cursor does not point into its search",
            ));
        }
        // The pattern is repeated in the cursor and `_meta`: reserve for it.
        let page_budget = page_budget(cursor.budget, Some(&cursor.query.pattern));
        let limited = Hits {
            hits: hits.hits[..hits
                .hits
                .len()
                .min(cursor.start as usize + cursor.max_matches as usize)]
                .to_vec(),
            total: hits.total,
        };
        let page = search::page(
            &stored.doc,
            &limited,
            &matcher,
            cursor.start as usize,
            usize::from(cursor.before),
            usize::from(cursor.after),
            &page_budget,
        );
        let next = (page.end < hits.hits.len()).then(|| {
            self.key().seal_search(&SearchCursor {
                start: page.end as u64,
                ..cursor.clone()
            })
        });
        let call = next
            .as_ref()
            .map(|c| format!("{SEARCH} {{\"cursor\":\"{c}\"}}"));
        let header = search::header(&hits, &page, stored.doc.kind(), call.as_deref());
        let meta = json!({
            "handle": stored.handle,
            "pattern": cursor.query.pattern,
            "total": hits.total,
            "returned": page.end - page.start,
            "next_cursor": next,
        });
        let mut result = CallToolResult::success(vec![
            ContentBlock::text(page.data),
            ContentBlock::text(header),
        ]);
        result.meta = Some(with_meta(None, "sluice/search", meta));
        Ok(result)
    }

    /// `sluice_query`: a jq filter over a stored result, in a worker process.
    pub async fn query(
        &self,
        arguments: Option<JsonObject>,
        owner: &Owner,
        budget: Budget,
    ) -> Result<CallToolResult, ErrorData> {
        let args: QueryArgs = match parse_args(
            QUERY,
            arguments,
            "{{\"handle\":\"h_…\",\"filter\":\".rows | length\"}}",
        ) {
            Ok(args) => args,
            Err(message) => return Ok(error_result(message)),
        };
        let budget = match smaller(QUERY, budget, args.max_tokens) {
            Ok(budget) => budget,
            Err(message) => return Ok(error_result(message)),
        };
        let stored = match self.store().get(owner, &args.handle) {
            Ok(listed) => listed.stored,
            Err(e) => return Ok(error_result(format!("{e}. {}", self.handles_hint(owner)))),
        };
        // A text is queried as the JSON array of its lines (the worker
        // splits it).
        let outputs = match self.jq().run(&args.filter, &stored).await {
            Ok(answer) => answer.outputs,
            // The message may quote the filter: cut.
            Err(message) => {
                return Ok(error_result(format!(
                    "{QUERY}: {}",
                    sluice_core::format::cut(&message, 1000)
                )));
            }
        };
        let mut meta = json!({
            "handle": stored.handle,
            "filter": args.filter,
            "outputs": outputs.count,
        });
        if budget.less(300, 600).fits_text(&outputs.text) {
            let mut result = CallToolResult::success(vec![ContentBlock::text(outputs.text)]);
            result.meta = Some(with_meta(None, "sluice/query", meta));
            return Ok(result);
        }
        // Too large: stored in turn: the output itself when there is one
        // (`.rows | map(…)` stores the array it made), else the array of the
        // outputs.
        let array = if outputs.count == 1 {
            outputs.text
        } else {
            outputs.array()
        };
        let policy = crate::govern::Policy {
            owner: owner.clone(),
            budget,
            source: format!("{QUERY} {}", quoted_cut(&args.filter)),
            mode: sluice_core::config::Mode::Buffer,
            preview_depth: crate::govern::DEFAULT_PREVIEW_DEPTH,
            narrowing: Vec::new(),
        };
        let mut result = self
            .tool_result(
                CallToolResult::success(vec![ContentBlock::text(array)]),
                policy,
            )
            .await;
        if let Some(stored_as) = result
            .meta
            .as_ref()
            .and_then(|m| m.0.get("sluice/stored"))
            .and_then(|s| s.get("handle"))
        {
            meta["stored_as"] = stored_as.clone();
        }
        result.meta = Some(with_meta(result.meta, "sluice/query", meta));
        Ok(result)
    }

    /// `sluice_info`.
    pub fn info(
        &self,
        arguments: Option<JsonObject>,
        owner: &Owner,
        budget: Budget,
    ) -> Result<CallToolResult, ErrorData> {
        let args: InfoArgs = match parse_args(INFO, arguments, "{\"handle\":\"h_…\"} or {}") {
            Ok(args) => args,
            Err(message) => return Ok(error_result(message)),
        };
        let Some(handle) = args.handle else {
            return Ok(self.list_handles(owner));
        };
        let listed = match self.store().get(owner, &handle) {
            Ok(listed) => listed,
            Err(e) => return Ok(error_result(format!("{e}. {}", self.handles_hint(owner)))),
        };
        let stored = &listed.stored;
        let info = &stored.info;
        let page_budget = page_budget(budget, None);
        let plan = stored.doc.plan(None, page_budget).ok();
        let pages = plan.as_ref().map_or(1, |p| p.pages());
        let path = bulk_path(&stored.doc);
        let expires_at = timestamp(listed.expires_at);
        let mut text = format!(
            "{} — {} of {}, {}{} tokens ({}), {} characters; stored {} ago, expires {expires_at} unless read again.\n",
            stored.handle,
            info.source,
            stored.doc.kind().as_str(),
            if info.tokens_estimated { "≈" } else { "" },
            group(info.tokens),
            bytes(info.bytes),
            group(info.chars),
            age(since(stored.created)),
        );
        text.push_str(&format!("Shape: {}\n", info.overview.shape(1)));
        let arrays: Vec<String> = stored
            .doc
            .notable_arrays()
            .into_iter()
            .take(6)
            .map(|a| {
                format!(
                    "{} ({} items)",
                    if a.pointer.is_empty() {
                        "\"\""
                    } else {
                        &a.pointer
                    },
                    group(a.items as u64)
                )
            })
            .collect();
        if !arrays.is_empty() {
            text.push_str(&format!("Arrays: {}\n", arrays.join(", ")));
        }
        text.push_str(&format!(
            "Pages: {} of ≤ {} tokens: {READ} {{\"handle\":\"{}\"}}\n",
            group(pages as u64),
            group(u64::from(page_budget.max_tokens)),
            stored.handle
        ));
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.meta = Some(with_meta(
            None,
            "sluice/stored",
            stored_meta(stored, pages, path.as_deref(), &expires_at),
        ));
        Ok(result)
    }

    fn list_handles(&self, owner: &Owner) -> CallToolResult {
        let listed = self.store().list(owner, LISTED);
        let (entries, held) = self.store().usage();
        let mut text = if !owner.may_list() {
            "Stored results are not listed to clients without a session: each handle is the key to its result, so keep the handles your answers named.\n".to_owned()
        } else if listed.is_empty() {
            "No stored results in this session: results within the budget pass through whole; larger ones are stored and their answer names a handle.\n".to_owned()
        } else {
            format!(
                "Stored results of this session, newest first ({}):\n",
                listed.len()
            )
        };
        for l in &listed {
            text.push_str(&format!("  {}\n", describe(l)));
        }
        text.push_str(&format!(
            "The store holds {} results, {}.\n",
            group(entries as u64),
            bytes(held)
        ));
        let jq = self.jq().stats();
        text.push_str(&format!(
            "sluice_query, all sessions: {} queries, {} over a document kept parsed, {} stopped; jq workers: {} busy, {} idle.\n",
            group(jq.queries),
            group(jq.kept_parsed),
            group(jq.stopped),
            jq.workers_busy,
            jq.workers_idle
        ));
        let list: Vec<Value> = listed
            .iter()
            .map(|l| {
                json!({
                    "handle": l.stored.handle,
                    "source": l.stored.info.source,
                    "kind": l.stored.doc.kind().as_str(),
                    "tokens": l.stored.info.tokens,
                    "bytes": l.stored.info.bytes,
                    "expires_at": timestamp(l.expires_at),
                })
            })
            .collect();
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        let meta = with_meta(None, "sluice/handles", Value::Array(list));
        result.meta = Some(with_meta(Some(meta), "sluice/jq", json!(jq)));
        result
    }

    /// "Handles of this session: …", for error messages.
    fn handles_hint(&self, owner: &Owner) -> String {
        if !owner.may_list() {
            return "Use a handle an answer named, or call the tool again.".into();
        }
        let listed = self.store().list(owner, 5);
        if listed.is_empty() {
            return "This session has no stored results: call the tool again.".into();
        }
        let names: Vec<String> = listed.iter().map(describe).collect();
        format!("This session's stored results: {}.", names.join("; "))
    }
}

fn describe(l: &Listed) -> String {
    let s = &l.stored;
    format!(
        "{} — {}, {} {}, {}{} tokens, stored {} ago",
        s.handle,
        s.info.source,
        bytes(s.info.bytes),
        s.doc.kind().as_str(),
        if s.info.tokens_estimated { "≈" } else { "" },
        group(s.info.tokens),
        age(since(s.created))
    )
}

fn since(t: SystemTime) -> u64 {
    SystemTime::now()
        .duration_since(t)
        .map_or(0, |d| d.as_secs())
}

enum PageFailure {
    /// A mistake the model can fix; the message says how.
    Model(String),
    /// A cursor that does not fit its result.
    Cursor,
}

fn page_error(stored: &Stored, e: &PageError) -> String {
    match e {
        PageError::OutOfRange { .. } => format!(
            "{e}. {READ} {{\"handle\":\"{}\"}} reads page 1.",
            stored.handle
        ),
        _ => format!("{e}."),
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len()
                && b[i + 1].is_ascii_hexdigit()
                && b[i + 2].is_ascii_hexdigit() =>
            {
                let hex = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
                out.push(hex(b[i + 1]) * 16 + hex(b[i + 2]));
                i += 3;
                continue;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
