//! `sluice_cancel {operation}`: stops an operation (its upstream request is
//! cancelled) and answers with what it reported so far.

use rmcp::model::{CallToolResult, JsonObject, Tool};
use serde_json::json;
use sluice_core::store::Owner;

use super::{ToolError, object};
use crate::contract::tool::CANCEL;
use crate::operations::Operations;

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

/// Runs `sluice_cancel`.
pub(super) fn run(
    operations: &Operations,
    arguments: Option<JsonObject>,
    owner: &Owner,
) -> Result<CallToolResult, ToolError> {
    operations.cancel(arguments, owner)
}
