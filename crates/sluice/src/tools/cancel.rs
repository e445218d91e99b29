//! `sluice_cancel {operation}`: stops an operation (its upstream request is
//! cancelled) and answers with what it reported so far.

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool};
use serde_json::json;
use sluice_core::store::Owner;

use super::{ToolError, object};
use crate::contract::meta::OPERATION;
use crate::contract::tool::CANCEL;
use crate::govern::{ToolAnswer, with_meta};
use crate::operations::{Operations, answer, operation_arg};

/// `sluice_cancel` as listed.
pub(super) fn tool() -> Tool {
    let operation = json!({
        "type": "object",
        "properties": {"operation": {"type": "string"}},
        "required": ["operation"]
    });
    Tool::new(
        CANCEL,
        "Stop an operation; answers with what it reported so far.",
        object(operation),
    )
}

/// Runs `sluice_cancel {operation}`: an operation that already ended is
/// an error result that still carries its status.
pub(super) async fn run(
    operations: &Operations,
    arguments: Option<JsonObject>,
    owner: &Owner,
) -> Result<ToolAnswer, ToolError> {
    let args = arguments.unwrap_or_default();
    let id = operation_arg(&args, CANCEL).map_err(ToolError::Model)?;
    let op = operations.get(owner, id).await.map_err(ToolError::Model)?;
    let op = match operations.cancel(op.clone()).await {
        Ok(op) => op,
        Err(status) => return Ok(already_ended(&op, status)),
    };
    Ok(answer(&op))
}

/// The answer to cancelling `op`, which had ended (`status`).
fn already_ended(
    op: &crate::operations::Operation,
    status: crate::operations::Status,
) -> ToolAnswer {
    {
        let mut result = CallToolResult::error(vec![ContentBlock::text(format!(
            "operation {} already ended ({}): nothing to cancel. sluice_result {{\"operation\":\"{}\"}} gives its result.",
            op.id,
            status.as_str(),
            op.id
        ))]);
        result.meta = Some(with_meta(None, OPERATION, op.meta()));
        ToolAnswer::Made(result)
    }
}
