//! `sluice_read {handle, page?, path?, max_tokens?}` or `{cursor}`: one page
//! of a stored result. Mistakes a model can fix (an unknown handle, a page
//! past the end, a path that is not an array) are error results that say
//! what exists; an altered or foreign cursor is a JSON-RPC `-32602` error.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, ErrorData, JsonObject, Tool};
use serde::Deserialize;
use serde_json::{Value, json};
use sluice_core::budget::Budget;
use sluice_core::cursor::Cursor;
use sluice_core::limits::BLOCKING_BYTES;
use sluice_core::pager::{Page, PageError, Position};
use sluice_core::store::{Owner, StoreError, Stored};

use crate::govern::{Governor, page_budget, with_meta};

use super::*;

/// `sluice_read` as listed.
pub(super) fn tool() -> Tool {
    let read = json!({
        "type": "object",
        "properties": {
            "handle": {"type": "string", "description": "from a stored answer"},
            "page": {"type": "integer"},
            "path": {"type": "string", "description": "JSON Pointer of the array or object to page, e.g. \"/rows\""},
            "max_tokens": {"type": "integer"},
            "cursor": {"type": "string", "description": "a page's next_cursor"}
        }
    });
    Tool::new(
        READ,
        "A page of a stored result: {handle, page?} or {cursor}. content[0] is the data, content[1] where it is and the next call.",
        object(read),
    )
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

/// Where a read starts.
#[derive(Clone)]
pub(super) enum From {
    Page(u64),
    At(Position),
}

/// A page request, validated.
#[derive(Clone)]
pub(super) struct PageRequest {
    pub(super) handle: String,
    pub(super) path: Option<String>,
    pub(super) budget: Budget,
    pub(super) from: From,
}

pub(super) fn invalid_cursor(why: impl std::fmt::Display) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "{why}. Cursors are only valid in the session that received them; to start again, call {READ} with the handle from the stored result's answer (and \"page\" to jump)."
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
    ) -> Result<CallToolResult, ToolError> {
        let args: ReadArgs = match parse_args(
            READ,
            arguments,
            "{{\"handle\":\"h_…\",\"page\":2}} or {{\"cursor\":\"c1_…\"}}",
        ) {
            Ok(args) => args,
            Err(message) => return Err(ToolError::Model(message)),
        };
        let request = match (args.cursor, args.handle) {
            (Some(_), Some(_)) => {
                return Err(ToolError::Model(format!(
                    "{READ}: give either `cursor` or `handle`, not both: a cursor already names its handle, page and size."
                )));
            }
            (Some(cursor), None) => {
                if args.page.is_some() || args.path.is_some() || args.max_tokens.is_some() {
                    return Err(ToolError::Model(format!(
                        "{READ}: a `cursor` carries its page, path and size: call {READ} {{\"cursor\":\"…\"}} alone, or use `handle` with `page`, `path` and `max_tokens`."
                    )));
                }
                self.open_cursor(&cursor)?
            }
            (None, Some(handle)) => {
                if args.page == Some(0) {
                    return Err(ToolError::Model(format!(
                        "{READ}: pages are numbered from 1."
                    )));
                }
                let budget = match smaller(READ, budget, args.max_tokens) {
                    Ok(budget) => budget,
                    Err(message) => return Err(ToolError::Model(message)),
                };
                PageRequest {
                    handle,
                    path: args.path,
                    budget,
                    from: From::Page(args.page.unwrap_or(1)),
                }
            }
            (None, None) => {
                return Err(ToolError::Model(format!(
                    "{READ} needs a `handle` (from a stored result's answer) or a `cursor` (from a page's next_cursor). {}",
                    self.handles_hint(owner).await
                )));
            }
        };
        let via_cursor = matches!(request.from, From::At(_));
        let stored = match self.stored(owner, &request.handle).await {
            Ok(listed) => listed.stored,
            Err(StoreError::Unknown(_)) if via_cursor => {
                return Err(invalid_cursor(
                    "this cursor belongs to a result this session does not have",
                )
                .into());
            }
            Err(e) => {
                return Err(ToolError::Model(format!(
                    "{e}. {}",
                    self.handles_hint(owner).await
                )));
            }
        };
        match page_off_thread(&stored, &request).await {
            Ok(page) => Ok(self.page_result(&stored, &request, &page)),
            Err(PageFailure::Model(message)) => Err(ToolError::Model(message)),
            Err(PageFailure::Cursor) => {
                Err(invalid_cursor("this cursor does not point into its result").into())
            }
        }
    }

    pub(super) fn open_cursor(&self, sealed: &str) -> Result<PageRequest, ErrorData> {
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

/// The page `request` asks of `stored`, planned off the request threads
/// when the document is large (over [`BLOCKING_BYTES`]): a first plan of a
/// path scans the value paged (and may tokenize up to 4 MB of it), which a
/// request thread must not wait for.
pub(super) async fn page_off_thread(
    stored: &Arc<Stored>,
    request: &PageRequest,
) -> Result<Page, PageFailure> {
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
pub(super) fn page_of(stored: &Stored, request: &PageRequest) -> Result<Page, PageFailure> {
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
    pub(super) fn next_cursor(
        &self,
        stored: &Stored,
        request: &PageRequest,
        page: &Page,
    ) -> Option<String> {
        page.next.map(|at| {
            self.key().seal(&Cursor {
                handle: stored.handle.clone(),
                path: request.path.clone(),
                budget: request.budget,
                at,
            })
        })
    }

    pub(super) fn page_meta(&self, stored: &Stored, page: &Page, next: Option<&str>) -> Value {
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

    pub(super) fn page_result(
        &self,
        stored: &Stored,
        request: &PageRequest,
        page: &Page,
    ) -> CallToolResult {
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
        result.meta = Some(with_meta(None, crate::contract::meta::PAGE, meta));
        result
    }
}

pub(super) enum PageFailure {
    /// A mistake the model can fix; the message says how.
    Model(String),
    /// A cursor that does not fit its result.
    Cursor,
}

pub(super) fn page_error(stored: &Stored, e: &PageError) -> String {
    match e {
        PageError::OutOfRange { .. } => format!(
            "{e}. {READ} {{\"handle\":\"{}\"}} reads page 1.",
            stored.handle
        ),
        _ => format!("{e}."),
    }
}
