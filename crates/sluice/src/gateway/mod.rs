//! The gateway: one namespace over several upstreams.
//!
//! Every client request is routed here: list requests are answered with
//! the union of the upstreams' lists (whole, never paged), named requests
//! (tools, prompts) go to the upstream their name says, resource requests
//! to the upstream that listed the URI. Results come back unchanged.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::FutureExt as _;
use futures::future::{BoxFuture, Shared};

use rmcp::model::{
    CallToolRequest, CallToolRequestMethod, CallToolRequestParams, CallToolResponse, ClientRequest,
    CompleteRequest, CompleteRequestMethod, CompleteRequestParams, CompleteResult,
    ConstString as _, ErrorData, GetPromptRequest, GetPromptRequestMethod, GetPromptRequestParams,
    GetPromptResponse, GetTaskResult, Implementation, ListPromptsRequest,
    ListResourceTemplatesRequest, ListResourcesRequest, ListToolsRequest, PaginatedRequestParams,
    Prompt, ReadResourceRequest, ReadResourceRequestMethod, ReadResourceRequestParams,
    ReadResourceResponse, Reference, RequestId, RequestMetaObject, Resource, ResourceTemplate,
    ServerCapabilities, ServerConfig, ServerResult, SetLevelRequest, SetLevelRequestParams,
    SubscribeRequest, SubscribeRequestParams, Tool, UnsubscribeRequest, UnsubscribeRequestParams,
};
use sluice_core::config::Config;
use sluice_core::naming::Namer;
use tokio_util::sync::CancellationToken;

mod call;
mod forwarding;
pub mod input;
mod lists;
mod named_params;
mod routes;
mod task_call;

pub use crate::caller::Caller;
pub use call::Relayed;
use call::call_error;
use forwarding::{
    Request, for_caller, forwarded_meta, forwarded_params, in_clients_era, in_era_decoded,
};
use lists::{declares, unexpected, warn_unknown_tool_settings};
pub use named_params::NamedParams;
pub use routes::RoutedAnswer;

use crate::govern::{DEFAULT_PREVIEW_DEPTH, Governed, GovernedRead, Governor, Policy, RESULT_URI};
use crate::hub::{FirstClient, Hub, Notice, RouteGuard, SessionId};
use crate::upstream::{CallError, Upstream};
use sluice_core::config::Mode;
use sluice_core::store::Owner;

/// A listed tool's input schema, with what is found in it once per listing
/// rather than on every call.
struct ListedSchema {
    /// As its upstream listed it (without sluice's own arguments).
    schema: Arc<rmcp::model::JsonObject>,
    /// Its arguments that narrow a result ([`Policy::narrowing`]).
    narrowing: Arc<[String]>,
}

/// The gateway.
pub struct Gateway {
    upstreams: Vec<Arc<Upstream>>,
    /// `[limits]`: the largest message read in any direction.
    limits: sluice_core::limits::MessageLimits,
    /// The requests each HTTP client has answered at once (`[limits]
    /// max_requests_in_flight`).
    in_flight: crate::in_flight::InFlight,
    /// How many requests each client may send a minute (`[limits]
    /// requests_per_minute`), if limited.
    rate: Option<crate::rate::Rate>,
    namer: Namer,
    hub: Arc<Hub>,
    /// Which upstream listed which resource URI (for routing reads).
    resource_owners: Mutex<HashMap<String, String>>,
    /// URI template prefixes (up to the first `{`) and their upstream.
    template_owners: Mutex<Vec<(String, String)>>,
    /// The start of every upstream, once begun.
    starting: Mutex<Option<Shared<BoxFuture<'static, ()>>>>,
    /// What sluice declares to clients, as of the last start.
    info: RwLock<ServerConfig>,
    /// Budgets and stored results.
    governor: Governor,
    /// Calls that outlived their timeout.
    operations: crate::operations::Operations,
    /// The input schema of every listed tool, by exposed name (for the
    /// arguments that narrow a result).
    input_schemas: Mutex<HashMap<String, ListedSchema>>,
    /// The listed tools whose schemas mark arguments with `x-mcp-header`
    /// (found once per listing, not per call: the HTTP fast path asks).
    param_header_tools: Mutex<std::collections::HashSet<String>>,
    /// Tools (by exposed name) that refused a plain call: they are called
    /// as upstream tasks ([`task_call`]).
    task_tools: Mutex<std::collections::HashSet<String>>,
    /// Results of idempotent tools.
    cache: crate::cache::ResultCache,
    /// Tools (by exposed name) annotated read-only and idempotent: cached
    /// when `[cache] annotated = true`.
    annotated_idempotent: Mutex<std::collections::HashSet<String>>,
    /// Every call's timeout, kept by one timer.
    deadlines: crate::deadlines::Deadlines,
}

/// How long a client's `initialize` waits for the upstreams to start; past
/// it sluice answers anyway and announces the tools when they come.
/// The longest tool name sluice forwards, in bytes (MCP tool names are 1 to
/// 128 characters; a longer one is unknown everywhere).
const MAX_TOOL_NAME_BYTES: usize = 512;

const STARTUP_WAIT: Duration = Duration::from_secs(20);

impl Gateway {
    /// A wait of `after` from now, kept with every call's timeout by one
    /// timer ([`crate::deadlines`]).
    pub fn deadline(&self, after: Duration) -> crate::deadlines::Deadline {
        self.deadlines.after(after)
    }

    /// A gateway over the configured upstreams (nothing started yet).
    pub fn new(config: &Config) -> Arc<Self> {
        Self::with_governor(config, Governor::new(config))
    }

    /// The gateway of `config`, its `[store]` opened (a disk store, its
    /// cursor key): what sluice's commands serve with.
    pub fn open(config: &Config) -> Result<Arc<Self>, crate::state::StateError> {
        let mut state = crate::state::open(&config.store, config.cache.max_bytes)?;
        let (backing, asked) = (state.backing.take(), state.asked.take());
        Ok(Self::with_parts(
            config,
            Governor::with_state(config, state),
            backing,
            asked,
        ))
    }

    fn with_governor(config: &Config, governor: Governor) -> Arc<Self> {
        Self::with_parts(config, governor, None, None)
    }

    /// The gateway of `config`, with its governor, where its cache and
    /// operations keep what outlives memory, and the cancellations other
    /// instances ask of it, if any.
    fn with_parts(
        config: &Config,
        governor: Governor,
        backing: Option<crate::state::backing::Backing>,
        asked: Option<tokio::sync::mpsc::Receiver<String>>,
    ) -> Arc<Self> {
        // With `[auth]`, what an upstream sends about no call it names goes
        // to one principal's clients or to none (`Hub::whose`).
        let hub = Arc::new(match config.auth {
            Some(_) => Hub::by_principal(),
            None => Hub::default(),
        });
        let upstreams = config
            .upstreams
            .iter()
            .map(|spec| Upstream::new(spec.clone(), hub.clone(), config.limits))
            .collect::<Vec<_>>();
        let namer = Namer::new(upstreams.iter().map(|u| u.name().to_owned()));
        Arc::new(Self {
            upstreams,
            namer,
            hub,
            resource_owners: Mutex::default(),
            template_owners: Mutex::default(),
            starting: Mutex::new(None),
            info: RwLock::new(Self::everything_declared()),
            limits: config.limits,
            in_flight: crate::in_flight::InFlight::new(config.limits.max_requests_in_flight),
            rate: config
                .limits
                .requests_per_minute
                .map(crate::rate::Rate::new),
            governor,
            operations: crate::operations::Operations::new(
                config.operations,
                backing.clone(),
                asked,
            ),
            input_schemas: Mutex::default(),
            param_header_tools: Mutex::default(),
            task_tools: Mutex::default(),
            cache: crate::cache::ResultCache::new(config.cache).shared(backing),
            annotated_idempotent: Mutex::default(),
            deadlines: crate::deadlines::Deadlines::new(),
        })
    }

    /// Before the upstreams are known, sluice declares every capability it
    /// can forward.
    fn everything_declared() -> ServerConfig {
        let mut config = ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_prompts()
                .enable_prompts_list_changed()
                .enable_resources()
                .enable_resources_list_changed()
                .enable_resources_subscribe()
                .enable_completions()
                .enable_logging()
                .enable_tasks()
                .build(),
        );
        config.server_info = Implementation::new("sluice", env!("CARGO_PKG_VERSION"));
        config
    }

    /// Drops expired stored results every 30 s while the gateway lives
    /// (on a blocking thread where the backend writes files), and says
    /// once when the store starts failing and once when it recovers.
    ///
    /// The first sweep is 30 s after the start, not at once: a store opened
    /// has nothing expired to drop yet (the disk store drops it when it
    /// opens), and a sweep still running on a blocking thread when a
    /// one-shot `sluice call` ends would meet the runtime shutting down
    /// (the Redis store's deadline, a timer, then panics).
    fn spawn_store_sweeper(self: &Arc<Self>) {
        let gateway = Arc::downgrade(self);
        tokio::spawn(async move {
            let every = Duration::from_secs(30);
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            let mut failing = false;
            loop {
                tick.tick().await;
                let Some(gateway) = gateway.upgrade() else {
                    return;
                };
                let store = gateway.governor.store().clone();
                drop(gateway);
                let (purged, health) = crate::state::on_store(
                    &store,
                    |store| (store.purge_expired(), store.health()),
                    |why| (0, Err(format!("sweeping failed: {why}"))),
                )
                .await;
                if purged > 0 {
                    tracing::debug!("dropped {purged} expired stored results");
                }
                match health {
                    Err(why) if !failing => {
                        tracing::error!("the {} store is failing: {why}", store.backend());
                        failing = true;
                    }
                    Ok(()) if failing => {
                        tracing::info!("the {} store works again", store.backend());
                        failing = false;
                    }
                    _ => {}
                }
            }
        });
    }

    /// `[limits]`: the largest message read in any direction.
    pub fn limits(&self) -> sluice_core::limits::MessageLimits {
        self.limits
    }

    /// The requests each HTTP client has answered at once.
    pub fn in_flight(&self) -> &crate::in_flight::InFlight {
        &self.in_flight
    }

    /// How many requests each client may send a minute, if limited.
    pub fn rate(&self) -> Option<&crate::rate::Rate> {
        self.rate.as_ref()
    }

    /// Calls that outlived their timeout.
    pub fn operations(&self) -> &crate::operations::Operations {
        &self.operations
    }

    /// The cache of idempotent tools' results.
    pub fn cache(&self) -> &crate::cache::ResultCache {
        &self.cache
    }

    /// The governor (budgets and stored results).
    pub fn governor(&self) -> &Governor {
        &self.governor
    }

    /// Starts every upstream once, mirroring to them the first client
    /// (`client`); later calls change nothing.
    pub fn begin(self: &Arc<Self>, client: &FirstClient) {
        drop(self.starting(client));
    }

    fn starting(self: &Arc<Self>, client: &FirstClient) -> Shared<BoxFuture<'static, ()>> {
        let mut starting = lock(&self.starting);
        if let Some(start) = starting.as_ref() {
            return start.clone();
        }
        self.hub.set_first_client(client);
        let gateway = self.clone();
        self.spawn_store_sweeper();
        let task = tokio::spawn(async move {
            let begun = std::time::Instant::now();
            gateway.start().await;
            let info = gateway.server_info().await;
            *gateway.info.write().unwrap_or_else(|p| p.into_inner()) = info;
            if begun.elapsed() >= STARTUP_WAIT {
                // Clients that connected meanwhile saw empty lists.
                gateway.hub.publish(crate::hub::Event::ToolsChanged);
                gateway.hub.publish(crate::hub::Event::PromptsChanged);
                gateway.hub.publish(crate::hub::Event::ResourcesChanged);
            }
        });
        let start = async move {
            let _ = task.await;
        }
        .boxed()
        .shared();
        *starting = Some(start.clone());
        start
    }

    /// Starts the upstreams (see [`Self::begin`]) and waits, at most
    /// [`STARTUP_WAIT`], for them.
    pub async fn begin_and_wait(self: &Arc<Self>, client: &FirstClient) {
        let start = self.starting(client);
        if tokio::time::timeout(STARTUP_WAIT, start).await.is_err() {
            tracing::warn!(
                "upstreams still starting after {} s; answering the client without them",
                STARTUP_WAIT.as_secs()
            );
        }
    }

    /// What sluice declares to clients now.
    pub fn info(&self) -> ServerConfig {
        self.info.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Shared routing state.
    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// The upstreams, in configuration order.
    pub fn upstreams(&self) -> &[Arc<Upstream>] {
        &self.upstreams
    }

    /// Starts every upstream at once; failures are logged, and retried by
    /// the first request that needs the upstream.
    async fn start(&self) {
        let starts = self.upstreams.iter().map(|u| async move {
            match u.connection().await {
                Ok(_) => {
                    tracing::info!(upstream = %u.name(), "ready");
                    if !u.spec.tools.is_empty() {
                        warn_unknown_tool_settings(u).await;
                    }
                }
                Err(e) => tracing::error!("{e}"),
            }
        });
        futures::future::join_all(starts).await;
    }

    /// Cancels upstream what a client session was waiting for: it went away.
    pub async fn cancel_session_calls(&self, session: SessionId) {
        futures::future::join_all(
            self.upstreams
                .iter()
                .map(|u| u.cancel_session_calls(session, "the client went away")),
        )
        .await;
    }

    /// Stops every upstream.
    pub async fn shutdown(&self) {
        futures::future::join_all(self.upstreams.iter().map(|u| u.shutdown())).await;
        crate::state::on_store(self.governor.store(), |store| store.flush(), |_| ()).await;
        let (total, by_tool) = self.cache.figures().await;
        if !by_tool.is_empty() {
            tracing::info!("cache: {}", total.line());
            for (tool, figures) in by_tool {
                tracing::info!("cache of `{tool}`: {}", figures.line());
            }
        }
    }

    fn upstream(&self, name: &str) -> Option<&Arc<Upstream>> {
        self.upstreams.iter().find(|u| u.name() == name)
    }

    /// The listed tools a model may have meant by `name`, which routes to
    /// no upstream: those of any upstream with the same name after the
    /// prefix (`read_file`, or `filesystem__read_file` for
    /// `fs__read_file`), at most four, sorted.
    fn meant_tools(&self, name: &str) -> Vec<String> {
        use sluice_core::naming::SEPARATOR;
        let bare = name.split_once(SEPARATOR).map_or(name, |(_, bare)| bare);
        let mut meant: Vec<String> = lock(&self.input_schemas)
            .keys()
            .filter(|listed| {
                listed
                    .split_once(SEPARATOR)
                    .is_some_and(|(_, listed_bare)| listed_bare == bare)
            })
            .cloned()
            .collect();
        meant.sort_unstable();
        meant.truncate(4);
        meant
    }

    fn unknown(&self, what: &str, name: &str) -> ErrorData {
        let hint = if self.namer.prefixed() {
            let names: Vec<&str> = self.upstreams.iter().map(|u| u.name()).collect();
            let meant = match what {
                "tool" => self.meant_tools(name),
                _ => Vec::new(),
            };
            let meant = match meant.as_slice() {
                [] => String::new(),
                [one] => format!("; did you mean `{one}`?"),
                [first @ .., last] => {
                    format!("; did you mean `{}` or `{last}`?", first.join("`, `"))
                }
            };
            format!(
                ": names are `<upstream>__<{what}>` with upstream one of {}{meant}",
                names.join(", ")
            )
        } else {
            String::new()
        };
        let name = sluice_core::format::quoted_cut(name);
        ErrorData::invalid_params(format!("unknown {what} `{name}`{hint}"), None)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
