//! An in-process test harness: the gateway, one client session and the
//! sample server as its upstream, all in one tokio runtime and wired by
//! in-memory pipes (as `sluice demo` wires its client). No process is
//! started, so a test runs in milliseconds, and under
//! `#[tokio::test(start_paused = true)]` time moves only when every task
//! waits: store and cache lifetimes, operation timeouts, `wait_s` and the
//! sample server's own sleeps then take their exact durations, none of
//! them real.
//!
//! ```ignore
//! let h = Harness::new()
//!     .toml("[store]\nttl_s = 3\n[upstreams.sample.tools.lookup]\ncache = { ttl_s = 600 }")
//!     .start()
//!     .await;
//! let answer = h.call("lookup", json!({"key": "k"})).await;
//! tokio::time::sleep(Duration::from_secs(4)).await; // instant, exact
//! assert_eq!(h.ledger().lookups().len(), 1);
//! ```
//!
//! It is public (the integration tests in `tests/it/` are another crate)
//! but hidden from the docs rather than behind a cargo feature: it is a thin
//! layer over what the binary has anyway (the sample server and
//! [`crate::upstream::InMemory`], which `sluice demo` uses), and a feature
//! turned on only for tests would make `cargo build` and `cargo test`
//! compile this crate twice, with different features.
//!
//! Timing through it holds because sluice reads its clocks from tokio
//! ([`crate::clock`]). What still runs outside the runtime does not follow
//! virtual time: `sluice_query`'s jq workers are processes, so a query's
//! time limit would pass at once while the runtime waits for one; test
//! queries against the binary (`tests/it/query.rs`).

use std::path::Path;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    LoggingMessageNotificationParam, ProgressNotificationParam,
};
use rmcp::service::{NotificationContext, RoleClient, RunningService, ServiceError};
use rmcp::{ClientHandler, ServiceExt as _};
use serde_json::Value;
use sluice_core::config::Config;
use tokio_util::sync::CancellationToken;

use crate::gateway::Gateway;
use crate::sample_server::{Ledger, SampleServer};
use crate::upstream::InMemory;

/// The name of the harness's one upstream (the sample server): its tools
/// have no prefix, and its settings are `[upstreams.sample.tools.TOOL]`.
pub const UPSTREAM: &str = "sample";

/// A config edit, applied after the TOML is read.
type Edit = Box<dyn FnOnce(&mut Config)>;

/// How to build a gateway in front of the sample server, fluently:
/// `Harness::new().toml(…).config(|c| …).start().await`.
#[must_use = "a harness does nothing until it is started"]
pub struct Harness {
    toml: String,
    edits: Vec<Edit>,
    client_name: String,
    capabilities: ClientCapabilities,
    /// Upstreams served by another server than the sample, by name.
    servers: Vec<(String, InMemory)>,
}

impl Default for Harness {
    fn default() -> Self {
        Self::new()
    }
}

impl Harness {
    /// The sample server (with its test tools) behind a gateway with the
    /// default settings, and a client called `sluice-tests`.
    pub fn new() -> Self {
        Self {
            toml: String::new(),
            edits: Vec::new(),
            client_name: "sluice-tests".to_owned(),
            servers: Vec::new(),
            capabilities: ClientCapabilities::default(),
        }
    }

    /// Adds `text` to the configuration, as a user writes it (`[store]`,
    /// `[operations]`, `[upstreams.sample.tools.lookup] cache = {…}`): read
    /// and checked as sluice reads a file, after the upstream's own table.
    pub fn toml(mut self, text: &str) -> Self {
        self.toml.push_str(text);
        self.toml.push('\n');
        self
    }

    /// Edits the configuration once it is read (for what TOML cannot say
    /// briefly, or to bypass its checks).
    pub fn config(mut self, edit: impl FnOnce(&mut Config) + 'static) -> Self {
        self.edits.push(Box::new(edit));
        self
    }

    /// The client's `clientInfo.name` (budgets have presets by client).
    pub fn client_name(mut self, name: &str) -> Self {
        self.client_name = name.to_owned();
        self
    }

    /// The client's capabilities (e.g. the tasks extension).
    pub fn capabilities(mut self, capabilities: ClientCapabilities) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// Serves upstream `name` (configured by [`Harness::toml`], its
    /// command whatever) with `server` instead of the sample server: a
    /// server written for one test (one that never answers a list, say).
    pub fn server<S>(mut self, name: &str, server: S) -> Self
    where
        S: rmcp::ServerHandler + Clone + Send + Sync + 'static,
    {
        self.servers.push((name.to_owned(), InMemory::new(server)));
        self
    }

    /// The configuration the harness runs with; panics if the TOML is not
    /// a valid configuration (the message says why).
    fn built_config(&mut self) -> Config {
        // The upstream stands for `sluice sample-server`; it is served in
        // memory whatever the spec says.
        let text = format!(
            "[upstreams.{UPSTREAM}]\ncommand = \"sluice\"\nargs = [\"sample-server\"]\n\n{}",
            self.toml
        );
        let mut config = Config::parse(&text, Path::new("harness.toml"))
            .unwrap_or_else(|e| panic!("the harness's configuration: {e}\n{text}"));
        for edit in self.edits.drain(..) {
            edit(&mut config);
        }
        config
    }

    /// Starts the gateway and connects the client (its `initialize` starts
    /// the upstream, as a real client's does).
    ///
    /// # Panics
    /// If the configuration is invalid or the client's handshake fails.
    pub async fn start(mut self) -> Running {
        let config = self.built_config();
        let gateway = Gateway::new(&config);
        let ledger = Arc::new(Ledger::default());
        for upstream in gateway.upstreams() {
            let own = self
                .servers
                .iter()
                .find(|(name, _)| name == upstream.name());
            upstream.serve_in_memory(match own {
                Some((_, server)) => server.clone(),
                None => InMemory::new(SampleServer::with_ledger(ledger.clone())),
            });
        }
        let shutdown = CancellationToken::new();
        let mut running = Running {
            gateway,
            ledger,
            shutdown,
            client: None,
            inbox: Arc::default(),
            client_name: self.client_name,
            capabilities: self.capabilities,
        };
        let (client, inbox) = running.connect().await;
        running.client = Some(client);
        running.inbox = inbox;
        running
    }
}

/// What the harness's client was sent besides responses.
#[derive(Debug, Default)]
pub struct Inbox {
    /// Progress notifications, in order.
    pub progress: Vec<ProgressNotificationParam>,
    /// Log messages, in order.
    pub logs: Vec<LoggingMessageNotificationParam>,
}

/// The harness's MCP client: it records notifications.
#[derive(Clone)]
pub struct Recorder {
    inbox: Arc<Mutex<Inbox>>,
    name: String,
    capabilities: ClientCapabilities,
}

impl ClientHandler for Recorder {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        lock(&self.inbox).progress.push(params);
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        lock(&self.inbox).logs.push(params);
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            self.capabilities.clone(),
            Implementation::new(self.name.clone(), "0"),
        )
    }
}

/// A client session connected in memory.
pub type Client = RunningService<RoleClient, Recorder>;

/// A started harness: the gateway, its upstream's ledger, and a client.
pub struct Running {
    gateway: Arc<Gateway>,
    ledger: Arc<Ledger>,
    shutdown: CancellationToken,
    client: Option<Client>,
    inbox: Arc<Mutex<Inbox>>,
    client_name: String,
    capabilities: ClientCapabilities,
}

impl Running {
    /// The gateway, for assertions on its store, cache and operations.
    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// What the sample server was asked (real upstream calls).
    pub fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    /// The client.
    pub fn client(&self) -> &Client {
        self.client.as_ref().expect("connected at start")
    }

    /// What the client was sent besides responses.
    pub fn inbox(&self) -> std::sync::MutexGuard<'_, Inbox> {
        lock(&self.inbox)
    }

    /// Another client session on the same gateway (its own owner of
    /// stored results and operations), with its inbox.
    pub async fn connect(&self) -> (Client, Arc<Mutex<Inbox>>) {
        let (client_io, server_io) = tokio::io::duplex(1 << 20);
        let (reader, writer) = tokio::io::split(server_io);
        tokio::spawn(crate::downstream::stdio::serve_connection(
            self.gateway.clone(),
            reader,
            writer,
            self.shutdown.clone(),
        ));
        let inbox = Arc::<Mutex<Inbox>>::default();
        let recorder = Recorder {
            inbox: inbox.clone(),
            name: self.client_name.clone(),
            capabilities: self.capabilities.clone(),
        };
        let client = recorder
            .serve(client_io)
            .await
            .unwrap_or_else(|e| panic!("the harness client's handshake: {e}"));
        (client, inbox)
    }

    /// Calls `tool` with `arguments` (a JSON object) as the client.
    ///
    /// # Panics
    /// If the call fails at the protocol level (an error *result* is
    /// returned: sluice answers the model's mistakes with those).
    pub async fn call(&self, tool: &str, arguments: Value) -> CallToolResult {
        call(self.client(), tool, arguments)
            .await
            .unwrap_or_else(|e| panic!("{tool}: {e}"))
    }

    /// Every page of the stored result `handle`, following `next_cursor`
    /// from its first page.
    ///
    /// # Panics
    /// If a page is an error, or the pages never end.
    pub async fn read_all(&self, handle: &str) -> Vec<CallToolResult> {
        read_all(self.client(), handle).await
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Calls `tool` with `arguments` (a JSON object) as `client`.
pub async fn call(
    client: &Client,
    tool: &str,
    arguments: Value,
) -> Result<CallToolResult, ServiceError> {
    let arguments = match arguments {
        Value::Object(map) => map,
        Value::Null => Default::default(),
        other => panic!("arguments must be a JSON object, not {other}"),
    };
    client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments))
        .await
}

/// Every page of the stored result `handle` as `client` reads it.
///
/// # Panics
/// If a page is an error, or the pages never end.
pub async fn read_all(client: &Client, handle: &str) -> Vec<CallToolResult> {
    let mut request = serde_json::json!({"handle": handle});
    let mut pages = Vec::new();
    loop {
        let page = call(client, crate::contract::tool::READ, request)
            .await
            .unwrap_or_else(|e| panic!("sluice_read: {e}"));
        assert_ne!(page.is_error, Some(true), "sluice_read: {page:?}");
        let next = page
            .meta
            .as_ref()
            .and_then(|m| m.0.get(crate::contract::meta::PAGE))
            .and_then(|p| p.get("next_cursor"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        pages.push(page);
        match next {
            Some(cursor) => request = serde_json::json!({"cursor": cursor}),
            None => return pages,
        }
        assert!(pages.len() < 100_000, "the pages of {handle} never end");
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
