//! `sluice_result {operation, wait_s?}`: an operation's status, then its
//! result (waiting up to `wait_s` for it to end, without polling).

use rmcp::model::{JsonObject, Tool};
use serde_json::json;

use super::{ToolError, object};
use crate::caller::Caller;
use crate::contract::tool::RESULT;
use crate::contract::{FRESH_ARG as FRESH, TIMEOUT_ARG as TIMEOUT};
use crate::govern::ToolAnswer;
use crate::operations::{Operations, answer, operation_arg};

/// `sluice_result` as listed: its description says once what `_timeout_s`
/// and `_fresh` mean for every upstream tool.
pub(super) fn tool(settings: &sluice_core::operation::OperationSettings) -> Tool {
    let result = json!({
        "type": "object",
        "properties": {"operation": {"type": "string"}, "wait_s": {"type": "number"}},
        "required": ["operation"]
    });
    Tool::new(
        RESULT,
        format!(
            "An operation's status, then its result. A call running past {TIMEOUT} (an argument of every tool: seconds, default {}, at most {}) goes on in the background as an operation. wait_s: seconds to wait for the end. Cached tools take {FRESH}: true to skip the cache.",
            settings.default_timeout.as_secs_f64(),
            settings.max_timeout.as_secs_f64(),
        ),
        object(result),
    )
}

/// Runs `sluice_result {operation, wait_s?}`. A wait the client gives up
/// on ends with it.
pub(super) async fn run(
    operations: &Operations,
    arguments: Option<JsonObject>,
    caller: &Caller,
) -> Result<ToolAnswer, ToolError> {
    let args = arguments.unwrap_or_default();
    let id = operation_arg(&args, RESULT).map_err(ToolError::Model)?;
    let op = operations
        .get(&caller.owner, id)
        .await
        .map_err(ToolError::Model)?;
    if let Some(unknown) = args
        .keys()
        .find(|k| !["operation", "wait_s"].contains(&k.as_str()))
    {
        return Err(ToolError::Model(format!(
            "{RESULT}: unknown argument `{}`: it takes {{\"operation\":\"op_…\",\"wait_s\":N}}",
            sluice_core::format::quoted_cut(unknown)
        )));
    }
    let wait = operations
        .settings()
        .wait(args.get("wait_s"))
        .map_err(|message| ToolError::Model(format!("{RESULT}: {message}")))?;
    let op = if wait.is_zero() {
        op
    } else {
        tokio::select! {
            op = operations.wait(op, wait) => op,
            () = caller.ct.cancelled() => {
                return Err(ToolError::Protocol(crate::cancel::cancelled_error()));
            }
        }
    };
    Ok(answer(&op))
}
