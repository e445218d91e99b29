//! `sluice_result {operation, wait_s?}`: an operation's status, then its
//! result (waiting up to `wait_s` for it to end, without polling).

use rmcp::model::{CallToolResult, JsonObject, Tool};
use serde_json::json;

use super::{ToolError, object};
use crate::contract::tool::RESULT;
use crate::contract::{FRESH_ARG as FRESH, TIMEOUT_ARG as TIMEOUT};
use crate::gateway::Caller;
use crate::operations::Operations;

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

/// Runs `sluice_result`. A wait the client gives up on ends with it.
pub(super) async fn run(
    operations: &Operations,
    arguments: Option<JsonObject>,
    caller: &Caller,
) -> Result<CallToolResult, ToolError> {
    tokio::select! {
        result = operations.result(arguments, &caller.owner) => result,
        () = caller.ct.cancelled() => Err(ToolError::Protocol(crate::gateway::cancelled())),
    }
}
