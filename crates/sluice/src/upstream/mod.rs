//! One upstream MCP server, supervised: started on demand, restarted with
//! a backoff after a crash, and described precisely when it fails.
//!
//! A [`Connection`] is one live MCP session with the upstream; the
//! [`Upstream`] replaces it when it dies. Requests go through
//! [`Upstream::send`], which turns every way a request can fail into a
//! [`CallError`] that names the upstream and what happened.

mod client;
mod connection;
mod lines;
pub mod rpc;
pub mod streamable;

pub use connection::Connection;
mod http;
mod memory;
mod stdio;
pub mod tether;
pub mod transport;

pub use memory::InMemory;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures::FutureExt as _;
use futures::future::{BoxFuture, Shared};

use rmcp::model::{
    ClientConfig, ClientRequest, ConstString as _, ErrorData, Implementation, ServerPeerInfo,
};
use sluice_core::backoff::Backoff;
use sluice_core::config::{ProtocolChoice, UpstreamSpec, UpstreamTransport};
use sluice_core::limits::MessageLimits;
use sluice_core::tail::Tail;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::era::Era;
use crate::hub::{Event, Hub, RouteGuard};
pub use client::UpstreamClient;

/// How long an upstream may take to start and complete its handshake (in
/// the background: `npx` may be downloading it).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long requests wait for an upstream's handshake, counted from when it
/// began: past it they fail at once with an error that names the upstream,
/// while the handshake goes on in the background up to [`CONNECT_TIMEOUT`].
pub const HANDSHAKE_WAIT: Duration = Duration::from_secs(10);
/// A call waits this long for a restart backoff; longer waits fail at once.
const MAX_BACKOFF_WAIT: Duration = Duration::from_secs(5);
/// Stderr lines kept for error messages.
const TAIL_LINES: usize = 20;
/// Stderr lines quoted in an error message.
const QUOTED_LINES: usize = 8;

/// Why a request to an upstream failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// The upstream answered with a JSON-RPC error: forward it as is.
    #[error("{}", .0.message)]
    Upstream(ErrorData),
    /// The upstream cannot be reached, or died during the request.
    #[error("{0}")]
    Unavailable(String),
    /// The client cancelled the request.
    #[error("cancelled")]
    Cancelled,
}

/// A supervised upstream.
pub struct Upstream {
    /// Its configuration.
    pub spec: UpstreamSpec,
    hub: Arc<Hub>,
    connection: tokio::sync::Mutex<Option<Arc<Connection>>>,
    backoff: Mutex<Backoff>,
    last_failure: Mutex<Option<String>>,
    tail: Arc<Mutex<Tail>>,
    /// Whether a connection was ever made (a later one is a restart).
    connected_before: AtomicBool,
    /// Connections made after the first.
    restarts: std::sync::atomic::AtomicU64,
    /// The handshake under way, if any.
    attempt: Mutex<Option<Attempt>>,
    /// Whether a request gave up waiting for the handshake under way (its
    /// client saw lists without this upstream: they must list again).
    kept_waiting: AtomicBool,
    /// A server run in memory in place of the spec's (demo and tests).
    in_memory: Mutex<Option<InMemory>>,
    /// Itself, for the background handshake.
    me: Weak<Upstream>,
    /// The largest message read from it (`[limits] max_message_mb`).
    max_message_bytes: usize,
    /// What sluice has warned of once about it (a list item it cannot
    /// read), at most [`SAID_ONCE_MAX`]: every listing would say it again.
    said: Mutex<std::collections::HashSet<String>>,
}

/// The most distinct things warned of once per upstream; past that, they
/// are said at debug level (an upstream could list a million slips).
const SAID_ONCE_MAX: usize = 1024;

/// The outcome of a handshake, which every request waiting for it gets.
type Handshake = Shared<BoxFuture<'static, Result<Arc<Connection>, String>>>;

/// A handshake under way, in a task of its own, that requests join.
struct Attempt {
    /// When it was made (its backoff wait included).
    began: tokio::time::Instant,
    outcome: Handshake,
    task: tokio::task::AbortHandle,
}

impl Upstream {
    /// An upstream that is not started yet.
    pub fn new(spec: UpstreamSpec, hub: Arc<Hub>, limits: MessageLimits) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            spec,
            hub,
            connection: tokio::sync::Mutex::new(None),
            backoff: Mutex::new(Backoff::default()),
            last_failure: Mutex::new(None),
            tail: Arc::new(Mutex::new(Tail::new(TAIL_LINES))),
            connected_before: AtomicBool::new(false),
            restarts: Default::default(),
            attempt: Mutex::new(None),
            kept_waiting: AtomicBool::new(false),
            in_memory: Mutex::new(None),
            me: me.clone(),
            max_message_bytes: limits.max_message_bytes,
            said: Mutex::default(),
        })
    }

    /// Whether `what` is said about this upstream for the first time: a
    /// warning worth a line once, not at every listing. `false` again, past
    /// [`SAID_ONCE_MAX`] things said.
    pub fn first_said(&self, what: &str) -> bool {
        let mut said = lock(&self.said);
        if said.contains(what) || said.len() >= SAID_ONCE_MAX {
            return false;
        }
        said.insert(what.to_owned())
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The live connection, starting (or restarting) the upstream if needed.
    /// Waits for a handshake at most until [`HANDSHAKE_WAIT`] after it began.
    pub async fn connection(&self) -> Result<Arc<Connection>, CallError> {
        let (began, outcome) = {
            let mut slot = self.connection.lock().await;
            if let Some(conn) = slot.as_ref() {
                if conn.alive() {
                    lock(&self.backoff).healthy(conn.started, Instant::now());
                    return Ok(conn.clone());
                }
                if let Some(why) = conn.rpc.session_ended() {
                    // No failure: the upstream is up. Connect again at
                    // once (a crash waits out the backoff).
                    tracing::info!(upstream = %self.name(), "the upstream {why}: connecting again");
                } else {
                    let how = conn.how_it_ended().await;
                    let failure = format!("{how}{}", self.stderr_excerpt());
                    tracing::warn!(upstream = %self.name(), "connection lost: {failure}");
                    *lock(&self.last_failure) = Some(failure);
                    lock(&self.backoff).failed(Instant::now());
                }
                *slot = None;
            }
            let under_way = lock(&self.attempt)
                .as_ref()
                .map(|a| (a.began, a.outcome.clone()));
            match under_way {
                Some(attempt) => attempt,
                None => {
                    let wait = lock(&self.backoff).wait(Instant::now());
                    if wait > MAX_BACKOFF_WAIT {
                        let last = lock(&self.last_failure).clone().unwrap_or_default();
                        return Err(CallError::Unavailable(format!(
                            "upstream `{}` is down (it {last}); sluice will start it again in {:.1} s: retry then",
                            self.name(),
                            wait.as_secs_f64()
                        )));
                    }
                    self.begin_handshake(wait)?
                }
            }
        };
        match tokio::time::timeout_at(began + HANDSHAKE_WAIT, outcome).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(message)) => Err(CallError::Unavailable(format!(
                "upstream `{}` {message}",
                self.name()
            ))),
            Err(_) => {
                self.kept_waiting.store(true, Ordering::Relaxed);
                Err(CallError::Unavailable(format!(
                    "upstream `{}` did not finish its MCP handshake within {} s: it {} but has not answered sluice's `initialize` (or `server/discover`). sluice keeps waiting for it in the background (up to {} s in all): retry in a moment; if it never answers, check that {}{}",
                    self.name(),
                    HANDSHAKE_WAIT.as_secs(),
                    match self.spec.transport {
                        UpstreamTransport::Stdio { .. } => "was started",
                        UpstreamTransport::Http { .. } => "was reached",
                    },
                    CONNECT_TIMEOUT.as_secs(),
                    match &self.spec.transport {
                        UpstreamTransport::Stdio { command, .. } =>
                            format!("`{command}` is an MCP server that answers on its stdout"),
                        UpstreamTransport::Http { url, .. } => {
                            format!("{} is an MCP endpoint", crate::shown_url(url))
                        }
                    },
                    self.stderr_excerpt()
                )))
            }
        }
    }

    /// Begins a handshake in a task of its own, after `wait` (the backoff):
    /// it outlives the requests that gave up waiting for it, and on success
    /// becomes the connection. Called with the connection slot locked.
    fn begin_handshake(
        &self,
        wait: Duration,
    ) -> Result<(tokio::time::Instant, Handshake), CallError> {
        let Some(me) = self.me.upgrade() else {
            return Err(CallError::Unavailable(format!(
                "upstream `{}` is shutting down",
                self.name()
            )));
        };
        let task = tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let made = me.connect().await;
            let mut slot = me.connection.lock().await;
            let outcome = match made {
                Ok(conn) => {
                    me.watch_lists(&conn);
                    let conn = Arc::new(conn);
                    *slot = Some(conn.clone());
                    *lock(&me.last_failure) = None;
                    // A restarted server may offer other tools than before,
                    // and clients told it was not ready listed without it:
                    // they should list again.
                    let restarted = me.connected_before.swap(true, Ordering::Relaxed);
                    if restarted {
                        me.restarts.fetch_add(1, Ordering::Relaxed);
                    }
                    if me.kept_waiting.swap(false, Ordering::Relaxed) || restarted {
                        for event in [
                            Event::ToolsChanged,
                            Event::PromptsChanged,
                            Event::ResourcesChanged,
                        ] {
                            me.hub.publish(event);
                        }
                    }
                    Ok(conn)
                }
                Err(message) => {
                    tracing::error!(upstream = %me.name(), "{message}");
                    lock(&me.backoff).failed(Instant::now());
                    *lock(&me.last_failure) = Some(message.clone());
                    me.kept_waiting.store(false, Ordering::Relaxed);
                    Err(message)
                }
            };
            *lock(&me.attempt) = None;
            drop(slot);
            outcome
        });
        let abort = task.abort_handle();
        let outcome = async move {
            task.await
                .unwrap_or_else(|e| Err(format!("stopped before its handshake ended: {e}")))
        }
        .boxed()
        .shared();
        let began = tokio::time::Instant::now();
        *lock(&self.attempt) = Some(Attempt {
            began,
            outcome: outcome.clone(),
            task: abort,
        });
        Ok((began, outcome))
    }

    /// How often a connection was made after the first (it died or was
    /// lost, and sluice started it again).
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// Why the last connection ended or the last start failed, while no
    /// connection has been made since.
    pub fn problem(&self) -> Option<String> {
        lock(&self.last_failure).clone()
    }

    /// `stdio` or `http`.
    pub fn transport(&self) -> &'static str {
        match self.spec.transport {
            UpstreamTransport::Stdio { .. } => "stdio",
            UpstreamTransport::Http { .. } => "http",
        }
    }

    /// The connection if it is up, without starting anything.
    pub async fn current(&self) -> Option<Arc<Connection>> {
        self.connection
            .lock()
            .await
            .as_ref()
            .filter(|c| c.alive())
            .cloned()
    }

    /// Sends `request`; `routes` registers, with the upstream's request id
    /// and progress token, whatever must follow the request (progress
    /// mapping, origin of server→client requests) before it is sent;
    /// `progress` asks the upstream for progress; `for_client` says what
    /// a 2026-07-28 request tells of its client (called only for such an
    /// upstream); `ct` cancels it.
    ///
    /// A request the upstream said it never handled, because it had ended
    /// the session the request went in (Streamable HTTP's 404, or a 400
    /// that speaks of the session), is sent once more on a new connection:
    /// a session that expired or an upstream that restarted costs its
    /// caller a handshake, not its call. `routes` runs again for it (a new
    /// id and progress token).
    pub async fn send(
        &self,
        request: ClientRequest,
        progress: bool,
        for_client: impl Fn() -> rpc::ForClient,
        ct: &CancellationToken,
        routes: impl Fn(&rpc::Outgoing) -> Vec<RouteGuard>,
    ) -> Result<rpc::Decoded, CallError> {
        // A tool call's error is governed with the caller's budget (and
        // stored whole); any other request's is cut here.
        let governed_later = matches!(request, ClientRequest::CallToolRequest(_));
        // Only a session over HTTP can end this way: a copy for that alone.
        let mut again = self.is_http().then(|| request.clone());
        let mut first = Some(request);
        let routes = &routes;
        self.until_handled(governed_later, for_client, |conn, for_client| {
            let request = first.take().or_else(|| again.take());
            async move {
                let Some(request) = request else {
                    // No copy (not over HTTP): ends as a lost connection does.
                    return Err(rpc::RpcError::Closed("ended its session".to_owned()));
                };
                conn.rpc
                    .request(request, progress, &for_client, ct, routes)
                    .await
            }
        })
        .await
    }

    /// [`Self::send`] for a request of `method` whose `params` are JSON
    /// text (the client's, as sent, with sluice's edits): sent as that
    /// text, with what sluice adds to its `_meta` spliced in (see
    /// [`rpc::Link::request_text`]).
    pub async fn send_text(
        &self,
        method: &str,
        params: &str,
        progress: bool,
        for_client: impl Fn() -> rpc::ForClient,
        ct: &CancellationToken,
        routes: impl Fn(&rpc::Outgoing) -> Vec<RouteGuard>,
    ) -> Result<rpc::Decoded, CallError> {
        // As in `send`: a tool call's error is governed with its result.
        let governed_later = method == rmcp::model::CallToolRequestMethod::VALUE;
        let routes = &routes;
        self.until_handled(governed_later, for_client, |conn, for_client| async move {
            conn.rpc
                .request_text(method, params, progress, &for_client, ct, routes)
                .await
        })
        .await
    }

    /// Makes a request with `send` on the live connection, given what
    /// `for_client` says of the client if the upstream takes that with
    /// each request (a 2026-07-28 upstream has no session: no
    /// `logging/setLevel`, no capabilities declared once); once more on a
    /// new connection if the upstream never handled it (see
    /// [`Self::send`]).
    async fn until_handled<Sent>(
        &self,
        governed_later: bool,
        for_client: impl Fn() -> rpc::ForClient,
        mut send: impl FnMut(Arc<Connection>, rpc::ForClient) -> Sent,
    ) -> Result<rpc::Decoded, CallError>
    where
        Sent: Future<Output = Result<rpc::Decoded, rpc::RpcError>>,
    {
        let mut resent = false;
        loop {
            let conn = self.connection().await?;
            let told = match conn.era() {
                Era::Stateless => for_client(),
                Era::Legacy => rpc::ForClient::NONE,
            };
            let answer = send(conn.clone(), told).await;
            if let Err(rpc::RpcError::Unhandled(why)) = &answer
                && !resent
            {
                tracing::info!(
                    upstream = %self.name(),
                    "the upstream {why} without handling a request: sending it again on a new connection"
                );
                resent = true;
                continue;
            }
            return self.outcome(&conn, governed_later, answer).await;
        }
    }

    /// Whether the upstream is reached over HTTP.
    fn is_http(&self) -> bool {
        matches!(self.spec.transport, UpstreamTransport::Http { .. })
    }

    /// `answer`'s result, decoded if it was left as sent (see
    /// [`rpc::Decoded`]), with the response it came in; a result that
    /// cannot be read fails the call as an answer that cannot be read does.
    pub fn decoded(
        &self,
        answer: rpc::Decoded,
    ) -> Result<(rmcp::model::ServerResult, crate::jsonrpc::Message), CallError> {
        answer
            .decoded()
            .map_err(|why| CallError::Unavailable(format!("upstream `{}`: {why}", self.name())))
    }

    /// What a request's end means for its caller.
    async fn outcome(
        &self,
        conn: &Connection,
        governed_later: bool,
        answer: Result<rpc::Decoded, rpc::RpcError>,
    ) -> Result<rpc::Decoded, CallError> {
        match answer {
            Ok(result) => Ok(result),
            Err(rpc::RpcError::Error(error)) if governed_later => Err(CallError::Upstream(error)),
            Err(rpc::RpcError::Error(error)) => {
                Err(CallError::Upstream(bounded_error(error, self.name())))
            }
            Err(rpc::RpcError::Cancelled) => Err(CallError::Cancelled),
            Err(rpc::RpcError::Failed(why)) => Err(CallError::Unavailable(format!(
                "upstream `{}`: {why}",
                self.name()
            ))),
            Err(rpc::RpcError::Closed(_) | rpc::RpcError::Unhandled(_)) => {
                Err(self.lost(conn).await)
            }
        }
    }

    /// Describes a request that failed below the MCP level.
    async fn lost(&self, conn: &Connection) -> CallError {
        let how = conn.how_it_ended().await;
        let again = match self.spec.transport {
            UpstreamTransport::Stdio { .. } => "starts it again",
            UpstreamTransport::Http { .. } => "connects again",
        };
        CallError::Unavailable(format!(
            "upstream `{}` {how} during the request; the next request {again}{}",
            self.name(),
            self.stderr_excerpt()
        ))
    }

    fn stderr_excerpt(&self) -> String {
        let tail = lock(&self.tail);
        if tail.is_empty() {
            return String::new();
        }
        let lines: Vec<&str> = tail.lines().collect();
        let mut out = String::from("\nlast lines of its stderr:");
        for line in &lines[lines.len().saturating_sub(QUOTED_LINES)..] {
            let _ = write!(out, "\n  {line}");
        }
        out
    }

    fn client(&self) -> UpstreamClient {
        let mut first = self.hub.first_client();
        // Tasks are sluice's own (its operations): an upstream that made
        // one would hand sluice a task id no client could read.
        if let Some(extensions) = first.capabilities.extensions.as_mut() {
            extensions.remove(rmcp::model::TASKS_EXTENSION_ID);
        }
        let mut info = ClientConfig::new(
            first.capabilities,
            Implementation::new("sluice", env!("CARGO_PKG_VERSION")),
        );
        if let Some(version) = first.initialize_version {
            info.protocol_version = version;
        }
        UpstreamClient {
            upstream: self.spec.name.clone(),
            hub: self.hub.clone(),
            info,
        }
    }

    /// A 2026-07-28 upstream announces list changes only on a
    /// `subscriptions/listen` stream: open one for what it can announce,
    /// and publish what comes, as an older upstream's notifications are.
    fn watch_lists(&self, conn: &Connection) {
        let Some(info) = conn.info() else { return };
        if Era::of(Some(&info.protocol_version)).is_legacy() {
            return;
        }
        let declared = &info.capabilities;
        let mut filter = rmcp::model::SubscriptionFilter::new();
        let announces = |flag: Option<bool>| flag == Some(true);
        if declared
            .tools
            .as_ref()
            .is_some_and(|c| announces(c.list_changed))
        {
            filter.tools_list_changed = Some(true);
        }
        if declared
            .prompts
            .as_ref()
            .is_some_and(|c| announces(c.list_changed))
        {
            filter.prompts_list_changed = Some(true);
        }
        if declared
            .resources
            .as_ref()
            .is_some_and(|c| announces(c.list_changed))
        {
            filter.resources_list_changed = Some(true);
        }
        if filter == rmcp::model::SubscriptionFilter::new() {
            return;
        }
        // The notifications come to the connection's client like any
        // other (see `client.rs`); the request stays open with the connection.
        let request = ClientRequest::SubscriptionsListenRequest(
            rmcp::model::SubscriptionsListenRequest::new(
                rmcp::model::SubscriptionsListenRequestParams::new(filter),
            ),
        );
        let rpc = conn.rpc.listener();
        let name = self.spec.name.clone();
        tokio::spawn(async move {
            let never = CancellationToken::new();
            if let Err(e) = rpc
                .request(request, false, &rpc::ForClient::NONE, &never, |_| ())
                .await
            {
                tracing::debug!(upstream = %name, "stopped listening for list changes: {e:?}");
            }
        });
    }

    /// Starts the upstream and completes the MCP handshake.
    async fn connect(&self) -> Result<Connection, String> {
        let first = self.hub.first_client();
        let lifecycle = match self.spec.protocol {
            // A client of the initialize era gets an upstream of that era:
            // same logging, same server→client requests, same errors.
            ProtocolChoice::Auto if first.initialize_version.is_some() => {
                rpc::Lifecycle::Initialize
            }
            ProtocolChoice::Auto => rpc::Lifecycle::Auto,
            ProtocolChoice::Legacy => rpc::Lifecycle::Initialize,
            ProtocolChoice::Stateless => rpc::Lifecycle::Discover,
        };
        let client = self.client();
        tracing::info!(upstream = %self.name(), protocol = %self.spec.protocol, "starting");
        let in_memory = lock(&self.in_memory).clone();
        if let Some(server) = in_memory {
            return self.connect_memory(server, client, lifecycle).await;
        }
        match &self.spec.transport {
            transport @ UpstreamTransport::Stdio { .. } => {
                self.connect_stdio(transport, client, lifecycle).await
            }
            UpstreamTransport::Http { url, headers } => {
                self.connect_http(url, headers, client, lifecycle).await
            }
        }
    }

    /// Starts the engine on an open transport and makes the handshake,
    /// within [`CONNECT_TIMEOUT`].
    async fn handshake(
        &self,
        transport: Arc<dyn transport::Transport>,
        inbound: tokio::sync::mpsc::Receiver<transport::Inbound>,
        client: UpstreamClient,
        lifecycle: rpc::Lifecycle,
    ) -> Result<(rpc::Rpc, Arc<ServerPeerInfo>), String> {
        let declared = client.info.clone();
        let engine = rpc::Rpc::start(transport, inbound, client);
        match tokio::time::timeout(CONNECT_TIMEOUT, engine.handshake(lifecycle, &declared)).await {
            Ok(Ok(info)) => Ok((engine, Arc::new(info))),
            Ok(Err(e)) => {
                engine.close().await;
                Err(format!("failed during the MCP handshake: it {e}"))
            }
            Err(_) => {
                engine.close().await;
                Err(format!(
                    "did not complete the MCP handshake within {} s",
                    CONNECT_TIMEOUT.as_secs()
                ))
            }
        }
    }

    /// Cancels what the upstream is doing for one client session (it went away).
    pub async fn cancel_session_calls(&self, session: crate::hub::SessionId, reason: &str) {
        let ids = self.hub.calls_to(self.name(), Some(session));
        if ids.is_empty() {
            return;
        }
        if let Some(conn) = self.current().await {
            conn.cancel(self.name(), ids, reason).await;
        }
    }

    /// Stops the upstream: cancels what it is still doing for clients,
    /// closes the session, then the process.
    pub async fn shutdown(&self) {
        if let Some(attempt) = lock(&self.attempt).take() {
            attempt.task.abort();
        }
        let conn = self.connection.lock().await.take();
        if let Some(conn) = conn {
            let all = self.hub.calls_to(self.name(), None);
            conn.cancel(self.name(), all, "sluice is shutting down")
                .await;
            match Arc::try_unwrap(conn) {
                Ok(mut conn) => {
                    let _ = tokio::time::timeout(Duration::from_secs(3), conn.rpc.close()).await;
                    if let Some(stop) = &conn.stop {
                        stop.cancel();
                    }
                    if let Some(exit) = &mut conn.exit {
                        let _ = tokio::time::timeout(
                            Duration::from_secs(3),
                            exit.wait_for(Option::is_some),
                        )
                        .await;
                    }
                }
                Err(conn) => {
                    // Still used by a request: stop the process; the request
                    // gets a "closed" error.
                    if let Some(stop) = &conn.stop {
                        stop.cancel();
                    }
                }
            }
        }
    }
}

/// The most of an upstream error's message, and of its `data` serialized,
/// that reaches a client whole (tool calls excepted: their errors are
/// governed like results, see [`crate::govern::Governor::tool_error`]).
const MAX_ERROR_PART_BYTES: usize = 4 << 10;

/// `error` with a message of at most [`MAX_ERROR_PART_BYTES`] (then "… N
/// more bytes" and whose error it was) and `data` dropped when larger: an
/// upstream's error is untrusted input, and a client's answer has a budget.
fn bounded_error(mut error: ErrorData, upstream: &str) -> ErrorData {
    let data_bytes = error
        .data
        .as_ref()
        .map_or(0, |d| crate::govern::json_bytes(d) as usize);
    let message_bytes = error.message.len();
    if message_bytes <= MAX_ERROR_PART_BYTES && data_bytes <= MAX_ERROR_PART_BYTES {
        return error;
    }
    let mut message = error.message.into_owned();
    let mut notes = Vec::new();
    if message_bytes > MAX_ERROR_PART_BYTES {
        message.truncate(sluice_core::budget::floor_boundary(
            &message,
            MAX_ERROR_PART_BYTES,
        ));
        let more = (message_bytes - message.len()) as u64;
        notes.push(format!("{} more bytes", sluice_core::format::group(more)));
    }
    if data_bytes > MAX_ERROR_PART_BYTES {
        error.data = None;
        let bytes = sluice_core::format::group(data_bytes as u64);
        notes.push(format!("its `data` of {bytes} bytes"));
    }
    let _ = write!(
        message,
        "… ({} of upstream `{upstream}`'s error cut by sluice: it was too large to pass on)",
        notes.join(" and ")
    );
    error.message = message.into();
    error
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ErrorCode;

    #[test]
    fn an_upstream_error_too_large_is_cut_and_says_whose_it_was() {
        let small = ErrorData::invalid_params("no such prompt", Some(serde_json::json!({"a": 1})));
        assert_eq!(bounded_error(small.clone(), "git"), small);
        let message = "é".repeat(3_000_000);
        let data = serde_json::json!({"detail": "x".repeat(5_000_000)});
        let cut = bounded_error(
            ErrorData::invalid_params(message.clone(), Some(data)),
            "git",
        );
        assert_eq!(cut.code, ErrorCode::INVALID_PARAMS);
        assert_eq!(cut.data, None);
        assert!(cut.message.len() < 5 << 10, "{}", cut.message.len());
        assert!(message.starts_with(cut.message.split('…').next().unwrap()));
        assert!(
            cut.message.ends_with(
                "… (5,995,904 more bytes and its `data` of 5,000,013 bytes of upstream `git`'s error cut by sluice: it was too large to pass on)"
            ),
            "{}",
            &cut.message[4000..]
        );
    }
}
