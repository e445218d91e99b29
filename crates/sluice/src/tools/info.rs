//! `sluice_info {handle?}`: a stored result's shape, size, pages and expiry;
//! without a handle, the caller's stored results, operations and the cache's
//! figures.

use std::time::SystemTime;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool};
use serde::Deserialize;
use serde_json::{Value, json};
use sluice_core::budget::Budget;
use sluice_core::format::{age, bytes, group, timestamp};
use sluice_core::store::{Brief, Owner};

use crate::govern::{Governor, bulk_path, page_budget, stored_meta, with_meta};

use super::*;

/// `sluice_info` as listed.
pub(super) fn tool() -> Tool {
    Tool::new(
        INFO,
        "A stored result's shape, size, pages and expiry; without handle, your stored results and operations.",
        object(json!({"type": "object", "properties": {"handle": {"type": "string"}}})),
    )
}

/// Runs `sluice_info`: about one handle, or (without arguments) the
/// owner's stored results, then its operations, then the cache's figures
/// (shared by every owner).
pub(super) async fn run(
    context: &Context<'_>,
    arguments: Option<JsonObject>,
    owner: &Owner,
    budget: Budget,
) -> Result<CallToolResult, ToolError> {
    let listing = arguments.as_ref().is_none_or(|a| a.is_empty());
    let mut result = context.governor.info(arguments, owner, budget).await?;
    if !listing {
        return Ok(result);
    }
    let operations = context.operations;
    let ops = operations.list(owner);
    if let Some(ContentBlock::Text(text)) = result.content.first_mut() {
        text.text.push_str(&operations.list_hint(owner));
        text.text.push('\n');
    }
    let list: Vec<Value> = ops.iter().map(|o| o.meta()).collect();
    result.meta = Some(with_meta(
        result.meta,
        crate::contract::meta::OPERATIONS,
        Value::Array(list),
    ));
    let (total, by_tool) = context.cache.figures().await;
    if let Some(ContentBlock::Text(text)) = result.content.first_mut() {
        if by_tool.is_empty() {
            text.text.push_str(if context.caches_anything {
                "Cache: no cached calls yet.\n"
            } else {
                "Cache: off (no tool is cached: `cache = { ttl_s = … }` in a tool's table, or `[cache] annotated = true`).\n"
            });
        } else {
            text.text.push_str(&format!("Cache: {}.\n", total.line()));
            for (tool, figures) in &by_tool {
                text.text
                    .push_str(&format!("  `{tool}`: {}.\n", figures.line()));
            }
        }
    }
    let tools: serde_json::Map<String, Value> = by_tool
        .iter()
        .map(|(tool, f)| (tool.to_string(), f.json()))
        .collect();
    result.meta = Some(with_meta(
        result.meta,
        crate::contract::meta::CACHE_FIGURES,
        json!({"total": total.json(), "tools": tools}),
    ));
    Ok(result)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InfoArgs {
    #[serde(default, deserialize_with = "lenient::id")]
    handle: Option<String>,
}

impl Governor {
    /// `sluice_info`.
    pub async fn info(
        &self,
        arguments: Option<JsonObject>,
        owner: &Owner,
        budget: Budget,
    ) -> Result<CallToolResult, ToolError> {
        let args: InfoArgs = match parse_args(INFO, arguments, "{\"handle\":\"h_…\"} or {}") {
            Ok(args) => args,
            Err(message) => return Err(ToolError::Model(message)),
        };
        let Some(handle) = args.handle else {
            return Ok(self.list_handles(owner).await);
        };
        let listed = match self.stored(owner, &handle).await {
            Ok(listed) => listed,
            Err(e) => {
                return Err(ToolError::Model(format!(
                    "{e}. {}",
                    self.handles_hint(owner).await
                )));
            }
        };
        let stored = &listed.stored;
        let info = &stored.info;
        let page_budget = page_budget(budget, None);
        let plan = stored.doc.plan(None, page_budget).ok();
        let pages = plan.as_ref().map_or(1, |p| p.pages());
        let path = bulk_path(&stored.doc);
        let expires_at = timestamp(listed.expires_at);
        let mut text = format!(
            "{} — {}, {}, {}{} tokens ({}), {} characters; stored {} ago, expires {expires_at} unless read again.\n",
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
                    "{} ({})",
                    if a.pointer.is_empty() {
                        "\"\""
                    } else {
                        &a.pointer
                    },
                    sluice_core::format::counted(a.items as u64, "item", "items")
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
            crate::contract::meta::STORED,
            stored_meta(stored, pages, path.as_deref(), &expires_at),
        ));
        Ok(result)
    }

    pub(super) async fn list_handles(&self, owner: &Owner) -> CallToolResult {
        let listed = self.listed(owner, LISTED).await;
        let (entries, held) = self.usage().await;
        let mut text = if !owner.may_list() {
            "Stored results are not listed to clients without a session: each handle is the key to its result, so keep the handles your answers named.\n".to_owned()
        } else if listed.is_empty() {
            "You have no stored results: results within the budget pass through whole; larger ones are stored and their answer names a handle.\n".to_owned()
        } else {
            format!("Your stored results, newest first ({}):\n", listed.len())
        };
        for l in &listed {
            text.push_str(&format!("  {}\n", describe(l)));
        }
        let store = self.store();
        let health = store.health();
        text.push_str(&match &health {
            Ok(()) => format!(
                "The store ({} backend) holds {}, {}.\n",
                store.backend(),
                sluice_core::format::counted(entries as u64, "result", "results"),
                bytes(held)
            ),
            // Its figures are not known while it fails.
            Err(why) => format!(
                "The store ({} backend) is failing: {why}.\n",
                store.backend()
            ),
        });
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
                    "handle": l.handle,
                    "source": l.source,
                    "kind": l.kind.as_str(),
                    "tokens": l.tokens,
                    "bytes": l.bytes,
                    "expires_at": timestamp(l.expires_at),
                })
            })
            .collect();
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        let meta = with_meta(None, crate::contract::meta::HANDLES, Value::Array(list));
        let meta = with_meta(
            Some(meta),
            crate::contract::meta::STORE,
            json!({
                "backend": store.backend(),
                "healthy": health.is_ok(),
                "problem": health.err(),
            }),
        );
        result.meta = Some(with_meta(Some(meta), crate::contract::meta::JQ, json!(jq)));
        result
    }

    /// "Your stored results: …", for error messages.
    pub(super) async fn handles_hint(&self, owner: &Owner) -> String {
        if !owner.may_list() {
            return "Use a handle an answer named, or call the tool again.".into();
        }
        let listed = self.listed(owner, 5).await;
        if listed.is_empty() {
            return "You have no stored results: call the tool again.".into();
        }
        let names: Vec<String> = listed.iter().map(describe).collect();
        format!("Your stored results: {}.", names.join("; "))
    }
}

pub(super) fn describe(l: &Brief) -> String {
    format!(
        "{} — {}, {} {}, {}{} tokens, stored {} ago",
        l.handle,
        l.source,
        bytes(l.bytes),
        l.kind.as_str(),
        if l.tokens_estimated { "≈" } else { "" },
        group(l.tokens),
        age(since(l.created))
    )
}

pub(super) fn since(t: SystemTime) -> u64 {
    crate::clock::wall()
        .duration_since(t)
        .map_or(0, |d| d.as_secs())
}
