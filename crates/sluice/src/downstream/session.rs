//! One downstream client session: the MCP server face of sluice.
//!
//! A `Session` is made per client connection (stdio: one; Streamable HTTP:
//! one per session, or one per request for 2026-07-28 stateless clients)
//! and delegates everything to the shared [`Gateway`].

use std::sync::Arc;

use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
    CompleteResult, DiscoverResult, ErrorData, GetPromptRequestParams, GetPromptResponse,
    GetTaskParams, GetTaskResult, InitializeRequestParams, InitializeResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ServerConfig, ServerNotification,
    SetLevelRequestParams, SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
    UpdateTaskParams,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, RoleServer, SubscriptionContext};

use sluice_core::store::Owner;

use crate::caller::Caller;
use crate::downstream::PeerAddr;
use crate::downstream::auth::Principal;
use crate::era::Era;
use crate::gateway::Gateway;
use crate::hub::{Event, FirstClient, SessionEntry, SessionId};

/// The handler of one client session of Streamable HTTP (a connection's
/// messages are all answered by its front: `downstream::stdio`).
pub struct Session {
    gateway: Arc<Gateway>,
    id: SessionId,
    /// Stops this session's background tasks when it ends.
    closed: tokio_util::sync::CancellationToken,
}

impl Session {
    /// Its id in the Hub.
    pub fn id(&self) -> SessionId {
        self.id
    }

    /// A session in front of `gateway`, made per Streamable HTTP session
    /// (or per request, for 2026-07-28 stateless clients).
    pub fn new(gateway: Arc<Gateway>) -> Self {
        let id = gateway.hub().new_session_id();
        Self {
            gateway,
            id,
            closed: Default::default(),
        }
    }

    fn caller(&self, ctx: &RequestContext<RoleServer>) -> Caller {
        let http = ctx.extensions.get::<http::request::Parts>();
        self.caller_of(&Asking {
            meta: &ctx.meta,
            peer: Some(&ctx.peer),
            request: ctx.id.clone(),
            ct: ctx.ct.clone(),
            era: Era::of(ctx.protocol_version().as_ref()),
            capabilities: ctx.client_capabilities(),
            client: ctx.client_info().map(|info| info.name),
            principal: http.and_then(|parts| parts.extensions.get::<Principal>()),
            address: http.and_then(|p| p.extensions.get::<PeerAddr>()),
            sent_request: None,
            stream: None,
            link: None,
        })
    }

    fn caller_of(&self, asking: &Asking<'_>) -> Caller {
        caller_of(&self.gateway, self.id, false, asking)
    }
}

/// The [`Caller`] of one request of session `id` (`connection`: the whole
/// connection is the session, as stdio's is), whichever layer read it
/// (rmcp's server, or sluice's own for the methods it has taken over).
pub(crate) fn caller_of(
    gateway: &Arc<Gateway>,
    id: SessionId,
    connection: bool,
    asking: &Asking<'_>,
) -> Caller {
    // Only sessions that completed `initialize` are registered; a
    // 2026-07-28 request stands alone.
    let session = gateway.hub().has_session(id).then_some(id);
    if session.is_none() {
        // A 2026-07-28 request declares its client's capabilities itself.
        gateway.begin(&FirstClient {
            capabilities: asking.capabilities.clone().unwrap_or_default(),
            initialize_version: None,
        });
    }
    // With `[auth]` everything belongs to the principal, whichever session
    // it comes with. Without, stored results belong to the session; a
    // stateless HTTP request has none, so its results are reachable by
    // their unguessable handle alone.
    let owner = if let Some(principal) = asking.principal {
        Owner::Principal(principal.0.clone())
    } else if session.is_some() || connection {
        Owner::Session(id)
    } else {
        Owner::Anonymous
    };
    let quota = match (&owner, asking.address) {
        (Owner::Anonymous, Some(PeerAddr(addr))) => format!("address:{}", addr.ip()),
        (owner, _) => owner.key(),
    };
    Caller {
        era: asking.era,
        owner,
        quota,
        client: asking.client.clone(),
        session,
        peer: asking.peer.cloned(),
        request: asking.request.clone(),
        meta: asking.meta.clone(),
        ct: asking.ct.clone(),
        partial: None,
        // Declared at `initialize`, or with this very request.
        tasks: asking
            .capabilities
            .as_ref()
            .is_some_and(|c| c.supports_tasks()),
        sent_request: asking.sent_request.clone(),
        stream: asking.stream.clone(),
        link: asking.link.clone(),
    }
}

/// What is known of one request's asker, for [`caller_of`].
pub(crate) struct Asking<'a> {
    /// The request's `_meta`.
    pub meta: &'a rmcp::model::RequestMetaObject,
    /// Where to reach the client (none for a 2026-07-28 request over HTTP
    /// that sluice's own layer answers: its notifications go on
    /// [`Self::stream`]).
    pub peer: Option<&'a Peer<RoleServer>>,
    /// The request's id.
    pub request: rmcp::model::RequestId,
    /// Fires when the client cancels it or leaves.
    pub ct: tokio_util::sync::CancellationToken,
    /// The request's protocol era.
    pub era: Era,
    /// The client's capabilities (from `initialize`, or the request's `_meta`).
    pub capabilities: Option<rmcp::model::ClientCapabilities>,
    /// The client's `clientInfo.name`.
    pub client: Option<String>,
    /// Who an HTTP request authenticated as.
    pub principal: Option<&'a Principal>,
    /// Where an HTTP request came from.
    pub address: Option<&'a PeerAddr>,
    /// The request as sent, when sluice's own layer read it.
    pub sent_request: Option<crate::jsonrpc::Message>,
    /// Where notifications about the request go, when sluice's own layer
    /// answers it (see [`Caller::stream`]).
    pub stream: Option<tokio::sync::mpsc::Sender<bytes::Bytes>>,
    /// Where sluice's own layer asks the client (when no `peer` does).
    pub link: Option<Arc<crate::downstream::link::ClientLink>>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.gateway.hub().remove_session(self.id);
        self.closed.cancel();
    }
}

/// Opens session `id` of a client that sent `request` (`initialize`):
/// starts the upstreams for the first client (and waits for them, within
/// bounds), registers the session in the Hub, and forwards the gateway's
/// events to it (through rmcp's `peer`, or sluice's own `link`) until
/// `closed` fires.
pub(crate) async fn open(
    gateway: &Arc<Gateway>,
    id: SessionId,
    request: &InitializeRequestParams,
    peer: Option<Peer<RoleServer>>,
    link: Option<Arc<crate::downstream::link::ClientLink>>,
    closed: tokio_util::sync::CancellationToken,
) {
    gateway
        .begin_and_wait(&FirstClient {
            capabilities: request.capabilities.clone(),
            initialize_version: Some(request.protocol_version.clone()),
        })
        .await;
    tracing::info!(
        session = id,
        client = %request.client_info.name,
        version = %request.protocol_version,
        "client connected"
    );
    let again = gateway.hub().has_session(id);
    gateway.hub().add_session(
        id,
        SessionEntry {
            peer: peer.clone(),
            capabilities: request.capabilities.clone(),
            subscriptions: Default::default(),
            log_level: None,
            link,
        },
    );
    // The client left while the upstreams started: no session to keep.
    if closed.is_cancelled() {
        gateway.hub().remove_session(id);
        return;
    }
    // A second `initialize` on a session renews its entry; its events
    // already flow.
    if !again {
        tokio::spawn(forward_events(gateway.clone(), id, peer, closed));
    }
}

/// Forwards the gateway's events to a legacy (initialize) session until it
/// closes: through sluice's own layer where it writes to the client, else
/// through rmcp's `peer`.
async fn forward_events(
    gateway: Arc<Gateway>,
    id: SessionId,
    peer: Option<Peer<RoleServer>>,
    closed: tokio_util::sync::CancellationToken,
) {
    use tokio::sync::broadcast::error::RecvError;
    let mut events = gateway.hub().subscribe();
    // Where sluice's own layer writes the session's messages that belong to
    // no call, if anywhere: the link's sender, asked per event (an HTTP
    // session's GET stream comes and goes).
    let link = gateway.hub().session(id).and_then(|s| s.link);
    let link_sender = || link.as_ref().and_then(|link| link.sender());
    loop {
        let received = tokio::select! {
            () = closed.cancelled() => return,
            received = events.recv() => received,
        };
        let event = match received {
            Ok(event) => event,
            Err(RecvError::Lagged(n)) => {
                tracing::warn!(
                    session = id,
                    "dropped {n} notifications: the client is slow"
                );
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        if peer.as_ref().is_some_and(Peer::is_transport_closed) || !gateway.hub().has_session(id) {
            return;
        }
        let notification = match event {
            Event::ToolsChanged => {
                ServerNotification::ToolListChangedNotification(Default::default())
            }
            Event::PromptsChanged => {
                ServerNotification::PromptListChangedNotification(Default::default())
            }
            Event::ResourcesChanged => {
                ServerNotification::ResourceListChangedNotification(Default::default())
            }
            Event::ResourceUpdated(uri) => {
                let subscribed = gateway
                    .hub()
                    .session(id)
                    .is_some_and(|s| s.subscriptions.contains(&uri));
                if !subscribed {
                    continue;
                }
                ServerNotification::ResourceUpdatedNotification(
                    rmcp::model::ResourceUpdatedNotification::new(
                        rmcp::model::ResourceUpdatedNotificationParam::new(uri),
                    ),
                )
            }
            Event::Log(ref logged) => {
                // Where sluice's own layer writes to the client (a stdio
                // connection, an HTTP session's GET stream), as the
                // upstream sent it.
                if let Some(raw) = &logged.raw
                    && let Some(out) = link_sender()
                {
                    if out.send(raw.as_bytes().clone()).await.is_err() {
                        tracing::debug!(session = id, "log message not delivered: stream closed");
                    }
                    continue;
                }
                ServerNotification::LoggingMessageNotification(
                    rmcp::model::LoggingMessageNotification::new(logged.params.clone()),
                )
            }
        };
        // In order with the log messages sluice's layer writes.
        if let Some(out) = link_sender() {
            let message = rmcp::model::ServerJsonRpcMessage::notification(notification);
            let bytes = serde_json::to_vec(&message).expect("rmcp's messages serialize");
            if out.send(bytes::Bytes::from(bytes)).await.is_err() {
                tracing::debug!(session = id, "notification not delivered: stream closed");
            }
            continue;
        }
        let Some(peer) = &peer else {
            tracing::debug!(session = id, "notification not delivered: no stream open");
            continue;
        };
        if let Err(e) = peer.send_notification(notification).await {
            tracing::debug!(session = id, "notification not delivered: {e}");
            if peer.is_transport_closed() {
                return;
            }
        }
    }
}

impl ServerHandler for Session {
    fn get_info(&self) -> ServerConfig {
        self.gateway.info()
    }

    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        self.gateway
            .begin_and_wait(&FirstClient {
                capabilities: context.client_capabilities().unwrap_or_default(),
                initialize_version: None,
            })
            .await;
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            self.gateway.info(),
        ))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        let registration = context
            .extensions
            .get::<crate::downstream::http_sessions::Registration>();
        // An HTTP session relays server→client requests on the stream of
        // the call that caused them.
        let link =
            registration.map(|_| Arc::new(crate::downstream::link::ClientLink::per_stream()));
        open(
            &self.gateway,
            self.id,
            &request,
            Some(context.peer.clone()),
            link.clone(),
            self.closed.clone(),
        )
        .await;
        // An HTTP session: sluice answers the requests its front takes.
        if let Some(registration) = registration {
            let front = crate::downstream::front::Front::new(self.gateway.clone(), self.id, false);
            front.attach(context.peer.clone());
            if let Some(link) = link {
                front.set_link(link);
            }
            registration.register(front);
        }
        crate::downstream::front::negotiated(&request, self.gateway.info())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.gateway
            .list_tools()
            .await
            .map(ListToolsResult::with_all_items)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.gateway
            .call_tool(request, &self.caller(&context))
            .await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.gateway
            .get_task(&request.task_id, &self.caller(&context))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        // An operation never waits for input: one that would is answered
        // as a failure instead.
        Err(ErrorData::invalid_params(
            format!(
                "task {} takes no input: sluice's tasks never ask for any",
                request.task_id
            ),
            None,
        ))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.gateway
            .cancel_task(&request.task_id, &self.caller(&context))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.gateway
            .list_prompts()
            .await
            .map(ListPromptsResult::with_all_items)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.gateway
            .get_prompt(request, &self.caller(&context))
            .await
            .map(|relayed| relayed.response)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.gateway
            .list_resources()
            .await
            .map(ListResourcesResult::with_all_items)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.gateway
            .list_resource_templates()
            .await
            .map(ListResourceTemplatesResult::with_all_items)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.gateway
            .read_resource(request, &self.caller(&context))
            .await
            .map(|relayed| relayed.response)
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.gateway
            .subscribe(request.uri, true, &self.caller(&context))
            .await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.gateway
            .subscribe(request.uri, false, &self.caller(&context))
            .await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.gateway
            .complete(request, &self.caller(&context))
            .await
            .map(|relayed| relayed.response)
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.gateway
            .set_level(request, &self.caller(&context))
            .await
    }

    async fn on_roots_list_changed(&self, _context: NotificationContext<RoleServer>) {
        for upstream in self.gateway.upstreams() {
            if let Some(conn) = upstream.current().await {
                conn.notify_roots_list_changed().await;
            }
        }
    }

    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, ErrorData> {
        // Methods 2026-07-28 removed are not found in that era, whatever
        // their params (rmcp only routes here those it could not parse; the
        // HTTP layer answers -32601 with 404, as SEP-2575 asks).
        const REMOVED_IN_2026: &[&str] = &[
            "initialize",
            "logging/setLevel",
            "resources/subscribe",
            "resources/unsubscribe",
        ];
        if Era::of(context.protocol_version().as_ref()) == Era::Stateless
            && REMOVED_IN_2026.contains(&request.method.as_str())
        {
            return Err(ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                format!(
                    "method not found: {} was removed in protocol 2026-07-28",
                    request.method
                ),
                None,
            ));
        }
        // rmcp hands a standard method whose params do not parse to this
        // catch-all: say what is wrong with them instead of "not found".
        const STANDARD: &[&str] = &[
            "initialize",
            "ping",
            "tools/list",
            "tools/call",
            "prompts/list",
            "prompts/get",
            "resources/list",
            "resources/templates/list",
            "resources/read",
            "resources/subscribe",
            "resources/unsubscribe",
            "completion/complete",
            "logging/setLevel",
            "server/discover",
        ];
        if STANDARD.contains(&request.method.as_str()) {
            let params = request.params.clone().unwrap_or_default();
            let why = match request.method.as_str() {
                "tools/call" => serde_json::from_value::<CallToolRequestParams>(params).err(),
                "prompts/get" => serde_json::from_value::<GetPromptRequestParams>(params).err(),
                "resources/read" => {
                    serde_json::from_value::<ReadResourceRequestParams>(params).err()
                }
                "completion/complete" => {
                    serde_json::from_value::<CompleteRequestParams>(params).err()
                }
                _ => None,
            }
            .map_or_else(
                || "see the MCP schema for this method".to_owned(),
                |e| e.to_string(),
            );
            return Err(ErrorData::invalid_params(
                format!("invalid parameters for {}: {why}", request.method),
                None,
            ));
        }
        Err(ErrorData::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            format!("method not found: {}", request.method),
            None,
        ))
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // List changes are forwarded; per-resource subscriptions of
        // 2026-07-28 clients are not relayed upstream yet, so they are not
        // acknowledged either (the client sees exactly what it will get).
        let mut accepted = requested.clone();
        accepted.resource_subscriptions = None;
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        use tokio::sync::broadcast::error::RecvError;
        let mut events = self.gateway.hub().subscribe();
        loop {
            let event = tokio::select! {
                () = context.cancelled() => return Ok(()),
                event = events.recv() => event,
            };
            let sent = match event {
                Ok(Event::ToolsChanged) => context.sink().notify_tool_list_changed().await,
                Ok(Event::PromptsChanged) => context.sink().notify_prompt_list_changed().await,
                Ok(Event::ResourcesChanged) => context.sink().notify_resource_list_changed().await,
                Ok(Event::ResourceUpdated(uri)) => {
                    context.sink().notify_resource_updated(uri).await
                }
                Ok(Event::Log(..)) | Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return Ok(()),
            };
            if let Err(e) = sent {
                tracing::debug!("subscription notification not sent: {e}");
            }
        }
    }
}
