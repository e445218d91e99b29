//! sluice's own handling of the client requests it has taken over from
//! rmcp's server, on a stdio connection ([`super::lines`]) or over HTTP
//! ([`super::http_front`]).
//!
//! The downstream side moves off rmcp one method at a time: every message
//! the client sends is read by sluice's JSON-RPC layer first; a request the
//! front takes is answered here, with bytes sluice writes itself, and
//! everything else goes on to rmcp's server as before. rmcp still owns the
//! lifecycle (`initialize`, `server/discover`), the session's own
//! notifications and the server→client requests, through the peer it gives
//! once the lifecycle began ([`Front::attach`]).
//!
//! Taken today: `tools/list` (each upstream tool as the upstream sent it,
//! but for sluice's documented changes) and `tools/call` when its params
//! read as a call (its params sent upstream as the client's text, with
//! sluice's edits; a result within the budget as the upstream sent it),
//! in a session that began with `initialize`, or as 2026-07-28 requests
//! whose `_meta` carries their whole lifecycle (version, client info and
//! capabilities). A request naming another version, or whose `_meta` lacks
//! what its version requires, goes to rmcp, which refuses it as the spec
//! says. Each answer is shaped for its era: `resultType` only for
//! 2026-07-28, with the cache hints that version requires on `tools/list`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use futures::FutureExt as _;
use futures::future::BoxFuture;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ErrorData, ProtocolVersion,
    RequestId, RequestMetaObject, ResultType, ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::{Peer, RoleServer};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::PeerAddr;
use super::auth::Principal;
use super::session::{Asking, caller_of};
use crate::era::Era;
use crate::gateway::Gateway;
use crate::hub::SessionId;
use crate::jsonrpc::{Id, Kind, Message, RawObject};

/// The requests of one session that sluice answers itself.
pub struct Front {
    gateway: Arc<Gateway>,
    session: SessionId,
    /// The session is the whole connection (stdio).
    connection: bool,
    /// rmcp's peer for this connection, once its lifecycle began.
    peer: OnceLock<Peer<RoleServer>>,
    /// The calls being answered here, by the client's id, to cancel.
    running: Mutex<HashMap<Id, CancellationToken>>,
    /// Fires when the client leaves.
    stop: CancellationToken,
    /// The requests relayed to the client, whose answers come back here
    /// (an HTTP session's, as POSTs).
    link: OnceLock<Arc<super::link::ClientLink>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Front {
    /// The front of session `session` of `gateway`; `connection`: the
    /// session is a whole connection (stdio), not an HTTP session.
    pub fn new(gateway: Arc<Gateway>, session: SessionId, connection: bool) -> Arc<Front> {
        Arc::new(Front {
            gateway,
            session,
            connection,
            peer: OnceLock::new(),
            running: Mutex::new(HashMap::new()),
            stop: CancellationToken::new(),
            link: OnceLock::new(),
        })
    }

    /// The gateway the front answers with.
    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// Starts taking requests: rmcp's lifecycle began and gave this peer.
    pub fn attach(&self, peer: Peer<RoleServer>) {
        let _ = self.peer.set(peer);
    }

    /// The protocol version the client asked for at `initialize`.
    pub fn protocol_version(&self) -> Option<String> {
        let info = self.peer.get()?.peer_info()?;
        Some(info.protocol_version.to_string())
    }

    /// Where the client's answers to relayed requests go.
    pub fn set_link(&self, link: Arc<super::link::ClientLink>) {
        let _ = self.link.set(link);
    }

    /// Opens the session's GET stream for sluice's own layer: what the link
    /// sends that belongs to no call comes out of the receiver, until it is
    /// dropped or another GET stream replaces it. `None` without a link.
    pub fn open_standalone(&self) -> Option<mpsc::Receiver<Bytes>> {
        let link = self.link.get()?;
        let (stream, messages) = mpsc::channel(super::lines::NOTICES);
        link.attach_standalone(stream);
        Some(messages)
    }

    /// Takes `message` if it is the client's answer to a request relayed
    /// through the front's link.
    pub fn answered(&self, message: &Message) -> bool {
        self.link.get().is_some_and(|link| link.answered(message))
    }

    /// The client left: what runs here stops.
    pub fn end(&self) {
        self.stop.cancel();
        if let Some(link) = self.link.get() {
            link.end();
        }
    }

    /// A client's `notifications/cancelled`: stops the call it names if it
    /// runs here (rmcp is told too, and ignores an id it does not know).
    pub fn cancelled(&self, message: &Message) {
        let id = message.cancelled_request();
        if let Some(ct) = id.and_then(|id| lock(&self.running).remove(&id)) {
            ct.cancel();
        }
    }

    /// Takes `message` if it is a request answered here: gives the work
    /// that makes its answer (see [`Taken`]); `None` leaves it to rmcp.
    /// `http`: the HTTP request that carried it (who sent it, from where);
    /// `stream`: where the notifications about it go, before its answer.
    pub fn take(
        self: &Arc<Self>,
        message: &Message,
        http: Option<&http::request::Parts>,
        stream: mpsc::Sender<Bytes>,
    ) -> Option<Taken> {
        if message.kind() != Kind::Request {
            return None;
        }
        let method = message.method()?;
        if !matches!(method, "tools/call" | "tools/list") {
            return None;
        }
        let id = message.id()?;
        if method == "tools/list" {
            let asker = self.asker(message)?;
            let legacy = asker.era.is_legacy();
            // Its params (a cursor) change nothing: every tool is listed at
            // once, as rmcp's server did.
            let gateway = self.gateway.clone();
            return Some(Taken {
                work: async move {
                    Some(match gateway.list_tools_as_sent().await {
                        Ok(tools) => tools_line(&id, &tools, legacy),
                        Err(error) => answer_line(&id, Err(in_era(error, legacy))),
                    })
                }
                .boxed(),
                ct: CancellationToken::new(),
            });
        }
        let request: RequestId = serde_json::from_str(id.as_json()).ok()?;
        // One parse of the params, `_meta` and all.
        let mut params: CallToolRequestParams = serde_json::from_str(message.params()?).ok()?;
        let meta = params.meta.take().unwrap_or_default();
        let asker = self.asker_of(&meta)?;
        let legacy = asker.era.is_legacy();
        let ct = self.stop.child_token();
        lock(&self.running).insert(id.clone(), ct.clone());
        let capabilities = asker.capabilities;
        let asking = Asking {
            meta: &meta,
            peer: self.peer.get(),
            request,
            ct: ct.clone(),
            era: asker.era,
            capabilities: Some(capabilities.clone()),
            client: asker.client,
            principal: http.and_then(|parts| parts.extensions.get::<Principal>()),
            address: http.and_then(|parts| parts.extensions.get::<PeerAddr>()),
            sent_request: Some(message.clone()),
            stream: Some(stream),
        };
        let caller = caller_of(&self.gateway, self.session, self.connection, &asking);
        let front = self.clone();
        Some(Taken {
            ct: ct.clone(),
            work: async move {
                let answer = front.gateway.call_tool_relayed(params, &caller).await;
                lock(&front.running).remove(&id);
                if ct.is_cancelled() {
                    return None;
                }
                if let Ok(relayed) = &answer
                    && let Some(line) = relayed
                        .raw
                        .as_ref()
                        .and_then(|raw| relayed_line(&id, raw, legacy))
                {
                    return Some(line);
                }
                let tasks = capabilities.supports_tasks();
                let answer = shaped(answer.map(|r| r.response), tasks, legacy);
                Some(answer_line(&id, answer.map_err(|e| in_era(e, legacy))))
            }
            .boxed(),
        })
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
    /// request whose `_meta` carries its whole lifecycle. Any other version,
    /// or `_meta` missing what that version requires, is rmcp's to refuse.
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
            Some(version) => {
                let stateless = version == ProtocolVersion::V_2026_07_28
                    && meta
                        .missing_required_keys(&ProtocolVersion::V_2026_07_28)
                        .is_empty();
                if !stateless {
                    return None;
                }
                Some(Asker {
                    era: Era::of(Some(&version)),
                    capabilities: meta.client_capabilities().unwrap_or_default(),
                    client: meta.client_info().map(|c| c.name),
                })
            }
            None => {
                let info = self.peer.get()?.peer_info()?;
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
    /// Runs the work, handing `emit` each notification that arrives on
    /// `notices` (the receiving end of the `stream` given to
    /// [`Front::take`]) and then the answer, in that order. When `emit`
    /// fails (the client is gone) the request is cancelled and nothing
    /// more is emitted.
    pub async fn drive<F, Fut>(self, mut notices: mpsc::Receiver<Bytes>, mut emit: F)
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
                    if open && !emit(notice).await {
                        open = false;
                        ct.cancel();
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

/// The answer to `tools/list` `id`: every tool, each as its text; for a
/// 2026-07-28 request (not `legacy`) with the `resultType` and the cache
/// hints that version requires, as rmcp's server fills them in.
fn tools_line(id: &Id, tools: &[String], legacy: bool) -> Bytes {
    let size: usize = tools.iter().map(|t| t.len() + 1).sum();
    let mut line = Vec::with_capacity(size + id.as_json().len() + 112);
    line.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    line.extend_from_slice(id.as_json().as_bytes());
    line.extend_from_slice(br#","result":{"#);
    if !legacy {
        line.extend_from_slice(br#""resultType":"complete","ttlMs":0,"cacheScope":"private","#);
    }
    line.extend_from_slice(br#""tools":["#);
    for (i, tool) in tools.iter().enumerate() {
        if i > 0 {
            line.push(b',');
        }
        line.extend_from_slice(tool.as_bytes());
    }
    line.extend_from_slice(b"]}}");
    Bytes::from(line)
}

/// What rmcp's server makes of a call's answer: a task only for a client
/// that declared tasks; for a client of the initialize era (`legacy`) no
/// `input_required` and no `resultType`, for a 2026-07-28 one a
/// `resultType` always.
fn shaped(
    answer: Result<CallToolResponse, ErrorData>,
    tasks: bool,
    legacy: bool,
) -> Result<ServerResult, ErrorData> {
    let response = answer?;
    if matches!(response, CallToolResponse::Task(_)) && !tasks {
        return Err(ErrorData::missing_required_client_capability(
            ClientCapabilities::builder().enable_tasks().build(),
        ));
    }
    let mut result = ServerResult::from(response);
    if !legacy {
        if let ServerResult::CallToolResult(r) = &mut result {
            r.result_type.get_or_insert(ResultType::COMPLETE);
        }
        return Ok(result);
    }
    if matches!(result, ServerResult::InputRequiredResult(_)) {
        return Err(ErrorData::invalid_request(
            "InputRequiredResult requires negotiated protocol version 2026-07-28 or newer",
            None,
        ));
    }
    result.strip_result_type_for_legacy_peer();
    Ok(result)
}

/// An error as the client's era spells it: 2026-07-28 has no
/// resource-not-found code of its own (invalid params instead).
fn in_era(mut error: ErrorData, legacy: bool) -> ErrorData {
    if !legacy && error.code == rmcp::model::ErrorCode::RESOURCE_NOT_FOUND {
        error.code = rmcp::model::ErrorCode::INVALID_PARAMS;
    }
    error
}

/// The line that answers the client's request `id` with an upstream's
/// result as the upstream sent it: every byte of its `result` kept, except
/// for a client of the initialize era (`legacy`) a `resultType`, which that
/// era does not know, and for a 2026-07-28 client a `resultType` added
/// where the upstream (of the older era) sent none. `None` if the
/// upstream's response has no result to relay.
fn relayed_line(id: &Id, upstream: &Message, legacy: bool) -> Option<Bytes> {
    let result = upstream.result()?;
    let edited;
    // Read as an object only if the key may be there.
    static RESULT_TYPE: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(br#""resultType""#));
    let mentioned = RESULT_TYPE.find(result.as_bytes()).is_some();
    let result = match (legacy, mentioned) {
        (true, false) => result,
        (true, true) => {
            let mut object = RawObject::parse(result).ok()?;
            if object.remove("resultType").is_some() {
                edited = object.to_json();
                edited.as_str()
            } else {
                result
            }
        }
        (false, true) if RawObject::parse(result).ok()?.get("resultType").is_some() => result,
        (false, _) => {
            // `{` then the member, then the rest as sent.
            let rest = result.trim_start().strip_prefix('{')?.trim_start();
            edited = if rest.starts_with('}') {
                format!(r#"{{"resultType":"complete"{rest}"#)
            } else {
                format!(r#"{{"resultType":"complete",{rest}"#)
            };
            edited.as_str()
        }
    };
    let mut line = Vec::with_capacity(result.len() + id.as_json().len() + 32);
    line.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    line.extend_from_slice(id.as_json().as_bytes());
    line.extend_from_slice(br#","result":"#);
    line.extend_from_slice(result.as_bytes());
    line.push(b'}');
    Some(Bytes::from(line))
}

/// The answer's line, with the client's id exactly as it sent it.
fn answer_line(id: &Id, answer: Result<ServerResult, ErrorData>) -> Bytes {
    let placeholder = RequestId::Number(0);
    let message = match answer {
        Ok(result) => ServerJsonRpcMessage::response(result, placeholder),
        Err(error) => ServerJsonRpcMessage::error(error, Some(placeholder)),
    };
    let bytes = serde_json::to_vec(&message).expect("rmcp's messages serialize");
    match Message::parse(Bytes::from(bytes)) {
        Ok(message) => message.with_id(id).into_bytes(),
        Err(e) => {
            // Not reachable: serde_json writes valid JSON-RPC.
            tracing::error!("an answer sluice made could not be read back: {e}");
            Bytes::from(format!(
                r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32603,"message":"sluice could not encode its answer"}}}}"#
            ))
        }
    }
}
