//! `sluice call`: one tool call through the gateway, printed as JSON.

use rmcp::model::{CallToolRequestParams, CallToolResponse, RequestId};
use sluice_core::config::Config;
use tokio_util::sync::CancellationToken;

use crate::caller::Caller;
use crate::gateway::Gateway;

/// Calls `tool` with `arguments` and prints the result; returns whether the
/// call succeeded (not an error result).
pub async fn run(
    config: Config,
    tool: String,
    arguments: serde_json::Map<String, serde_json::Value>,
) -> anyhow::Result<bool> {
    let gateway = Gateway::open(&config)?;
    gateway.begin_and_wait(&Default::default()).await;
    let tools = gateway.list_tools().await;
    if let Ok(tools) = &tools
        && !tools.iter().any(|t| t.name == tool)
    {
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        gateway.shutdown().await;
        anyhow::bail!("no tool `{tool}`; the upstream has: {}", names.join(", "));
    }
    let caller = Caller {
        session: None,
        request: RequestId::Number(0),
        meta: Default::default(),
        ct: CancellationToken::new(),
        era: crate::era::Era::Stateless,
        owner: sluice_core::store::Owner::Anonymous,
        quota: crate::caller::Quota::Owner(sluice_core::store::Owner::Anonymous),
        client: None,
        partial: None,
        tasks: false,
        sent_request: None,
        stream: None,
        stream_asks: false,
        link: None,
    };
    let params = CallToolRequestParams::new(tool).with_arguments(arguments);
    let mut result = gateway.call_tool(params, &caller).await;
    // A one-off call has nobody to come back later: wait for an operation.
    while let Ok(CallToolResponse::Complete(r)) = &result {
        let Some(id) = r
            .meta
            .as_ref()
            .and_then(|m| m.0.get(crate::operations::META))
            .filter(|op| op["status"] == "running")
            .and_then(|op| op["id"].as_str())
        else {
            break;
        };
        let wait = serde_json::json!({"operation": id, "wait_s": 60});
        let params = CallToolRequestParams::new(crate::contract::tool::RESULT)
            .with_arguments(wait.as_object().cloned().unwrap_or_default());
        result = gateway.call_tool(params, &caller).await;
    }
    gateway.shutdown().await;
    if let Ok(CallToolResponse::Complete(r)) = &result
        && let Some(handle) = crate::govern::stored_handle(r)
        && config.store.backend == sluice_core::store::StoreBackend::Memory
    {
        eprintln!("{}", memory_note(handle));
    }
    let (json, ok) = match result {
        Ok(CallToolResponse::Complete(mut r)) => {
            // Printed for a person: the 2025-11-25 shape, without envelope fields.
            r.result_type = None;
            let ok = r.is_error != Some(true);
            (serde_json::to_string_pretty(&r)?, ok)
        }
        Ok(CallToolResponse::InputRequired(r)) => (serde_json::to_string_pretty(&r)?, true),
        Ok(CallToolResponse::Task(r)) => (serde_json::to_string_pretty(&r)?, true),
        Ok(_) => anyhow::bail!("the upstream answered with a result sluice does not know"),
        Err(e) => anyhow::bail!("the call failed: {}", e.message),
    };
    println!("{json}");
    Ok(ok)
}

/// Said on stderr when `sluice call` stored its result in memory: the
/// answer's next steps name a handle that ends with the command.
fn memory_note(handle: &str) -> String {
    format!(
        "sluice: the result was over the budget, so sluice stored it (as {handle}) and printed what stands for it; the memory store ends with this command. To read it in later calls, keep results on disk: `[store] backend = \"disk\"` in a --config file, then `sluice call --config FILE --tool sluice_read --args '{{\"handle\":\"h_…\"}}'`."
    )
}
