//! `sluice_query {handle, filter, max_tokens?}`: a jq filter over a stored
//! result, run in a `sluice jq-worker` process ([`crate::jq`]).

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool};
use serde::Deserialize;
use serde_json::json;
use sluice_core::budget::Budget;
use sluice_core::format::quoted_cut;
use sluice_core::store::Owner;

use crate::govern::{Governor, with_meta};
use crate::metrics::QueryOutcome;

use super::*;

/// `sluice_query` as listed.
pub(super) fn tool() -> Tool {
    let string = json!({"type": "string"});
    let query = json!({
        "type": "object",
        "properties": {"handle": string, "filter": string, "max_tokens": {"type": "integer"}},
        "required": ["handle", "filter"]
    });
    Tool::new(
        QUERY,
        "Run a jq filter (jaq) over a stored result; one JSON value per line. A text is an array of lines. A large answer is stored in turn.",
        object(query),
    )
}

/// Runs `sluice_query` for `caller`. A query the client cancels (or
/// leaves) stops at once: dropping it kills its worker.
pub(super) async fn run(
    governor: &Governor,
    arguments: Option<JsonObject>,
    caller: &Caller,
    budget: Budget,
) -> Result<CallToolResult, ToolError> {
    tokio::select! {
        r = governor.query(arguments, &caller.owner, budget) => r,
        () = caller.ct.cancelled() => Err(ToolError::Protocol(crate::cancel::cancelled_error())),
    }
}

/// How a `sluice_query` that answered `result` ended, for the metrics.
fn outcome(result: &Result<CallToolResult, ToolError>, stopped: bool) -> QueryOutcome {
    match result {
        _ if stopped => QueryOutcome::Stopped,
        Ok(_) => QueryOutcome::Answered,
        Err(_) => QueryOutcome::Refused,
    }
}

/// What the model is told when its `filter` failed on `doc`: why; where
/// jq would not have failed, how to write it (see
/// [`sluice_core::query::failure_hint`]); and for a text, how a text is
/// queried (a filter written for the tool's JSON
/// result, `.content[0].text`, fails on the array of its lines, and the
/// failure alone does not say what the filter ran on).
fn failure_message(
    failed: &crate::jq::pool::Failed,
    filter: &str,
    doc: &sluice_core::document::Document,
) -> String {
    // The message may quote the filter: cut.
    let mut message = format!(
        "{QUERY}: {}",
        sluice_core::format::cut(failed.message(), 1000)
    );
    let crate::jq::pool::Failed::Refused(why) = failed else {
        return message;
    };
    if !why.starts_with(sluice_core::query::FILTER_FAILED) {
        return message;
    }
    if let Some(hint) = sluice_core::query::failure_hint(filter, why) {
        message.push_str(". ");
        message.push_str(hint);
    }
    if doc.kind() == sluice_core::document::Kind::Text {
        message.push_str(&format!(
            ". This result is a text: it is queried as the JSON array of its lines ({}), so `.[0]` is its first line, `length` counts its lines, and `.[] | select(test(\"…\"))` gives the lines that match.",
            sluice_core::format::counted(doc.line_starts().len() as u64, "line", "lines")
        ));
    }
    message
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QueryArgs {
    #[serde(deserialize_with = "lenient::required_id")]
    handle: String,
    filter: String,
    #[serde(default, deserialize_with = "lenient::integer")]
    max_tokens: Option<u32>,
}

impl Governor {
    /// `sluice_query`: a jq filter over a stored result, in a worker process.
    pub async fn query(
        &self,
        arguments: Option<JsonObject>,
        owner: &Owner,
        budget: Budget,
    ) -> Result<CallToolResult, ToolError> {
        let mut stopped = false;
        let result = self
            .query_counted(arguments, owner, budget, &mut stopped)
            .await;
        self.metrics().query(outcome(&result, stopped));
        result
    }

    async fn query_counted(
        &self,
        arguments: Option<JsonObject>,
        owner: &Owner,
        budget: Budget,
        stopped: &mut bool,
    ) -> Result<CallToolResult, ToolError> {
        let args: QueryArgs = match parse_args(
            QUERY,
            arguments,
            "{\"handle\":\"h_…\",\"filter\":\".rows | length\"}",
        ) {
            Ok(args) => args,
            Err(message) => return Err(ToolError::Model(message)),
        };
        let budget = match smaller(QUERY, budget, args.max_tokens) {
            Ok(budget) => budget,
            Err(message) => return Err(ToolError::Model(message)),
        };
        let stored = match self.stored(owner, &args.handle).await {
            Ok(listed) => listed.stored,
            Err(e) => {
                return Err(ToolError::Model(format!(
                    "{e}. {}",
                    self.handles_hint(owner).await
                )));
            }
        };
        // A text is queried as the JSON array of its lines (the worker
        // splits it).
        let outputs = match self.jq().run(&args.filter, &stored).await {
            Ok(answer) => answer.outputs,
            Err(failed) => {
                *stopped = matches!(failed, crate::jq::pool::Failed::Stopped(_));
                return Err(ToolError::Model(failure_message(
                    &failed,
                    &args.filter,
                    &stored.doc,
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
            result.meta = Some(with_meta(None, crate::contract::meta::QUERY, meta));
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
            narrowing: Arc::default(),
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
            .and_then(|m| m.0.get(crate::contract::meta::STORED))
            .and_then(|s| s.get("handle"))
        {
            meta["stored_as"] = stored_as.clone();
        }
        result.meta = Some(with_meta(result.meta, crate::contract::meta::QUERY, meta));
        Ok(result)
    }
}
