//! `sluice_cancel {operation}`: stops an operation (its upstream request is
//! cancelled) and answers with what it reported so far.

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool};
use serde_json::json;
use sluice_core::store::Owner;

use super::{ToolError, object};
use crate::contract::meta::OPERATION;
use crate::contract::tool::CANCEL;
use crate::govern::{ToolAnswer, with_meta};
use crate::operations::{Operations, answer, operation_arg, stop};

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
pub(super) fn run(
    operations: &Operations,
    arguments: Option<JsonObject>,
    owner: &Owner,
) -> Result<ToolAnswer, ToolError> {
    let args = arguments.unwrap_or_default();
    let op = operation_arg(&args, CANCEL)
        .and_then(|id| operations.get(owner, id))
        .map_err(ToolError::Model)?;
    if let Err(status) = stop(&op) {
        let mut result = CallToolResult::error(vec![ContentBlock::text(format!(
            "operation {} already ended ({}): nothing to cancel. sluice_result {{\"operation\":\"{}\"}} gives its result.",
            op.id,
            status.as_str(),
            op.id
        ))]);
        result.meta = Some(with_meta(None, OPERATION, op.meta()));
        return Ok(ToolAnswer::Made(result));
    }
    Ok(answer(&op))
}
