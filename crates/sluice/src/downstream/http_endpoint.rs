//! The Streamable HTTP endpoint at `/mcp`, on sluice's own layer: every
//! request a client sends there is answered here (or by the fast path of
//! [`super::http_front`], which [`super::http_guard`] tries first for a
//! plainly well-formed request), and no message passes through rmcp's
//! typed model.
//!
//! - `POST` carries one JSON-RPC message. `initialize` opens a 2025-11-25
//!   session, answered with its `Mcp-Session-Id`; a session's later
//!   messages name it. A 2026-07-28 request stands alone: its `_meta` says
//!   who asks. `initialize` and a list are answered with one JSON body, a
//!   session's other requests with an SSE stream (its notifications, then
//!   its answer), a request standing alone with one JSON body where its
//!   first message is its answer, else an SSE stream; a notification or a
//!   response with 202. A client that goes away cancels its request.
//! - `GET` opens a session's stream for what belongs to no request (list
//!   changes, log messages, server→client requests of no call). Its events
//!   carry no ids, so a `Last-Event-ID` gets an empty stream: there is
//!   nothing to replay.
//! - `DELETE` ends a session (202, also for one already gone).
//!
//! The refusals are those of the rmcp server sluice used before, so that
//! clients see the same answers: 403 for a Host or Origin not allowed, 406
//! and 415 for the media types (and a compressed body), 400 for an unknown `MCP-Protocol-Version`,
//! a version the body contradicts, SEP-2243 headers that do not say what
//! the body says (JSON-RPC `-32020`) or a missing session id, 404 for a
//! session that is not open, 405 for a method the era has not (one
//! difference: a `DELETE` of a session already gone gets 202, not 404).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use http_body_util::BodyExt as _;
use rmcp::model::{ErrorCode, ProtocolVersion, RequestMetaObject};
use sluice_core::http::HttpLimits;

use super::front::Front;
use super::http_front::{self, AllowedHosts, Forms, Statuses};
use super::http_sessions::SessionTable;
use super::link::ClientLink;
use crate::gateway::Gateway;
use crate::jsonrpc::{Kind, Message};

/// The session header.
pub const SESSION_HEADER: &str = "mcp-session-id";
/// The protocol version header.
const VERSION_HEADER: &str = "mcp-protocol-version";

/// What the endpoint answers with.
pub struct Endpoint {
    /// The gateway.
    pub gateway: Arc<Gateway>,
    /// The limits.
    pub limits: HttpLimits,
    /// The open sessions.
    pub sessions: Arc<SessionTable>,
    /// Which hosts and origins requests may name.
    pub hosts: AllowedHosts,
    /// Answers the 2026-07-28 requests that stand alone.
    pub stateless: Arc<Front>,
}

/// Answers a request to `/mcp` (after [`super::http_guard`] read its body).
pub async fn handle(State(endpoint): State<Arc<Endpoint>>, request: Request) -> Response {
    if let Some(refused) = endpoint.hosts.refusal(request.headers()) {
        return refused;
    }
    match *request.method() {
        Method::POST => post(&endpoint, request).await,
        Method::GET => get(&endpoint, request.headers()),
        Method::DELETE => delete(&endpoint, request.headers()),
        _ => method_not_allowed("GET, POST, DELETE"),
    }
}

/// The protocol version the request's header names, checked: `Err` is the
/// refusal of a header that is not text, or (unless `any`: the body names
/// its own version) names a version sluice does not know.
fn header_version(headers: &HeaderMap, any: bool) -> Result<Option<&str>, Box<Response>> {
    let Some(value) = headers.get(VERSION_HEADER) else {
        return Ok(None);
    };
    let Ok(version) = value.to_str() else {
        return Err(Box::new(plain(
            StatusCode::BAD_REQUEST,
            "Bad Request: Invalid MCP-Protocol-Version header encoding",
        )));
    };
    let known = ProtocolVersion::KNOWN_VERSIONS
        .iter()
        .any(|v| v.as_str() == version);
    if !any && !known {
        return Err(Box::new(plain(
            StatusCode::BAD_REQUEST,
            format!("Bad Request: Unsupported MCP-Protocol-Version: {version}"),
        )));
    }
    Ok(Some(version))
}

/// Whether a request of version `version` (none: 2025-03-26, as the spec
/// says of a request without the header) belongs to a session.
fn has_initialize(version: Option<&str>) -> bool {
    version.is_none_or(|v| v < ProtocolVersion::V_2026_07_28.as_str())
}

async fn post(endpoint: &Endpoint, request: Request) -> Response {
    let (mut parts, body) = request.into_parts();
    let Some(forms) = Forms::of(&http_front::accept_list(&parts.headers)) else {
        return plain(
            StatusCode::NOT_ACCEPTABLE,
            "Not Acceptable: Client must accept both application/json and text/event-stream (sluice answers a client that takes one of them in that one)",
        );
    };
    if forms == Forms::JsonOnly {
        parts.extensions.insert(http_front::TakesOnlyJson);
    }
    let headers = &parts.headers;
    if !http_front::sends_json(headers) {
        return plain(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Unsupported Media Type: Content-Type must be application/json",
        );
    }
    // A compressed body is not read as one (it was refused as "not UTF-8
    // text", which hid why): RFC 7694's answer, naming what is accepted.
    if let Some(encoding) = headers
        .get(header::CONTENT_ENCODING)
        .filter(|e| !e.as_bytes().eq_ignore_ascii_case(b"identity"))
    {
        let encoding = String::from_utf8_lossy(encoding.as_bytes());
        let mut refused = plain(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "Unsupported Media Type: Content-Encoding {} is not accepted; send the body uncompressed",
                sluice_core::format::quoted_cut(&encoding)
            ),
        );
        refused.headers_mut().insert(
            header::ACCEPT_ENCODING,
            http::HeaderValue::from_static("identity"),
        );
        return refused;
    }
    // Read whole by the guard already, under `[http] max_body_mb`.
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            return plain(
                StatusCode::BAD_REQUEST,
                format!("the request body could not be read: {e}"),
            );
        }
    };
    let message = match Message::parse(body) {
        Ok(message) => message,
        Err(e) => {
            // As stdio answers a line (`downstream::lines`): what is not
            // JSON is a parse error, JSON that is not a message an invalid
            // request.
            let code = match e {
                crate::jsonrpc::MessageError::NotJson { .. }
                | crate::jsonrpc::MessageError::NotUtf8 { .. } => ErrorCode::PARSE_ERROR,
                _ => ErrorCode::INVALID_REQUEST,
            };
            return error(StatusCode::BAD_REQUEST, None, code, &e.to_string());
        }
    };
    let request = message.kind() == Kind::Request;
    let method = message.method().unwrap_or_default().to_owned();
    // Before its `_meta` or an `initialize`'s params are read here; the
    // request's answer, as the front gives it (see `Front::take`).
    if request && let Some(fault) = super::bounds::params_fault(&message, &method) {
        return error(
            StatusCode::OK,
            message.id().as_ref(),
            fault.code,
            &fault.message,
        );
    }
    let meta = if request {
        request_meta(&message)
    } else {
        RequestMetaObject::default()
    };
    let meta_version = meta.protocol_version();
    let version = match header_version(headers, meta_version.is_some()) {
        Ok(version) => version,
        Err(refused) => return *refused,
    };
    let id = message.id();
    // An `initialize` that reads as one (one that does not is a request of
    // a method 2026-07-28 removed, as rmcp's server read it).
    let hello = (request && method == "initialize")
        .then(|| message.params())
        .flatten()
        .and_then(|params| {
            serde_json::from_str::<rmcp::model::InitializeRequestParams>(params).ok()
        });
    let initialize = hello.is_some();
    if let Some(hello) = &hello {
        let body = hello.protocol_version.as_str();
        if let Some(header) = version
            && header != body
        {
            return error(
                StatusCode::BAD_REQUEST,
                id.as_ref(),
                ErrorCode::INVALID_REQUEST,
                &format!(
                    "Invalid Request: MCP-Protocol-Version header ({header}) does not match initialize params.protocolVersion ({body})"
                ),
            );
        }
    } else if request {
        match &meta_version {
            None => {
                let required = method == "server/discover"
                    || version.is_some_and(|v| v >= ProtocolVersion::V_2026_07_28.as_str());
                if required {
                    return incomplete_meta(id.as_ref(), &meta);
                }
            }
            Some(named) => {
                let mismatch = match version {
                    None => Some(
                        "request _meta protocolVersion requires MCP-Protocol-Version header"
                            .to_owned(),
                    ),
                    Some(header) if header != named.as_str() => Some(format!(
                        "MCP-Protocol-Version header ({header}) does not match request _meta protocolVersion ({named})"
                    )),
                    Some(_) => None,
                };
                if let Some(why) = mismatch {
                    return error(
                        StatusCode::BAD_REQUEST,
                        id.as_ref(),
                        ErrorCode::HEADER_MISMATCH,
                        &why,
                    );
                }
            }
        }
    }
    let stands_alone = request
        && meta
            .missing_required_keys(&ProtocolVersion::V_2026_07_28)
            .is_empty();
    let era_version = meta_version
        .as_ref()
        .map(ProtocolVersion::as_str)
        .or(version);
    let in_session = initialize || (!stands_alone && has_initialize(era_version));
    let session = headers.get(SESSION_HEADER).map(HeaderValue::to_str);
    if !in_session {
        if let Err(why) = check_standard_headers(endpoint, headers, &message) {
            return *why;
        }
        if request && !stands_alone {
            // A 2026-07-28 request that does not say who asks.
            return incomplete_meta(id.as_ref(), &meta);
        }
        return match message.kind() {
            Kind::Request => answer_alone(&endpoint.stateless, &message, &parts, forms).await,
            // Nothing to act on: a request standing alone is cancelled by
            // closing its stream, and the stateless front's requests come
            // from every such client, so an id names none of them.
            Kind::Notification => accepted(),
            Kind::Response | Kind::Error => error(
                StatusCode::BAD_REQUEST,
                None,
                ErrorCode::INVALID_REQUEST,
                "stateless server does not accept JSON-RPC responses",
            ),
        };
    }
    let Some(session) = session else {
        if let Err(why) = check_standard_headers(endpoint, headers, &message) {
            return *why;
        }
        return match method.as_str() {
            _ if initialize => open_session(endpoint, &message, &parts, forms).await,
            "server/discover" if request => {
                answer_alone(&endpoint.stateless, &message, &parts, forms).await
            }
            _ => session_required(),
        };
    };
    let Some(front) = session.ok().and_then(|id| endpoint.sessions.touch(id)) else {
        return session_not_found();
    };
    if let Err(why) = check_standard_headers(endpoint, headers, &message) {
        return *why;
    }
    match message.kind() {
        Kind::Response | Kind::Error => {
            // The client's answer to a request relayed on a call's stream;
            // one to nothing sluice asked is dropped.
            if !front.answered(&message) {
                tracing::debug!("a client's answer to no request of sluice's was dropped");
            }
            accepted()
        }
        Kind::Notification => {
            front.notified(&message);
            accepted()
        }
        Kind::Request => {
            let (stream, notices) = super::outbox::channel(super::lines::NOTICES);
            match front.take_any(&message, Some(&parts), stream) {
                Some(taken) if forms == Forms::JsonOnly => {
                    http_front::answer_in(&front, taken, notices, Statuses::Never, forms).await
                }
                Some(taken) => http_front::stream_answer(&front, taken, notices),
                None => accepted(),
            }
        }
    }
}

/// Answers a request that stands alone (or a `server/discover`) with the
/// stateless front.
async fn answer_alone(
    front: &Arc<Front>,
    message: &Message,
    parts: &http::request::Parts,
    forms: Forms,
) -> Response {
    let (stream, notices) = super::outbox::channel(super::lines::NOTICES);
    match front.take_any(message, Some(parts), stream) {
        Some(taken) => {
            http_front::answer_in(front, taken, notices, Statuses::OfProtocolErrors, forms).await
        }
        None => accepted(),
    }
}

/// `initialize` without a session: a new session, whose id goes with the
/// answer. One whose `initialize` fails is not kept.
async fn open_session(
    endpoint: &Endpoint,
    message: &Message,
    parts: &http::request::Parts,
    forms: Forms,
) -> Response {
    let gateway = &endpoint.gateway;
    let front = Front::new(gateway.clone(), gateway.hub().new_session_id(), true);
    // Server→client requests go on the stream of the call that caused
    // them, or on the session's GET stream.
    front.set_link(Arc::new(ClientLink::per_stream()));
    let principal = parts.extensions.get::<super::auth::Principal>();
    let limits = (
        endpoint.limits.max_sessions,
        endpoint.limits.max_sessions_per_principal,
    );
    let id = match endpoint
        .sessions
        .insert_within(front.clone(), principal.map(|p| &p.0), limits)
    {
        Ok(id) => id,
        Err(full) => {
            front.end();
            let id = message.id().map_or(serde_json::Value::Null, |id| {
                serde_json::from_str(id.as_json()).unwrap_or(serde_json::Value::Null)
            });
            let metrics = endpoint.gateway.governor().metrics();
            return match (full, principal) {
                (super::http_sessions::Full::Principal(open), Some(principal)) => {
                    super::http_guard::too_many_sessions_of(metrics, id, &principal.0, open)
                }
                (
                    super::http_sessions::Full::All(open)
                    | super::http_sessions::Full::Principal(open),
                    _,
                ) => super::http_guard::too_many_sessions(metrics, id, open),
            };
        }
    };
    // Forgotten unless answered: a client that leaves while its upstreams
    // start, or an `initialize` that fails, keeps no session.
    let mut unopened = Unopened {
        sessions: &endpoint.sessions,
        id: &id,
        answered: false,
    };
    let (stream, notices) = super::outbox::channel(1);
    let Some(taken) = front.take_any(message, Some(parts), stream) else {
        return accepted();
    };
    let Some(answer) = http_front::answer_of(taken, notices).await else {
        return accepted();
    };
    let failed = Message::parse(answer.clone()).is_ok_and(|m| m.error().is_some());
    // One message, in the form the client takes.
    let mut response = if forms == Forms::SseOnly {
        http_front::sse_response(Body::from(http_front::sse_event(&answer)))
    } else {
        json(StatusCode::OK, answer)
    };
    if failed {
        return response;
    }
    unopened.answered = true;
    tracing::debug!(session = %id, "HTTP session opened");
    response.headers_mut().insert(
        SESSION_HEADER,
        HeaderValue::from_str(&id).expect("session ids are URL-safe base64"),
    );
    response
}

/// A session whose `initialize` is not answered yet: forgotten if dropped.
struct Unopened<'a> {
    sessions: &'a SessionTable,
    id: &'a str,
    answered: bool,
}

impl Drop for Unopened<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.sessions.forget(self.id);
        }
    }
}

/// `GET`: a session's stream of what belongs to no request.
fn get(endpoint: &Endpoint, headers: &HeaderMap) -> Response {
    let accept = http_front::accept_list(headers);
    if !http_front::accepts(&accept, "text/event-stream") {
        return plain(
            StatusCode::NOT_ACCEPTABLE,
            "Not Acceptable: Client must accept text/event-stream",
        );
    }
    let id = match session_named(headers) {
        Ok(id) => id,
        Err(refused) => return *refused,
    };
    let Some(front) = endpoint.sessions.touch(id) else {
        return session_not_found();
    };
    if headers.contains_key("last-event-id") {
        // sluice's events carry no ids: there is nothing to replay, and an
        // error would make an EventSource ask again and again.
        return http_front::sse_response(Body::empty());
    }
    let messages = front
        .open_standalone()
        .map(tokio_stream_of)
        .unwrap_or_else(|| Box::pin(futures::stream::empty()));
    let gateway = endpoint.gateway.clone();
    http_front::sse_response(Body::from_stream(http_front::sse_events(
        messages,
        move || gateway.deadline(http_front::KEEP_ALIVE),
    )))
}

/// A receiver as a stream that ends when its senders are gone.
fn tokio_stream_of(
    mut messages: crate::downstream::outbox::Receiver,
) -> std::pin::Pin<Box<dyn futures::Stream<Item = Bytes> + Send>> {
    Box::pin(futures::stream::poll_fn(move |cx| messages.poll_recv(cx)))
}

/// `DELETE`: the client ends its session.
fn delete(endpoint: &Endpoint, headers: &HeaderMap) -> Response {
    let id = match session_named(headers) {
        Ok(id) => id,
        Err(refused) => return *refused,
    };
    // One already gone (idle, or deleted before) is gone all the same: a
    // client closing late is not refused (the TypeScript SDK throws on
    // anything but success or 405).
    if endpoint.sessions.forget(id) {
        tracing::info!(session = %id, "HTTP session deleted by its client");
    }
    // 200, as the SDKs' servers answer: the Python SDK's client warns
    // "Session termination failed" on any other success (202 included).
    StatusCode::OK.into_response()
}

/// The session a `GET` or `DELETE` names, or the refusal of one that
/// cannot name any: a version sluice does not know, one of 2026-07-28
/// (which has no sessions: 405), or no session id (400).
fn session_named(headers: &HeaderMap) -> Result<&str, Box<Response>> {
    let version = header_version(headers, false)?;
    if !has_initialize(version) {
        return Err(Box::new(method_not_allowed("POST")));
    }
    let Some(session) = headers.get(SESSION_HEADER) else {
        return Err(Box::new(session_required()));
    };
    // An id sluice made is text; any other names no session.
    session.to_str().map_err(|_| Box::new(session_not_found()))
}

/// The refusal of a request whose SEP-2243 headers do not say what its
/// body says.
fn check_standard_headers(
    endpoint: &Endpoint,
    headers: &HeaderMap,
    message: &Message,
) -> Result<(), Box<Response>> {
    super::http_headers::check(headers, message, |name| {
        endpoint.gateway.tool_input_schema(name)
    })
    .map_err(|why| {
        Box::new(error(
            StatusCode::BAD_REQUEST,
            message.id().as_ref(),
            ErrorCode::HEADER_MISMATCH,
            &why,
        ))
    })
}

/// The request's `_meta` (empty when its params do not read).
fn request_meta(message: &Message) -> RequestMetaObject {
    #[derive(serde::Deserialize)]
    struct Params {
        #[serde(rename = "_meta", default)]
        meta: Option<RequestMetaObject>,
    }
    message
        .params()
        .and_then(|params| serde_json::from_str::<Params>(params).ok())
        .and_then(|params| params.meta)
        .unwrap_or_default()
}

fn plain(status: StatusCode, text: impl Into<String>) -> Response {
    (status, text.into()).into_response()
}

fn json(status: StatusCode, body: Bytes) -> Response {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .expect("a valid response")
}

/// A JSON-RPC error answer to request `id` (`null` when there is none).
fn error(
    status: StatusCode,
    id: Option<&crate::jsonrpc::Id>,
    code: ErrorCode,
    message: &str,
) -> Response {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":{},"error":{{"code":{},"message":{}}}}}"#,
        id.map_or("null", crate::jsonrpc::Id::as_json),
        code.0,
        serde_json::Value::from(message)
    );
    json(status, Bytes::from(body))
}

/// The refusal of a request whose `_meta` lacks what 2026-07-28 requires.
fn incomplete_meta(id: Option<&crate::jsonrpc::Id>, meta: &RequestMetaObject) -> Response {
    let missing = meta.missing_required_keys(&ProtocolVersion::V_2026_07_28);
    error(
        StatusCode::BAD_REQUEST,
        id,
        ErrorCode::INVALID_PARAMS,
        &format!(
            "Invalid params: request _meta is missing or has malformed required fields: {}",
            missing.join(", ")
        ),
    )
}

fn accepted() -> Response {
    StatusCode::ACCEPTED.into_response()
}

fn method_not_allowed(allow: &'static str) -> Response {
    let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    response
}

fn session_required() -> Response {
    plain(
        StatusCode::BAD_REQUEST,
        "Bad Request: Session ID is required",
    )
}

fn session_not_found() -> Response {
    plain(StatusCode::NOT_FOUND, "Not Found: Session not found")
}
