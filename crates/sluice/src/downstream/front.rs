//! sluice's own handling of the client requests it has taken over from
//! rmcp's server, on a stdio connection.
//!
//! The downstream side moves off rmcp one method at a time: every line the
//! client sends is read by sluice's JSON-RPC layer first ([`super::lines`]);
//! a request the front takes is answered here, with bytes sluice writes
//! itself, and everything else goes on to rmcp's server as before. rmcp
//! still owns the lifecycle (`initialize`, `server/discover`), the
//! notifications to the client and the server→client requests, through the
//! peer it gives once the lifecycle began ([`Front::attach`]).
//!
//! Taken today, in a session that began with `initialize` (what stdio
//! clients use): `tools/list` (each upstream tool as the upstream sent it,
//! but for sluice's documented changes) and `tools/call` when its params
//! read as a call (its params sent upstream as the client's text, with
//! sluice's edits; a result within the budget as the upstream sent it). A
//! 2026-07-28 request, which carries its lifecycle in `_meta` and must be
//! checked against it, still goes to rmcp.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use futures::FutureExt as _;
use futures::future::BoxFuture;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ErrorData, RequestId,
    ServerJsonRpcMessage, ServerResult,
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
        })
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

    /// The client left: what runs here stops.
    pub fn end(&self) {
        self.stop.cancel();
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
        let peer = self.peer.get()?.clone();
        // A session that began with `initialize`.
        let info = peer.peer_info()?;
        let id = message.id()?;
        if method == "tools/list" {
            // Its params (a cursor, `_meta`) change nothing: every tool is
            // listed at once, as rmcp's server did.
            let gateway = self.gateway.clone();
            return Some(Taken {
                work: async move {
                    Some(match gateway.list_tools_as_sent().await {
                        Ok(tools) => tools_line(&id, &tools),
                        Err(error) => answer_line(&id, Err(error)),
                    })
                }
                .boxed(),
                ct: CancellationToken::new(),
            });
        }
        let request: RequestId = serde_json::from_str(id.as_json()).ok()?;
        let mut params: CallToolRequestParams = serde_json::from_str(message.params()?).ok()?;
        let meta = params.meta.take().unwrap_or_default();
        // A request that names its own protocol version is checked against
        // it by rmcp's server.
        if meta.protocol_version().is_some() {
            return None;
        }
        let ct = self.stop.child_token();
        lock(&self.running).insert(id.clone(), ct.clone());
        let capabilities: ClientCapabilities = meta
            .client_capabilities()
            .unwrap_or_else(|| info.capabilities.clone());
        let asking = Asking {
            meta: &meta,
            peer: &peer,
            request,
            ct: ct.clone(),
            era: Era::of(Some(&info.protocol_version)),
            capabilities: Some(capabilities.clone()),
            client: Some(
                meta.client_info()
                    .map_or_else(|| info.client_info.name.clone(), |c| c.name),
            ),
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
                    && let Some(line) = relayed.raw.as_ref().and_then(|raw| relayed_line(&id, raw))
                {
                    return Some(line);
                }
                let tasks = capabilities.supports_tasks();
                Some(answer_line(&id, shaped(answer.map(|r| r.response), tasks)))
            }
            .boxed(),
        })
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

/// The answer to `tools/list` `id`: every tool, each as its text.
fn tools_line(id: &Id, tools: &[String]) -> Bytes {
    let size: usize = tools.iter().map(|t| t.len() + 1).sum();
    let mut line = Vec::with_capacity(size + id.as_json().len() + 48);
    line.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    line.extend_from_slice(id.as_json().as_bytes());
    line.extend_from_slice(br#","result":{"tools":["#);
    for (i, tool) in tools.iter().enumerate() {
        if i > 0 {
            line.push(b',');
        }
        line.extend_from_slice(tool.as_bytes());
    }
    line.extend_from_slice(b"]}}");
    Bytes::from(line)
}

/// What rmcp's server makes of a call's answer for a client of the
/// initialize era: a task only for a client that declared tasks, no
/// `input_required`, and no `resultType`.
fn shaped(
    answer: Result<CallToolResponse, ErrorData>,
    tasks: bool,
) -> Result<ServerResult, ErrorData> {
    let response = answer?;
    if matches!(response, CallToolResponse::Task(_)) && !tasks {
        return Err(ErrorData::missing_required_client_capability(
            ClientCapabilities::builder().enable_tasks().build(),
        ));
    }
    let mut result = ServerResult::from(response);
    if matches!(result, ServerResult::InputRequiredResult(_)) {
        return Err(ErrorData::invalid_request(
            "InputRequiredResult requires negotiated protocol version 2026-07-28 or newer",
            None,
        ));
    }
    result.strip_result_type_for_legacy_peer();
    Ok(result)
}

/// The line that answers the client's request `id` with an upstream's
/// result as the upstream sent it: every byte of its `result` kept, except
/// a `resultType` (2026-07-28's), which a client of the initialize era does
/// not know. `None` if the upstream's response has no result to relay.
fn relayed_line(id: &Id, upstream: &Message) -> Option<Bytes> {
    let result = upstream.result()?;
    let edited;
    // Read as an object only if the key may be there.
    let result = match memchr::memmem::find(result.as_bytes(), b"\"resultType\"") {
        None => result,
        Some(_) => {
            let mut object = RawObject::parse(result).ok()?;
            if object.remove("resultType").is_some() {
                edited = object.to_json();
                edited.as_str()
            } else {
                result
            }
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
