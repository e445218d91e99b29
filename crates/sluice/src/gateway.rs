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
    CallToolRequest, CallToolRequestParams, CallToolResponse, ClientRequest, CompleteRequest,
    CompleteRequestParams, CompleteResult, ErrorCode, ErrorData, GetPromptRequest,
    GetPromptRequestParams, GetPromptResponse, GetTaskResult, Implementation, ListPromptsRequest,
    ListResourceTemplatesRequest, ListResourcesRequest, ListToolsRequest, PaginatedRequestParams,
    Prompt, ReadResourceRequest, ReadResourceRequestParams, ReadResourceResponse, Reference,
    RequestId, RequestMetaObject, Resource, ResourceTemplate, ServerCapabilities, ServerConfig,
    ServerResult, SetLevelRequest, SetLevelRequestParams, SubscribeRequest, SubscribeRequestParams,
    Tool, UnsubscribeRequest, UnsubscribeRequestParams,
};
use rmcp::service::{Peer, RoleServer};
use sluice_core::config::Config;
use sluice_core::naming::Namer;
use tokio_util::sync::CancellationToken;

mod task_call;

use crate::govern::{DEFAULT_PREVIEW_DEPTH, Governor, Policy, RESULT_URI};
use crate::hub::{FirstClient, Hub, Notice, RouteGuard, SessionId};
use crate::upstream::{CallError, Upstream};
use sluice_core::config::Mode;
use sluice_core::store::Owner;

/// Who is asking: enough to route progress, cancellation and server→client
/// requests back to the client.
#[derive(Clone)]
pub struct Caller {
    /// The client's session (`None` for a 2026-07-28 request or `sluice call`).
    pub session: Option<SessionId>,
    /// Where to send progress; `None` when nobody listens (`sluice call`).
    pub peer: Option<Peer<RoleServer>>,
    /// The client's request id.
    pub request: RequestId,
    /// The request's `_meta` (progress token and anything else to forward).
    pub meta: RequestMetaObject,
    /// Fires when the client cancels or goes away.
    pub ct: CancellationToken,
    /// The client speaks a protocol before 2026-07-28: results must not
    /// carry that version's fields (cache hints).
    pub legacy: bool,
    /// Who the results it stores belong to.
    pub owner: Owner,
    /// Whose share of the operation limits its calls take: the owner's key,
    /// or for an anonymous client the address it came from (so one client
    /// cannot use up the share of every other sessionless client).
    pub quota: String,
    /// The client's `clientInfo.name`, which picks its budget.
    pub client: Option<String>,
    /// Where a call that may become an operation keeps the progress the
    /// upstream reports (its partial result).
    pub partial: Option<Arc<crate::operations::Partial>>,
    /// The client declared the MCP tasks extension (SEP-2663): a call that
    /// outlives its timeout is answered with a task, not a text.
    pub tasks: bool,
}

/// The gateway.
pub struct Gateway {
    upstreams: Vec<Arc<Upstream>>,
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
    input_schemas: Mutex<HashMap<String, Arc<rmcp::model::JsonObject>>>,
    /// Tools (by exposed name) that refused a plain call: they are called
    /// as upstream tasks ([`task_call`]).
    task_tools: Mutex<std::collections::HashSet<String>>,
    /// Results of idempotent tools.
    cache: crate::cache::ResultCache,
    /// Tools (by exposed name) annotated read-only and idempotent: cached
    /// when `[cache] annotated = true`.
    annotated_idempotent: Mutex<std::collections::HashSet<String>>,
}

/// How long a client's `initialize` waits for the upstreams to start; past
/// it sluice answers anyway and announces the tools when they come.
/// The longest tool name sluice forwards, in bytes (MCP tool names are 1 to
/// 128 characters; a longer one is unknown everywhere).
const MAX_TOOL_NAME_BYTES: usize = 512;

const STARTUP_WAIT: Duration = Duration::from_secs(20);

impl Gateway {
    /// A gateway over the configured upstreams (nothing started yet).
    pub fn new(config: &Config) -> Arc<Self> {
        let hub = Arc::new(Hub::default());
        let upstreams = config
            .upstreams
            .iter()
            .map(|spec| Upstream::new(spec.clone(), hub.clone()))
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
            governor: Governor::new(config),
            operations: crate::operations::Operations::new(config.operations),
            input_schemas: Mutex::default(),
            task_tools: Mutex::default(),
            cache: crate::cache::ResultCache::new(config.cache),
            annotated_idempotent: Mutex::default(),
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

    /// Drops expired stored results every 30 s while the gateway lives.
    fn spawn_store_sweeper(self: &Arc<Self>) {
        let gateway = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(30));
            loop {
                tick.tick().await;
                let Some(gateway) = gateway.upgrade() else {
                    return;
                };
                let purged = gateway.governor.store().purge_expired();
                if purged > 0 {
                    tracing::debug!("dropped {purged} expired stored results");
                }
            }
        });
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

    /// What sluice declares to clients: the union of what its upstreams
    /// declare (tools always), and their instructions.
    pub async fn server_info(&self) -> ServerConfig {
        // The union of what the upstreams declare, flag by flag, so that
        // one upstream's capabilities come through exactly.
        // Tools and resources always: sluice's own tools and stored results.
        // Tasks always: sluice's operations are tasks to clients that
        // declare the extension.
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_tasks()
            .build();
        let mut instructions = Vec::new();
        let mut names = Vec::new();
        for upstream in &self.upstreams {
            let Some(info) = upstream.current().await.and_then(|c| c.info()) else {
                continue;
            };
            let declared = &info.capabilities;
            if let Some(tools) = &declared.tools {
                let merged = capabilities.tools.get_or_insert_with(Default::default);
                merged.list_changed = either(merged.list_changed, tools.list_changed);
            }
            if let Some(prompts) = &declared.prompts {
                let merged = capabilities.prompts.get_or_insert_with(Default::default);
                merged.list_changed = either(merged.list_changed, prompts.list_changed);
            }
            if let Some(resources) = &declared.resources {
                let merged = capabilities.resources.get_or_insert_with(Default::default);
                merged.list_changed = either(merged.list_changed, resources.list_changed);
                merged.subscribe = either(merged.subscribe, resources.subscribe);
            }
            if let Some(completions) = &declared.completions {
                capabilities.completions = Some(completions.clone());
            }
            if let Some(logging) = &declared.logging {
                capabilities.logging = Some(logging.clone());
            }
            if let Some(text) = &info.instructions {
                if self.namer.prefixed() {
                    instructions.push(format!(
                        "## {} (tools prefixed `{}__`)\n{text}",
                        upstream.name(),
                        upstream.name()
                    ));
                } else {
                    instructions.push(text.clone());
                }
            }
            if let Some(server) = &info.server_info {
                names.push(server.name.clone());
            }
        }
        let mut config = ServerConfig::new(capabilities);
        config.server_info = Implementation::new("sluice", env!("CARGO_PKG_VERSION"))
            .with_title(format!("sluice → {}", names.join(", ")));
        config.instructions = (!instructions.is_empty()).then(|| instructions.join("\n\n"));
        config
    }

    /// Runs `op` on every upstream at once; the results of those that
    /// answered, and an error only if none did.
    async fn on_all<T, F, Fut>(&self, op: F) -> Result<Vec<(Arc<Upstream>, T)>, ErrorData>
    where
        F: Fn(Arc<Upstream>) -> Fut,
        Fut: std::future::Future<Output = Result<T, CallError>>,
    {
        let results = futures::future::join_all(self.upstreams.iter().map(|u| {
            let fut = op(u.clone());
            async move { (u.clone(), fut.await) }
        }))
        .await;
        let mut answered = Vec::new();
        let mut errors = Vec::new();
        for (upstream, result) in results {
            match result {
                Ok(value) => answered.push((upstream, value)),
                Err(e) => {
                    tracing::warn!(upstream = %upstream.name(), "{e}");
                    errors.push(e);
                }
            }
        }
        if answered.is_empty() && !errors.is_empty() {
            // One upstream's own error goes to the client as it was.
            if errors.len() == 1 {
                return Err(call_error(errors.remove(0)));
            }
            let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
            return Err(ErrorData::internal_error(messages.join("\n"), None));
        }
        Ok(answered)
    }

    /// All the tools, named for the client.
    pub async fn list_tools(&self) -> Result<Vec<Tool>, ErrorData> {
        let lists = self
            .on_all(|u| async move { upstream_tools(&u).await })
            .await?;
        let mut schemas = HashMap::new();
        let mut all: Vec<Tool> = lists
            .into_iter()
            .flat_map(|(u, tools)| {
                tools.into_iter().map(move |mut tool| {
                    let settings = u.spec.tools.get(tool.name.as_ref());
                    // A stored result's answer cannot meet the tool's output
                    // schema: clients that validate structured content would
                    // reject it. Only tools never governed keep theirs.
                    if settings.and_then(|s| s.mode) != Some(Mode::Passthrough) {
                        tool.output_schema = None;
                    }
                    tool.name = self.namer.expose(u.name(), &tool.name).into();
                    tool
                })
            })
            .inspect(|tool| {
                schemas.insert(tool.name.to_string(), tool.input_schema.clone());
            })
            .collect();
        let annotated: std::collections::HashSet<String> = all
            .iter()
            .filter(|t| {
                t.annotations.as_ref().is_some_and(|a| {
                    a.read_only_hint == Some(true) && a.idempotent_hint == Some(true)
                })
            })
            .map(|t| t.name.to_string())
            .collect();
        *lock(&self.annotated_idempotent) = annotated;
        // Every upstream tool takes sluice's `_timeout_s` (its type only:
        // `sluice_result` says once what it does, for every tool).
        let timeout = crate::builtins::timeout_property();
        for tool in &mut all {
            let cached = self.cache_policy(&tool.name).is_some();
            let schema = Arc::make_mut(&mut tool.input_schema);
            if !matches!(schema.get("properties"), Some(serde_json::Value::Object(_))) {
                schema.insert("properties".to_owned(), serde_json::json!({}));
            }
            if let Some(serde_json::Value::Object(properties)) = schema.get_mut("properties") {
                properties.insert(
                    sluice_core::operation::TIMEOUT_ARG.to_owned(),
                    timeout.clone(),
                );
                // Cached tools also take `_fresh`.
                if cached {
                    properties.insert(
                        sluice_core::cache::FRESH_ARG.to_owned(),
                        crate::builtins::fresh_property(),
                    );
                }
            }
        }
        *lock(&self.input_schemas) = schemas;
        all.extend(crate::builtins::tools(self.operations.settings()));
        Ok(all)
    }

    /// All the prompts, named for the client.
    pub async fn list_prompts(&self) -> Result<Vec<Prompt>, ErrorData> {
        let lists = self
            .on_all(|u| async move {
                if !declares(&u, |c| c.prompts.is_some()).await {
                    return Ok(Vec::new());
                }
                list_all(
                    &u,
                    |cursor| {
                        ClientRequest::ListPromptsRequest(ListPromptsRequest::with_param(page(
                            cursor,
                        )))
                    },
                    |r| match r {
                        ServerResult::ListPromptsResult(r) => Some((r.prompts, r.next_cursor)),
                        _ => None,
                    },
                )
                .await
            })
            .await?;
        Ok(lists
            .into_iter()
            .flat_map(|(u, prompts)| {
                prompts.into_iter().map(move |mut prompt| {
                    prompt.name = self.namer.expose(u.name(), &prompt.name);
                    prompt
                })
            })
            .collect())
    }

    /// All the resources (URIs are not renamed).
    pub async fn list_resources(&self) -> Result<Vec<Resource>, ErrorData> {
        let lists = self
            .on_all(|u| async move {
                if !declares(&u, |c| c.resources.is_some()).await {
                    return Ok(Vec::new());
                }
                list_all(
                    &u,
                    |cursor| {
                        ClientRequest::ListResourcesRequest(ListResourcesRequest::with_param(page(
                            cursor,
                        )))
                    },
                    |r| match r {
                        ServerResult::ListResourcesResult(r) => Some((r.resources, r.next_cursor)),
                        _ => None,
                    },
                )
                .await
            })
            .await?;
        let mut owners = lock(&self.resource_owners);
        let mut all = Vec::new();
        for (u, resources) in lists {
            for resource in resources {
                owners.insert(resource.uri.clone(), u.name().to_owned());
                all.push(resource);
            }
        }
        Ok(all)
    }

    /// All the resource templates.
    pub async fn list_resource_templates(&self) -> Result<Vec<ResourceTemplate>, ErrorData> {
        let lists = self
            .on_all(|u| async move {
                if !declares(&u, |c| c.resources.is_some()).await {
                    return Ok(Vec::new());
                }
                list_all(
                    &u,
                    |cursor| {
                        ClientRequest::ListResourceTemplatesRequest(
                            ListResourceTemplatesRequest::with_param(page(cursor)),
                        )
                    },
                    |r| match r {
                        ServerResult::ListResourceTemplatesResult(r) => {
                            Some((r.resource_templates, r.next_cursor))
                        }
                        _ => None,
                    },
                )
                .await
            })
            .await?;
        let mut owners = lock(&self.template_owners);
        owners.clear();
        let mut all = vec![crate::builtins::template()];
        for (u, templates) in lists {
            for template in templates {
                let prefix = template
                    .uri_template
                    .split('{')
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                owners.push((prefix, u.name().to_owned()));
                all.push(template);
            }
        }
        Ok(all)
    }

    /// Calls a tool.
    pub async fn call_tool(
        self: &Arc<Self>,
        mut params: CallToolRequestParams,
        caller: &Caller,
    ) -> Result<CallToolResponse, ErrorData> {
        let exposed = params.name.to_string();
        let budget = self.governor.budget_for(caller.client.as_deref());
        match exposed.as_str() {
            crate::builtins::READ => {
                return self
                    .governor
                    .read(params.arguments, &caller.owner, budget)
                    .await
                    .map(|r| CallToolResponse::Complete(era(r, caller)));
            }
            crate::builtins::SEARCH => {
                return self
                    .governor
                    .search(params.arguments, &caller.owner, budget)
                    .await
                    .map(|r| CallToolResponse::Complete(era(r, caller)));
            }
            crate::builtins::QUERY => {
                // A query the client cancels (or leaves) stops at once:
                // dropping it kills its worker.
                return tokio::select! {
                    r = self.governor.query(params.arguments, &caller.owner, budget) => {
                        r.map(|r| CallToolResponse::Complete(era(r, caller)))
                    }
                    () = caller.ct.cancelled() => Err(call_error(CallError::Cancelled)),
                };
            }
            crate::builtins::INFO => {
                let listing = params.arguments.as_ref().is_none_or(|a| a.is_empty());
                let mut result = self
                    .governor
                    .info(params.arguments, &caller.owner, budget)?;
                if listing {
                    // The session's operations, after its stored results.
                    let ops = self.operations.list(&caller.owner);
                    if let Some(rmcp::model::ContentBlock::Text(text)) = result.content.first_mut()
                    {
                        text.text
                            .push_str(&self.operations.list_hint(&caller.owner));
                        text.text.push('\n');
                    }
                    let list: Vec<serde_json::Value> = ops.iter().map(|o| o.meta()).collect();
                    result.meta = Some(crate::govern::with_meta(
                        result.meta,
                        "sluice/operations",
                        serde_json::Value::Array(list),
                    ));
                    // And the cache's figures, shared by every session.
                    let (total, by_tool) = self.cache.figures().await;
                    if let Some(rmcp::model::ContentBlock::Text(text)) = result.content.first_mut()
                    {
                        if by_tool.is_empty() {
                            text.text.push_str(if self.caches_anything() {
                                "Cache: no cached calls yet.\n"
                            } else {
                                "Cache: off (no tool is cached: `cache = { ttl_s = … }` in a tool's table, or `[cache] annotated = true`).\n"
                            });
                        } else {
                            text.text.push_str(&format!("Cache: {}.\n", total.line()));
                            for (tool, figures) in &by_tool {
                                text.text
                                    .push_str(&format!("  `{tool}`: {}.\n", figures.line()));
                            }
                        }
                    }
                    let tools: serde_json::Map<String, serde_json::Value> = by_tool
                        .iter()
                        .map(|(tool, f)| (tool.to_string(), f.json()))
                        .collect();
                    result.meta = Some(crate::govern::with_meta(
                        result.meta,
                        "sluice/cache_figures",
                        serde_json::json!({"total": total.json(), "tools": tools}),
                    ));
                }
                return Ok(CallToolResponse::Complete(era(result, caller)));
            }
            crate::builtins::RESULT => {
                // A wait the client gives up on ends with it.
                return tokio::select! {
                    result = self.operations.result(params.arguments, &caller.owner) => {
                        Ok(CallToolResponse::Complete(era(result, caller)))
                    }
                    () = caller.ct.cancelled() => Err(call_error(CallError::Cancelled)),
                };
            }
            crate::builtins::CANCEL => {
                let result = self.operations.cancel(params.arguments, &caller.owner);
                return Ok(CallToolResponse::Complete(era(result, caller)));
            }
            _ => {}
        }
        // No tool has a name this long (MCP names are at most 128
        // characters): refused here, not sent on and echoed back whole.
        if exposed.len() > MAX_TOOL_NAME_BYTES {
            return Err(self.unknown("tool", &exposed));
        }
        let Some((upstream, name)) = self.namer.route(&exposed) else {
            return Err(self.unknown("tool", &exposed));
        };
        let upstream = self
            .upstream(upstream)
            .expect("routed to a known upstream")
            .clone();
        let settings = upstream.spec.tools.get(name).cloned().unwrap_or_default();
        if lock(&self.input_schemas).is_empty() {
            // The client called without listing: learn the input schemas
            // (for the arguments a stored answer suggests) once.
            let _ = self.list_tools().await;
        }
        let narrowing = lock(&self.input_schemas)
            .get(&exposed)
            .map(|schema| sluice_core::summary::narrowing_arguments(schema))
            .unwrap_or_default();
        let policy = Policy {
            owner: caller.owner.clone(),
            budget: budget.narrowed(&settings.budget()),
            source: exposed.clone(),
            mode: settings.mode.unwrap_or_default(),
            preview_depth: settings
                .preview_depth
                .map_or(DEFAULT_PREVIEW_DEPTH, |d| d as usize),
            narrowing,
        };
        params.name = name.to_owned().into();
        params.meta = forwarded_meta(&caller.meta);
        // `_timeout_s` is sluice's: the upstream never sees it.
        let timeout_arg = params
            .arguments
            .as_mut()
            .and_then(|a| a.remove(sluice_core::operation::TIMEOUT_ARG));
        let settings = self.operations.settings();
        let timeout =
            match settings.timeout(timeout_arg.as_ref(), settings_timeout(&upstream, name)) {
                Ok(timeout) => timeout,
                Err(message) => return Ok(CallToolResponse::Complete(error_result(message))),
            };
        // So is `_fresh`, for the tools sluice caches.
        let cached = match self.cache_policy(&exposed) {
            None => None,
            // Clients without a session or a principal cannot be told apart:
            // an entry "per session" would be shared by all of them.
            Some(cache_policy) if cache_policy.per_session && caller.owner == Owner::Anonymous => {
                None
            }
            Some(cache_policy) => {
                let fresh = match params
                    .arguments
                    .as_mut()
                    .and_then(|a| a.remove(sluice_core::cache::FRESH_ARG))
                {
                    None | Some(serde_json::Value::Bool(false)) => false,
                    Some(serde_json::Value::Bool(true)) => true,
                    Some(other) => {
                        return Ok(CallToolResponse::Complete(error_result(format!(
                            "`_fresh` must be true (skip the cached result and refresh it) or false, not {}",
                            sluice_core::format::quoted_cut(&other.to_string())
                        ))));
                    }
                };
                let owner = cache_policy.per_session.then(|| caller.owner.key());
                Some(CachedCall {
                    key: sluice_core::cache::key(
                        upstream.name(),
                        name,
                        owner.as_deref(),
                        params.arguments.as_ref(),
                    ),
                    policy: cache_policy,
                    fresh,
                })
            }
        };
        if let Err(message) = self.operations.admit(&caller.owner, &caller.quota) {
            return Ok(CallToolResponse::Complete(error_result(message)));
        }
        // The call runs in a task of its own, which a timeout leaves running
        // in the background; until then the client's cancellation stops it.
        let started = std::time::Instant::now();
        let partial = Arc::new(crate::operations::Partial::default());
        let stop = CancellationToken::new();
        let mut inner = caller.clone();
        inner.ct = stop.clone();
        inner.partial = Some(partial.clone());
        let gateway = self.clone();
        let mut call = tokio::spawn(async move {
            gateway
                .call_upstream(&upstream, params, policy, &inner, cached)
                .await
        });
        let done = tokio::select! {
            done = &mut call => done,
            () = caller.ct.cancelled() => {
                stop.cancel();
                return Err(call_error(CallError::Cancelled));
            }
            () = tokio::time::sleep(timeout) => {
                let op = self.operations.start(
                    caller.owner.clone(),
                    caller.quota.clone(),
                    &exposed,
                    partial,
                    stop,
                    started,
                );
                if let Some(session) = caller.session {
                    self.hub.detach_calls(session, &caller.request);
                }
                let answer = if caller.tasks {
                    let mut meta = rmcp::model::MetaObject::new();
                    meta.insert(crate::operations::META.into(), op.meta());
                    CallToolResponse::Task(
                        rmcp::model::CreateTaskResult::new(op.task(settings.retention))
                            .with_meta(meta),
                    )
                } else {
                    CallToolResponse::Complete(era(self.operations.started_answer(&op), caller))
                };
                tokio::spawn(async move {
                    let outcome = match call.await {
                        Ok(Done::Answer(answer)) => match *answer {
                            Ok(CallToolResponse::Complete(result)) => {
                                crate::operations::Outcome::Completed(result)
                            }
                            Ok(_) => crate::operations::Outcome::Failed(
                                "the upstream asked for input or answered with a task, which an operation cannot take".into(),
                            ),
                            Err(e) => crate::operations::Outcome::Failed(e.message.to_string()),
                        },
                        Ok(Done::Unavailable(why)) => crate::operations::Outcome::Failed(why),
                        Err(e) => crate::operations::Outcome::Failed(format!("sluice lost the call: {e}")),
                    };
                    op.finish(outcome);
                });
                return Ok(answer);
            }
        };
        match done {
            Ok(Done::Answer(answer)) => *answer,
            Ok(Done::Unavailable(message)) => Ok(CallToolResponse::Complete(error_result(message))),
            Err(e) => Err(ErrorData::internal_error(
                format!("sluice lost the call: {e}"),
                None,
            )),
        }
    }

    /// Sends a tool call upstream (or answers it from the cache) and
    /// governs its result.
    async fn call_upstream(
        self: &Arc<Self>,
        upstream: &Arc<Upstream>,
        params: CallToolRequestParams,
        policy: Policy,
        caller: &Caller,
        cached: Option<CachedCall>,
    ) -> Done {
        // The owner and budget a stored answer was made for (cached calls).
        let governed_key = cached
            .as_ref()
            .map(|_| format!("{}|{:?}", policy.owner.key(), policy.budget))
            .unwrap_or_default();
        let (sent, entry, hit) = match cached {
            None => (
                self.fetch(upstream, params, caller, &policy.source).await,
                None,
                false,
            ),
            Some(call) => {
                let fetch = self.fetcher(upstream, params, caller, &policy.source);
                match self
                    .cache
                    .serve(call.key, &policy.source, call.policy, call.fresh, fetch)
                    .await
                {
                    crate::cache::Served::Hit(entry) => {
                        // A large result this owner had stored with this
                        // budget: the same answer, while its handle lives.
                        if let Some(answer) = entry
                            .governed_for(&governed_key)
                            .and_then(|a| self.governor.renewed(a, &policy.owner))
                        {
                            return Done::Answer(Box::new(Ok(CallToolResponse::Complete(
                                with_hit(answer, &entry),
                            ))));
                        }
                        let result = ServerResult::CallToolResult(entry.result());
                        // An entry made for a client of the other era.
                        (Ok(in_clients_era(result, caller.legacy)), Some(entry), true)
                    }
                    crate::cache::Served::Fetched(answer, entry) => (
                        (*answer).map(|r| in_clients_era(r, caller.legacy)),
                        entry,
                        false,
                    ),
                }
            }
        };
        // Told apart so that an operation can fail with the reason.
        if let Err(CallError::Unavailable(why)) = sent {
            return Done::Unavailable(why);
        }
        let answer = self.call_answer(upstream, sent);
        Done::Answer(Box::new(match answer {
            Ok(CallToolResponse::Complete(result)) => {
                let result = self.governor.tool_result(result, policy).await;
                if let Some(entry) = &entry
                    && crate::govern::stored_handle(&result).is_some()
                {
                    entry.keep_governed(governed_key, result.clone());
                }
                Ok(CallToolResponse::Complete(match &entry {
                    Some(entry) if hit => with_hit(result, entry),
                    _ => result,
                }))
            }
            // The upstream's own error, governed like a result.
            Err(error) => Err(self
                .governor
                .tool_error(error, upstream.name(), &policy)
                .await),
            other => other,
        }))
    }

    /// Makes the upstream call of a tool: as a task if the tool needs one,
    /// with sluice answering `input_required` for a client that cannot.
    async fn fetch(
        &self,
        upstream: &Arc<Upstream>,
        params: CallToolRequestParams,
        caller: &Caller,
        source: &str,
    ) -> Result<ServerResult, CallError> {
        if lock(&self.task_tools).contains(source) {
            return self.call_as_task(upstream, params, caller).await;
        }
        // A 2025-11-25 upstream may refuse a plain call to a tool that
        // needs a task: the call is kept to make it again as one.
        let legacy = upstream.current().await.is_none_or(|c| !c.speaks_2026());
        let again = legacy.then(|| params.clone());
        let sent = if !crate::input::must_bridge(caller) {
            // The common case: one request, its arguments moved.
            let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
            self.send(upstream, request, caller).await
        } else {
            match self.call_bridged(upstream, params, caller).await {
                Ok(sent) => sent,
                Err(e) => Err(CallError::Upstream(e)),
            }
        };
        match again {
            Some(params) if task_call::refused_without_task(&sent) => {
                tracing::info!(
                    tool = %source,
                    "the tool must be called as a task: sluice calls it as one and polls"
                );
                lock(&self.task_tools).insert(source.to_owned());
                self.call_as_task(upstream, params, caller).await
            }
            _ => sent,
        }
    }

    /// [`Self::fetch`] as the cache calls it: for `caller`, or for a
    /// background refresh that no client waits for.
    fn fetcher(
        self: &Arc<Self>,
        upstream: &Arc<Upstream>,
        params: CallToolRequestParams,
        caller: &Caller,
        source: &str,
    ) -> crate::cache::Fetch {
        let (gateway, upstream, caller, source) = (
            self.clone(),
            upstream.clone(),
            caller.clone(),
            source.to_owned(),
        );
        Box::new(move |background| {
            let caller = if background {
                Caller {
                    session: None,
                    peer: None,
                    request: RequestId::Number(0),
                    meta: Default::default(),
                    ct: CancellationToken::new(),
                    legacy: caller.legacy,
                    owner: caller.owner.clone(),
                    quota: caller.quota.clone(),
                    client: None,
                    partial: None,
                    tasks: false,
                }
            } else {
                caller.clone()
            };
            let (gateway, upstream, params, source) = (
                gateway.clone(),
                upstream.clone(),
                params.clone(),
                source.clone(),
            );
            Box::pin(async move { gateway.fetch(&upstream, params, &caller, &source).await })
        })
    }

    /// Whether any tool may be cached.
    fn caches_anything(&self) -> bool {
        self.cache.settings().annotated
            || self
                .upstreams
                .iter()
                .any(|u| u.spec.tools.values().any(|t| t.cache_policy.is_some()))
    }

    /// The cache policy of a tool (by exposed name), if it is cached: its
    /// own `cache` table, else `[cache]`'s defaults when `annotated` is on
    /// and the tool is annotated read-only and idempotent.
    fn cache_policy(&self, exposed: &str) -> Option<sluice_core::cache::CachePolicy> {
        let (upstream, name) = self.namer.route(exposed)?;
        let configured = self
            .upstream(upstream)?
            .spec
            .tools
            .get(name)
            .and_then(|s| s.cache_policy);
        let settings = self.cache.settings();
        configured.or_else(|| {
            (settings.annotated && lock(&self.annotated_idempotent).contains(exposed))
                .then_some(settings.defaults)
        })
    }

    /// Calls a tool for a client that cannot answer `input_required`
    /// itself: sluice asks it with ordinary requests and calls again.
    async fn call_bridged(
        &self,
        upstream: &Arc<Upstream>,
        mut params: CallToolRequestParams,
        caller: &Caller,
    ) -> Result<Result<ServerResult, CallError>, ErrorData> {
        // The call may be repeated with the client's answers: keep a copy.
        let mut round = 0;
        loop {
            let request = ClientRequest::CallToolRequest(CallToolRequest::new(params.clone()));
            match self.send(upstream, request, caller).await {
                Ok(ServerResult::InputRequiredResult(result))
                    if round < crate::input::MAX_ROUNDS =>
                {
                    (params.input_responses, params.request_state) =
                        crate::input::fulfil(result, caller, round).await?;
                    round += 1;
                }
                answer => return Ok(answer),
            }
        }
    }

    fn call_answer(
        &self,
        upstream: &Upstream,
        answer: Result<ServerResult, CallError>,
    ) -> Result<CallToolResponse, ErrorData> {
        match answer {
            Ok(ServerResult::CallToolResult(result)) => Ok(CallToolResponse::Complete(result)),
            Ok(ServerResult::InputRequiredResult(result)) => {
                Ok(CallToolResponse::InputRequired(result))
            }
            Ok(ServerResult::CreateTaskResult(result)) => Ok(CallToolResponse::Task(result)),
            Ok(other) => Err(unexpected(upstream, "tools/call", &other)),
            // The model should read why its call failed: an error result,
            // not a JSON-RPC error that clients show as "internal error".
            Err(CallError::Unavailable(message)) => Ok(CallToolResponse::Complete(
                rmcp::model::CallToolResult::error(vec![rmcp::model::ContentBlock::text(message)]),
            )),
            Err(e) => Err(call_error(e)),
        }
    }

    /// `tasks/get`: an operation seen as an MCP task.
    pub fn get_task(&self, task_id: &str, caller: &Caller) -> Result<GetTaskResult, ErrorData> {
        self.operations
            .get_task(task_id, &caller.owner, |result| era(result, caller))
    }

    /// `tasks/cancel`: cancels an operation, as `sluice_cancel` does.
    pub fn cancel_task(&self, task_id: &str, caller: &Caller) -> Result<(), ErrorData> {
        self.operations.cancel_task(task_id, &caller.owner)
    }

    /// Gets a prompt.
    pub async fn get_prompt(
        &self,
        mut params: GetPromptRequestParams,
        caller: &Caller,
    ) -> Result<GetPromptResponse, ErrorData> {
        let exposed = params.name.clone();
        let Some((upstream, name)) = self.namer.route(&exposed) else {
            return Err(self.unknown("prompt", &exposed));
        };
        let upstream = self
            .upstream(upstream)
            .expect("routed to a known upstream")
            .clone();
        params.name = name.to_owned();
        params.meta = forwarded_meta(&caller.meta);
        let mut round = 0;
        loop {
            let request = ClientRequest::GetPromptRequest(GetPromptRequest::new(params.clone()));
            match self
                .send(&upstream, request, caller)
                .await
                .map_err(call_error)?
            {
                ServerResult::GetPromptResult(r) => return Ok(GetPromptResponse::Complete(r)),
                ServerResult::InputRequiredResult(r)
                    if crate::input::must_bridge(caller) && round < crate::input::MAX_ROUNDS =>
                {
                    (params.input_responses, params.request_state) =
                        crate::input::fulfil(r, caller, round).await?;
                    round += 1;
                }
                ServerResult::InputRequiredResult(r) => {
                    return Ok(GetPromptResponse::InputRequired(r));
                }
                other => return Err(unexpected(&upstream, "prompts/get", &other)),
            }
        }
    }

    /// Reads a resource.
    pub async fn read_resource(
        &self,
        mut params: ReadResourceRequestParams,
        caller: &Caller,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let budget = self.governor.budget_for(caller.client.as_deref());
        if params.uri.starts_with(RESULT_URI) {
            return self
                .governor
                .read_result_resource(&params.uri, &caller.owner, budget)
                .await
                .map(|mut r| {
                    if caller.legacy {
                        r.result_type = None;
                    }
                    ReadResourceResponse::Complete(r)
                });
        }
        let policy = Policy {
            owner: caller.owner.clone(),
            budget,
            source: format!("resources/read {}", params.uri),
            mode: Mode::Buffer,
            preview_depth: DEFAULT_PREVIEW_DEPTH,
            narrowing: Vec::new(),
        };
        params.meta = forwarded_meta(&caller.meta);
        let candidates = self.resource_candidates(&params.uri).await;
        let mut last_error = None;
        for upstream in candidates {
            let request =
                ClientRequest::ReadResourceRequest(ReadResourceRequest::new(params.clone()));
            match self.send(&upstream, request, caller).await {
                Ok(ServerResult::ReadResourceResult(r)) => {
                    let uri = params.uri.clone();
                    return Ok(ReadResourceResponse::Complete(
                        self.governor.resource_result(r, &uri, policy).await,
                    ));
                }
                Ok(ServerResult::InputRequiredResult(r)) => {
                    return Ok(ReadResourceResponse::InputRequired(r));
                }
                Ok(other) => return Err(unexpected(&upstream, "resources/read", &other)),
                Err(CallError::Upstream(e)) => last_error = Some(e),
                Err(e) => return Err(call_error(e)),
            }
        }
        Err(last_error.unwrap_or_else(|| {
            ErrorData::resource_not_found(
                format!("no upstream serves the resource {}", params.uri),
                None,
            )
        }))
    }

    /// The upstreams that may serve `uri`, most likely first.
    async fn resource_candidates(&self, uri: &str) -> Vec<Arc<Upstream>> {
        if self.upstreams.len() == 1 {
            return self.upstreams.clone();
        }
        let mut names = Vec::new();
        if let Some(owner) = lock(&self.resource_owners).get(uri) {
            names.push(owner.clone());
        }
        let mut templates: Vec<(String, String)> = lock(&self.template_owners)
            .iter()
            .filter(|(prefix, _)| !prefix.is_empty() && uri.starts_with(prefix.as_str()))
            .cloned()
            .collect();
        templates.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        names.extend(templates.into_iter().map(|(_, name)| name));
        let mut ordered: Vec<Arc<Upstream>> = Vec::new();
        for name in names {
            if let Some(u) = self.upstream(&name)
                && !ordered.iter().any(|o| Arc::ptr_eq(o, u))
            {
                ordered.push(u.clone());
            }
        }
        if ordered.is_empty() {
            for u in &self.upstreams {
                if declares(u, |c| c.resources.is_some()).await {
                    ordered.push(u.clone());
                }
            }
        }
        ordered
    }

    /// Subscribes to (or unsubscribes from) a resource for a session.
    pub async fn subscribe(
        &self,
        uri: String,
        subscribe: bool,
        caller: &Caller,
    ) -> Result<(), ErrorData> {
        let remaining = caller.session.map_or(usize::from(subscribe), |s| {
            self.hub.set_subscription(s, &uri, subscribe)
        });
        // Upstream, one subscription serves every session: unsubscribe only
        // when the last session does.
        if !subscribe && remaining > 0 {
            return Ok(());
        }
        for upstream in self.resource_candidates(&uri).await {
            let request = if subscribe {
                ClientRequest::SubscribeRequest(SubscribeRequest::new(SubscribeRequestParams::new(
                    uri.clone(),
                )))
            } else {
                ClientRequest::UnsubscribeRequest(UnsubscribeRequest::new(
                    UnsubscribeRequestParams::new(uri.clone()),
                ))
            };
            match self.send(&upstream, request, caller).await {
                Ok(_) => return Ok(()),
                Err(CallError::Upstream(_)) => continue,
                Err(e) => return Err(call_error(e)),
            }
        }
        Err(ErrorData::resource_not_found(
            format!(
                "no upstream accepted a subscription to {}",
                sluice_core::format::quoted_cut(&uri)
            ),
            None,
        ))
    }

    /// Completes a prompt or resource template argument.
    pub async fn complete(
        &self,
        mut params: CompleteRequestParams,
        caller: &Caller,
    ) -> Result<CompleteResult, ErrorData> {
        params.meta = forwarded_meta(&caller.meta);
        let candidates = match &mut params.r#ref {
            Reference::Prompt(prompt) => {
                let exposed = prompt.name.clone();
                let Some((upstream, name)) = self.namer.route(&exposed) else {
                    return Err(self.unknown("prompt", &exposed));
                };
                prompt.name = name.to_owned();
                vec![self.upstream(upstream).expect("known upstream").clone()]
            }
            Reference::Resource(resource) => {
                let uri = resource.uri.clone();
                self.resource_candidates(&uri).await
            }
            _ => {
                return Err(ErrorData::invalid_params(
                    "unsupported completion reference",
                    None,
                ));
            }
        };
        let mut last_error = None;
        for upstream in candidates {
            let request = ClientRequest::CompleteRequest(CompleteRequest::new(params.clone()));
            match self.send(&upstream, request, caller).await {
                Ok(ServerResult::CompleteResult(r)) => return Ok(r),
                Ok(other) => return Err(unexpected(&upstream, "completion/complete", &other)),
                Err(CallError::Upstream(e)) => last_error = Some(e),
                Err(e) => return Err(call_error(e)),
            }
        }
        Err(last_error.unwrap_or_else(|| {
            ErrorData::invalid_params("no upstream can complete this reference", None)
        }))
    }

    /// Sets the log level of every upstream that logs.
    pub async fn set_level(
        &self,
        params: SetLevelRequestParams,
        caller: &Caller,
    ) -> Result<(), ErrorData> {
        let level = params.level;
        if let Some(session) = caller.session {
            self.hub.set_log_level(session, level);
        }
        self.on_all(|u| async move {
            if !declares(&u, |c| c.logging.is_some()).await {
                return Ok(());
            }
            // A 2026-07-28 upstream gets the level with each request.
            if caller.session.is_some() && u.current().await.is_some_and(|c| c.speaks_2026()) {
                return Ok(());
            }
            let request = ClientRequest::SetLevelRequest(SetLevelRequest::new(
                SetLevelRequestParams::new(level),
            ));
            self.send(&u, request, caller).await.map(drop)
        })
        .await
        .map(drop)
    }

    /// Sends one request to `upstream` on behalf of `caller`, routing its
    /// progress and server→client requests back to the caller.
    async fn send(
        &self,
        upstream: &Arc<Upstream>,
        request: ClientRequest,
        caller: &Caller,
    ) -> Result<ServerResult, CallError> {
        let hub = &self.hub;
        // Notifications about the request are forwarded from here, in the
        // order they came, and all of them before the response (see
        // `upstream::tap`).
        let progress_token = caller.meta.get_progress_token();
        let (notices_tx, mut notices) = tokio::sync::mpsc::unbounded_channel();
        let log_level = caller.session.and_then(|s| hub.log_level(s));
        let call = upstream.send(request, log_level, &caller.ct, |handle| {
            let mut guards: Vec<RouteGuard> = Vec::with_capacity(2);
            let listening = caller.peer.is_some();
            guards.push(hub.track_call(
                upstream.name(),
                handle.id.clone(),
                caller.session,
                caller.request.clone(),
                listening.then(|| notices_tx.clone()),
            ));
            // A call that may become an operation always hears its
            // progress (rmcp asks every upstream request for it).
            if (listening && progress_token.is_some()) || caller.partial.is_some() {
                guards.push(hub.route_progress(
                    upstream.name(),
                    handle.progress_token.clone(),
                    notices_tx.clone(),
                ));
            }
            guards
        });
        if caller.peer.is_none() && caller.partial.is_none() {
            return call.await.map(|r| in_clients_era(r, caller.legacy));
        }
        let forward = |notice: Notice| {
            let partial = caller.partial.clone();
            // Once the call went on in the background, its client has its
            // answer: it hears no more about the call.
            let peer = caller
                .peer
                .clone()
                .filter(|_| !partial.as_ref().is_some_and(|p| p.detached()));
            let token = progress_token.clone();
            async move {
                match (&notice, &partial) {
                    (Notice::Progress(params), Some(partial)) => partial.progress(params),
                    (Notice::Log(params), Some(partial)) => partial.log(params),
                    _ => {}
                }
                let Some(peer) = peer else { return };
                let sent = match notice {
                    Notice::Progress(mut params) => {
                        let Some(token) = token else { return };
                        params.progress_token = token;
                        peer.notify_progress(params).await
                    }
                    Notice::Log(params) => peer.notify_logging_message(params).await,
                };
                if let Err(e) = sent {
                    tracing::debug!("notification not delivered: {e}");
                }
            }
        };
        tokio::pin!(call);
        let result = loop {
            tokio::select! {
                biased;
                Some(notice) = notices.recv() => forward(notice).await,
                result = &mut call => break result,
            }
        };
        while let Ok(notice) = notices.try_recv() {
            forward(notice).await;
        }
        result.map(|r| in_clients_era(r, caller.legacy))
    }

    fn unknown(&self, what: &str, name: &str) -> ErrorData {
        let hint = if self.namer.prefixed() {
            let names: Vec<&str> = self.upstreams.iter().map(|u| u.name()).collect();
            format!(
                ": names are `<upstream>__<{what}>` with upstream one of {}",
                names.join(", ")
            )
        } else {
            String::new()
        };
        let name = sluice_core::format::quoted_cut(name);
        ErrorData::invalid_params(format!("unknown {what} `{name}`{hint}"), None)
    }
}

/// The client's `_meta`, minus what sluice sets itself on the upstream
/// request (the progress token, and the 2026-07-28 keys that describe
/// sluice, not the client; the client's `logLevel` preference is kept).
fn forwarded_meta(meta: &RequestMetaObject) -> Option<RequestMetaObject> {
    let mut forwarded = meta.clone();
    forwarded.0.0.retain(|key, _| {
        key != "progressToken"
            && !matches!(
                key.as_str(),
                "io.modelcontextprotocol/protocolVersion"
                    | "io.modelcontextprotocol/clientInfo"
                    | "io.modelcontextprotocol/clientCapabilities"
            )
    });
    (!forwarded.0.0.is_empty()).then_some(forwarded)
}

/// An upstream's result in the shape of the client's protocol era: the
/// upstream may speak the other one. A 2026-07-28 client requires
/// `resultType`; an older one knows no cache hints.
fn in_clients_era(mut result: ServerResult, legacy: bool) -> ServerResult {
    use rmcp::model::ResultType;
    if legacy {
        if let ServerResult::ReadResourceResult(r) = &mut result {
            r.ttl_ms = None;
            r.cache_scope = None;
        }
        return result;
    }
    let result_type = match &mut result {
        ServerResult::CompleteResult(r) => &mut r.result_type,
        ServerResult::GetPromptResult(r) => &mut r.result_type,
        ServerResult::ReadResourceResult(r) => &mut r.result_type,
        ServerResult::CallToolResult(r) => &mut r.result_type,
        _ => return result,
    };
    result_type.get_or_insert(ResultType::COMPLETE);
    result
}

/// `true` if either says so, `false` if either says so, else unsaid.
/// A result sluice made itself, shaped to the client's era.
fn era(mut result: rmcp::model::CallToolResult, caller: &Caller) -> rmcp::model::CallToolResult {
    if caller.legacy {
        result.result_type = None;
    }
    result
}

fn either(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(true), _) | (_, Some(true)) => Some(true),
        (None, None) => None,
        _ => Some(false),
    }
}

fn page(cursor: Option<String>) -> PaginatedRequestParams {
    PaginatedRequestParams::default().with_cursor(cursor)
}

/// Follows an upstream's list cursors to the end.
async fn list_all<T>(
    upstream: &Upstream,
    request: impl Fn(Option<String>) -> ClientRequest,
    extract: impl Fn(ServerResult) -> Option<(Vec<T>, Option<String>)>,
) -> Result<Vec<T>, CallError> {
    // A server that keeps returning cursors must not keep sluice paging forever.
    const MAX_PAGES: usize = 1000;
    let mut all = Vec::new();
    let mut cursor = None;
    let never = CancellationToken::new();
    for _ in 0..MAX_PAGES {
        let result = upstream
            .send(request(cursor.take()), None, &never, |_| Vec::new())
            .await?;
        let Some((items, next)) = extract(result) else {
            return Err(CallError::Unavailable(format!(
                "upstream `{}` answered a list request with an unexpected result",
                upstream.name()
            )));
        };
        all.extend(items);
        match next {
            Some(next) if !next.is_empty() => cursor = Some(next),
            _ => return Ok(all),
        }
    }
    Ok(all)
}

/// All of one upstream's tools, under their own names.
async fn upstream_tools(upstream: &Upstream) -> Result<Vec<Tool>, CallError> {
    list_all(
        upstream,
        |cursor| ClientRequest::ListToolsRequest(ListToolsRequest::with_param(page(cursor))),
        |r| match r {
            ServerResult::ListToolsResult(r) => Some((r.tools, r.next_cursor)),
            _ => None,
        },
    )
    .await
}

/// A `[upstreams.NAME.tools.TOOL]` table for a tool the upstream does not
/// have is most likely a typo: say so (the settings would apply to nothing).
async fn warn_unknown_tool_settings(upstream: &Upstream) {
    let Ok(tools) = upstream_tools(upstream).await else {
        return;
    };
    for name in upstream.spec.tools.keys() {
        if !tools.iter().any(|t| t.name == name.as_str()) {
            let known: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
            tracing::warn!(
                "the config has settings for tool `{name}` of upstream `{}`, which has no such tool (it has: {})",
                upstream.name(),
                known.join(", ")
            );
        }
    }
}

/// Whether the upstream declared a capability (starting it if needed).
async fn declares(upstream: &Upstream, test: impl Fn(&ServerCapabilities) -> bool) -> bool {
    match upstream.connection().await {
        Ok(conn) => conn.info().is_some_and(|info| test(&info.capabilities)),
        Err(_) => false,
    }
}

fn unexpected(upstream: &Upstream, method: &str, result: &ServerResult) -> ErrorData {
    let kind = format!("{result:?}");
    let kind = kind.split('(').next().unwrap_or_default();
    ErrorData::internal_error(
        format!(
            "upstream `{}` answered {method} with an unexpected {kind}",
            upstream.name()
        ),
        None,
    )
}

/// `result` marked as served from the cache (`_meta["sluice/cache"]`).
fn with_hit(
    mut result: rmcp::model::CallToolResult,
    entry: &crate::cache::Entry,
) -> rmcp::model::CallToolResult {
    let age = (entry.age().as_secs_f64() * 10.0).round() / 10.0;
    result.meta = Some(crate::govern::with_meta(
        result.meta,
        crate::cache::META,
        serde_json::json!({"hit": true, "age_s": age}),
    ));
    result
}

/// A call the cache may answer.
struct CachedCall {
    key: String,
    policy: sluice_core::cache::CachePolicy,
    /// `_fresh: true`: skip the entry and replace it.
    fresh: bool,
}

/// How an upstream tool call ended.
enum Done {
    /// An answer (governed), or a JSON-RPC error.
    Answer(Box<Result<CallToolResponse, ErrorData>>),
    /// The upstream could not be reached or died: why.
    Unavailable(String),
}

fn error_result(message: String) -> rmcp::model::CallToolResult {
    rmcp::model::CallToolResult::error(vec![rmcp::model::ContentBlock::text(message)])
}

/// The tool's configured `timeout_s`.
fn settings_timeout(upstream: &Upstream, tool: &str) -> Option<f64> {
    upstream.spec.tools.get(tool).and_then(|s| s.timeout_s)
}

fn call_error(error: CallError) -> ErrorData {
    match error {
        CallError::Upstream(e) => e,
        CallError::Unavailable(message) => ErrorData::internal_error(message, None),
        CallError::Cancelled => {
            ErrorData::new(ErrorCode::INTERNAL_ERROR, "request cancelled", None)
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
