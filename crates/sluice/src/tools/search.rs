//! `sluice_search {handle, pattern, …}` or `{cursor}`: grep a stored result.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, ErrorData, JsonObject, Tool};
use serde::Deserialize;
use serde_json::{Value, json};
use sluice_core::budget::Budget;
use sluice_core::cursor::SearchCursor;
use sluice_core::format::quoted_cut;
use sluice_core::search::{self, Hits, Matcher, Query};
use sluice_core::store::{Owner, StoreError};

use crate::govern::{Governor, page_budget, with_meta};

use super::*;

/// `sluice_search` as listed.
pub(super) fn tool() -> Tool {
    let string = json!({"type": "string"});
    let integer = json!({"type": "integer"});
    let search = json!({
        "type": "object",
        "properties": {
            "handle": string,
            "pattern": {"type": "string", "description": "literal unless regex"},
            "regex": {"type": "boolean"},
            "case_sensitive": {"type": "boolean"},
            "context": integer,
            "before": integer,
            "after": integer,
            "max_matches": integer,
            "cursor": string
        }
    });
    Tool::new(
        SEARCH,
        format!(
            "Grep a stored result: text lines with context (0–{max} lines: context both sides, default {DEFAULT_CONTEXT}, or before/after), or JSON strings (keys, values) with their paths. {{handle, pattern}} or {{cursor}}.",
            max = search::MAX_CONTEXT
        ),
        object(search),
    )
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    #[serde(default, deserialize_with = "lenient::id")]
    handle: Option<String>,
    pattern: Option<String>,
    #[serde(default, deserialize_with = "lenient::boolean")]
    regex: Option<bool>,
    #[serde(default, deserialize_with = "lenient::boolean")]
    case_sensitive: Option<bool>,
    // Any JSON: checked by `context_lines`, whose message names the
    // argument and its range (serde's would not).
    context: Option<Value>,
    before: Option<Value>,
    after: Option<Value>,
    #[serde(default, deserialize_with = "lenient::integer")]
    max_matches: Option<u32>,
    #[serde(default, deserialize_with = "lenient::id")]
    cursor: Option<String>,
}

/// 0 to [`search::MAX_CONTEXT`], or a message that says so.
pub(super) fn context_lines(name: &str, value: Option<&Value>) -> Result<Option<u8>, String> {
    let Some(value) = value else {
        return Ok(None);
    };
    lenient::whole(value)
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

/// A search cursor that cannot be used: `-32602`, as for page cursors.
pub(super) fn invalid_search_cursor(why: impl std::fmt::Display) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "{why}. Cursors are only valid in the session that received them; to start again, call {SEARCH} with the handle and the pattern."
        ),
        None,
    )
}

impl Governor {
    /// `sluice_search`.
    pub async fn search(
        &self,
        arguments: Option<JsonObject>,
        owner: &Owner,
        budget: Budget,
    ) -> Result<CallToolResult, ToolError> {
        let args: SearchArgs = match parse_args(
            SEARCH,
            arguments,
            "{\"handle\":\"h_…\",\"pattern\":\"error\"} or {\"cursor\":\"s2_…\"}",
        ) {
            Ok(args) => args,
            Err(message) => return Err(ToolError::Model(message)),
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
                    return Err(ToolError::Model(format!(
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
                        return Err(ToolError::Model(message));
                    }
                };
                let context = context.unwrap_or(DEFAULT_CONTEXT);
                if pattern.len() > search::MAX_PATTERN_BYTES {
                    return Err(ToolError::Model(format!(
                        "{SEARCH}: {}.",
                        search::SearchError::TooLong(pattern.len())
                    )));
                }
                if args.max_matches == Some(0) {
                    return Err(ToolError::Model(format!(
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
                return Err(ToolError::Model(format!(
                    "{SEARCH}: give either `cursor` alone or `handle` and `pattern`."
                )));
            }
            _ => {
                return Err(ToolError::Model(format!(
                    "{SEARCH} needs a `handle` and a `pattern` (or a `cursor` from a previous page). {}",
                    self.handles_hint(owner).await
                )));
            }
        };
        let via_cursor = cursor.start > 0;
        let stored = match self.stored(owner, &cursor.handle).await {
            Ok(listed) => listed.stored,
            Err(StoreError::Unknown(_)) if via_cursor => {
                return Err(invalid_search_cursor(
                    "this cursor belongs to a result you do not have",
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
        // Compiling is bounded (8 KiB of pattern, the regex crate's size
        // limits) but may take a while: off the request threads.
        let (query, kind) = (cursor.query.clone(), stored.doc.kind());
        let compiled = tokio::task::spawn_blocking(move || Matcher::new(&query, kind))
            .await
            .map_err(|e| ErrorData::internal_error(format!("search failed: {e}"), None))?;
        let matcher = match compiled {
            Ok(m) => m,
            Err(e) => {
                return Err(ToolError::Model(format!(
                    "{SEARCH}: {e}. Use \"regex\": false to search the text literally."
                )));
            }
        };
        let hits = self
            .hits_of(owner, &stored, &cursor.query, &matcher)
            .await?;
        if cursor.start as usize > hits.hits.len() {
            return Err(invalid_search_cursor("this cursor does not point into its search").into());
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
        let missed = match hits.total {
            0 => match search::Missed::scalar(&cursor.query, stored.doc.kind()) {
                Some(scalar) => Some(scalar),
                None => self
                    .regex_total(owner, &stored, &cursor.query)
                    .await
                    .map(search::Missed::AsRegex),
            },
            _ => None,
        };
        let header = search::header(
            &hits,
            &page,
            stored.doc.kind(),
            call.as_deref(),
            missed.as_ref(),
        );
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
        result.meta = Some(with_meta(None, crate::contract::meta::SEARCH, meta));
        self.metrics().search();
        Ok(result)
    }
}

impl Governor {
    /// The hits of `query` (compiled as `matcher`) in `stored`: the kept
    /// ones if one of the last searches was this one (its next pages), else
    /// the whole document searched once, off the request threads, and kept.
    async fn hits_of(
        &self,
        owner: &Owner,
        stored: &Arc<sluice_core::store::Stored>,
        query: &Query,
        matcher: &Matcher,
    ) -> Result<Arc<Hits>, ErrorData> {
        let key = (owner.clone(), stored.handle.clone(), query.clone());
        if let Some(hits) = self.recent_hits(&key) {
            return Ok(hits);
        }
        let (doc, m) = (stored.clone(), matcher.clone());
        let hits = Arc::new(
            tokio::task::spawn_blocking(move || search::search(&doc.doc, &m))
                .await
                .map_err(|e| ErrorData::internal_error(format!("search failed: {e}"), None))?,
        );
        self.keep_hits(key, hits.clone());
        Ok(hits)
    }

    /// How many matches `query`'s pattern has in `stored` as a regular
    /// expression, when taken literally it had none (see
    /// [`search::as_regex`]); `None` if it has no regex syntax, does not
    /// compile as a regex, or matches nothing as one either. A second pass
    /// over the document, made only when the first found nothing, and kept
    /// as that search's hits: the call the answer suggests (`"regex":
    /// true`) finds them.
    async fn regex_total(
        &self,
        owner: &Owner,
        stored: &Arc<sluice_core::store::Stored>,
        query: &Query,
    ) -> Option<u64> {
        let regex = search::as_regex(query)?;
        let (compiling, kind) = (regex.clone(), stored.doc.kind());
        let matcher = tokio::task::spawn_blocking(move || Matcher::new(&compiling, kind))
            .await
            .ok()?
            .ok()?;
        let hits = self.hits_of(owner, stored, &regex, &matcher).await.ok()?;
        (hits.total > 0).then_some(hits.total)
    }
}
