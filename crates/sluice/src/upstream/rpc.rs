//! sluice's own JSON-RPC engine for one upstream connection: request ids
//! and their waiters, the handshake of either protocol era, and what is
//! done with everything the upstream sends on its own initiative.
//!
//! It drives any [`Transport`] (stdio lines, Streamable HTTP, in memory)
//! and reads what it gets as [`Inbound`] items, in order, on one task:
//!
//! - an answer completes the call waiting for its id ([`Pending`]); an
//!   answer that could not be read fails that call at once with the reason,
//!   so nothing waits for an answer that will never come;
//! - a progress or log notification about a routed call is queued for that
//!   call before anything later is read, so it always reaches the client
//!   before the call's answer;
//! - a server→client request (sampling, elicitation, roots) is handled in
//!   a task of its own ([`UpstreamClient`]), cancellable by the upstream;
//! - the end of the connection fails every waiting call with how it ended.
//!
//! Requests and answers are still described with rmcp's model types at this
//! engine's edge (the gateway has not moved to raw messages yet), but the
//! engine itself keeps each message as the bytes received: it never drops
//! an answer it cannot decode without failing its call.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    ClientConfig, ClientJsonRpcMessage, ClientRequest, DiscoverRequest, DiscoverRequestParams,
    DiscoverResult, ErrorCode, ErrorData, GetMeta as _, InitializeResult, LoggingLevel,
    NumberOrString, ProtocolVersion, RequestId, RequestMetaObject, ServerPeerInfo, ServerResult,
};
use sluice_core::limits::BLOCKING_BYTES;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::{CancellationToken, DropGuard};

use super::client::{ClientAnswer, UpstreamClient};
use super::transport::{Inbound, Transport};
use crate::FastMap;
use crate::hub::Hub;
use crate::jsonrpc::{CallFailed, Id, Kind, Message, Pending};

/// How many server→client requests of one upstream may be handled at
/// once; more are refused at once (an upstream cannot make sluice hold an
/// unbounded number of tasks).
const MAX_SERVING: usize = 64;

/// How long the `server/discover` probe of [`Lifecycle::Auto`] may take
/// before sluice falls back to `initialize`.
const DISCOVER_PROBE: Duration = Duration::from_secs(10);

/// What a waiting call gets.
#[derive(Debug)]
enum Answer {
    /// The answer (a result or a JSON-RPC error).
    Message(Message),
    /// An answer arrived that could not be read, or the request failed
    /// below JSON-RPC: why, in words.
    Failed(String),
    /// The upstream said it never handled this request (see
    /// [`Inbound::Unhandled`]): how it ended the session.
    Unhandled(String),
}

/// Why a request got no result.
#[derive(Debug, Clone)]
pub enum RpcError {
    /// The upstream answered with a JSON-RPC error.
    Error(ErrorData),
    /// No usable answer: it could not be read or the request failed below
    /// JSON-RPC; the connection may still work.
    Failed(String),
    /// The connection ended before the answer came.
    Closed(String),
    /// The upstream never handled the request: it had ended the session
    /// the request went in (see [`Inbound::Unhandled`]), or the request was
    /// not sent for that. It may be sent again on a new connection (once;
    /// see [`super::Upstream::send`]). How the session ended.
    Unhandled(String),
    /// The caller cancelled the request (the upstream was told).
    Cancelled,
}

/// How a connection's handshake is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lifecycle {
    /// `initialize` then `notifications/initialized` (2025-11-25 and before).
    Initialize,
    /// `server/discover` (2026-07-28): no session; every request carries
    /// the client's context in `_meta`.
    Discover,
    /// `server/discover`, falling back to `initialize` when the upstream
    /// answers it as an older server does or does not answer in time.
    Auto,
}

/// An upstream's answer: the message it came as (the bytes a relayed result
/// is forwarded from) and its result, decoded; except an answer to
/// `tools/call`, `resources/read`, `prompts/get` or `completion/complete`,
/// left as sent until something needs it decoded (the gateway relays or
/// governs it from its bytes: see [`crate::govern::SentCall`],
/// [`crate::govern::SentRead`], [`crate::govern::plain_result`]).
#[derive(Debug, Clone)]
pub struct Decoded {
    /// The response, as received.
    pub raw: Message,
    /// The result, decoded (boxed: rmcp's type is large, and moves with
    /// every answer); `None` while it is left as sent.
    result: Option<Box<ServerResult>>,
    /// What the result is read as when it is decoded later.
    expect: Expect,
}

impl Decoded {
    /// A tool call's response whose result is left as sent.
    pub fn sent(raw: Message) -> Decoded {
        Decoded {
            raw,
            result: None,
            expect: Expect::CallTool,
        }
    }

    /// The response to a request of `method` whose result is left as
    /// sent, to be decoded as that method's answer when needed (its bytes
    /// were read and found to need it).
    pub fn sent_for(method: &str, raw: Message) -> Decoded {
        Decoded {
            raw,
            result: None,
            expect: Expect::of(Some(method)),
        }
    }

    /// The result's JSON text while it is not decoded.
    pub fn undecoded(&self) -> Option<&str> {
        match self.result {
            Some(_) => None,
            None => self.raw.result(),
        }
    }

    /// The result, decoded now if it was left as sent, and the response;
    /// the error says why the result cannot be read.
    pub fn decoded(self) -> Result<(ServerResult, Message), String> {
        let result = match self.result {
            Some(result) => *result,
            None => self
                .expect
                .decode(self.raw.result().unwrap_or("{}"))
                .map_err(|e| format!("its result could not be read: {e}"))?,
        };
        Ok((result, self.raw))
    }
}

/// A request as sent: its id and, if one was asked for, its progress token.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// The request's id on this connection.
    pub id: RequestId,
    /// The progress token it carries.
    pub progress_token: Option<rmcp::model::ProgressToken>,
}

/// One connection's engine. Dropping it stops reading, which fails every
/// call still waiting; close the transport with [`Link::close`] first to
/// end the connection politely.
pub struct Rpc {
    link: Link,
    _reader: DropGuard,
}

impl std::ops::Deref for Rpc {
    type Target = Link;

    fn deref(&self) -> &Link {
        &self.link
    }
}

/// What sends on a connection: requests, notifications, cancellations. A
/// clone outlives its [`Rpc`] harmlessly: once that is dropped, every
/// request fails with how the connection ended.
#[derive(Clone)]
pub struct Link {
    shared: Arc<Shared>,
}

struct Shared {
    upstream: String,
    transport: Arc<dyn Transport>,
    pending: Pending<Answer>,
    /// How the connection ended, once it has.
    ended: watch::Sender<Option<String>>,
    /// The client context every request carries (2026-07-28).
    context: Mutex<Option<Arc<Context>>>,
    /// Server→client requests being handled, by id, to cancel.
    serving: Mutex<FastMap<Id, CancellationToken>>,
    hub: Arc<Hub>,
    client: Arc<UpstreamClient>,
    /// Stops the reader and every server→client request's task.
    stop: CancellationToken,
}

/// The `_meta` key of the client's log level on a 2026-07-28 request
/// (rmcp's `RequestMetaObject::set_log_level` writes the same).
const LOG_LEVEL_META: &str = "io.modelcontextprotocol/logLevel";

/// The `_meta` key of the client's capabilities on a 2026-07-28 request
/// (rmcp's `RequestMetaObject::set_client_capabilities` writes the same).
const CAPABILITIES_META: &str = "io.modelcontextprotocol/clientCapabilities";

/// What one request tells a 2026-07-28 upstream about the client it is
/// made for, where the connection's context (sluice's `clientInfo`, the
/// first client's capabilities) does not: that upstream hears no session,
/// so each request says what its client can do. A request of the
/// initialize era carries neither (the session declared them once).
#[derive(Debug, Clone, Default)]
pub struct ForClient {
    /// The level of log messages the client asked for.
    pub log_level: Option<LoggingLevel>,
    /// The client's capabilities (as sluice relays them: see
    /// [`crate::hub::mirrored`]); `None`: the connection's.
    pub capabilities: Option<Arc<crate::hub::Mirrored>>,
}

impl ForClient {
    /// Nothing of a client: a request sluice makes for itself (lists, the
    /// handshake), which carries the connection's context alone.
    pub const NONE: ForClient = ForClient {
        log_level: None,
        capabilities: None,
    };
}

/// The client context a 2026-07-28 upstream's every request carries in its
/// `_meta`: typed for the requests sluice makes itself, and as members'
/// text for those it forwards as the client's text
/// ([`crate::jsonrpc::params_with_meta`]).
struct Context {
    typed: RequestMetaObject,
    /// Each key of `typed` and its value's JSON text.
    members: Vec<(String, String)>,
}

impl Context {
    fn new(typed: RequestMetaObject) -> Arc<Context> {
        // The type is its map (serialized transparently): its members are
        // the map's.
        let members = typed
            .iter()
            .map(|(key, value)| (key.clone(), value.to_string()))
            .collect();
        Arc::new(Context { typed, members })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Rpc {
    /// Starts reading `inbound`, what `transport` receives.
    pub fn start(
        transport: Arc<dyn Transport>,
        inbound: mpsc::Receiver<Inbound>,
        client: UpstreamClient,
    ) -> Rpc {
        let stop = CancellationToken::new();
        let shared = Arc::new(Shared {
            upstream: client.upstream.clone(),
            transport,
            pending: Pending::new(),
            ended: watch::channel(None).0,
            context: Mutex::new(None),
            serving: Mutex::default(),
            hub: client.hub.clone(),
            client: Arc::new(client),
            stop: stop.clone(),
        });
        let (pending, upstream) = (shared.pending.clone(), shared.upstream.clone());
        shared
            .transport
            .hand_answers_to(Arc::new(move |item| answered(&pending, &upstream, item)));
        tokio::spawn(read(shared.clone(), inbound));
        Rpc {
            link: Link { shared },
            _reader: stop.drop_guard(),
        }
    }

    /// A link that may outlive this engine (a request held open for as
    /// long as the connection lasts).
    pub fn listener(&self) -> Link {
        self.link.clone()
    }
}

impl Link {
    /// Whether the connection still works: neither ended nor left without
    /// its session.
    pub fn is_open(&self) -> bool {
        self.shared.ended.borrow().is_none() && self.session_ended().is_none()
    }

    /// How the upstream ended the connection's session itself, once it has
    /// (see [`Transport::session_ended`]).
    pub fn session_ended(&self) -> Option<String> {
        self.shared.transport.session_ended()
    }

    /// How the connection ended (`None` while it works).
    pub fn ended(&self) -> Option<String> {
        self.shared.ended.borrow().clone()
    }

    /// Ends the connection politely (see [`Transport::close`]).
    pub async fn close(&self) {
        self.shared.transport.close().await;
        self.shared.stop.cancel();
    }

    /// Makes the handshake; gives what the upstream declared about itself.
    pub async fn handshake(
        &self,
        lifecycle: Lifecycle,
        client: &ClientConfig,
    ) -> Result<ServerPeerInfo, String> {
        match lifecycle {
            Lifecycle::Initialize => self.initialize(client.clone()).await,
            Lifecycle::Discover => match self.discover(client).await? {
                Discovered::Modern(info) => Ok(*info),
                Discovered::Legacy(why) => Err(format!(
                    "answered `server/discover` as a server of the 2025-11-25 era or older does ({why}); set `protocol = \"auto\"` or `\"2025-11-25\"` for it"
                )),
            },
            Lifecycle::Auto => {
                match tokio::time::timeout(DISCOVER_PROBE, self.discover(client)).await {
                    Ok(Ok(Discovered::Modern(info))) => Ok(*info),
                    // The connection itself failed: initialize would too.
                    Ok(Err(e)) if !self.is_open() => Err(e),
                    // Answered, but not as a server of the new era does
                    // (an older one may refuse the probe outright, e.g. with
                    // an HTTP 400 for want of a session), or not in time.
                    Ok(Err(_) | Ok(Discovered::Legacy(_))) | Err(_) => {
                        let mut legacy = client.clone();
                        legacy.protocol_version = ProtocolVersion::V_2025_11_25;
                        self.initialize(legacy).await
                    }
                }
            }
        }
    }

    async fn initialize(&self, client: ClientConfig) -> Result<ServerPeerInfo, String> {
        let request =
            ClientRequest::InitializeRequest(rmcp::model::InitializeRequest::new(client.clone()));
        let never = CancellationToken::new();
        let result = self
            .request(request, false, &ForClient::NONE, &never, |_| ())
            .await
            .map_err(|e| describe(&e, "`initialize`"))?
            .decoded()?
            .0;
        let ServerResult::InitializeResult(result) = result else {
            return Err(
                "answered `initialize` with something that is not an initialize result".into(),
            );
        };
        let result: InitializeResult = result;
        // A version without a handshake (2026-07-28 answered to
        // `initialize`): from here every request carries the context.
        if !result.protocol_version.has_initialize() {
            *lock(&self.shared.context) =
                Some(Context::new(RequestMetaObject::with_client_context(
                    result.protocol_version.clone(),
                    client.client_info.clone(),
                    client.capabilities.clone(),
                )));
        }
        self.shared
            .transport
            .negotiated(&result.protocol_version.to_string());
        self.notify(
            "notifications/initialized",
            None,
            "the `initialized` notification",
        )
        .await?;
        Ok(result.into())
    }

    async fn discover(&self, client: &ClientConfig) -> Result<Discovered, String> {
        let preferred = [ProtocolVersion::V_2026_07_28];
        let mut candidate = preferred[0].clone();
        let mut attempts = 0;
        loop {
            attempts += 1;
            let mut discover = DiscoverRequest::new(DiscoverRequestParams {});
            discover
                .extensions
                .insert(RequestMetaObject::with_client_context(
                    candidate.clone(),
                    client.client_info.clone(),
                    client.capabilities.clone(),
                ));
            let never = CancellationToken::new();
            let answer = self
                .request(
                    ClientRequest::DiscoverRequest(discover),
                    false,
                    &ForClient::NONE,
                    &never,
                    |_| (),
                )
                .await;
            match answer.and_then(|a| a.decoded().map(|(r, _)| r).map_err(RpcError::Failed)) {
                Ok(ServerResult::DiscoverResult(result)) => {
                    let result: DiscoverResult = result;
                    let Some(selected) = preferred
                        .iter()
                        .find(|v| result.supported_versions.contains(v))
                        .cloned()
                    else {
                        return Err(format!(
                            "supports protocol versions {} but sluice speaks {}",
                            versions(&result.supported_versions),
                            versions(&preferred)
                        ));
                    };
                    *lock(&self.shared.context) =
                        Some(Context::new(RequestMetaObject::with_client_context(
                            selected.clone(),
                            client.client_info.clone(),
                            client.capabilities.clone(),
                        )));
                    self.shared.transport.negotiated(&selected.to_string());
                    return Ok(Discovered::Modern(Box::new(
                        ServerPeerInfo::from_discover_result(selected, result),
                    )));
                }
                Ok(_) => {
                    return Err(
                        "answered `server/discover` with something that is not a discover result"
                            .into(),
                    );
                }
                Err(RpcError::Error(error))
                    if error.code == ErrorCode::UNSUPPORTED_PROTOCOL_VERSION && attempts < 3 =>
                {
                    let supported: Vec<ProtocolVersion> = error
                        .data
                        .as_ref()
                        .and_then(|d| d.get("supported"))
                        .and_then(|v| serde_json::from_value(v.clone()).ok())
                        .unwrap_or_default();
                    match preferred.iter().find(|v| supported.contains(v)) {
                        Some(next) => candidate = next.clone(),
                        None => {
                            return Err(format!(
                                "supports protocol versions {} but sluice speaks {}",
                                versions(&supported),
                                versions(&preferred)
                            ));
                        }
                    }
                }
                // A correlated JSON-RPC error that is not one of the new
                // era's rejections: an older server.
                Err(RpcError::Error(error))
                    if error.code != ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
                        && error.code != ErrorCode::HEADER_MISMATCH
                        && error.code != ErrorCode::UNSUPPORTED_PROTOCOL_VERSION =>
                {
                    return Ok(Discovered::Legacy(error.message.to_string()));
                }
                Err(e) => return Err(describe(&e, "`server/discover`")),
            }
        }
    }

    /// Sends `request` and waits for its answer, decoded. `progress` asks
    /// the upstream for progress (a token is added); `for_client` is what
    /// a 2026-07-28 request says of its client; `routes` runs with
    /// the request's id and token before it is sent, and what it returns is
    /// kept until the answer has been read; `ct` cancels the request (the
    /// upstream is told).
    pub async fn request<G>(
        &self,
        mut request: ClientRequest,
        progress: bool,
        for_client: &ForClient,
        ct: &CancellationToken,
        routes: impl FnOnce(&Outgoing) -> G,
    ) -> Result<Decoded, RpcError> {
        if let Some(context) = lock(&self.shared.context).clone() {
            let meta = request.get_meta_mut();
            meta.extend(context.typed.clone());
            if let Some(mirrored) = &for_client.capabilities {
                meta.set_client_capabilities(mirrored.capabilities.clone());
            }
        }
        if let Some(level) = for_client.log_level {
            request.get_meta_mut().set_log_level(level);
        }
        let (id, waiter) = self.shared.pending.register();
        let request_id = rmcp_id(&id);
        let progress_token = progress
            .then(|| rmcp::model::ProgressToken(NumberOrString::Number(request_id_number(&id))));
        if let Some(token) = &progress_token {
            request.get_meta_mut().set_progress_token(token.clone());
        }
        let message = encode(&ClientJsonRpcMessage::request(request, request_id.clone()))
            .map_err(RpcError::Failed)?;
        self.exchange(id, waiter, message, progress_token, ct, routes)
            .await
    }

    /// Sends a request of `method` whose `params` are JSON text, kept as
    /// they are but for what sluice adds to their `_meta`: the progress
    /// token when `progress`; for an upstream of 2026-07-28, the client
    /// context and what `for_client` says, replacing the client's own
    /// values of those keys, as [`Link::request`] does. Waits for its
    /// answer; see [`Link::request`].
    pub async fn request_text<G>(
        &self,
        method: &str,
        params: &str,
        progress: bool,
        for_client: &ForClient,
        ct: &CancellationToken,
        routes: impl FnOnce(&Outgoing) -> G,
    ) -> Result<Decoded, RpcError> {
        let (id, waiter) = self.shared.pending.register();
        let made = |e: crate::jsonrpc::MessageError| {
            RpcError::Failed(format!(
                "the request could not be made from its params: {e}"
            ))
        };
        let context = lock(&self.shared.context).clone();
        let level = for_client
            .log_level
            .map(|level| serde_json::to_string(&level).expect("a log level serializes"));
        // The client's own capabilities in place of the connection's.
        let capabilities = (for_client.capabilities.as_ref()).filter(|_| context.is_some());
        let mut members: Vec<(&str, &str)> = context
            .iter()
            .flat_map(|c| c.members.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .filter(|(key, _)| capabilities.is_none() || *key != CAPABILITIES_META)
            .collect();
        if let Some(mirrored) = capabilities {
            members.push((CAPABILITIES_META, &mirrored.json));
        }
        if let Some(level) = &level {
            members.push((LOG_LEVEL_META, level));
        }
        if progress {
            members.push(("progressToken", id.as_json()));
        }
        // What sluice adds goes into the params before the message is made,
        // which is then not parsed: the params are the client's, which were
        // parsed, with edits that keep them valid (`Message::request`).
        let edited = crate::jsonrpc::params_with_meta(params, &members).map_err(made)?;
        let message = Message::request(&id, method, &edited);
        let progress_token = progress
            .then(|| rmcp::model::ProgressToken(NumberOrString::Number(request_id_number(&id))));
        self.exchange(id, waiter, message, progress_token, ct, routes)
            .await
    }

    /// Sends request `message` (its id `id`, its answer awaited by
    /// `waiter`) and waits for its answer.
    async fn exchange<G>(
        &self,
        id: Id,
        waiter: crate::jsonrpc::Waiter<Answer>,
        message: Message,
        progress_token: Option<rmcp::model::ProgressToken>,
        ct: &CancellationToken,
        routes: impl FnOnce(&Outgoing) -> G,
    ) -> Result<Decoded, RpcError> {
        let _routes = routes(&Outgoing {
            id: rmcp_id(&id),
            progress_token,
        });
        let expect = Expect::of(message.method());
        if let Err(e) = self.shared.transport.send(message).await {
            return Err(match e {
                // Not sent because the upstream ended the session: the
                // request may go on a new connection.
                super::transport::SendError::Closed(why) if self.session_ended().is_some() => {
                    RpcError::Unhandled(why)
                }
                super::transport::SendError::Closed(why) => RpcError::Closed(why),
                super::transport::SendError::Refused(why) => RpcError::Failed(why),
            });
        }
        let answer = tokio::select! {
            answer = waiter => answer,
            () = ct.cancelled() => {
                self.cancel(&id, "cancelled by the client").await;
                return Err(RpcError::Cancelled);
            }
        };
        match answer {
            Ok(Answer::Message(message)) => decode_answer(message, expect).await,
            Ok(Answer::Failed(why)) => Err(RpcError::Failed(why)),
            Ok(Answer::Unhandled(why)) => Err(RpcError::Unhandled(why)),
            Err(CallFailed::ConnectionLost { reason }) => Err(RpcError::Closed(reason)),
            Err(other) => Err(RpcError::Failed(other.to_string())),
        }
    }

    /// Sends a notification.
    async fn notify(
        &self,
        method: &str,
        params: Option<serde_json::Value>,
        what: &str,
    ) -> Result<(), String> {
        let mut body = serde_json::json!({"jsonrpc": "2.0", "method": method});
        if let Some(params) = params {
            body["params"] = params;
        }
        let message = Message::parse(bytes::Bytes::from(body.to_string()))
            .map_err(|e| format!("could not make {what}: {e}"))?;
        self.shared
            .transport
            .send(message)
            .await
            .map_err(|e| format!("could not be sent {what}: {e}"))
    }

    /// Tells the upstream that sluice no longer waits for request `id`.
    pub async fn cancel(&self, id: &Id, reason: &str) {
        let params = serde_json::json!({
            "requestId": serde_json::from_str::<serde_json::Value>(id.as_json()).unwrap_or_default(),
            "reason": reason,
        });
        if let Err(e) = self
            .notify("notifications/cancelled", Some(params), "a cancellation")
            .await
        {
            tracing::debug!(upstream = %self.shared.upstream, "{e}");
        }
    }

    /// Tells the upstream that the client's roots changed.
    pub async fn notify_roots_list_changed(&self) {
        if let Err(e) = self
            .notify(
                "notifications/roots/list_changed",
                None,
                "roots/list_changed",
            )
            .await
        {
            tracing::debug!(upstream = %self.shared.upstream, "{e}");
        }
    }
}

enum Discovered {
    Modern(Box<ServerPeerInfo>),
    Legacy(String),
}

fn versions(list: &[ProtocolVersion]) -> String {
    let names: Vec<String> = list.iter().map(|v| v.to_string()).collect();
    if names.is_empty() {
        "(none named)".to_owned()
    } else {
        names.join(", ")
    }
}

/// A failed handshake request, described.
fn describe(error: &RpcError, what: &str) -> String {
    match error {
        RpcError::Error(e) => format!(
            "answered {what} with an error: {} ({})",
            e.message, e.code.0
        ),
        RpcError::Failed(why) => format!("gave no usable answer to {what}: {why}"),
        RpcError::Closed(why) | RpcError::Unhandled(why) => {
            format!("{why} before answering {what}")
        }
        RpcError::Cancelled => format!("{what} was cancelled"),
    }
}

/// rmcp's spelling of one of sluice's ids (always numbers it counts).
pub fn rmcp_id(id: &Id) -> RequestId {
    match id.as_u64() {
        Some(n) => NumberOrString::Number(n as i64),
        None => NumberOrString::String(id.as_json().trim_matches('"').into()),
    }
}

fn request_id_number(id: &Id) -> i64 {
    id.as_u64().map_or(0, |n| n as i64)
}

/// sluice's id for rmcp's spelling of it.
pub fn own_id(id: &RequestId) -> Id {
    match id {
        NumberOrString::Number(n) => Id::from_json(&n.to_string()).unwrap_or_else(|| Id::number(0)),
        NumberOrString::String(s) => Id::string(s),
    }
}

fn encode<T: serde::Serialize>(message: &T) -> Result<Message, String> {
    let bytes = serde_json::to_vec(message).map_err(|e| format!("could not be encoded: {e}"))?;
    Message::parse(bytes::Bytes::from(bytes)).map_err(|e| format!("could not be encoded: {e}"))
}

/// A response's result or error, decoded (large ones off the async threads).
async fn decode_answer(message: Message, expect: Expect) -> Result<Decoded, RpcError> {
    let len = message.as_bytes().len();
    // A tool's result, a resource's, a prompt's and a completion's are
    // relayed or governed from their bytes: decoding waits until it is
    // needed (see `Decoded::decoded`).
    if expect.left_as_sent() && message.kind() == Kind::Response {
        return Ok(Decoded {
            raw: message,
            result: None,
            expect,
        });
    }
    let decode = move || -> Result<Decoded, RpcError> {
        match message.kind() {
            Kind::Response => match expect.decode(message.result().unwrap_or("{}")) {
                Ok(result) => Ok(Decoded {
                    result: Some(Box::new(result)),
                    raw: message,
                    expect,
                }),
                Err(e) => Err(RpcError::Failed(format!(
                    "its result could not be read: {e}"
                ))),
            },
            Kind::Error => match serde_json::from_str::<ErrorData>(message.error().unwrap_or("{}"))
            {
                Ok(error) => Err(RpcError::Error(error)),
                Err(e) => Err(RpcError::Failed(format!(
                    "its error could not be read: {e}"
                ))),
            },
            Kind::Request | Kind::Notification => {
                Err(RpcError::Failed("the answer is not a response".into()))
            }
        }
    };
    if len > BLOCKING_BYTES {
        tokio::task::spawn_blocking(decode)
            .await
            .unwrap_or_else(|e| Err(RpcError::Failed(format!("decoding failed: {e}"))))
    } else {
        decode()
    }
}

/// What the answer to a request is expected to be, from its method: the
/// result is decoded as that type directly. `ServerResult` is an untagged
/// enum, which serde decodes by buffering the whole result and trying each
/// variant in turn: a tenth of sluice's time on a small call, and a copy of
/// the whole result as a tree before it is read (a resource's text held
/// twice more while a large read was decoded).
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// `tools/call` (and `tasks/result`, a task's): a `CallToolResult`,
    /// unless the text may be one of the other answers a call can get (a
    /// task, `input_required`); left as sent until someone needs it typed.
    CallTool,
    /// A method whose answer is one type, which the gateway relays,
    /// governs or reads item by item from its bytes (`resources/read`,
    /// `prompts/get`, `completion/complete`, the lists): left as sent, as a
    /// call's is. When something needs it typed, it is decoded as that
    /// type, unless the text may be another answer; what does not read as
    /// it is read as any result.
    Sent(fn(&str) -> serde_json::Result<ServerResult>),
    /// Anything: decoded as any result.
    Any,
}

/// A function that reads a result as `ServerResult::$variant`: a plain
/// function per type, as an `Expect` is made for every request.
macro_rules! decoder {
    ($variant:ident) => {{
        fn decode(result: &str) -> serde_json::Result<ServerResult> {
            serde_json::from_str(result).map(ServerResult::$variant)
        }
        decode
    }};
}

impl Expect {
    fn of(method: Option<&str>) -> Expect {
        match method {
            // A task's result (SEP-1686) is the tool's: relayed as sent.
            Some("tools/call" | "tasks/result") => Expect::CallTool,
            Some("resources/read") => Expect::Sent(decoder!(ReadResourceResult)),
            Some("prompts/get") => Expect::Sent(decoder!(GetPromptResult)),
            Some("completion/complete") => Expect::Sent(decoder!(CompleteResult)),
            // Read item by item (`gateway::lists::list_all`).
            Some("tools/list") => Expect::Sent(decoder!(ListToolsResult)),
            Some("prompts/list") => Expect::Sent(decoder!(ListPromptsResult)),
            Some("resources/list") => Expect::Sent(decoder!(ListResourcesResult)),
            Some("resources/templates/list") => Expect::Sent(decoder!(ListResourceTemplatesResult)),
            _ => Expect::Any,
        }
    }

    /// Whether a response's result is left as sent until it is needed.
    fn left_as_sent(self) -> bool {
        !matches!(self, Expect::Any)
    }

    fn decode(self, result: &str) -> serde_json::Result<ServerResult> {
        // Searchers built once: building one costs more than searching a
        // small result.
        static KEYS: std::sync::LazyLock<[memchr::memmem::Finder<'static>; 3]> =
            std::sync::LazyLock::new(|| {
                [r#""task""#, r#""resultType""#, r#""inputRequests""#]
                    .map(|key| memchr::memmem::Finder::new(key.as_bytes()))
            });
        let may_be_other = || {
            let text = result.as_bytes();
            KEYS.iter().any(|key| key.find(text).is_some())
        };
        match self {
            // Nothing else answers a call without those keys: what does
            // not read as a tool's result is one that cannot be read (read
            // as any result, it was a `CustomResult`, refused as
            // "unexpected" without saying what was wrong).
            Expect::CallTool if !may_be_other() => {
                serde_json::from_str::<rmcp::model::CallToolResult>(result)
                    .map(ServerResult::CallToolResult)
            }
            // What does not read as the expected type is read as any
            // result, as before.
            Expect::Sent(decode) if !may_be_other() => {
                decode(result).or_else(|_| serde_json::from_str::<ServerResult>(result))
            }
            _ => serde_json::from_str::<ServerResult>(result),
        }
    }
}

/// The reader: everything the transport hands over, in order.
async fn read(shared: Arc<Shared>, mut inbound: mpsc::Receiver<Inbound>) {
    let why = loop {
        let item = tokio::select! {
            item = inbound.recv() => item,
            () = shared.stop.cancelled() => break "was closed by sluice".to_owned(),
        };
        match item {
            None => break "closed the connection".to_owned(),
            Some(Inbound::Closed { why }) => break why,
            Some(Inbound::Unhandled { id, why }) => {
                if !shared.pending.complete(&id, Answer::Unhandled(why)) {
                    tracing::debug!(upstream = %shared.upstream, "request {id} was never handled, and no one waits for it");
                }
            }
            Some(Inbound::Failed { id, why }) => {
                if !shared.pending.complete(&id, Answer::Failed(why)) {
                    tracing::debug!(upstream = %shared.upstream, "a failure for request {id}, which no one waits for");
                }
            }
            Some(Inbound::Unreadable { id: Some(id), why }) => {
                tracing::warn!(upstream = %shared.upstream, "answer to request {id} refused: {why}");
                shared.pending.complete(&id, Answer::Failed(why));
            }
            Some(Inbound::Unreadable { id: None, why }) => {
                tracing::warn!(upstream = %shared.upstream, "skipped a message that cannot be read: {why}");
            }
            Some(Inbound::Message { message, stream_of }) => match message.kind() {
                Kind::Response | Kind::Error => match message.id() {
                    Some(id) => complete(&shared.pending, &shared.upstream, &id, message),
                    None => without_id(&shared, message, stream_of),
                },
                Kind::Notification => notification(&shared, &message, stream_of),
                Kind::Request => request(&shared, message, stream_of),
            },
        }
        shared.transport.handled();
    };
    tracing::debug!(upstream = %shared.upstream, "connection ended: {why}");
    shared.ended.send_replace(Some(why.clone()));
    // The transport's own tasks (an HTTP session's standalone stream) end
    // with the connection, whichever way it ended.
    shared.transport.close().await;
    shared
        .pending
        .fail_all(&CallFailed::ConnectionLost { reason: why });
    for (_, ct) in lock(&shared.serving).drain() {
        ct.cancel();
    }
}

/// Completes call `id` with its answer `message` (one no one waits for,
/// cancelled or late, is dropped). The engine's reader and the transport's
/// [`Answers`](super::transport::Answers) (see [`answered`]) both complete
/// calls with it.
///
/// An answer whose id writes a waiting request's another way (`"5"` for
/// `5`: [`Pending::respelled`]) is that request's, said in a warning: it
/// was dropped, and its call waited until its timeout and went on as an
/// operation that never ended.
fn complete(pending: &Pending<Answer>, upstream: &str, id: &Id, message: Message) {
    let own = pending.respelled(id);
    match &own {
        Some(own) => {
            pending.complete(own, Answer::Message(message.with_id(own)));
        }
        None if pending.complete(id, Answer::Message(message)) => return,
        None => {}
    }
    let Some(before) = pending.stray(id) else {
        tracing::debug!(%upstream, "an answer to request {id}, which no one waits for (cancelled or late)");
        return;
    };
    // Said the first time, then at the 2nd, 4th, 8th…: a server that
    // answers every request so says so, not once per answer.
    if !(before + 1).is_power_of_two() {
        tracing::debug!(%upstream, "another answer to request {id}, an id sluice never sent");
        return;
    }
    let id = sluice_core::format::quoted_cut(id.as_json());
    let answers = before + 1;
    match own {
        Some(own) => tracing::warn!(
            %upstream,
            answers,
            "the upstream answered request {own} with the id {id}, written another way: taken as its answer. An answer must carry the id of its request exactly as sent (a number as a number): this is the server's bug"
        ),
        None => tracing::warn!(
            %upstream,
            answers,
            "the upstream answered request {id}, which sluice never sent: the answer is dropped, and the call it was meant for waits until its timeout. sluice numbers its requests 1, 2, 3…; an answer must carry the id of its request exactly as sent (a number as a number): this is the server's bug"
        ),
    }
}

/// An answer that names no request: JSON-RPC's error with a `null` id,
/// which a server sends when it could not read a request's id (a line it
/// could not parse). Left alone, the call it answers waited until its
/// timeout and then became an operation that never ended. It answers the
/// request whose response it came in (`stream_of`: Streamable HTTP knows),
/// or, over stdio ([`Transport::one_stream`]), the one request waiting if
/// only one is (nothing else can be waiting for it); with several waiting
/// none can be chosen, and it is only logged.
fn without_id(shared: &Shared, message: Message, stream_of: Option<Id>) {
    let upstream = &shared.upstream;
    let error = sluice_core::format::quoted_cut(message.error().unwrap_or_default());
    if message.kind() != Kind::Error {
        tracing::warn!(%upstream, "dropped a result without a request id (only an error may lack one): {}", sluice_core::format::quoted_cut(message.as_str()));
        return;
    }
    let alone = || {
        shared
            .transport
            .one_stream()
            .then(|| shared.pending.only_waiting())
            .flatten()
    };
    match stream_of.or_else(alone) {
        Some(id) => {
            tracing::warn!(%upstream, "an error without a request id ({error}) answers request {id}, the only one it can be for");
            complete(&shared.pending, upstream, &id, message.with_id(&id));
        }
        None => {
            let waiting = shared.pending.len();
            tracing::warn!(%upstream, waiting, "an error without a request id ({error}): {waiting} requests wait, and it cannot be told which it answers, so none is failed; each waits until its timeout");
        }
    }
}

/// The transport's [`Answers`](super::transport::Answers): completes the
/// call `item` answers, if it is an answer with an id; gives back anything
/// else, for the engine.
fn answered(pending: &Pending<Answer>, upstream: &str, item: Inbound) -> Option<Inbound> {
    match item {
        Inbound::Message { message, stream_of }
            if matches!(message.kind(), Kind::Response | Kind::Error) =>
        {
            match message.id() {
                Some(id) => {
                    complete(pending, upstream, &id, message);
                    None
                }
                None => Some(Inbound::Message { message, stream_of }),
            }
        }
        other => Some(other),
    }
}

/// A notification from the upstream, handled before anything later is
/// read; `stream_of`: the request on whose response stream it came
/// (Streamable HTTP says so).
fn notification(shared: &Shared, message: &Message, stream_of: Option<Id>) {
    if message.method() == Some("notifications/cancelled") {
        // Only cancelled: the entry leaves with its task (see `request`).
        let id = message.cancelled_request();
        if let Some(ct) = id.and_then(|id| lock(&shared.serving).get(&id).cloned()) {
            ct.cancel();
        }
        return;
    }
    // Read for what routes it, never for its payload (a `_meta`): that
    // goes on as sent.
    if message.method() == Some("notifications/progress")
        && let Some(progress) = progress_of(message)
        && shared
            .hub
            .divert_progress(&shared.upstream, &progress, message)
    {
        return;
    }
    shared
        .client
        .handle_notification(message, stream_of.as_ref().map(rmcp_id).as_ref());
}

/// A progress notification's params, but its `_meta` (not read), its
/// `message` cut at [`PROGRESS_MESSAGE_CHARS`]: the notification goes on
/// as sent (these params route it and are what an operation keeps of it),
/// and a message as large as a notification may be was held twice while
/// the notification waited for its client.
fn progress_of(message: &Message) -> Option<rmcp::model::ProgressNotificationParam> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Progress {
        progress_token: rmcp::model::ProgressToken,
        progress: f64,
        total: Option<f64>,
        message: Option<Cut>,
    }
    /// A string's first [`PROGRESS_MESSAGE_CHARS`] characters.
    struct Cut(String);
    impl<'de> serde::Deserialize<'de> for Cut {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Visit;
            impl serde::de::Visitor<'_> for Visit {
                type Value = Cut;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a string")
                }
                fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Cut, E> {
                    Ok(Cut(text.chars().take(PROGRESS_MESSAGE_CHARS).collect()))
                }
            }
            d.deserialize_str(Visit)
        }
    }
    let read: Progress = serde_json::from_str(message.params()?).ok()?;
    let mut progress =
        rmcp::model::ProgressNotificationParam::new(read.progress_token, read.progress);
    (progress.total, progress.message) = (read.total, read.message.map(|cut| cut.0));
    Some(progress)
}

/// How much of a progress notification's message sluice reads: what an
/// operation keeps of it.
const PROGRESS_MESSAGE_CHARS: usize = crate::operations::STATUS_CHARS;

/// A server→client request, answered in a task of its own.
///
/// Each request's entry in `serving` leaves only with its task, cancelled or
/// not, so an id stays in use until then: a second request with it is
/// refused at once. (It took the first's entry, whose task, ending, then
/// removed the second's: the second's answer was never sent, and its
/// upstream waited for it.)
fn request(shared: &Arc<Shared>, message: Message, stream_of: Option<Id>) {
    let Some(id) = message.id() else { return };
    let ct = shared.stop.child_token();
    let refused = {
        let mut serving = lock(&shared.serving);
        if serving.contains_key(&id) {
            Some(ErrorData::invalid_request(
                format!(
                    "the request's id {} is already the id of a request of upstream `{}` that sluice is still answering: JSON-RPC asks for a new id for every request; send this one with an id not in use",
                    sluice_core::format::quoted_cut(id.as_json()),
                    shared.upstream
                ),
                None,
            ))
        } else if serving.len() >= MAX_SERVING {
            Some(ErrorData::internal_error(
                format!(
                    "sluice is already handling {MAX_SERVING} requests from upstream `{}`: send this one again when they are answered",
                    shared.upstream
                ),
                None,
            ))
        } else {
            serving.insert(id.clone(), ct.clone());
            None
        }
    };
    let shared = shared.clone();
    if let Some(refusal) = refused {
        tokio::spawn(async move {
            answer(&shared, &id, Err(refusal)).await;
        });
        return;
    }
    tokio::spawn(async move {
        // Not decoded: routed by its method, and passed on as sent (its
        // params are any size; the client reads them). An id MCP does not
        // allow is refused (the answer carries it as sent).
        let answer = match crate::caller::request_id(&id) {
            None => Err(ErrorData::invalid_request(
                crate::caller::unread_request_id(&id),
                None,
            )),
            Some(_) => {
                let origin = stream_of.as_ref().map(rmcp_id);
                shared
                    .client
                    .handle_request(&message, origin, ct.clone())
                    .await
            }
        };
        // Gone from the table when the connection ended; cancelled by the
        // upstream: no answer.
        let still_wanted = lock(&shared.serving).remove(&id).is_some() && !ct.is_cancelled();
        if still_wanted {
            self::answer(&shared, &id, answer).await;
        }
    });
}

/// Sends the answer to the upstream's request `id`.
async fn answer(shared: &Shared, id: &Id, answer: Result<ClientAnswer, ErrorData>) {
    let placeholder = NumberOrString::Number(0);
    let response = match answer {
        Ok(ClientAnswer::Relayed(answer)) => {
            // The client's bytes, with the upstream's id exactly as it came.
            if let Err(e) = shared.transport.send(answer.with_id(id)).await {
                tracing::debug!(upstream = %shared.upstream, "the answer to request {id} was not delivered: {e}");
            }
            return;
        }
        Ok(ClientAnswer::Typed(result)) => ClientJsonRpcMessage::response(result, placeholder),
        Err(error) => ClientJsonRpcMessage::error(error, Some(placeholder)),
    };
    // The upstream's id goes back exactly as it came.
    let sent = match encode(&response) {
        Ok(response) => shared
            .transport
            .send(response.with_id(id))
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    if let Err(e) = sent {
        tracing::debug!(upstream = %shared.upstream, "the answer to request {id} was not delivered: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

    /// An answer is read as the one type its method's result is (not
    /// through the untagged `ServerResult`, which copies it whole as a tree
    /// first); one that does not read as it is read as any result, as
    /// before; a 2026-07-28 answer that may be another kind is read as any.
    #[test]
    fn an_answer_is_read_as_its_methods_type() {
        for (method, result) in [
            ("tools/list", r#"{"tools":[]}"#),
            (
                "resources/read",
                r#"{"contents":[{"uri":"a://b","text":"t"}]}"#,
            ),
            ("prompts/get", r#"{"messages":[]}"#),
            ("completion/complete", r#"{"completion":{"values":["a"]}}"#),
            ("prompts/list", r#"{"prompts":[]}"#),
            ("resources/list", r#"{"resources":[]}"#),
            ("resources/templates/list", r#"{"resourceTemplates":[]}"#),
        ] {
            let expect = Expect::of(Some(method));
            assert!(
                matches!(expect, Expect::Sent(_)) && expect.left_as_sent(),
                "{method}"
            );
            let read = expect.decode(result).unwrap();
            let typed = match read {
                ServerResult::ListToolsResult(_) => "tools/list",
                ServerResult::ReadResourceResult(_) => "resources/read",
                ServerResult::GetPromptResult(_) => "prompts/get",
                ServerResult::CompleteResult(_) => "completion/complete",
                ServerResult::ListPromptsResult(_) => "prompts/list",
                ServerResult::ListResourcesResult(_) => "resources/list",
                ServerResult::ListResourceTemplatesResult(_) => "resources/templates/list",
                _ => "another",
            };
            assert_eq!(typed, method);
            let untagged: ServerResult = serde_json::from_str(result).unwrap();
            assert_eq!(
                serde_json::to_value(expect.decode(result).unwrap()).unwrap(),
                serde_json::to_value(untagged).unwrap(),
                "{method}: read as the untagged enum reads it"
            );
        }
        // Not the type: read as any result, as before.
        let odd = Expect::of(Some("resources/list"))
            .decode(r#"{"x":1}"#)
            .unwrap();
        assert!(!matches!(odd, ServerResult::ListResourcesResult(_)));
        assert!(matches!(Expect::of(Some("ping")), Expect::Any));
    }

    /// What sluice reads of a progress notification routes it; its
    /// message, which may be as large as a notification may be, is read
    /// only as far as an operation shows it (the notification goes on as
    /// sent).
    #[test]
    fn a_progress_notifications_message_is_read_cut() {
        let long = "\\u00e9".repeat(1000);
        let raw = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":"t","progress":2,"total":5,"message":"{long}"}}}}"#
        );
        let message = Message::parse(bytes::Bytes::from(raw)).unwrap();
        let read = progress_of(&message).unwrap();
        assert_eq!(
            read.progress_token,
            rmcp::model::ProgressToken(NumberOrString::String("t".into()))
        );
        assert_eq!((read.progress, read.total), (2.0, Some(5.0)));
        assert_eq!(read.message.unwrap(), "é".repeat(PROGRESS_MESSAGE_CHARS));
        let short = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1,"message":"half"}}"#;
        let read = progress_of(&Message::parse(bytes::Bytes::from(short)).unwrap()).unwrap();
        assert_eq!(read.message.as_deref(), Some("half"));
    }

    /// The far end of a pipe: a hand-written server that reads what the
    /// engine sends and answers with exact bytes.
    struct Far {
        lines: tokio::io::Lines<BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>,
        writer: tokio::io::WriteHalf<tokio::io::DuplexStream>,
    }

    impl Far {
        async fn received(&mut self) -> serde_json::Value {
            let line = self.lines.next_line().await.unwrap().expect("a message");
            serde_json::from_str(&line).unwrap()
        }

        async fn send(&mut self, bytes: &[u8]) {
            self.writer.write_all(bytes).await.unwrap();
            self.writer.write_all(b"\n").await.unwrap();
        }
    }

    fn engine(limit: usize) -> (Rpc, Far) {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (read, write) = tokio::io::split(ours);
        let (transport, inbound) = super::super::lines::open("fake", read, write, limit);
        let client = UpstreamClient {
            upstream: "fake".into(),
            hub: Arc::new(Hub::default()),
            info: ClientConfig::default(),
        };
        let (far_read, far_write) = tokio::io::split(theirs);
        let far = Far {
            lines: BufReader::new(far_read).lines(),
            writer: far_write,
        };
        (Rpc::start(transport, inbound, client), far)
    }

    fn list_tools() -> ClientRequest {
        ClientRequest::ListToolsRequest(Default::default())
    }

    /// A `tools/list` request made in a task of its own.
    fn spawn_ask(rpc: &Rpc) -> tokio::task::JoinHandle<Result<ServerResult, RpcError>> {
        tokio::spawn(ask_on(rpc.listener()))
    }

    async fn ask(rpc: &Rpc) -> Result<ServerResult, RpcError> {
        ask_on(rpc.listener()).await
    }

    /// A `tools/list` request on `link`, its answer decoded.
    async fn ask_on(link: Link) -> Result<ServerResult, RpcError> {
        let never = CancellationToken::new();
        link.request(list_tools(), false, &ForClient::NONE, &never, |_| ())
            .await
            .and_then(|a| a.decoded().map(|(r, _)| r).map_err(RpcError::Failed))
    }

    #[tokio::test]
    async fn an_answer_that_cannot_be_read_fails_its_call_at_once_and_the_next_call_works() {
        let (rpc, mut far) = engine(1 << 20);
        let first = spawn_ask(&rpc);
        let request = far.received().await;
        assert_eq!(request["method"], "tools/list");
        assert!(
            request["params"]["_meta"].get("progressToken").is_none(),
            "{request}"
        );
        let id = request["id"].to_string();
        // An answer cut short (its line ends mid-JSON), then a line of
        // garbage: the call fails with the first's reason; the garbage,
        // which names no request, is skipped.
        far.send(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"tools":[],"x":"#).as_bytes())
            .await;
        far.send(b"\xff\xfe\"}}").await;
        match first.await.unwrap() {
            Err(RpcError::Failed(why)) => assert!(why.contains("not JSON"), "{why}"),
            other => panic!("{other:?}"),
        }
        let second = spawn_ask(&rpc);
        let request = far.received().await;
        let id = request["id"].to_string();
        far.send(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"tools":[]}}}}"#).as_bytes())
            .await;
        assert!(matches!(
            second.await.unwrap(),
            Ok(ServerResult::ListToolsResult(_))
        ));
    }

    /// An error naming no request (`"id":null`) over one stream: with two
    /// calls waiting it answers neither (either may be its request); with
    /// one, it is that one's answer. A result naming no request answers
    /// nothing (only an error may lack an id). Every call that waits still
    /// takes its own answer.
    #[tokio::test]
    async fn an_answer_naming_no_request_answers_only_the_one_call_waiting() {
        let (rpc, mut far) = engine(1 << 20);
        let nameless =
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: unreadable"}}"#;
        let answer = |id: &serde_json::Value| {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"tools":[]}}}}"#)
        };
        let mut first = spawn_ask(&rpc);
        let one = far.received().await["id"].clone();
        let second = spawn_ask(&rpc);
        let two = far.received().await["id"].clone();
        far.send(nameless).await;
        far.send(answer(&two).as_bytes()).await;
        assert!(matches!(
            second.await.unwrap(),
            Ok(ServerResult::ListToolsResult(_))
        ));
        let waiting = Duration::from_millis(100);
        assert!(
            tokio::time::timeout(waiting, &mut first).await.is_err(),
            "two waited: the error answered the first"
        );
        far.send(nameless).await;
        let alone = tokio::time::timeout(Duration::from_secs(10), first).await;
        match alone.expect("the one call waiting was answered").unwrap() {
            Err(RpcError::Error(error)) => {
                assert!(error.message.contains("unreadable"), "{error:?}");
            }
            other => panic!("{other:?}"),
        }
        assert_ne!(one, two);
        let mut third = spawn_ask(&rpc);
        let three = far.received().await["id"].clone();
        far.send(br#"{"jsonrpc":"2.0","id":null,"result":{"tools":[]}}"#)
            .await;
        assert!(
            tokio::time::timeout(waiting, &mut third).await.is_err(),
            "a result without an id answered the call"
        );
        far.send(answer(&three).as_bytes()).await;
        assert!(matches!(
            third.await.unwrap(),
            Ok(ServerResult::ListToolsResult(_))
        ));
    }

    #[tokio::test]
    async fn an_answer_that_is_not_utf8_fails_its_call_saying_so() {
        let (rpc, mut far) = engine(1 << 20);
        let call = spawn_ask(&rpc);
        let id = far.received().await["id"].to_string();
        let mut line =
            format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"tools":[],"x":""#).into_bytes();
        line.extend_from_slice(b"\xff\"}}");
        far.send(&line).await;
        match call.await.unwrap() {
            Err(RpcError::Failed(why)) => {
                assert!(why.contains("UTF-8") && why.contains("`fake`"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        drop(rpc);
    }

    #[tokio::test]
    async fn an_answer_over_the_limit_fails_its_call_naming_the_key() {
        let (rpc, mut far) = engine(1 << 10);
        let call = spawn_ask(&rpc);
        let id = far.received().await["id"].to_string();
        let big = "x".repeat(4 << 10);
        far.send(
            format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"tools":[],"x":"{big}"}}}}"#)
                .as_bytes(),
        )
        .await;
        match call.await.unwrap() {
            Err(RpcError::Failed(why)) => assert!(why.contains("max_message_mb"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(
            rpc.is_open(),
            "a refused answer with an id keeps the connection"
        );
    }

    #[tokio::test]
    async fn the_end_of_the_connection_fails_every_waiting_call_with_how_it_ended() {
        let (rpc, mut far) = engine(1 << 20);
        let calls: Vec<_> = (0..2).map(|_| spawn_ask(&rpc)).collect();
        far.received().await;
        far.received().await;
        drop(far);
        for call in calls {
            match call.await.unwrap() {
                Err(RpcError::Closed(why)) => assert_eq!(why, "closed its stdout"),
                other => panic!("{other:?}"),
            }
        }
        assert!(!rpc.is_open());
        assert!(matches!(ask(&rpc).await, Err(RpcError::Closed(_))));
    }

    #[tokio::test]
    async fn an_upstream_ping_is_answered_with_its_id_exactly_as_sent() {
        let (_rpc, mut far) = engine(1 << 20);
        far.send(br#"{"jsonrpc":"2.0","id":"p\u00e9","method":"ping"}"#)
            .await;
        let line = far.lines.next_line().await.unwrap().unwrap();
        assert!(line.contains(r#""id":"p\u00e9""#), "{line}");
        let answer: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(answer["result"], serde_json::json!({}));
    }

    #[tokio::test]
    async fn a_cancelled_request_tells_the_upstream() {
        let (rpc, mut far) = engine(1 << 20);
        let ct = CancellationToken::new();
        let call = tokio::spawn({
            let link = rpc.listener();
            let ct = ct.clone();
            async move {
                link.request(list_tools(), false, &ForClient::NONE, &ct, |_| ())
                    .await
            }
        });
        let id = far.received().await["id"].clone();
        ct.cancel();
        assert!(matches!(call.await.unwrap(), Err(RpcError::Cancelled)));
        let cancelled = far.received().await;
        assert_eq!(cancelled["method"], "notifications/cancelled");
        assert_eq!(cancelled["params"]["requestId"], id);
    }

    #[tokio::test]
    async fn auto_falls_back_to_initialize_when_discover_is_unknown() {
        let (rpc, mut far) = engine(1 << 20);
        let handshake = tokio::spawn(async move {
            let info = rpc
                .handshake(Lifecycle::Auto, &ClientConfig::default())
                .await;
            (rpc, info)
        });
        let discover = far.received().await;
        assert_eq!(discover["method"], "server/discover");
        assert_eq!(
            discover["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
            "2026-07-28"
        );
        let id = discover["id"].to_string();
        far.send(
            format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32601,"message":"Method not found"}}}}"#)
                .as_bytes(),
        )
        .await;
        let initialize = far.received().await;
        assert_eq!(initialize["method"], "initialize");
        assert_eq!(initialize["params"]["protocolVersion"], "2025-11-25");
        let id = initialize["id"].to_string();
        far.send(
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"result":{{"protocolVersion":"2025-11-25","capabilities":{{"tools":{{}}}},"serverInfo":{{"name":"far","version":"1"}}}}}}"#
            )
            .as_bytes(),
        )
        .await;
        let initialized = far.received().await;
        assert_eq!(initialized["method"], "notifications/initialized");
        let (rpc, info) = handshake.await.unwrap();
        let info = info.unwrap();
        assert_eq!(info.protocol_version, ProtocolVersion::V_2025_11_25);
        assert_eq!(info.server_info.unwrap().name, "far");
        // No client context on requests of the initialize era.
        let call = spawn_ask(&rpc);
        let request = far.received().await;
        assert!(request["params"]["_meta"].is_null(), "{request}");
        drop(call);
    }

    /// A 2026-07-28 request tells the upstream its own client's
    /// capabilities in place of the connection's (the first client's),
    /// typed or as text; one made for no client carries the connection's.
    #[tokio::test]
    async fn a_2026_request_carries_its_own_clients_capabilities() {
        let (rpc, mut far) = engine(1 << 20);
        let mut first = ClientConfig::default();
        first.capabilities.roots = Some(Default::default());
        let handshake = tokio::spawn(async move {
            let info = rpc.handshake(Lifecycle::Discover, &first).await;
            (rpc, info)
        });
        let discover = far.received().await;
        let id = discover["id"].to_string();
        far.send(
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{{"tools":{{}}}},"ttlMs":0,"cacheScope":"private"}}}}"#
            )
            .as_bytes(),
        )
        .await;
        let (rpc, info) = handshake.await.unwrap();
        info.unwrap();
        let mut sampling = rmcp::model::ClientCapabilities::default();
        sampling.sampling = Some(Default::default());
        let for_client = ForClient {
            log_level: None,
            capabilities: Some(crate::hub::Mirrored::of(&sampling)),
        };
        let link = rpc.listener();
        let never = CancellationToken::new();
        let typed = link.request(list_tools(), false, &for_client, &never, |_| ());
        let text = link.request_text(
            "tools/call",
            r#"{"name":"t","_meta":{"io.modelcontextprotocol/clientCapabilities":{"elicitation":{}},"x":1}}"#,
            false,
            &for_client,
            &never,
            |_| (),
        );
        let own = link.request(list_tools(), false, &ForClient::NONE, &never, |_| ());
        let received = async {
            let mut metas = Vec::new();
            for _ in 0..3 {
                let request = far.received().await;
                metas.push((
                    request["method"].clone(),
                    request["params"]["_meta"].clone(),
                ));
            }
            metas
        };
        let metas = tokio::select! {
            metas = received => metas,
            _ = async { tokio::join!(typed, text, own) } => unreachable!("nothing answers"),
        };
        let key = "io.modelcontextprotocol/clientCapabilities";
        let capabilities: Vec<String> = metas.iter().map(|(_, m)| m[key].to_string()).collect();
        assert_eq!(
            capabilities,
            [
                r#"{"sampling":{}}"#,
                r#"{"sampling":{}}"#,
                r#"{"roots":{}}"#
            ],
            "{metas:?}"
        );
        // The text keeps what else its `_meta` had, the key once.
        assert_eq!(metas[1].0, "tools/call");
        assert_eq!(metas[1].1["x"], 1);
        assert_eq!(
            metas[1].1["io.modelcontextprotocol/protocolVersion"],
            "2026-07-28"
        );
    }
}
