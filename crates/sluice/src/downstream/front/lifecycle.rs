//! What a front answers besides the lists and the routed requests: the lifecycle (`initialize`, `ping`, `server/discover`), the
//! session's settings (`logging/setLevel`, resource subscriptions), tasks
//! (`tasks/get`, `tasks/update`, `tasks/cancel`), `subscriptions/listen`,
//! and an error that says what is wrong for every other request.
//!
//! Every client's request comes here (stdio, the in-memory connections of
//! the demo and the test harness, HTTP sessions and the HTTP requests that
//! stand alone; no rmcp server answers any): these rules are the ones
//! rmcp's server applied, kept so that clients see the same answers (one
//! exception: a request standing alone whose `_meta` names a version before
//! 2026-07-28, which rmcp served as a session of that version, is refused
//! with "send `initialize` first"):
//! - before `initialize`, a request stands alone only with the whole
//!   2026-07-28 lifecycle in its `_meta` (version, client info and
//!   capabilities), else `-32602` names what its `_meta` lacks; a `ping`
//!   is answered then whatever it says; `server/discover` always needs
//!   that `_meta`; `initialize` is answered before the next line is read;
//! - a version the request names that sluice does not know gets
//!   `-32022` (unsupported protocol version) with the versions it knows;
//! - the methods 2026-07-28 removed (`ping` for a request standing alone,
//!   `resources/(un)subscribe`) are not found in that era (a
//!   `logging/setLevel` goes to the upstreams, which answer it as their era
//!   does), and `subscriptions/listen` is not found in the older one;
//! - `tasks/*` need the client to have declared the tasks extension;
//! - a standard method whose params do not read gets `-32602` with why;
//!   any other method `-32601` (a request whose `params` is `null` gets
//!   `-32600` from the framing, `downstream::lines`);
//! - what is answered here is answered even if the client's input ends
//!   right after the request (only calls are cancelled then).

use std::sync::Arc;

use bytes::Bytes;
use futures::FutureExt as _;
use rmcp::model::GetMeta as _;
use rmcp::model::{
    CancelTaskParams, ClientCapabilities, DiscoverResult, ErrorCode, ErrorData, GetTaskParams,
    InitializeRequestParams, InitializeResult, NotificationMetaObject, ProtocolVersion,
    RequestMetaObject, ServerJsonRpcMessage, ServerNotification, ServerResult,
    SetLevelRequestParams, SubscribeRequestParams, SubscriptionFilter,
    SubscriptionsAcknowledgedNotification, SubscriptionsAcknowledgedNotificationParams,
    SubscriptionsListenResult,
};
use tokio_util::sync::CancellationToken;

use super::{Front, Taken, lock};
use crate::downstream::answer::{answer_line, for_era, task_line};
use crate::downstream::outbox;
use crate::era::Era;
use crate::hub::{Event, FirstClient};
use crate::jsonrpc::{Id, Message};

/// The protocol versions sluice serves.
pub fn supported_versions() -> &'static [ProtocolVersion] {
    ProtocolVersion::KNOWN_VERSIONS
}

/// The answer to `initialize` for `request`, from what sluice declares
/// (`info`): the client's version when sluice serves it over `initialize`,
/// else sluice's own (or the newest one that still has `initialize`).
pub fn negotiated(
    request: &InitializeRequestParams,
    mut info: InitializeResult,
) -> Result<InitializeResult, ErrorData> {
    let requested = &request.protocol_version;
    let supported = supported_versions();
    info.protocol_version = if requested.has_initialize() && supported.contains(requested) {
        requested.clone()
    } else if info.protocol_version.has_initialize() {
        info.protocol_version
    } else {
        supported
            .iter()
            .filter(|v| v.has_initialize())
            .max_by(|a, b| a.as_str().cmp(b.as_str()))
            .cloned()
            .ok_or_else(|| ErrorData::unsupported_protocol_version(requested.clone(), supported))?
    };
    Ok(info)
}

/// `tasks/get` of `task_id` for `caller`, of the initialize era
/// (`legacy`) or not: the task, with a completed call's result as its
/// upstream sent it.
pub(super) async fn task(
    gateway: &crate::gateway::Gateway,
    task_id: &str,
    caller: &crate::gateway::Caller,
    legacy: bool,
) -> Result<Answered, ErrorData> {
    if !caller.tasks {
        return Err(missing_tasks());
    }
    let (task, call) = gateway.get_task_as_sent(task_id, caller).await?;
    let task = for_era(ServerResult::GetTaskResult(task), legacy)?;
    Ok(match call {
        Some(call) => Answered::Task { task, call, legacy },
        None => Answered::Made(task),
    })
}

/// A request that stands alone with a complete `_meta` naming a version
/// before 2026-07-28 (which has no such requests).
fn no_session() -> ErrorData {
    ErrorData::invalid_request(
        "sluice answers a request of no session only in protocol 2026-07-28: send `initialize` first, or name 2026-07-28 in the request's `_meta`",
        None,
    )
}

fn missing_tasks() -> ErrorData {
    ErrorData::missing_required_client_capability(
        ClientCapabilities::builder().enable_tasks().build(),
    )
}

/// A request answered here, as it was asked.
#[derive(Clone, Copy)]
struct Asked<'a> {
    sent: &'a Message,
    id: &'a Id,
    /// The HTTP request that carried it (who sent it, from where).
    http: Option<&'a http::request::Parts>,
    /// Where notifications about it go.
    stream: &'a outbox::Sender,
    /// Cancels it.
    ct: &'a CancellationToken,
}

/// What answers a request here.
pub(super) enum Answered {
    /// A result sluice made.
    Made(ServerResult),
    /// A task (`tasks/get`) whose result is a call's, as the upstream sent
    /// it (`call`, the response it came in), for a client of the
    /// initialize era (`legacy`) or not.
    Task {
        task: ServerResult,
        call: Message,
        legacy: bool,
    },
}

impl Answered {
    /// The line that answers request `id` with it.
    pub(super) fn line(self, id: &Id) -> Bytes {
        match self {
            Answered::Made(result) => answer_line(id, Ok(result)),
            Answered::Task { task, call, legacy } => task_line(id, task, &call, legacy),
        }
    }
}

/// The methods answered here (besides those [`Front::take`] answers).
const LIFECYCLE: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "subscriptions/listen",
];

/// The methods 2026-07-28 removed that sluice refuses in that era
/// (`logging/setLevel` goes to the upstreams, which answer it as their
/// era does).
const REMOVED_IN_2026: &[&str] = &["resources/subscribe", "resources/unsubscribe"];

fn not_found(method: &str) -> ErrorData {
    ErrorData::new(
        ErrorCode::METHOD_NOT_FOUND,
        format!("method not found: {method}"),
        None,
    )
}

fn removed_in_2026(method: &str) -> ErrorData {
    ErrorData::new(
        ErrorCode::METHOD_NOT_FOUND,
        format!("method not found: {method} was removed in protocol 2026-07-28"),
        None,
    )
}

/// Why a request's `_meta.progressToken` cannot be one: JSON-RPC's
/// invalid params. It must be a string or a number (`null` is as absent).
pub(super) fn progress_token_fault(meta: &RequestMetaObject) -> Option<ErrorData> {
    use serde_json::Value;
    let found = match meta.0.0.get("progressToken")? {
        Value::String(_) | Value::Number(_) | Value::Null => return None,
        Value::Bool(_) => "a boolean",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    Some(ErrorData::invalid_params(
        format!("params._meta.progressToken is {found}; it must be a string or a number"),
        None,
    ))
}

fn invalid_params(method: &str, why: impl std::fmt::Display) -> ErrorData {
    ErrorData::invalid_params(format!("invalid parameters for {method}: {why}"), None)
}

/// `params` read as `T` (absent params as an empty object).
fn typed<T: serde::de::DeserializeOwned>(
    method: &str,
    params: Option<&str>,
) -> Result<T, ErrorData> {
    serde_json::from_str(params.unwrap_or("{}")).map_err(|e| invalid_params(method, e))
}

impl Front {
    /// Takes any request of a connection (see [`Front::take`]): what
    /// `take` answers, else what this module does. `None`: not a request.
    /// `http`: the HTTP request that carried it, if one did.
    pub fn take_any(
        self: &Arc<Self>,
        message: &Message,
        http: Option<&http::request::Parts>,
        stream: outbox::Sender,
    ) -> Option<Taken> {
        if let Some(taken) = self.take(message, http, stream.clone()) {
            return Some(taken);
        }
        let id = message.id()?;
        if message.kind() != crate::jsonrpc::Kind::Request {
            return None;
        }
        if let Some(fault) = self.id_fault(&id) {
            return Some(Taken::refused(&id, fault));
        }
        // Counted as the others are: `subscriptions/listen` holds its
        // stream (and a connection) open for as long as the client likes.
        let slot = match self.admitted(http) {
            Ok(slot) => slot,
            Err(refused) => return Some(Taken::refused(&id, refused)),
        };
        let method = message.method()?.to_owned();
        let http = http.cloned();
        let params = message.params().map(str::to_owned);
        let sent = message.clone();
        // Not a child of the front's stop: what is answered here is answered
        // even when the client's input ends right after it (a piped
        // `initialize`), as rmcp's server did; only the client's own
        // cancellation drops it (`subscriptions/listen` ends at the stop
        // with its final result).
        let ct = CancellationToken::new();
        // In use since `id_fault` above only if another request of an HTTP
        // session with this id came in meanwhile.
        let Some(running) = self.register(&id, &ct) else {
            return Some(Taken::refused(&id, super::in_use(&id)));
        };
        let front = self.clone();
        Some(
            Taken {
                ct: ct.clone(),
                work: async move {
                    let _running = running;
                    let asked = Asked {
                        sent: &sent,
                        id: &id,
                        http: http.as_ref(),
                        stream: &stream,
                        ct: &ct,
                    };
                    let answer = front.answer(&method, params.as_deref(), &asked).await;
                    Front::finished(&ct)?;
                    Some(answer.map_or_else(|e| answer_line(&id, Err(e)), |a| a.line(&id)))
                }
                .boxed(),
            }
            .holding(slot),
        )
    }

    /// Takes `message` if it is a notification the front acts on: a
    /// cancellation (of a request running here), and in a session
    /// `initialized` (nothing to do) and the client's roots changing (told
    /// to every upstream).
    pub fn notified(self: &Arc<Self>, message: &Message) -> bool {
        if message.kind() != crate::jsonrpc::Kind::Notification {
            return false;
        }
        match message.method() {
            Some("notifications/cancelled") => {
                self.cancelled(message);
                true
            }
            _ if !self.connection => false,
            Some("notifications/initialized") => true,
            Some("notifications/roots/list_changed") => {
                let gateway = self.gateway.clone();
                tokio::spawn(async move {
                    for upstream in gateway.upstreams() {
                        if let Some(conn) = upstream.current().await {
                            conn.notify_roots_list_changed().await;
                        }
                    }
                });
                true
            }
            _ => false,
        }
    }

    /// The client's `initialize`, once it came: what it said of itself,
    /// with the version agreed.
    pub fn hello(&self) -> Option<Arc<InitializeRequestParams>> {
        lock(&self.hello).clone()
    }

    /// Answers request `method` (which [`Front::take`] did not take).
    async fn answer(
        self: &Arc<Self>,
        method: &str,
        params: Option<&str>,
        asked: &Asked<'_>,
    ) -> Result<Answered, ErrorData> {
        let Asked { id, stream, ct, .. } = *asked;
        let standard = LIFECYCLE.contains(&method) || super::Method::of(method).is_some();
        if !standard {
            return Err(not_found(method));
        }
        #[derive(serde::Deserialize)]
        struct Params {
            #[serde(rename = "_meta", default)]
            meta: Option<RequestMetaObject>,
        }
        let meta = match params {
            None => RequestMetaObject::default(),
            Some(params) => serde_json::from_str::<Params>(params)
                .map_err(|e| invalid_params(method, e))?
                .meta
                .unwrap_or_default(),
        };
        if let Some(fault) = progress_token_fault(&meta) {
            return Err(fault);
        }
        // Requests that stand alone open no session (an HTTP client's
        // `initialize` opens one of its own: `http_endpoint`); one that
        // reaches the front of those is of 2026-07-28, which removed it.
        if method == "initialize" && !self.connection {
            return Err(removed_in_2026(method));
        }
        if method == "initialize" {
            let principal = asked
                .http
                .and_then(|parts| parts.extensions.get::<crate::downstream::auth::Principal>());
            return self
                .initialize(typed(method, params)?, principal)
                .await
                .map(Answered::Made);
        }
        let hello = self.hello();
        // Before `initialize`, a ping is answered whatever it says.
        if method == "ping" && hello.is_none() && self.connection {
            return Ok(Answered::Made(ServerResult::empty(())));
        }
        let requested = meta.protocol_version();
        let era = Era::of(
            requested
                .as_ref()
                .or(hello.as_ref().map(|h| &h.protocol_version)),
        );
        // A request of no session stands alone: its `_meta` must carry the
        // whole lifecycle.
        let alone = method == "server/discover" || hello.is_none() || era == Era::Stateless;
        let missing = if alone {
            meta.missing_required_keys(&ProtocolVersion::V_2026_07_28)
        } else {
            Vec::new()
        };
        let incomplete = (!missing.is_empty()).then(|| {
            ErrorData::invalid_params(
                format!(
                    "request _meta is missing or has malformed required fields: {}",
                    missing.join(", ")
                ),
                None,
            )
        });
        let unknown = requested
            .filter(|version| !supported_versions().contains(version))
            .map(|version| ErrorData::unsupported_protocol_version(version, supported_versions()));
        // rmcp's order: before `initialize` the `_meta` is checked first,
        // in a session the version.
        let refused = if hello.is_none() {
            incomplete.or(unknown)
        } else {
            unknown.or(incomplete)
        };
        if let Some(error) = refused {
            return Err(error);
        }
        let legacy = era.is_legacy();
        let result = match method {
            "ping" if legacy => ServerResult::empty(()),
            "ping" => return Err(not_found(method)),
            "server/discover" => {
                self.gateway
                    .begin_and_wait(&FirstClient {
                        capabilities: meta.client_capabilities().unwrap_or_default(),
                        initialize_version: None,
                    })
                    .await;
                ServerResult::DiscoverResult(DiscoverResult::from_server_info(
                    supported_versions().to_vec(),
                    self.gateway.info(),
                ))
            }
            _ if !legacy && REMOVED_IN_2026.contains(&method) => {
                return Err(removed_in_2026(method));
            }
            "subscriptions/listen" if legacy => return Err(not_found(method)),
            "logging/setLevel" => {
                // A 2026-07-28 one that does not even read as one is a
                // method that era removed (rmcp's rule); one that reads
                // goes to the upstreams, which answer it as their era does.
                let params: SetLevelRequestParams = typed(method, params)
                    .map_err(|e| if legacy { e } else { removed_in_2026(method) })?;
                let caller = self.caller(asked, meta)?;
                self.gateway.set_level(params, &caller).await?;
                ServerResult::empty(())
            }
            "resources/subscribe" | "resources/unsubscribe" => {
                let params: SubscribeRequestParams = typed(method, params)?;
                let caller = self.caller(asked, meta)?;
                let subscribe = method == "resources/subscribe";
                self.gateway
                    .subscribe(params.uri, subscribe, &caller)
                    .await?;
                ServerResult::empty(())
            }
            // (`tasks/get` is `take`'s: here only when its params do not read.)
            "tasks/update" | "tasks/cancel" => {
                let caller = self.caller(asked, meta)?;
                if !caller.tasks {
                    return Err(missing_tasks());
                }
                if method == "tasks/cancel" {
                    let params: CancelTaskParams = typed(method, params)?;
                    self.gateway.cancel_task(&params.task_id, &caller).await?;
                    ServerResult::task_ack(())
                } else {
                    let params: GetTaskParams = typed(method, params)?;
                    return Err(ErrorData::invalid_params(
                        format!(
                            "task {} takes no input: sluice's tasks never ask for any",
                            params.task_id
                        ),
                        None,
                    ));
                }
            }
            "subscriptions/listen" => {
                #[derive(serde::Deserialize)]
                struct Listen {
                    #[serde(default)]
                    notifications: SubscriptionFilter,
                }
                let listen: Listen = typed(method, params)?;
                self.listen(listen.notifications, id, stream, ct).await?
            }
            // A method `take` answers, whose params it could not read, or
            // that names an older version without `initialize`.
            _ => {
                return Err(match why_unread(method, params) {
                    Some(why) => invalid_params(method, why),
                    None => no_session(),
                });
            }
        };
        for_era(result, legacy).map(Answered::Made)
    }

    /// The [`crate::gateway::Caller`] of a request answered here.
    fn caller(
        &self,
        asked: &Asked<'_>,
        meta: RequestMetaObject,
    ) -> Result<crate::gateway::Caller, ErrorData> {
        // The request's own token (registered by `take_any`) cancels it.
        self.begin_with(
            asked.sent,
            asked.id,
            meta,
            asked.http,
            asked.stream.clone(),
            asked.ct.clone(),
        )
        .map(|begun| begun.caller)
        .ok_or_else(no_session)
    }

    /// `initialize`: sluice's answer, and the session opened.
    async fn initialize(
        self: &Arc<Self>,
        request: InitializeRequestParams,
        principal: Option<&crate::downstream::auth::Principal>,
    ) -> Result<ServerResult, ErrorData> {
        let version = negotiated(&request, self.gateway.info())?.protocol_version;
        let mut hello = request.clone();
        hello.protocol_version = version.clone();
        let hello = Arc::new(hello);
        *lock(&self.hello) = Some(hello.clone());
        // The session as negotiated (the version sluice answers with).
        crate::downstream::session::open(
            &self.gateway,
            self.session,
            &hello,
            principal,
            self.link.get().cloned(),
            self.stop.clone(),
        )
        .await;
        // What sluice declares once its upstreams answered (`open` waited).
        let mut result = self.gateway.info();
        result.protocol_version = version;
        Ok(ServerResult::InitializeResult(result))
    }

    /// `subscriptions/listen`: acknowledges the accepted filter, then sends
    /// the list changes it accepts, each with the subscription's id in its
    /// `_meta`, until the client cancels the request or leaves.
    async fn listen(
        &self,
        requested: SubscriptionFilter,
        id: &Id,
        stream: &outbox::Sender,
        ct: &CancellationToken,
    ) -> Result<ServerResult, ErrorData> {
        let request = crate::caller::request_id(id).ok_or_else(|| {
            ErrorData::invalid_request(crate::caller::unread_request_id(id), None)
        })?;
        let info = self.gateway.info();
        // Per-resource subscriptions are not relayed upstream yet, so they
        // are not acknowledged either (the client sees what it will get).
        let mut candidate = requested.clone();
        candidate.resource_subscriptions = None;
        let accepted = requested
            .intersection(&candidate)
            .intersection(&requested.supported_by(&info.capabilities));
        let mut events = self.gateway.hub().subscribe();
        let mut ack = SubscriptionsAcknowledgedNotification::new(
            SubscriptionsAcknowledgedNotificationParams::new(accepted.clone()),
        );
        let mut meta = NotificationMetaObject::new();
        meta.set_subscription_id(request.clone());
        ack.extensions.insert(meta);
        let send = |notification: ServerNotification| {
            let message = ServerJsonRpcMessage::notification(notification);
            let bytes = serde_json::to_vec(&message).expect("rmcp's messages serialize");
            stream.send(Bytes::from(bytes))
        };
        if send(ServerNotification::SubscriptionsAcknowledgedNotification(
            ack,
        ))
        .await
        .is_err()
        {
            return Err(ErrorData::internal_error("the client is gone", None));
        }
        'listening: loop {
            let batch = tokio::select! {
                () = ct.cancelled() => break,
                () = self.stop.cancelled() => break,
                // Only list changes go on a listen stream: no principal's
                // event (a log message) is needed.
                batch = crate::hub::next_events(&mut events, self.session, None) => batch,
            };
            let Some(batch) = batch else { break };
            for event in batch {
                let (mut notification, wanted) = match event {
                    Event::ToolsChanged => (
                        ServerNotification::ToolListChangedNotification(Default::default()),
                        accepted.tools_list_changed,
                    ),
                    Event::PromptsChanged => (
                        ServerNotification::PromptListChangedNotification(Default::default()),
                        accepted.prompts_list_changed,
                    ),
                    Event::ResourcesChanged => (
                        ServerNotification::ResourceListChangedNotification(Default::default()),
                        accepted.resources_list_changed,
                    ),
                    _ => continue,
                };
                if wanted != Some(true) {
                    continue;
                }
                notification
                    .get_meta_mut()
                    .set_subscription_id(request.clone());
                if send(notification).await.is_err() {
                    break 'listening;
                }
            }
        }
        let mut result = SubscriptionsListenResult::complete(request);
        result.meta.set_server_info(info.server_info);
        Ok(ServerResult::SubscriptionsListenResult(result))
    }
}

/// Why the params of `method` (one [`Front::take`] answers) do not read;
/// `None` if they do.
fn why_unread(method: &str, params: Option<&str>) -> Option<String> {
    use rmcp::model::{CompleteRequestParams, PaginatedRequestParams, ReadResourceRequestParams};
    let params = params.unwrap_or("{}");
    if !params.trim_start().starts_with('{') {
        return Some("params must be a JSON object".to_owned());
    }
    let error = match method {
        // Read as `Front::take` reads them: the arguments not decoded.
        "tools/call" | "prompts/get" => crate::gateway::NamedParams::why_unread(params),
        "resources/read" => serde_json::from_str::<ReadResourceRequestParams>(params).err(),
        "completion/complete" => serde_json::from_str::<CompleteRequestParams>(params).err(),
        "tasks/get" => serde_json::from_str::<rmcp::model::GetTaskParams>(params).err(),
        _ => serde_json::from_str::<Option<PaginatedRequestParams>>(params).err(),
    };
    error.map(|e| e.to_string())
}
