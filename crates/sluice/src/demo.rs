//! `sluice demo`: the built-in walkthrough. It runs sluice's own sample
//! server as an upstream (in memory: a task, not a process), puts the
//! gateway in front of it, and drives a scripted client session through
//! the gateway, printing what a model would see. Nothing but the sluice
//! binary is needed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation,
    ProgressNotificationParam, ReadResourceRequestParams,
};
use rmcp::service::{NotificationContext, RoleClient};
use rmcp::{ClientHandler, ServiceExt};
use sluice_core::config::{Config, ProtocolChoice, UpstreamSpec, UpstreamTransport};
use tokio_util::sync::CancellationToken;

use crate::gateway::Gateway;
use crate::sample_server::SampleServer;
use crate::upstream::InMemory;

/// The demo's client: it prints progress as it arrives.
#[derive(Clone, Default)]
struct DemoClient {
    progress: Arc<Mutex<Vec<String>>>,
}

impl ClientHandler for DemoClient {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let line = format!(
            "    progress {}/{} {}",
            params.progress,
            params.total.unwrap_or_default(),
            params.message.unwrap_or_default()
        );
        println!("{line}");
        self.progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(line);
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("sluice-demo-client", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// A tool call with JSON arguments.
fn params(tool: &str, arguments: serde_json::Value) -> CallToolRequestParams {
    CallToolRequestParams::new(tool.to_owned())
        .with_arguments(arguments.as_object().cloned().unwrap_or_default())
}

fn heading(text: &str) {
    println!("\n== {text}");
}

fn model_sees(result: &impl serde::Serialize) {
    let json = serde_json::to_string_pretty(result).unwrap_or_default();
    for line in json.lines() {
        println!("    {line}");
    }
}

/// Prints the text blocks of a result (long lines cut), and its `_meta`.
fn model_sees_text(result: &rmcp::model::CallToolResult) {
    for block in &result.content {
        match block.as_text() {
            Some(t) => {
                // Every line (up to 14), each cut at 300 characters: the
                // summary's next steps stay visible.
                let chars = t.text.chars().count();
                let mut cut = false;
                for (i, line) in t.text.lines().enumerate() {
                    if i == 14 {
                        cut = true;
                        break;
                    }
                    let shown: String = line.chars().take(300).collect();
                    cut |= shown.len() < line.len();
                    println!("    {shown}");
                }
                if cut {
                    println!(
                        "    … ({chars} characters in all; cut here by the demo, not by sluice)"
                    );
                }
            }
            None => println!("    {}", serde_json::to_string(block).unwrap_or_default()),
        }
    }
    if let Some(meta) = &result.meta {
        println!(
            "    _meta: {}",
            serde_json::to_string(&meta.0).unwrap_or_default()
        );
    }
}

/// Runs the walkthrough.
pub async fn run() -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let config = Config {
        upstreams: vec![UpstreamSpec {
            name: "warehouse".into(),
            transport: UpstreamTransport::Stdio {
                command: exe.to_string_lossy().into_owned(),
                args: vec!["sample-server".into()],
                env: BTreeMap::new(),
                cwd: None,
            },
            protocol: ProtocolChoice::Auto,
            // As `[upstreams.warehouse.tools.inventory] cache = { ttl_s = 600 }`.
            tools: BTreeMap::from([(
                "inventory".to_owned(),
                sluice_core::config::ToolSettings {
                    cache: Some(sluice_core::cache::CacheFields {
                        ttl_s: Some(600.0),
                        ..Default::default()
                    }),
                    cache_policy: Some(sluice_core::cache::CachePolicy {
                        ttl: std::time::Duration::from_secs(600),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            )]),
        }],
        budget: Default::default(),
        store: Default::default(),
        query: Default::default(),
        operations: Default::default(),
        cache: Default::default(),
        http: Default::default(),
        limits: Default::default(),
        auth: None,
        admin: None,
        admin_principals: None,
        tls: None,
    };
    println!("sluice demo: a sample MCP server (`sluice sample-server`) behind the gateway,");
    println!("and a client session through it. Everything below is what a model would see.");

    let gateway = Gateway::new(&config);
    // The upstream stands for `sluice sample-server`, served in memory.
    for upstream in gateway.upstreams() {
        upstream.serve_in_memory(InMemory::new(SampleServer::default()));
    }
    gateway.begin_and_wait(&Default::default()).await;
    let (client_io, server_io) = tokio::io::duplex(1 << 20);
    let shutdown = CancellationToken::new();
    let server = tokio::spawn({
        let (reader, writer) = tokio::io::split(server_io);
        crate::downstream::stdio::serve_connection(
            gateway.clone(),
            reader,
            writer,
            shutdown.clone(),
        )
    });
    let client = DemoClient::default().serve(client_io).await?;

    heading("tools/list: the upstream's tools, unchanged (one upstream, so no prefix)");
    for tool in client.list_all_tools().await? {
        println!(
            "    {:<10} {}",
            tool.name,
            tool.description.as_deref().unwrap_or_default()
        );
    }

    heading("tools/call echo {\"text\":\"hello through sluice\"}: a small result passes untouched");
    let result = client
        .call_tool(params(
            "echo",
            serde_json::json!({"text": "hello through sluice"}),
        ))
        .await?;
    model_sees(&result);

    heading("tools/call inventory {\"count\":2}");
    let result = client
        .call_tool(params("inventory", serde_json::json!({"count": 2})))
        .await?;
    model_sees(&result);

    heading(
        "tools/call inventory {\"count\":2} again: `inventory` is cached (config), so the upstream is not called",
    );
    let again = client
        .call_tool(params("inventory", serde_json::json!({"count": 2})))
        .await?;
    model_sees_text(&again);

    heading(
        "tools/call inventory {\"count\":20000}: 1.6 MB, far over the budget: stored, and summarised",
    );
    let stored = client
        .call_tool(params("inventory", serde_json::json!({"count": 20000})))
        .await?;
    model_sees_text(&stored);
    let handle = stored
        .meta
        .as_ref()
        .and_then(|m| m.0.get(crate::contract::meta::STORED))
        .and_then(|s| s["handle"].as_str())
        .unwrap_or_default()
        .to_owned();

    heading(&format!(
        "tools/call sluice_read {{\"handle\":\"{handle}\",\"page\":2}}: whole items, a header, a cursor"
    ));
    let page = client
        .call_tool(params(
            "sluice_read",
            serde_json::json!({"handle": handle, "page": 2}),
        ))
        .await?;
    model_sees_text(&page);

    heading(&format!(
        "tools/call sluice_search {{\"handle\":\"{handle}\",\"pattern\":\"kettle #5\"}}: matches with their JSON paths"
    ));
    let found = client
        .call_tool(params(
            "sluice_search",
            serde_json::json!({"handle": handle, "pattern": "kettle #5", "max_matches": 5}),
        ))
        .await?;
    model_sees_text(&found);

    let filter = "[.items[] | select(.category == \"toys\")] | length";
    heading(&format!(
        "tools/call sluice_query {{\"handle\":\"{handle}\",\"filter\":{filter:?}}}: jq, in a worker process"
    ));
    let counted = client
        .call_tool(params(
            "sluice_query",
            serde_json::json!({"handle": handle, "filter": filter}),
        ))
        .await?;
    model_sees_text(&counted);

    heading("tools/call slow_task {\"seconds\":1}: progress flows back through the gateway");
    let result = client
        .call_tool(params("slow_task", serde_json::json!({"seconds": 1})))
        .await?;
    model_sees(&result);

    heading(
        "tools/call slow_task {\"seconds\":2,\"_timeout_s\":0.6}: still running at its timeout, it goes on as an operation",
    );
    let started = client
        .call_tool(params(
            "slow_task",
            serde_json::json!({"seconds": 2, "_timeout_s": 0.6}),
        ))
        .await?;
    model_sees_text(&started);
    let operation = started
        .meta
        .as_ref()
        .and_then(|m| m.0.get(crate::contract::meta::OPERATION))
        .and_then(|o| o.get("id"))
        .and_then(|id| id.as_str())
        .unwrap_or_default()
        .to_owned();
    heading(&format!(
        "tools/call sluice_result {{\"operation\":\"{operation}\",\"wait_s\":30}}: returns when it ends"
    ));
    let ended = client
        .call_tool(params(
            "sluice_result",
            serde_json::json!({"operation": operation, "wait_s": 30}),
        ))
        .await?;
    model_sees_text(&ended);

    heading("resources/read sample://readme");
    let read = client
        .read_resource(ReadResourceRequestParams::new("sample://readme"))
        .await?;
    model_sees(&read);

    heading("tools/call nosuch: a clear error");
    match client.call_tool(CallToolRequestParams::new("nosuch")).await {
        Ok(result) => model_sees(&result),
        Err(e) => println!("    {e}"),
    }

    client.cancel().await?;
    shutdown.cancel();
    let _ = server.await;
    gateway.shutdown().await;
    println!(
        "\nTo put sluice in front of your own server:\n    claude mcp add NAME -- sluice -- <server command>"
    );
    Ok(())
}
