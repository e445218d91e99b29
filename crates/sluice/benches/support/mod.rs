//! What the end-to-end benches share.
#![allow(dead_code)] // each bench uses its part

use rmcp::model::CallToolRequestParams;

/// The value after `name` on the command line, or `default`.
pub fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_owned())
}

/// A tool call with JSON arguments.
pub fn params(tool: &str, args: serde_json::Value) -> CallToolRequestParams {
    CallToolRequestParams::new(tool.to_owned()).with_arguments(args.as_object().cloned().unwrap())
}
