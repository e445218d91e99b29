//! `sluice_read {handle, page?, path?, max_tokens?}` or `{cursor}`: one page
//! of a stored result. Mistakes a model can fix (an unknown handle, a page
//! past the end, a path that is not an array) are error results that say
//! what exists; an altered or foreign cursor is a JSON-RPC `-32602` error.

use rmcp::model::{CallToolResult, ContentBlock, ErrorData, JsonObject, Tool};
use serde::Deserialize;
use serde_json::{Value, json};
use sluice_core::budget::Budget;
use sluice_core::cursor::Cursor;
use sluice_core::pager::{Page, PageError, Start};
use sluice_core::store::{Owner, PageAsk, ReadError, StoreError};

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
    #[serde(default, deserialize_with = "lenient::id")]
    handle: Option<String>,
    #[serde(default, deserialize_with = "lenient::integer")]
    page: Option<u64>,
    path: Option<String>,
    #[serde(default, deserialize_with = "lenient::integer")]
    max_tokens: Option<u32>,
    #[serde(default, deserialize_with = "lenient::id")]
    cursor: Option<String>,
}

/// A page request, validated.
#[derive(Clone)]
pub(super) struct PageRequest {
    pub(super) handle: String,
    pub(super) path: Option<String>,
    pub(super) budget: Budget,
    /// Where the read starts: a page number, or a cursor's position.
    pub(super) from: Start,
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
            "{\"handle\":\"h_…\",\"page\":2} or {\"cursor\":\"c1_…\"}",
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
                    from: Start::Page(args.page.unwrap_or(1)),
                }
            }
            (None, None) => {
                return Err(ToolError::Model(format!(
                    "{READ} needs a `handle` (from a stored result's answer) or a `cursor` (from a page's next_cursor). {}",
                    self.handles_hint(owner).await
                )));
            }
        };
        let via_cursor = matches!(request.from, Start::At(_));
        match self.page(owner, &request).await {
            Ok(page) => Ok(self.page_result(&request, &page)),
            Err(ReadError::Store(StoreError::Unknown(_))) if via_cursor => {
                Err(invalid_cursor("this cursor belongs to a result you do not have").into())
            }
            Err(ReadError::Store(e)) => Err(ToolError::Model(format!(
                "{e}. {}",
                self.handles_hint(owner).await
            ))),
            Err(ReadError::Page(e)) => Err(ToolError::Model(page_error(&request.handle, &e))),
            Err(ReadError::Cursor) => {
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
            from: Start::At(at),
        })
    }
}

impl Governor {
    /// The page `request` asks of `owner`'s result.
    pub(super) async fn page(
        &self,
        owner: &Owner,
        request: &PageRequest,
    ) -> Result<Page, ReadError> {
        let ask = PageAsk {
            path: request.path.clone(),
            budget: page_budget(request.budget, request.path.as_deref()),
            start: request.from,
        };
        let page = self.page_of(owner, &request.handle, ask).await;
        if page.is_ok() {
            self.metrics().page_served();
        }
        page
    }
}

impl Governor {
    pub(super) fn next_cursor(&self, request: &PageRequest, page: &Page) -> Option<String> {
        page.next.map(|at| {
            self.key().seal(&Cursor {
                handle: request.handle.clone(),
                path: request.path.clone(),
                budget: request.budget,
                at,
            })
        })
    }

    pub(super) fn page_meta(&self, handle: &str, page: &Page, next: Option<&str>) -> Value {
        let mut meta = json!({
            "handle": handle,
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

    pub(super) fn page_result(&self, request: &PageRequest, page: &Page) -> CallToolResult {
        let next = self.next_cursor(request, page);
        let call = next
            .as_ref()
            .map(|c| format!("{READ} {{\"cursor\":\"{c}\"}}"));
        let header = page.header(call.as_deref());
        let meta = self.page_meta(&request.handle, page, next.as_deref());
        let mut result = CallToolResult::success(vec![
            ContentBlock::text(page.data.clone()),
            ContentBlock::text(header),
        ]);
        result.meta = Some(with_meta(None, crate::contract::meta::PAGE, meta));
        result
    }
}

pub(super) fn page_error(handle: &str, e: &PageError) -> String {
    match e {
        PageError::OutOfRange { .. } => {
            format!("{e}. {READ} {{\"handle\":\"{handle}\"}} reads page 1.")
        }
        _ => format!("{e}."),
    }
}
