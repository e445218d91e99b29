//! sluice's own handling of a client's requests, on a stdio connection
//! ([`super::lines`]) or over HTTP ([`super::http_endpoint`], and its fast
//! path [`super::http_front`]).
//!
//! Every message the client sends is read by sluice's JSON-RPC layer
//! first, and every request is answered here, with bytes sluice writes
//! itself: the lifecycle and what has no route ([`lifecycle`], through
//! [`Front::take_any`]), and the requests below ([`Front::take`]). There is
//! a front per stdio connection, per HTTP session (from its `initialize`)
//! and one for the 2026-07-28 requests that stand alone over HTTP.
//!
//! Taken by [`Front::take`], in a session that began with `initialize`, or as
//! 2026-07-28 requests whose `_meta` carries their whole lifecycle
//! (version, client info and capabilities):
//! - the lists (`tools/list`, `prompts/list`, `resources/list`,
//!   `resources/templates/list`): every upstream's items merged, each as
//!   its upstream sent it but for sluice's documented changes (tools'
//!   schemas, prefixed names);
//! - the requests routed to one upstream (`tools/call`, `prompts/get`,
//!   `resources/read`, `completion/complete`) whose params read as one:
//!   the params go upstream as the client's text with sluice's edits (the
//!   upstream's name, `_meta` keys sluice sets itself), and an upstream's
//!   result that passes unchanged (within the budget) is answered as the
//!   bytes it sent.
//!
//! A request naming another version, or whose `_meta` lacks what its
//! version requires, is refused as the spec says ([`lifecycle`]). Each
//! answer is shaped for its era ([`super::answer`]): `resultType` only for
//! 2026-07-28, with the cache hints that version requires on lists and
//! reads.

use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use futures::FutureExt as _;
use futures::future::BoxFuture;
use rmcp::model::{
    ClientCapabilities, CompleteRequestParams, ErrorData, ProtocolVersion,
    ReadResourceRequestParams, RequestMetaObject,
};
use tokio_util::sync::CancellationToken;

use super::PeerAddr;
use super::answer::{Shape, answer_line, for_era, in_era, line_of, list_line, shaped_call};
use super::auth::Principal;
use super::session::{Asking, caller_of};
use crate::FastMap;
use crate::downstream::outbox;
use crate::era::Era;
use crate::gateway::Gateway;
use crate::hub::SessionId;
use crate::jsonrpc::{Id, Kind, Message};

mod lifecycle;
pub use lifecycle::{negotiated, supported_versions};

/// The requests of one session that sluice answers itself.
pub struct Front {
    gateway: Arc<Gateway>,
    session: SessionId,
    /// The front answers one session (a stdio connection, an HTTP
    /// session), not the HTTP requests that stand alone.
    connection: bool,
    /// What the client said at `initialize`, with the version agreed, when
    /// the front answered it (a connection's).
    hello: Mutex<Option<Arc<rmcp::model::InitializeRequestParams>>>,
    /// The calls being answered here, by the client's id, to cancel
    /// (on a connection; see [`Running`]).
    running: Arc<RunningTable>,
    /// Fires when the client leaves.
    stop: CancellationToken,
    /// The requests relayed to the client, whose answers come back here
    /// (on a connection, as its lines; in an HTTP session, as POSTs).
    link: OnceLock<Arc<super::link::ClientLink>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Front {
    /// The front of session `session` of `gateway`; `connection`: it
    /// answers one session (a stdio connection, an HTTP session), not the
    /// HTTP requests that stand alone.
    pub fn new(gateway: Arc<Gateway>, session: SessionId, connection: bool) -> Arc<Front> {
        Arc::new(Front {
            gateway,
            session,
            connection,
            hello: Mutex::new(None),
            running: Arc::default(),
            stop: CancellationToken::new(),
            link: OnceLock::new(),
        })
    }

    /// The gateway the front answers with.
    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// The protocol version agreed at `initialize`.
    pub fn protocol_version(&self) -> Option<String> {
        Some(self.hello()?.protocol_version.to_string())
    }

    /// Where the client's answers to relayed requests go.
    pub fn set_link(&self, link: Arc<super::link::ClientLink>) {
        let _ = self.link.set(link);
    }

    /// Opens the session's GET stream for sluice's own layer: what the link
    /// sends that belongs to no call comes out of the receiver, until it is
    /// dropped or another GET stream replaces it. `None` without a link.
    pub fn open_standalone(&self) -> Option<outbox::Receiver> {
        let link = self.link.get()?;
        // Room for what the link held too.
        let (stream, messages) = super::outbox::channel(super::lines::NOTICES + super::link::HELD);
        link.attach_standalone(stream);
        Some(messages)
    }

    /// Takes `message` if it is the client's answer to a request relayed
    /// through the front's link.
    pub fn answered(&self, message: &Message) -> bool {
        self.link.get().is_some_and(|link| link.answered(message))
    }

    /// The client left: what runs here stops (and a connection's session
    /// ends).
    pub fn end(&self) {
        self.stop.cancel();
        if self.connection {
            self.gateway.hub().remove_session(self.session);
        }
        if let Some(link) = self.link.get() {
            link.end();
        }
    }

    /// A client's `notifications/cancelled`: stops the call it names if it
    /// runs here. Its entry stays until the work ends ([`Running`]): the
    /// id is in use until then.
    fn cancelled(&self, message: &Message) {
        let id = message.cancelled_request();
        if let Some(ct) = id.and_then(|id| lock(&self.running).get(&id).cloned()) {
            ct.cancel();
        }
    }

    /// Takes `message` if it is a request answered here: gives the work
    /// that makes its answer (see [`Taken`]); `None` leaves it to the
    /// lifecycle ([`Front::take_any`]).
    /// `http`: the HTTP request that carried it (who sent it, from where);
    /// `stream`: where the notifications about it go, before its answer.
    pub fn take(
        self: &Arc<Self>,
        message: &Message,
        http: Option<&http::request::Parts>,
        stream: outbox::Sender,
    ) -> Option<Taken> {
        if message.kind() != Kind::Request {
            return None;
        }
        let name = message.method()?;
        let id = message.id()?;
        if let Some(fault) = self.id_fault(&id) {
            return Some(Taken::refused(&id, fault));
        }
        // Before any of its params is read (the lifecycle's too).
        if let Some(fault) = super::bounds::params_fault(message, name) {
            return Some(Taken::refused(&id, fault));
        }
        let method = Method::of(name)?;
        let slot = match self.admitted(http) {
            Ok(slot) => slot,
            Err(refused) => return Some(Taken::refused(&id, refused)),
        };
        let taken = self.take_method(method, message, id, http, stream)?;
        Some(taken.holding(slot))
    }

    /// Over HTTP, where each request comes on its own, its place among its
    /// client's requests in flight (`[limits] max_requests_in_flight`),
    /// held until its answer ends, if its client has not sent more than
    /// `[limits] requests_per_minute`; or the refusal, counted. A stdio
    /// connection counts its own (`lines`): `None` there.
    pub(super) fn admitted(
        &self,
        http: Option<&http::request::Parts>,
    ) -> Result<Option<crate::in_flight::Slot>, ErrorData> {
        let Some(parts) = http else {
            return Ok(None);
        };
        let client = self.client_of(parts);
        if let Some(refused) = self.over_rate(&client) {
            return Err(refused);
        }
        match self.gateway.in_flight().admit(client) {
            Ok(slot) => Ok(Some(slot)),
            Err(max) => {
                let metrics = self.gateway.governor().metrics();
                metrics.refused(crate::metrics::Limit::RequestsInFlight);
                Err(super::too_many_in_flight(max))
            }
        }
    }

    /// The refusal of a request of `client` over `[limits]
    /// requests_per_minute`, counted; `None` when it may go on.
    fn over_rate(&self, client: &crate::caller::Quota) -> Option<ErrorData> {
        let rate = self.gateway.rate()?;
        let wait = rate.take(client).err()?;
        let metrics = self.gateway.governor().metrics();
        metrics.refused(crate::metrics::Limit::RequestsPerMinute);
        Some(crate::rate::too_fast(rate.per_minute(), wait))
    }

    /// [`Front::over_rate`] for a request of this connection (stdio: one
    /// client, its session).
    pub fn connection_over_rate(&self) -> Option<ErrorData> {
        let client = crate::caller::Quota::Owner(sluice_core::store::Owner::Session(self.session));
        self.over_rate(&client)
    }

    /// Whose share of `[limits] max_requests_in_flight` a request that
    /// came over HTTP (`parts`) takes: its principal's, its session's, or
    /// its address's.
    fn client_of(&self, parts: &http::request::Parts) -> crate::caller::Quota {
        let in_session = self.connection || self.gateway.hub().has_session(self.session);
        super::session::owner_of(
            &self.gateway,
            self.session,
            in_session,
            parts.extensions.get::<Principal>(),
            parts.extensions.get::<PeerAddr>(),
        )
        .1
    }

    /// [`Self::take`] of a request of `method`.
    fn take_method(
        self: &Arc<Self>,
        method: Method,
        message: &Message,
        id: Id,
        http: Option<&http::request::Parts>,
        stream: outbox::Sender,
    ) -> Option<Taken> {
        let list = match method {
            Method::List(list) => list,
            Method::Routed(routed) => return self.take_routed(routed, message, id, http, stream),
            Method::Call => return self.take_call(message, id, http, stream),
            Method::TaskGet => return self.take_task(message, id, http, stream),
        };
        let legacy = self.asker(message)?.era.is_legacy();
        // Its params (a cursor) change nothing: every item is listed at
        // once, as rmcp's server did.
        let gateway = self.gateway.clone();
        Some(Taken {
            work: async move {
                let items = match list {
                    List::Tools => gateway.list_tools_as_sent().await,
                    List::Prompts => gateway.list_prompts_as_sent().await,
                    List::Resources => gateway.list_resources_as_sent().await,
                    List::Templates => gateway.list_resource_templates_as_sent().await,
                };
                Some(match items {
                    Ok(items) => list_line(&id, list.key(), &items, legacy),
                    Err(error) => answer_line(&id, Err(in_era(error, legacy))),
                })
            }
            .boxed(),
            ct: CancellationToken::new(),
        })
    }

    /// Takes a `tools/call` whose params read as one.
    fn take_call(
        self: &Arc<Self>,
        message: &Message,
        id: Id,
        http: Option<&http::request::Parts>,
        stream: outbox::Sender,
    ) -> Option<Taken> {
        // One parse of the params, `_meta` and all; the arguments kept as
        // the message's text (`gateway::NamedParams`).
        let mut params = crate::gateway::NamedParams::of(message)?;
        let meta = params.meta.take().unwrap_or_default();
        let Begun {
            caller,
            ct,
            legacy,
            tasks,
            running,
        } = self.begin(message, &id, meta, http, stream)?;
        let front = self.clone();
        Some(Taken {
            ct: ct.clone(),
            work: async move {
                let _running = running;
                let answer = front.gateway.call_tool_relayed(params, &caller).await;
                Front::finished(&ct)?;
                let shape = Shape {
                    legacy,
                    cache_hints: false,
                };
                Some(line_of(&id, answer, shape, |relayed| {
                    shaped_call(relayed.into_response(), tasks, legacy)
                }))
            }
            .boxed(),
        })
    }

    /// Takes a `tasks/get` whose params read as one: the task, with a
    /// completed call's result as its upstream sent it.
    fn take_task(
        self: &Arc<Self>,
        message: &Message,
        id: Id,
        http: Option<&http::request::Parts>,
        stream: outbox::Sender,
    ) -> Option<Taken> {
        let mut params: rmcp::model::GetTaskParams =
            serde_json::from_str(message.params()?).ok()?;
        let meta = params.meta.take().unwrap_or_default();
        let Begun {
            caller,
            ct,
            legacy,
            running,
            ..
        } = self.begin(message, &id, meta, http, stream)?;
        let front = self.clone();
        Some(Taken {
            ct: ct.clone(),
            work: async move {
                let _running = running;
                let answer =
                    lifecycle::task(&front.gateway, &params.task_id, &caller, legacy).await;
                Front::finished(&ct)?;
                Some(answer.map_or_else(|e| answer_line(&id, Err(e)), |a| a.line(&id)))
            }
            .boxed(),
        })
    }

    /// Takes `prompts/get`, `resources/read` or `completion/complete` whose
    /// params read as one: the upstream's answer is relayed as it sent it.
    fn take_routed(
        self: &Arc<Self>,
        routed: Routed,
        message: &Message,
        id: Id,
        http: Option<&http::request::Parts>,
        stream: outbox::Sender,
    ) -> Option<Taken> {
        let params = message.params()?;
        let (request, meta) = match routed {
            Routed::Prompt => {
                // The arguments kept as the message's text.
                let mut params = crate::gateway::NamedParams::of(message)?;
                let meta = params.meta.take();
                (RoutedRequest::Prompt(params), meta)
            }
            Routed::Read => {
                let mut params: ReadResourceRequestParams = serde_json::from_str(params).ok()?;
                let meta = params.meta.take();
                (RoutedRequest::Read(params), meta)
            }
            Routed::Complete => {
                let mut params: CompleteRequestParams = serde_json::from_str(params).ok()?;
                let meta = params.meta.take();
                (RoutedRequest::Complete(params), meta)
            }
        };
        let Begun {
            caller,
            ct,
            legacy,
            running,
            ..
        } = self.begin(message, &id, meta.unwrap_or_default(), http, stream)?;
        let front = self.clone();
        Some(Taken {
            ct: ct.clone(),
            work: async move {
                let _running = running;
                let gateway = &front.gateway;
                let answer = match request {
                    RoutedRequest::Prompt(params) => gateway.get_prompt(params, &caller).await,
                    RoutedRequest::Read(params) => gateway.read_resource(params, &caller).await,
                    RoutedRequest::Complete(params) => gateway.complete(params, &caller).await,
                };
                Front::finished(&ct)?;
                let shape = Shape {
                    legacy,
                    cache_hints: matches!(routed, Routed::Read),
                };
                // A result relayed as sent is decoded only if its bytes
                // cannot be written as they are.
                Some(line_of(&id, answer, shape, |relayed| {
                    for_era(relayed.into_result()?, legacy)
                }))
            }
            .boxed(),
        })
    }

    /// Begins a request the front answers: who asks it (`None` if the
    /// front does not answer them: see [`Self::asker_of`], or if its id is
    /// in use), and what cancels it, registered as the request's.
    fn begin(
        &self,
        message: &Message,
        id: &Id,
        meta: RequestMetaObject,
        http: Option<&http::request::Parts>,
        stream: outbox::Sender,
    ) -> Option<Begun> {
        let begun = self.begin_with(message, id, meta, http, stream, self.stop.child_token())?;
        // In use meanwhile (two requests of an HTTP session at once):
        // refused by the lifecycle (`Front::take_any`).
        let running = self.register(id, &begun.ct)?;
        Some(Begun { running, ..begun })
    }

    /// [`Self::begin`], cancelled by `ct` (which the caller registers as
    /// the request's, if it must be).
    fn begin_with(
        &self,
        message: &Message,
        id: &Id,
        meta: RequestMetaObject,
        http: Option<&http::request::Parts>,
        stream: outbox::Sender,
        ct: CancellationToken,
    ) -> Option<Begun> {
        // Refused with why by the lifecycle's answer (`Front::take_any`).
        if lifecycle::progress_token_fault(&meta).is_some() {
            return None;
        }
        let request = crate::caller::request_id(id)?;
        let asker = self.asker_of(&meta)?;
        let legacy = asker.era.is_legacy();
        let tasks = asker.capabilities.supports_tasks();
        let asking = Asking {
            meta: &meta,
            request,
            ct: ct.clone(),
            era: asker.era,
            capabilities: Some(asker.capabilities),
            client: asker.client,
            principal: http.and_then(|parts| parts.extensions.get::<Principal>()),
            address: http.and_then(|parts| parts.extensions.get::<PeerAddr>()),
            sent_request: Some(message.clone()),
            stream: Some(stream),
            stream_asks: http.is_none_or(super::http_front::reads_streams),
            link: self.link.get().cloned(),
        };
        let caller = caller_of(&self.gateway, self.session, self.connection, &asking);
        Some(Begun {
            caller,
            ct,
            legacy,
            tasks,
            running: Running(None),
        })
    }

    /// A request begun here got its answer: `None` if the client cancelled
    /// it meanwhile (it gets no answer).
    fn finished(ct: &CancellationToken) -> Option<()> {
        (!ct.is_cancelled()).then_some(())
    }

    /// Registers request `id`, cancelled by `ct`, to be cancelled by the
    /// client's `notifications/cancelled`: on a connection only (the
    /// requests that stand alone are cancelled by closing their streams,
    /// and come from every such client, whose ids may be the same). The
    /// work answering it keeps the [`Running`] until it ends. `None` if the
    /// id is already a running request's: then nothing is registered
    /// ([`Self::id_fault`] says why the request is refused).
    fn register(&self, id: &Id, ct: &CancellationToken) -> Option<Running> {
        if !self.connection {
            return Some(Running(None));
        }
        match lock(&self.running).entry(id.clone()) {
            std::collections::hash_map::Entry::Occupied(_) => None,
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(ct.clone());
                Some(Running(Some((self.running.clone(), id.clone()))))
            }
        }
    }

    /// Why request `id` is refused before anything else is read, if it is:
    /// an id MCP does not allow (a request's id is a string or an integer;
    /// sluice reads integers of 64 bits, as rmcp does), or, on a
    /// connection, the id of a request of the client's that is still being
    /// answered (MCP forbids using an id twice: a cancellation naming it
    /// could stop either, and both answers would carry it).
    pub(super) fn id_fault(&self, id: &Id) -> Option<ErrorData> {
        if crate::caller::request_id(id).is_none() {
            return Some(ErrorData::invalid_request(
                format!(
                    "{}; send the request with one of those",
                    crate::caller::unread_request_id(id)
                ),
                None,
            ));
        }
        if self.connection && lock(&self.running).contains_key(id) {
            return Some(in_use(id));
        }
        None
    }
}

/// The refusal of a request whose id `id` is a running request's.
fn in_use(id: &Id) -> ErrorData {
    ErrorData::invalid_request(
        format!(
            "the request's id {} is already the id of a request of this session that has not been answered yet (or was cancelled and has not ended yet): MCP asks for a new id for every request; send this one with an id not used before",
            sluice_core::format::quoted_cut(id.as_json())
        ),
        None,
    )
}

/// How the front's answer to a request of `method` goes over HTTP: a list
/// as one JSON body, anything else as an SSE stream (its notifications
/// first). `None`: the front does not answer `method`.
pub fn answered_as(method: &str) -> Option<AnsweredAs> {
    Some(match Method::of(method)? {
        Method::List(_) | Method::TaskGet => AnsweredAs::Json,
        Method::Call | Method::Routed(_) => AnsweredAs::Stream,
    })
}

/// See [`answered_as`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnsweredAs {
    /// One JSON body.
    Json,
    /// An SSE stream.
    Stream,
}

/// The methods the front answers.
#[derive(Debug, Clone, Copy)]
enum Method {
    List(List),
    Call,
    Routed(Routed),
    /// `tasks/get`: a completed call's result in it is relayed as sent.
    TaskGet,
}

impl Method {
    fn of(method: &str) -> Option<Method> {
        Some(match method {
            "tools/call" => Method::Call,
            "tools/list" => Method::List(List::Tools),
            "prompts/list" => Method::List(List::Prompts),
            "resources/list" => Method::List(List::Resources),
            "resources/templates/list" => Method::List(List::Templates),
            "prompts/get" => Method::Routed(Routed::Prompt),
            "resources/read" => Method::Routed(Routed::Read),
            "completion/complete" => Method::Routed(Routed::Complete),
            "tasks/get" => Method::TaskGet,
            _ => return None,
        })
    }
}

/// The lists, merged from every upstream.
#[derive(Debug, Clone, Copy)]
enum List {
    Tools,
    Prompts,
    Resources,
    Templates,
}

impl List {
    /// The result's member that holds the items.
    fn key(self) -> &'static str {
        match self {
            List::Tools => "tools",
            List::Prompts => "prompts",
            List::Resources => "resources",
            List::Templates => "resourceTemplates",
        }
    }
}

/// The requests routed to one upstream by a name or URI.
#[derive(Debug, Clone, Copy)]
enum Routed {
    Prompt,
    Read,
    Complete,
}

/// A routed request's params, read.
enum RoutedRequest {
    Prompt(crate::gateway::NamedParams),
    Read(ReadResourceRequestParams),
    Complete(CompleteRequestParams),
}

/// A request the front began to answer.
struct Begun {
    caller: crate::gateway::Caller,
    ct: CancellationToken,
    legacy: bool,
    /// The client declared tasks.
    tasks: bool,
    /// Its entry among the running requests, for its work to keep.
    running: Running,
}

/// A request's entry in its front's table of running requests (the table,
/// the id), given up when the work answering it ends however it ends
/// (answered, or dropped with its client): the one place an entry leaves.
/// A cancellation only cancels, so the id stays in use until the cancelled
/// work has ended, and a request that reuses it meanwhile is refused. (It
/// was taken, and then unregistered when the old work ended, which left it
/// running with no way to cancel it.) `None`: not registered (the requests
/// that stand alone).
struct Running(Option<(Arc<RunningTable>, Id)>);

/// A front's running requests: what cancels each, by the client's id.
type RunningTable = Mutex<FastMap<Id, CancellationToken>>;

impl Drop for Running {
    fn drop(&mut self) {
        if let Some((table, id)) = &self.0 {
            lock(table).remove(id);
        }
    }
}

/// Who asks a request the front may take, and in which era.
struct Asker {
    era: Era,
    capabilities: ClientCapabilities,
    client: Option<String>,
}

impl Front {
    /// Who asks request `message`, if the front answers it: a
    /// request of a session that began with `initialize`, or a 2026-07-28
    /// request whose `_meta` carries its whole lifecycle. A version sluice
    /// does not know, or `_meta` missing what 2026-07-28 requires, is
    /// refused elsewhere (by the lifecycle, or the HTTP endpoint).
    fn asker(&self, message: &Message) -> Option<Asker> {
        #[derive(serde::Deserialize)]
        struct Params {
            #[serde(rename = "_meta", default)]
            meta: Option<RequestMetaObject>,
        }
        let meta = match message.params() {
            None => None,
            Some(params) => serde_json::from_str::<Params>(params).ok()?.meta,
        }
        .unwrap_or_default();
        self.asker_of(&meta)
    }

    /// [`Self::asker`], from the request's `_meta`.
    fn asker_of(&self, meta: &RequestMetaObject) -> Option<Asker> {
        match meta.protocol_version() {
            // Complete as `missing_required_keys` has it (the version and
            // the capabilities), each read once.
            Some(version) if version == ProtocolVersion::V_2026_07_28 => Some(Asker {
                era: Era::of(Some(&version)),
                capabilities: meta.client_capabilities()?,
                client: meta.client_info().map(|c| c.name),
            }),
            // An older version sluice knows, named in a session's request:
            // the session's (one it does not know is refused as such).
            Some(version) if !lifecycle::supported_versions().contains(&version) => None,
            _ => {
                let info = self.hello()?;
                Some(Asker {
                    era: Era::of(Some(&info.protocol_version)),
                    capabilities: meta
                        .client_capabilities()
                        .unwrap_or_else(|| info.capabilities.clone()),
                    client: Some(
                        meta.client_info()
                            .map_or_else(|| info.client_info.name.clone(), |c| c.name),
                    ),
                })
            }
        }
    }
}

/// A request [`Front::take`] took: the work that answers it, and what
/// cancels it.
pub struct Taken {
    /// Makes the answer, as the bytes of one message (`None` when the
    /// client cancelled the request, which gets no answer).
    pub work: BoxFuture<'static, Option<Bytes>>,
    /// Cancels the request (its client went away).
    pub ct: CancellationToken,
}

impl Taken {
    /// This request, counted in its client's share by `slot` until its
    /// work ends or is dropped.
    fn holding(self, slot: Option<crate::in_flight::Slot>) -> Taken {
        let Some(slot) = slot else {
            return self;
        };
        let work = self.work;
        Taken {
            work: async move {
                let _counted = slot;
                work.await
            }
            .boxed(),
            ct: self.ct,
        }
    }

    /// Request `id` refused at once with `error`.
    fn refused(id: &Id, error: ErrorData) -> Taken {
        Taken {
            work: std::future::ready(Some(answer_line(id, Err(error)))).boxed(),
            ct: CancellationToken::new(),
        }
    }

    /// Runs the work, handing `emit` each notification that arrives on
    /// `notices` (the receiving end of the `stream` given to
    /// [`Front::take`]) and then the answer, in that order. When `emit`
    /// fails (the client is gone) the request is cancelled and nothing
    /// more is emitted.
    pub async fn drive<F, Fut>(self, mut notices: outbox::Receiver, mut emit: F)
    where
        F: FnMut(Bytes) -> Fut,
        Fut: Future<Output = bool>,
    {
        let Taken { work, ct } = self;
        let mut work = std::pin::pin!(work);
        let mut open = true;
        let answer = loop {
            tokio::select! {
                biased;
                Some(notice) = notices.recv() => {
                    if !open {
                        continue;
                    }
                    // The work goes on while the client is slow to read
                    // (its cancellation, above all, must reach the
                    // upstream); a line being written is never cut.
                    let mut emitting = std::pin::pin!(emit(notice));
                    let mut finished = None;
                    let emitted = loop {
                        tokio::select! {
                            biased;
                            emitted = &mut emitting => break emitted,
                            answer = &mut work, if finished.is_none() => finished = Some(answer),
                        }
                    };
                    if !emitted {
                        open = false;
                        ct.cancel();
                    }
                    if let Some(answer) = finished {
                        break answer;
                    }
                }
                answer = &mut work => break answer,
            }
        };
        while let Ok(notice) = notices.try_recv() {
            if open && !emit(notice).await {
                open = false;
            }
        }
        if open && let Some(answer) = answer {
            emit(answer).await;
        }
    }
}
