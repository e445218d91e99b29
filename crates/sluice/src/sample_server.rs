//! A small MCP server built into sluice (`sluice sample-server`), so that
//! `sluice demo` and the tests run with nothing else installed.
//!
//! With a [`Ledger`] ([`SampleServer::with_ledger`]) it also offers tools for
//! sluice's own tests (`lookup`) and records what it was asked, so a test
//! run in memory ([`crate::testing`]) can count real upstream calls.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    GetPromptRequestParams, GetPromptResponse, GetPromptResult, JsonObject, ListPromptsResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    Prompt, PromptArgument, PromptMessage, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, Resource, ResourceContents, Role, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ServerHandler, ServiceExt};
use serde_json::{Value, json};

/// The sample server.
#[derive(Debug, Default, Clone)]
pub struct SampleServer {
    /// Where the test tools record their calls; `None` (no test tools) for
    /// `sluice sample-server` and the demo.
    ledger: Option<Arc<Ledger>>,
}

impl SampleServer {
    /// The sample server with the test tools, recording into `ledger`.
    pub fn with_ledger(ledger: Arc<Ledger>) -> Self {
        Self {
            ledger: Some(ledger),
        }
    }
}

/// What the sample server did for a test: the real calls of `lookup`, how
/// each `slow_task` ended, and a switch that makes `lookup` fail.
#[derive(Debug, Default)]
pub struct Ledger {
    lookups: Mutex<Vec<Value>>,
    slow_tasks: Mutex<Vec<&'static str>>,
    failing: AtomicBool,
}

impl Ledger {
    /// The keys `lookup` was really called with, in order.
    pub fn lookups(&self) -> Vec<Value> {
        lock(&self.lookups).clone()
    }

    /// How each `slow_task` ended (`completed` or `cancelled`), in order.
    pub fn slow_tasks(&self) -> Vec<&'static str> {
        lock(&self.slow_tasks).clone()
    }

    /// From now on every `lookup` answers with an error result (`true`), or
    /// as asked (`false`).
    pub fn fail_lookups(&self, failing: bool) {
        self.failing.store(failing, Ordering::Relaxed);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

const README: &str = "sample://readme";

fn schema(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => unreachable!("schemas are objects"),
    }
}

fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "echo",
            "Returns the text it is given.",
            schema(
                json!({"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}),
            ),
        ),
        Tool::new(
            "inventory",
            "Lists items of a warehouse inventory as JSON (id, name, category, price, stock).",
            schema(json!({"type":"object","properties":{
                "count":{"type":"integer","minimum":0,"description":"how many items (default 20)"},
                "category":{"type":"string","description":"only items of this category"}}})),
        ),
        Tool::new(
            "slow_task",
            "Works for a while, reporting progress every quarter second (unless quiet).",
            schema(json!({"type":"object","properties":{
                "seconds":{"type":"number","minimum":0},
                "quiet":{"type":"boolean","description":"report no progress"}}})),
        ),
    ]
}

/// The tools only a server with a [`Ledger`] lists.
fn test_tools() -> Vec<Tool> {
    let mut lookup = Tool::new(
        "lookup",
        "Looks `key` up slowly: waits `sleep_s` (default 0), records the call, and returns {key, call, pad} (call = the real calls so far; pad = `pad` characters); `fail` returns an error result.",
        schema(json!({"type":"object","properties":{
            "key":{},
            "sleep_s":{"type":"number","minimum":0},
            "fail":{"type":"boolean"},
            "pad":{"type":"integer","minimum":0}}})),
    );
    lookup.annotations = Some(
        rmcp::model::ToolAnnotations::new()
            .read_only(true)
            .idempotent(true),
    );
    vec![lookup]
}

/// The most `pad` characters `lookup` returns (64 MiB).
const MAX_PAD: u64 = 64 << 20;

const CATEGORIES: [&str; 4] = ["tools", "garden", "kitchen", "toys"];
const NAMES: [&str; 8] = [
    "hammer", "rake", "kettle", "kite", "wrench", "hose", "whisk", "yo-yo",
];

/// `count` inventory items, the same every time.
pub fn inventory(count: usize, category: Option<&str>) -> Value {
    let items: Vec<Value> = (0..)
        .map(|i: usize| {
            json!({
                "id": format!("SKU-{:05}", i + 1),
                "name": format!("{} #{}", NAMES[i % NAMES.len()], i / NAMES.len() + 1),
                "category": CATEGORIES[i % CATEGORIES.len()],
                "price": ((i * 37) % 5000) as f64 / 100.0 + 1.0,
                "stock": (i * 13) % 120,
            })
        })
        .filter(|item| category.is_none_or(|c| item["category"] == c))
        .take(count)
        .collect();
    json!({ "warehouse": "north", "items": items })
}

fn text(s: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(s.into())])
}

impl ServerHandler for SampleServer {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_prompts()
                .build(),
        );
        info.server_info =
            rmcp::model::Implementation::new("sluice-sample", env!("CARGO_PKG_VERSION"));
        info.instructions = Some("A sample warehouse server for trying sluice.".into());
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut listed = tools();
        if self.ledger.is_some() {
            listed.extend(test_tools());
        }
        Ok(ListToolsResult::with_all_items(listed))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let result = match request.name.as_ref() {
            "echo" => {
                let Some(t) = args.get("text").and_then(Value::as_str) else {
                    return Ok(CallToolResult::error(vec![ContentBlock::text(
                        "echo needs a string argument `text`",
                    )])
                    .into());
                };
                text(t)
            }
            "inventory" => {
                let count = args.get("count").and_then(Value::as_u64).unwrap_or(20) as usize;
                let category = args.get("category").and_then(Value::as_str);
                text(inventory(count, category).to_string())
            }
            "slow_task" => {
                let seconds = args
                    .get("seconds")
                    .and_then(Value::as_f64)
                    .unwrap_or(1.0)
                    .clamp(0.0, 600.0);
                let steps = (seconds * 4.0).ceil() as u32;
                let quiet = args.get("quiet").and_then(Value::as_bool) == Some(true);
                let token = context.meta.get_progress_token().filter(|_| !quiet);
                let ended = |how: &'static str| {
                    if let Some(ledger) = &self.ledger {
                        lock(&ledger.slow_tasks).push(how);
                    }
                };
                for step in 1..=steps {
                    tokio::select! {
                        () = context.ct.cancelled() => {
                            ended("cancelled");
                            return Ok(text("cancelled").into());
                        }
                        () = tokio::time::sleep(Duration::from_millis(250)) => {}
                    }
                    if let Some(token) = &token {
                        let mut p = ProgressNotificationParam::new(token.clone(), f64::from(step));
                        p.total = Some(f64::from(steps));
                        p.message = Some(format!("step {step} of {steps}"));
                        let _ = context.peer.notify_progress(p).await;
                    }
                }
                ended("completed");
                text(format!("done after {seconds} s"))
            }
            "lookup" if self.ledger.is_some() => {
                let ledger = self.ledger.as_ref().expect("matched");
                let key = args.get("key").cloned().unwrap_or(Value::Null);
                let sleep_s = args
                    .get("sleep_s")
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0)
                    .clamp(0.0, 600.0);
                tokio::select! {
                    () = context.ct.cancelled() => return Ok(text("cancelled").into()),
                    () = tokio::time::sleep(Duration::from_secs_f64(sleep_s)) => {}
                }
                let call = {
                    let mut lookups = lock(&ledger.lookups);
                    lookups.push(key.clone());
                    lookups.len()
                };
                let fail = args.get("fail").and_then(Value::as_bool) == Some(true)
                    || ledger.failing.load(Ordering::Relaxed);
                if fail {
                    return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                        "lookup of {key} failed on purpose (call {call})"
                    ))])
                    .into());
                }
                let pad = args
                    .get("pad")
                    .and_then(Value::as_u64)
                    .unwrap_or(0)
                    .min(MAX_PAD) as usize;
                text(json!({"key": key, "call": call, "pad": "x".repeat(pad)}).to_string())
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool `{other}`"),
                    None,
                ));
            }
        };
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let mut resource = Resource::new(README, "readme");
        resource.mime_type = Some("text/plain".into());
        Ok(ListResourcesResult::with_all_items(vec![resource]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        if request.uri != README {
            return Err(ErrorData::resource_not_found(
                format!("no resource {}", request.uri),
                None,
            ));
        }
        Ok(ReadResourceResult::new(vec![ResourceContents::text(
            "This warehouse sells hammers, rakes, kettles and kites.",
            README,
        )])
        .into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(vec![Prompt::new(
            "restock",
            Some("Ask which items of a category need restocking."),
            Some(vec![PromptArgument::new("category").with_required(true)]),
        )]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        if request.name != "restock" {
            return Err(ErrorData::invalid_params(
                format!("unknown prompt `{}`", request.name),
                None,
            ));
        }
        let category = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("category"))
            .and_then(Value::as_str)
            .unwrap_or("tools");
        Ok(GetPromptResult::new(vec![PromptMessage::new_text(
            Role::User,
            format!("Which {category} items have less than 10 in stock?"),
        )])
        .into())
    }
}

/// Runs the sample server on stdin/stdout, or over Streamable HTTP at
/// `http://ADDR/mcp` (printing `sample-server: serving http://ADDR/mcp` on
/// stderr once it listens).
pub async fn run(listen: Option<std::net::SocketAddr>) -> anyhow::Result<()> {
    let Some(addr) = listen else {
        let running = SampleServer::default()
            .serve(rmcp::transport::stdio())
            .await?;
        running.waiting().await?;
        return Ok(());
    };
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
    let service = StreamableHttpService::new(
        || Ok(SampleServer::default()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    eprintln!(
        "sample-server: serving http://{}/mcp",
        listener.local_addr()?
    );
    // As sluice's own listener does: no Nagle delay on keep-alive requests.
    use axum::serve::ListenerExt as _;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router).await?;
    Ok(())
}
