//! The fast path of the Streamable HTTP endpoint: the requests of a
//! session or standing alone (2026-07-28) that [`super::front`] answers
//! (tools, prompts, resources, completions, `tasks/get`), taken when they
//! are plainly well formed, before [`super::http_endpoint`] checks every
//! rule a request may break.
//!
//! A POST is taken only when it is plainly well formed: it comes from an
//! allowed host and origin, accepts both JSON and SSE and sends JSON; in a
//! session, it names an open one, no other protocol version than the
//! session's and no SEP-2243 header; standing alone, its headers name
//! version 2026-07-28 and say what its body says (`Mcp-Method`, and
//! `Mcp-Name` for a call, a prompt, a read or a `tasks/get`; no
//! `Mcp-Param-*`), and its `_meta` carries what that version requires.
//! Anything else goes on to the endpoint, which answers it (or refuses it):
//! the checks here only decide what may skip the endpoint's, never how a
//! bad request is refused.
//!
//! A list is answered with a JSON body; anything else as its first message
//! decides ([`first_decides`]): an answer that comes first, within a
//! second, as a JSON body; otherwise an SSE stream, its notifications
//! (progress, logs) before its answer. A client that goes
//! away cancels its request. These streams carry no event ids: a cut one
//! cannot be resumed (the spec lets a server choose so), and a call's
//! result stays reachable when it became an operation.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures::SinkExt as _;
use http::{HeaderMap, StatusCode, header};

use super::front::{AnsweredAs, Front, Taken, answered_as};
use super::http_sessions::SessionTable;
use crate::downstream::outbox;
use crate::jsonrpc::sse::write_event;
use crate::jsonrpc::{Kind, Message};

/// Which hosts a request may name and come from, as [`super::HttpAccess`]
/// says; `None`: any.
#[derive(Debug, Clone)]
pub struct AllowedHosts(Option<Vec<String>>);

impl AllowedHosts {
    /// Localhost and `extra` (host names, or `host:port`); any host when
    /// `any`.
    pub fn new(extra: &[String], any: bool) -> Self {
        if any {
            return Self(None);
        }
        let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"]
            .iter()
            .map(|h| (*h).to_owned())
            .collect();
        hosts.extend(extra.iter().map(|h| host_part(h).to_ascii_lowercase()));
        Self(Some(hosts))
    }

    fn allows(&self, host: &str) -> bool {
        match &self.0 {
            None => true,
            Some(hosts) => {
                let host = host_part(host).to_ascii_lowercase();
                hosts.contains(&host)
            }
        }
    }

    /// What is wrong with the request's Host or Origin, if anything.
    fn check(&self, headers: &HeaderMap) -> Result<(), Refused> {
        if self.0.is_none() {
            return Ok(());
        }
        let host = headers.get(header::HOST).ok_or(Refused::NoHost)?;
        let host = host.to_str().map_err(|_| Refused::HostNotText)?;
        if !self.allows(host) {
            return Err(Refused::Host);
        }
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let rest = origin
            .to_str()
            .ok()
            .and_then(|o| o.split_once("://"))
            .filter(|(scheme, rest)| matches!(*scheme, "http" | "https") && !rest.contains('/'))
            .map(|(_, rest)| rest)
            .ok_or(Refused::OriginMalformed)?;
        if !self.allows(rest) {
            return Err(Refused::Origin);
        }
        Ok(())
    }

    /// The refusal of a request whose Host or Origin is not allowed (a
    /// DNS rebinding attack, a page of another site): 400 without a Host
    /// that reads, 403 for one not allowed.
    pub fn refusal(&self, headers: &HeaderMap) -> Option<axum::response::Response> {
        use axum::response::IntoResponse as _;
        let refused = self.check(headers).err()?;
        let (status, why) = match refused {
            Refused::NoHost => (StatusCode::BAD_REQUEST, "Bad Request: missing Host header"),
            Refused::HostNotText => (
                StatusCode::BAD_REQUEST,
                "Bad Request: Invalid Host header encoding",
            ),
            Refused::Host => {
                tracing::warn!(
                    host = ?headers.get(header::HOST),
                    "refused a request whose Host is not allowed (a DNS rebinding attempt?): `--allow-host` adds hosts"
                );
                (
                    StatusCode::FORBIDDEN,
                    "Forbidden: Host header is not allowed",
                )
            }
            Refused::OriginMalformed => (StatusCode::FORBIDDEN, "Forbidden: Invalid Origin header"),
            Refused::Origin => {
                tracing::warn!(
                    origin = ?headers.get(header::ORIGIN),
                    "refused a request from a page whose Origin is not allowed: `--allow-host` adds hosts"
                );
                (
                    StatusCode::FORBIDDEN,
                    "Forbidden: Origin header is not allowed",
                )
            }
        };
        Some((status, why).into_response())
    }

    /// Whether the request's Host and Origin are plainly allowed.
    fn plainly_allowed(&self, headers: &HeaderMap) -> bool {
        self.check(headers).is_ok()
    }
}

/// Why a request's Host or Origin is refused ([`AllowedHosts::refusal`]).
#[derive(Debug, Clone, Copy)]
enum Refused {
    NoHost,
    HostNotText,
    Host,
    OriginMalformed,
    Origin,
}

/// The host of `host` or `host:port` (an IPv6 address without brackets).
fn host_part(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default();
    }
    match host.matches(':').count() {
        1 => host.split(':').next().unwrap_or_default(),
        _ => host,
    }
}

/// Answers the POST `headers` + `body` if sluice takes it (see the
/// module's documentation); `None` leaves it to the endpoint.
pub async fn answer(
    sessions: &SessionTable,
    hosts: &AllowedHosts,
    stateless: &Arc<Front>,
    parts: &http::request::Parts,
    body: &Bytes,
) -> Option<Response> {
    let headers = &parts.headers;
    let Some(session) = headers.get("mcp-session-id") else {
        return answer_stateless(stateless, hosts, parts, body).await;
    };
    let front = sessions.touch(session.to_str().ok()?)?;
    if !plain_headers(headers, front.protocol_version().as_deref())
        || !hosts.plainly_allowed(headers)
    {
        return None;
    }
    let message = Message::parse(body.clone()).ok()?;
    if message.kind() != Kind::Request {
        // The endpoint's (`http_endpoint`): notifications, the client's
        // answers to requests relayed on a call's stream.
        return None;
    }
    let (stream, notices) = super::outbox::channel(super::lines::NOTICES);
    let answered_as = answered_as(message.method()?)?;
    let taken = front.take(&message, Some(parts), stream)?;
    if answered_as == AnsweredAs::Json {
        return Some(json_answer(taken).await);
    }
    Some(first_decides(&front, taken, notices, Statuses::Never).await)
}

/// Answers a 2026-07-28 request that stands alone, if it is plainly well
/// formed: its version in `MCP-Protocol-Version` and in its `_meta` (with
/// everything `_meta` must carry: [`Front::take`] checks), and the SEP-2243
/// `Mcp-Method` and `Mcp-Name` headers that say what the body says.
async fn answer_stateless(
    front: &Arc<Front>,
    hosts: &AllowedHosts,
    parts: &http::request::Parts,
    body: &Bytes,
) -> Option<Response> {
    let headers = &parts.headers;
    if !hosts.plainly_allowed(headers) {
        return None;
    }
    let message = Message::parse(body.clone()).ok()?;
    let method = message.method()?;
    if message.kind() != Kind::Request {
        return None;
    }
    let answered_as = answered_as(method)?;
    let routing = message.routing().ok()?;
    // SEP-2243's `Mcp-Name`: what the request names, by method.
    let name = match method {
        "tools/call" | "prompts/get" => routing.name,
        "resources/read" => routing.uri,
        "tasks/get" => task_id(&message).map(std::borrow::Cow::Owned),
        _ => None,
    };
    if !plain_stateless_headers(headers, method, name.as_deref()) {
        return None;
    }
    // A call whose arguments must also travel as `Mcp-Param-*` headers
    // has them checked by the endpoint.
    if method == "tools/call"
        && name
            .as_deref()
            .is_some_and(|name| front.gateway().tool_has_param_headers(name))
    {
        return None;
    }
    let (stream, notices) = super::outbox::channel(super::lines::NOTICES);
    let taken = front.take(&message, Some(parts), stream)?;
    if answered_as == AnsweredAs::Json {
        return Some(json_answer(taken).await);
    }
    Some(first_decides(front, taken, notices, Statuses::OfProtocolErrors).await)
}

/// How long a request answered as a stream may take to be answered with
/// one JSON body instead (see [`first_decides`]).
const FIRST_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether a request's answer sent as one JSON body gets an HTTP status of
/// its own (see [`error_status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Statuses {
    /// In a session: every answer is a 200.
    Never,
    /// A 2026-07-28 request standing alone: an answer that is the
    /// request's fault at the protocol level gets its status (400, 404).
    OfProtocolErrors,
}

/// The answer to a request that may be answered as an SSE stream (a call,
/// a prompt, a read): its first message decides its form, as the spec
/// lets a server choose. The answer itself, when it comes first and
/// within [`FIRST_WAIT`] (a small call's, nearly always), is one JSON
/// body: one write, no stream to keep, no task of its own. A notification
/// or a request of sluice's first (progress, a log, sampling), or nothing
/// within [`FIRST_WAIT`] (a slow call), opens an SSE stream that carries it
/// and everything after it, the answer last, with keep-alive comments while
/// it is quiet; so a client behind a proxy hears from sluice within a
/// second whatever the call does.
///
/// Measured on 2026-11-27 (`wrk`, 8 kept-alive clients in sessions, a
/// small call to an HTTP upstream, fat LTO): 80–84 → 58–63 µs of system
/// time per request, 4.5–5.1 K → 5.3–5.7 K requests per second, the user
/// time unchanged within the spread. Standing alone no difference: that
/// stream already began with the answer, in one write.
pub(super) async fn first_decides(
    front: &Front,
    taken: Taken,
    notices: outbox::Receiver,
    statuses: Statuses,
) -> Response {
    answer_in(front, taken, notices, statuses, Forms::Both).await
}

/// The answer to a request in a form the client takes: as
/// [`first_decides`] says when it takes both; a stream from the start when
/// it takes only SSE; one JSON body when it takes only JSON (the
/// notifications about the request dropped: it has no stream to carry
/// them).
pub(super) async fn answer_in(
    front: &Front,
    taken: Taken,
    mut notices: outbox::Receiver,
    statuses: Statuses,
    forms: Forms,
) -> Response {
    let Taken { work, ct } = taken;
    // The client going away before the answer ends cancels the call: while
    // the first message is awaited here (hyper then drops this future, and
    // the work goes on in a task of its own to say so upstream: `Held`),
    // then with the stream's body.
    let mut held = Held {
        work: Some(work),
        ct: ct.clone(),
    };
    let first = {
        let work = held.work.as_mut().expect("held until taken below");
        match forms {
            Forms::SseOnly => First::Nothing,
            // The notifications are read (and dropped) so that the work,
            // which waits when they pile up, goes on.
            Forms::JsonOnly => loop {
                tokio::select! {
                    biased;
                    Some(_) = notices.recv() => {}
                    answer = &mut *work => break First::Answer(answer),
                }
            },
            Forms::Both => {
                let waited = front.gateway().deadline(FIRST_WAIT);
                tokio::select! {
                    biased;
                    Some(notice) = notices.recv() => First::Notice(notice),
                    answer = work => First::Answer(answer),
                    () = waited => First::Nothing,
                }
            }
        }
    };
    let work = held.work.take().expect("held until now");
    let cancel_unless_answered = ct.clone().drop_guard();
    let (first, work) = match first {
        First::Answer(answer) if forms == Forms::JsonOnly => {
            cancel_unless_answered.disarm();
            return json_body(answer, statuses);
        }
        First::Answer(answer) => match notices.try_recv() {
            // A notification came just before the answer: both go, in
            // that order, on a stream.
            Ok(notice) => (
                Some(notice),
                futures::FutureExt::boxed(std::future::ready(answer)),
            ),
            Err(_) => {
                cancel_unless_answered.disarm();
                return json_body(answer, statuses);
            }
        },
        First::Notice(notice) => (Some(notice), work),
        First::Nothing => (None, work),
    };
    streamed(
        front,
        first,
        Taken { work, ct },
        notices,
        cancel_unless_answered,
    )
}

/// A request's work while [`first_decides`] awaits its first message.
/// Dropped with it still in (hyper drops the handler of a client that went
/// away), the request is cancelled and its work run on in a task of its
/// own: the work is what tells the upstream (`notifications/cancelled`)
/// and gives back what the request held; dropped unpolled, it would do
/// neither and the upstream would go on with the call.
/// (`http::a_session_client_that_leaves_before_any_answer_cancels_it_upstream`)
struct Held {
    work: Option<futures::future::BoxFuture<'static, Option<Bytes>>>,
    ct: tokio_util::sync::CancellationToken,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(work) = self.work.take() {
            self.ct.cancel();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(work);
            }
        }
    }
}

/// What came first on a request's way to its answer.
enum First {
    /// The answer (`None`: the request was cancelled).
    Answer(Option<Bytes>),
    /// A notification or a request of sluice's about it.
    Notice(Bytes),
    /// Nothing within [`FIRST_WAIT`].
    Nothing,
}

/// `answer` as one JSON body (with its own status as `statuses` says);
/// `None` (the request was cancelled): 202 and no body.
fn json_body(answer: Option<Bytes>, statuses: Statuses) -> Response {
    let Some(answer) = answer else {
        return Response::builder()
            .status(StatusCode::ACCEPTED)
            .body(Body::empty())
            .expect("a valid response");
    };
    let status = match statuses {
        Statuses::Never => None,
        Statuses::OfProtocolErrors => error_status(&answer),
    };
    Response::builder()
        .status(status.unwrap_or(StatusCode::OK))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(answer))
        .expect("a valid response")
}

/// The answer as an SSE stream from the start, whatever comes first: how
/// the endpoint answers a session's request that the fast path left to it
/// (an unusual header). The conformance suite's check of concurrent POST
/// streams (SEP-1699, `server-sse-streams-functional`) sends its requests
/// so (a 2025-03-26 `MCP-Protocol-Version` in a 2025-11-25 session), and
/// passes a server that streams them where it only notes one that answers
/// with JSON: through sluice it passes as it does directly.
pub(super) fn stream_answer(front: &Front, taken: Taken, notices: outbox::Receiver) -> Response {
    let guard = taken.ct.clone().drop_guard();
    streamed(front, None, taken, notices, guard)
}

/// The answer as an SSE stream: `first`, then the notifications about the
/// request, then its answer. The call runs in a task of its own; the client
/// going away (the body dropped) cancels it (`guard`).
fn streamed(
    front: &Front,
    first: Option<Bytes>,
    taken: Taken,
    notices: outbox::Receiver,
    guard: tokio_util::sync::DropGuard,
) -> Response {
    let (mut messages, received) = futures::channel::mpsc::channel::<Bytes>(4);
    if let Some(first) = first {
        messages
            .try_send(first)
            .expect("a new channel has room for one message");
    }
    tokio::spawn(taken.drive(notices, move |message| {
        let mut messages = messages.clone();
        async move { messages.send(message).await.is_ok() }
    }));
    let gateway = front.gateway().clone();
    let events = sse_events(received, move || gateway.deadline(KEEP_ALIVE));
    sse_response(Body::from_stream(cancelled_if_dropped(events, guard)))
}

/// `events`, cancelling `guard`'s token if they are dropped before they end: the
/// client went away (hyper drops a response body whose connection closed)
/// while its request was still being answered, which may send nothing
/// for a long time (a quiet call, `subscriptions/listen`).
fn cancelled_if_dropped<S>(
    events: S,
    guard: tokio_util::sync::DropGuard,
) -> impl futures::Stream<Item = S::Item> + Send + 'static
where
    S: futures::Stream + Send + 'static,
    S::Item: Send,
{
    use futures::StreamExt as _;
    let guard = Some(guard);
    futures::stream::unfold(
        (Box::pin(events), guard),
        |(mut events, mut guard)| async move {
            match events.next().await {
                Some(item) => Some((item, (events, guard))),
                None => {
                    // Ended: answered, nothing to cancel.
                    guard.take().map(tokio_util::sync::DropGuard::disarm);
                    None
                }
            }
        },
    )
}

/// The HTTP status of an answer that is a protocol-level error of the
/// request standing alone (see [`Statuses::OfProtocolErrors`]).
fn error_status(message: &Bytes) -> Option<StatusCode> {
    use rmcp::model::ErrorCode;
    #[derive(serde::Deserialize)]
    struct Error {
        code: i32,
    }
    let message = Message::parse(message.clone()).ok()?;
    let code = serde_json::from_str::<Error>(message.error()?).ok()?.code;
    match ErrorCode(code) {
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
        | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        | ErrorCode::HEADER_MISMATCH => Some(StatusCode::BAD_REQUEST),
        ErrorCode::METHOD_NOT_FOUND => Some(StatusCode::NOT_FOUND),
        _ => None,
    }
}

/// One message as an SSE event.
pub(super) fn sse_event(message: &[u8]) -> Bytes {
    let mut event = Vec::with_capacity(message.len() + 16);
    write_event(&mut event, Some("message"), None, message);
    Bytes::from(event)
}

/// A response that streams `body`, SSE events.
pub(super) fn sse_response(body: Body) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        // Proxies such as nginx would otherwise hold the stream back.
        .header("x-accel-buffering", "no")
        .body(body)
        .expect("a valid response")
}

/// The one value of header `name`, if it has exactly one.
fn single<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h [u8]> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?;
    values.next().is_none().then_some(value.as_bytes())
}

/// Whether the headers are those of a plain 2026-07-28 request of
/// `method` (calling tool `name`): see [`answer_stateless`].
fn plain_stateless_headers(headers: &HeaderMap, method: &str, name: Option<&str>) -> bool {
    let version = single(headers, "mcp-protocol-version") == Some(b"2026-07-28".as_slice());
    let method_named = single(headers, "mcp-method") == Some(method.as_bytes());
    let name_named = match method {
        "tools/call" | "prompts/get" | "resources/read" | "tasks/get" => {
            name.is_some_and(|name| single(headers, "mcp-name") == Some(name.as_bytes()))
        }
        _ => !headers.contains_key("mcp-name"),
    };
    let other_mcp_headers = headers.keys().any(|header| {
        let header = header.as_str();
        header.starts_with("mcp-")
            && !matches!(header, "mcp-protocol-version" | "mcp-method" | "mcp-name")
    });
    version && method_named && name_named && !other_mcp_headers && media_types_plain(headers)
}

/// The `taskId` a `tasks/get` names (its `Mcp-Name`).
fn task_id(message: &Message) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Params {
        #[serde(rename = "taskId")]
        task_id: String,
    }
    let params: Params = serde_json::from_str(message.params()?).ok()?;
    Some(params.task_id)
}

/// The request's Accept headers, as one list.
pub(super) fn accept_list(headers: &HeaderMap) -> String {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether the request sends JSON and accepts both JSON and SSE.
fn media_types_plain(headers: &HeaderMap) -> bool {
    sends_json(headers) && takes_both(headers)
}

/// The Accept lists MCP's SDKs send (TypeScript, Python, Rust's rmcp),
/// spelled as they send them: lists that take both forms.
const SDK_ACCEPT_LISTS: [&[u8]; 2] = [
    b"application/json, text/event-stream",
    b"text/event-stream, application/json",
];

/// Whether the request's Accept list takes both JSON and SSE: one of
/// [`SDK_ACCEPT_LISTS`] is known to, without being read range by range (of
/// the ~145 K instructions sluice spends on a small call over HTTP, that
/// reading took 3.4 K); any other is read.
fn takes_both(headers: &HeaderMap) -> bool {
    let mut lists = headers.get_all(header::ACCEPT).iter();
    if let (Some(only), None) = (lists.next(), lists.next())
        && SDK_ACCEPT_LISTS.contains(&only.as_bytes())
    {
        return true;
    }
    Forms::of(&accept_list(headers)) == Some(Forms::Both)
}

/// Whether the request's body is JSON, as its Content-Type says.
pub(super) fn sends_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"))
}

/// Whether the headers are those of a plain request of a session that
/// negotiated `version`: see the module's documentation.
fn plain_headers(headers: &HeaderMap, version: Option<&str>) -> bool {
    let version_ok = version_matches(headers, version);
    let other_mcp_headers = headers.keys().any(|name| {
        let name = name.as_str();
        name.starts_with("mcp-") && name != "mcp-session-id" && name != "mcp-protocol-version"
    });
    version_ok && !other_mcp_headers && media_types_plain(headers)
}

/// Whether the request names no other protocol version than `version`,
/// the session's.
fn version_matches(headers: &HeaderMap, version: Option<&str>) -> bool {
    match headers.get("mcp-protocol-version") {
        None => true,
        Some(v) => version.is_some_and(|version| v.as_bytes() == version.as_bytes()),
    }
}

/// Whether the Accept list `accept` takes `media` (`type/subtype`), as RFC
/// 9110 reads it: the most specific range that matches decides (`media`
/// itself, then `type/*`, then `*/*`), and takes it unless its weight is
/// `q=0`; no Accept header at all takes anything. Clients that send `*/*`
/// (browsers, some HTTP libraries), no header (reported of some clients)
/// or only one of the two types MCP names (Claude.ai's connector sends
/// only `text/event-stream`) are real: see [`Forms`].
pub(super) fn accepts(accept: &str, media: &str) -> bool {
    if accept.trim().is_empty() {
        return true;
    }
    let kind = media.split('/').next().unwrap_or(media);
    // How specific each range is that matches, and its weight.
    let mut best: Option<(u8, bool)> = None;
    for range in accept.split(',') {
        let mut params = range.split(';');
        let name = params.next().unwrap_or_default().trim();
        let specific = if name.eq_ignore_ascii_case(media) {
            2
        } else if name
            .strip_suffix("/*")
            .is_some_and(|t| t.eq_ignore_ascii_case(kind))
        {
            1
        } else if name == "*/*" {
            0
        } else {
            continue;
        };
        let refused = params.any(|p| {
            p.trim()
                .strip_prefix("q=")
                .and_then(|q| q.trim().parse::<f32>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        if best.is_none_or(|(was, _)| specific > was) {
            best = Some((specific, !refused));
        }
    }
    best.is_some_and(|(_, taken)| taken)
}

/// The forms of answer a client takes, from its Accept list. MCP asks a
/// client to accept both JSON and SSE; one that takes only one of them is
/// answered in that one (SSE only: every answer a stream; JSON only: every
/// answer one body, the notifications about it dropped), not refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Forms {
    /// Both: the answer's first message decides ([`first_decides`]).
    Both,
    /// `application/json` only.
    JsonOnly,
    /// `text/event-stream` only.
    SseOnly,
}

impl Forms {
    /// What the Accept list `accept` takes; `None` if neither form.
    pub(super) fn of(accept: &str) -> Option<Forms> {
        match (
            accepts(accept, "application/json"),
            accepts(accept, "text/event-stream"),
        ) {
            (true, true) => Some(Forms::Both),
            (true, false) => Some(Forms::JsonOnly),
            (false, true) => Some(Forms::SseOnly),
            (false, false) => None,
        }
    }
}

/// Marks an HTTP request whose client takes only JSON answers (see
/// [`Forms`]): the endpoint sets it, having read the Accept list; the fast
/// path takes only clients that take both.
#[derive(Debug, Clone, Copy)]
pub(super) struct TakesOnlyJson;

/// Whether the client of the HTTP request `parts` reads an SSE stream in
/// answer to it: not one that takes only JSON ([`TakesOnlyJson`]).
pub(super) fn reads_streams(parts: &http::request::Parts) -> bool {
    parts.extensions.get::<TakesOnlyJson>().is_none()
}

/// The answer of a request about which no notification is sent (its
/// notifications, if any, dropped): `None` if it was cancelled.
pub(super) async fn answer_of(taken: Taken, notices: outbox::Receiver) -> Option<Bytes> {
    let mut answer = None;
    taken
        .drive(notices, |bytes| {
            answer = Some(bytes);
            async { true }
        })
        .await;
    answer
}

/// The answer as a JSON body (a request about which no notification is
/// sent).
async fn json_answer(taken: Taken) -> Response {
    let (_stream, notices) = super::outbox::channel(1);
    match answer_of(taken, notices).await {
        Some(bytes) => Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(bytes))
            .expect("a valid response"),
        None => Response::builder()
            .status(StatusCode::ACCEPTED)
            .body(Body::empty())
            .expect("a valid response"),
    }
}

/// How often a quiet SSE stream gets a comment, so that proxies between
/// the client and sluice do not close it as idle (a call may wait minutes:
/// `_timeout_s`, `sluice_result`'s `wait_s`).
pub(super) const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(15);

/// `messages` as SSE events, with a comment after every [`KEEP_ALIVE`]
/// without one (`quiet()` gives the wait: the gateway's shared deadlines,
/// not a timer of each stream's, see [`crate::deadlines`]); the stream ends
/// with `messages`.
pub(super) fn sse_events<Q>(
    messages: impl futures::Stream<Item = Bytes> + Send + Unpin + 'static,
    quiet: impl FnMut() -> Q + Send + 'static,
) -> impl futures::Stream<Item = Result<Bytes, Infallible>> + Send + 'static
where
    Q: Future<Output = ()> + Send + 'static,
{
    use futures::StreamExt as _;
    futures::stream::unfold(
        (messages, Quiet::new(quiet)),
        |(mut messages, mut quiet)| async move {
            let event = tokio::select! {
                biased;
                message = messages.next() => sse_event(&message?),
                () = quiet.elapsed() => Bytes::from_static(KEEP_ALIVE_COMMENT),
            };
            quiet.reset();
            Some((Ok(event), (messages, quiet)))
        },
    )
}

/// What a quiet SSE stream gets.
const KEEP_ALIVE_COMMENT: &[u8] = b": keep-alive\n\n";

/// A stream's quiet: the wait `make` gives ([`KEEP_ALIVE`] on the
/// gateway's shared deadlines), made when first awaited, and begun again
/// by [`Quiet::reset`] whenever the stream sends something.
struct Quiet<Q, F> {
    make: F,
    waiting: Option<std::pin::Pin<Box<Q>>>,
}

impl<Q: Future<Output = ()>, F: FnMut() -> Q> Quiet<Q, F> {
    fn new(make: F) -> Self {
        Quiet {
            make,
            waiting: None,
        }
    }

    /// Completes when the stream has been quiet for the whole wait.
    async fn elapsed(&mut self) {
        let make = &mut self.make;
        self.waiting.get_or_insert_with(|| Box::pin(make())).await;
        self.waiting = None;
    }

    /// The stream sent something: the quiet begins again.
    fn reset(&mut self) {
        self.waiting = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_accept_list_takes_a_type_by_its_most_specific_range() {
        let json = "application/json";
        let sse = "text/event-stream";
        for (accept, takes_json, takes_sse) in [
            ("", true, true),
            ("*/*", true, true),
            ("application/*", true, false),
            ("text/*;q=0.5", false, true),
            ("application/json, text/event-stream", true, true),
            ("text/event-stream", false, true),
            ("*/*, text/event-stream;q=0", true, false),
            ("application/json;q=0, */*", false, true),
            ("text/*;q=0, text/event-stream", false, true),
            ("text/html", false, false),
        ] {
            assert_eq!(accepts(accept, json), takes_json, "{accept:?} json");
            assert_eq!(accepts(accept, sse), takes_sse, "{accept:?} sse");
        }
        assert_eq!(Forms::of("text/event-stream"), Some(Forms::SseOnly));
        assert_eq!(Forms::of("application/json"), Some(Forms::JsonOnly));
        assert_eq!(Forms::of("*/*"), Some(Forms::Both));
        assert_eq!(Forms::of("text/html"), None);
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        map
    }

    const PLAIN: [(&str, &str); 4] = [
        ("host", "127.0.0.1:8080"),
        ("accept", "application/json, text/event-stream"),
        ("content-type", "application/json"),
        ("mcp-session-id", "abc"),
    ];

    #[test]
    fn a_plain_request_is_taken_and_anything_unusual_is_left_to_the_endpoint() {
        let hosts = AllowedHosts::new(&[], false);
        let plain = headers(&PLAIN);
        assert!(plain_headers(&plain, Some("2025-11-25")));
        assert!(hosts.plainly_allowed(&plain));

        let with = |extra: (&str, &str)| {
            let mut pairs = PLAIN.to_vec();
            pairs.retain(|(name, _)| *name != extra.0);
            pairs.push(extra);
            headers(&pairs)
        };
        // Versions: the session's own, or none.
        assert!(plain_headers(
            &with(("mcp-protocol-version", "2025-11-25")),
            Some("2025-11-25")
        ));
        assert!(!plain_headers(
            &with(("mcp-protocol-version", "2025-06-18")),
            Some("2025-11-25")
        ));
        // SEP-2243 headers are the endpoint's to check.
        assert!(!plain_headers(
            &with(("mcp-method", "tools/call")),
            Some("2025-11-25")
        ));
        // What the client accepts and sends.
        assert!(!plain_headers(&with(("accept", "application/json")), None));
        assert!(!plain_headers(
            &with(("accept", "application/json, text/event-stream;q=0")),
            None
        ));
        assert!(plain_headers(
            &with(("accept", "text/event-stream;q=0.5, application/json")),
            None
        ));
        // The SDKs' lists, known to take both, are what the rule says.
        for list in SDK_ACCEPT_LISTS {
            let list = std::str::from_utf8(list).unwrap();
            assert_eq!(Forms::of(list), Some(Forms::Both), "{list}");
            assert!(plain_headers(&with(("accept", list)), None));
        }
        assert!(plain_headers(
            &with(("accept", "Application/JSON,text/event-stream")),
            None
        ));
        let mut two_lists = with(("accept", "application/json"));
        two_lists.append(header::ACCEPT, "text/event-stream".parse().unwrap());
        assert!(plain_headers(&two_lists, None));
        assert!(!plain_headers(&with(("content-type", "text/plain")), None));
        assert!(plain_headers(
            &with(("content-type", "application/json; charset=utf-8")),
            None
        ));
        // Hosts and origins.
        assert!(!hosts.plainly_allowed(&with(("host", "evil.example"))));
        assert!(!hosts.plainly_allowed(&with(("origin", "http://evil.example"))));
        assert!(hosts.plainly_allowed(&with(("origin", "http://localhost:3000"))));
        assert!(hosts.plainly_allowed(&with(("host", "[::1]:8080"))));
        let extra = AllowedHosts::new(&["mcp.example:443".to_owned()], false);
        assert!(extra.plainly_allowed(&with(("host", "MCP.example"))));
        assert!(AllowedHosts::new(&[], true).plainly_allowed(&with(("host", "evil.example"))));
    }

    #[test]
    fn a_stateless_request_is_taken_only_when_its_headers_say_what_its_body_says() {
        let base = [
            ("accept", "application/json, text/event-stream"),
            ("content-type", "application/json"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "echo"),
        ];
        let with = |change: &[(&str, &str)], drop: &[&str]| {
            let mut pairs: Vec<(&str, &str)> = base
                .iter()
                .copied()
                .filter(|(name, _)| !drop.contains(name) && !change.iter().any(|(n, _)| n == name))
                .collect();
            pairs.extend_from_slice(change);
            headers(&pairs)
        };
        assert!(plain_stateless_headers(
            &with(&[], &[]),
            "tools/call",
            Some("echo")
        ));
        assert!(!plain_stateless_headers(
            &with(&[], &[]),
            "tools/call",
            Some("other")
        ));
        assert!(!plain_stateless_headers(
            &with(&[], &["mcp-name"]),
            "tools/call",
            Some("echo")
        ));
        assert!(!plain_stateless_headers(
            &with(&[], &["mcp-method"]),
            "tools/call",
            Some("echo")
        ));
        assert!(!plain_stateless_headers(
            &with(&[("mcp-protocol-version", "2025-11-25")], &[]),
            "tools/call",
            Some("echo")
        ));
        assert!(!plain_stateless_headers(
            &with(&[("mcp-param-region", "eu")], &[]),
            "tools/call",
            Some("echo")
        ));
        // Two Mcp-Method values, even equal ones: the endpoint refuses them.
        let mut twice = with(&[], &[]);
        twice.append("mcp-method", "tools/call".parse().unwrap());
        assert!(!plain_stateless_headers(&twice, "tools/call", Some("echo")));
        let list = with(&[("mcp-method", "tools/list")], &["mcp-name"]);
        assert!(plain_stateless_headers(&list, "tools/list", None));
        assert!(!plain_stateless_headers(
            &with(&[("mcp-method", "tools/list")], &[]),
            "tools/list",
            None
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_stream_gets_keep_alive_comments_and_ends_with_its_messages() {
        use futures::StreamExt as _;
        let (mut messages, received) = futures::channel::mpsc::channel::<Bytes>(4);
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_secs(40)).await;
            messages
                .send(Bytes::from_static(
                    br#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
                ))
                .await
                .unwrap();
        });
        let events: Vec<Bytes> = sse_events(received, || tokio::time::sleep(KEEP_ALIVE))
            .map(|e| e.unwrap())
            .collect()
            .await;
        let texts: Vec<&str> = events
            .iter()
            .map(|e| std::str::from_utf8(e).unwrap())
            .collect();
        assert_eq!(
            texts,
            [
                ": keep-alive\n\n",
                ": keep-alive\n\n",
                "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n",
            ]
        );
    }
}
