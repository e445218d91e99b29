//! `resources/read sluice://result/<handle>[?page=N&path=/p&cursor=c]`: the
//! pages of `sluice_read` as a resource, and the resource template that
//! announces them.

use rmcp::model::{ErrorData, ReadResourceResult, ResourceContents, ResourceTemplate};
use serde_json::{Value, json};
use sluice_core::budget::Budget;
use sluice_core::document::Kind;
use sluice_core::format::quoted_cut;
use sluice_core::pager::{Form, Start};
use sluice_core::store::{Owner, ReadError, StoreError};

use crate::contract::RESULT_URI;
use crate::govern::{Governor, mime_of, with_meta};

use super::read::{PageRequest, invalid_cursor, page_error};

/// The resource template of stored results.
pub fn template() -> ResourceTemplate {
    let mut template = ResourceTemplate::new(format!("{RESULT_URI}{{handle}}"), "sluice-result");
    template.description = Some(
        "A result stored by sluice. Add ?page=N, ?path=/json/pointer or ?cursor=… to read other pages.".into(),
    );
    template
}

impl Governor {
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
        let cursor_given = cursor.is_some();
        let request = match cursor {
            Some(c) => self.open_cursor(&c)?,
            None => PageRequest {
                handle: handle.to_owned(),
                path,
                budget,
                from: Start::Page(page.unwrap_or(1)),
            },
        };
        let page = match self.page(owner, &request).await {
            Ok(page) => page,
            Err(ReadError::Store(StoreError::Unknown(_))) if cursor_given => {
                return Err(invalid_cursor(
                    "this cursor belongs to a result you do not have",
                ));
            }
            Err(ReadError::Store(e)) => {
                return Err(ErrorData::resource_not_found(
                    format!("{e}. {}", self.handles_hint(owner).await),
                    Some(json!({"uri": quoted_cut(uri)})),
                ));
            }
            Err(ReadError::Page(e)) => {
                return Err(ErrorData::invalid_params(
                    page_error(&request.handle, &e),
                    None,
                ));
            }
            Err(ReadError::Cursor) => {
                return Err(invalid_cursor("this cursor does not point into its result"));
            }
        };
        let next = self.next_cursor(&request, &page);
        let mut meta = self.page_meta(&request.handle, &page, next.as_deref());
        let next_uri = next
            .as_ref()
            .map(|c| format!("{RESULT_URI}{}?cursor={c}", request.handle));
        meta["header"] = Value::String(page.header(next_uri.as_deref()));
        // A text document's pages are text; a JSON document's, JSON (its
        // slices included: they are of its compact JSON).
        let text = page.form == Form::Text && page.path.is_none();
        let mut result = ReadResourceResult::new(vec![
            ResourceContents::text(page.data, uri).with_mime_type(mime_of(if text {
                Kind::Text
            } else {
                Kind::Json
            })),
        ]);
        result.meta = Some(with_meta(None, crate::contract::meta::PAGE, meta));
        Ok(result)
    }
}

pub(super) fn percent_decode(s: &str) -> String {
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
