//! The HTTP requests that sluice answers itself, before rmcp's Streamable
//! HTTP server sees them: those [`super::front`] answers on stdio (tools,
//! prompts, resources, completions), of a 2025-11-25 session or standing
//! alone (2026-07-28).
//!
//! A POST is taken only when it is plainly well formed: it comes from an
//! allowed host and origin, accepts both JSON and SSE and sends JSON; in a
//! session, it names an open, initialized one, no other protocol version
//! than the session's and no SEP-2243 header; standing alone, its headers
//! name version 2026-07-28 and say what its body says (`Mcp-Method`, and
//! `Mcp-Name` for a call, a prompt, a read or a `tasks/get`; no `Mcp-Param-*`), and its
//! `_meta` carries what that version requires. Anything else goes on to
//! rmcp's server, which answers it (or refuses it) as before: the checks
//! here only decide what sluice may answer, never how a bad request is
//! refused.
//!
//! A list is answered with a JSON body; anything else with an SSE stream,
//! its notifications (progress, logs) before its answer. A client that goes
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

    /// Whether the request's Host and Origin are plainly allowed.
    fn plainly_allowed(&self, headers: &HeaderMap) -> bool {
        if self.0.is_none() {
            return true;
        }
        let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
            return false;
        };
        if !self.allows(host) {
            return false;
        }
        match headers.get(header::ORIGIN) {
            None => true,
            Some(origin) => origin
                .to_str()
                .ok()
                .and_then(|o| o.split_once("://"))
                .is_some_and(|(scheme, rest)| {
                    matches!(scheme, "http" | "https") && !rest.contains('/') && self.allows(rest)
                }),
        }
    }
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
/// module's documentation); `None` leaves it to rmcp.
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
    if front.answered(&message) {
        // The client's answer to a request relayed on a call's stream.
        return Some(
            Response::builder()
                .status(StatusCode::ACCEPTED)
                .body(Body::empty())
                .expect("a valid response"),
        );
    }
    if message.kind() == Kind::Notification {
        // Seen here too, so that a call answered here can be cancelled;
        // rmcp still gets it (and ignores an id it does not know).
        if message.method() == Some("notifications/cancelled") {
            front.cancelled(&message);
        }
        return None;
    }
    let (stream, notices) = tokio::sync::mpsc::channel(super::lines::NOTICES);
    let answered_as = answered_as(message.method()?)?;
    let taken = front.take(&message, Some(parts), stream)?;
    if answered_as == AnsweredAs::Json {
        return Some(json_answer(taken).await);
    }
    Some(sse_answer(&front, taken, notices))
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
    let (stream, notices) = tokio::sync::mpsc::channel(super::lines::NOTICES);
    let taken = front.take(&message, Some(parts), stream)?;
    if answered_as == AnsweredAs::Json {
        return Some(json_answer(taken).await);
    }
    Some(stateless_answer(front, taken, notices).await)
}

/// The answer to a 2026-07-28 request standing alone, as rmcp's server
/// shapes it: the first message decides. An error that is the request's
/// fault at the protocol level is a JSON body with its HTTP status (400 for
/// a missing capability, an unsupported version or a header mismatch, 404
/// for an unknown method); anything else an SSE stream, that message first.
async fn stateless_answer(
    front: &Front,
    taken: Taken,
    notices: tokio::sync::mpsc::Receiver<Bytes>,
) -> Response {
    use futures::StreamExt as _;
    let (messages, mut received) = futures::channel::mpsc::channel::<Bytes>(4);
    // The client going away before the first message cancels the call.
    let cancel_unless_answered = taken.ct.clone().drop_guard();
    tokio::spawn(taken.drive(notices, move |message| {
        let mut messages = messages.clone();
        async move { messages.send(message).await.is_ok() }
    }));
    let first = received.next().await;
    cancel_unless_answered.disarm();
    let Some(first) = first else {
        // Cancelled: no answer.
        return Response::builder()
            .status(StatusCode::ACCEPTED)
            .body(Body::empty())
            .expect("a valid response");
    };
    if let Some(status) = error_status(&first) {
        return Response::builder()
            .status(status)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(first))
            .expect("a valid response");
    }
    let messages = futures::stream::once(async move { first }).chain(received);
    let gateway = front.gateway().clone();
    sse_response(Body::from_stream(sse_events(
        Box::pin(messages),
        move || gateway.deadline(KEEP_ALIVE),
    )))
}

/// The HTTP status of an answer that is a protocol-level error of the
/// request (see [`stateless_answer`]).
fn error_status(message: &[u8]) -> Option<StatusCode> {
    use rmcp::model::ErrorCode;
    #[derive(serde::Deserialize)]
    struct Error {
        code: i32,
    }
    let message = Message::parse(Bytes::copy_from_slice(message)).ok()?;
    let code = serde_json::from_str::<Error>(message.error()?).ok()?.code;
    match ErrorCode(code) {
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
        | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        | ErrorCode::HEADER_MISMATCH => Some(StatusCode::BAD_REQUEST),
        ErrorCode::METHOD_NOT_FOUND => Some(StatusCode::NOT_FOUND),
        _ => None,
    }
}

/// The front of the session a GET names, when sluice's own layer writes to
/// the session's GET stream too: the GET is plainly well formed (allowed
/// Host and Origin, accepts SSE, names no other protocol version than the
/// session's) and is not a resumption (`Last-Event-ID`: rmcp replays its
/// own events, which are all such a stream may ask again).
pub fn standalone_front(
    sessions: &SessionTable,
    hosts: &AllowedHosts,
    headers: &HeaderMap,
) -> Option<Arc<Front>> {
    let session = headers.get("mcp-session-id")?.to_str().ok()?;
    let front = sessions.touch(session)?;
    let version_ok = version_matches(headers, front.protocol_version().as_deref());
    let accept = accept_list(headers);
    let plain = version_ok
        && accepts(&accept, "text/event-stream")
        && !headers.contains_key("last-event-id")
        && hosts.plainly_allowed(headers);
    plain.then_some(front)
}

/// rmcp's answer to a session's GET, with what sluice's own layer sends
/// the session on it merged in (log messages as the upstream sent them,
/// the session's other notifications, server→client requests of no call):
/// rmcp's bytes pass unchanged, sluice's events go between two of its
/// events, and a keep-alive comment after 15 s of quiet. Any other answer
/// (an error, a stream rmcp refused) is given back as it is.
pub fn merged_standalone(front: &Front, response: Response) -> Response {
    let streams = response.status() == StatusCode::OK
        && response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
    if !streams {
        return response;
    }
    let Some(ours) = front.open_standalone() else {
        return response;
    };
    let (parts, body) = response.into_parts();
    Response::from_parts(
        parts,
        Body::from_stream(merged_events(body.into_data_stream(), ours, {
            let gateway = front.gateway().clone();
            move || gateway.deadline(KEEP_ALIVE)
        })),
    )
}

/// rmcp's SSE bytes (`theirs`) with `ours` (messages) as events between
/// theirs; see [`merged_standalone`]. Ends when rmcp's stream ends.
fn merged_events<Q, S>(
    theirs: S,
    ours: tokio::sync::mpsc::Receiver<Bytes>,
    quiet: impl FnMut() -> Q + Send + 'static,
) -> impl futures::Stream<Item = Result<Bytes, axum::Error>> + Send + 'static
where
    S: futures::Stream<Item = Result<Bytes, axum::Error>> + Send + Unpin + 'static,
    Q: Future<Output = ()> + Send + 'static,
{
    use futures::StreamExt as _;
    struct Merge<S, Q, F> {
        theirs: S,
        ours: Option<tokio::sync::mpsc::Receiver<Bytes>>,
        /// Our events, waiting for rmcp's stream to be between events.
        held: std::collections::VecDeque<Bytes>,
        /// The last bytes sent (at most 4): where rmcp's stream is.
        tail: Vec<u8>,
        quiet: Quiet<Q, F>,
    }
    impl<S, Q, F> Merge<S, Q, F> {
        fn between_events(&self) -> bool {
            let t = self.tail.as_slice();
            t.is_empty()
                || t.ends_with(b"\n\n")
                || t.ends_with(b"\r\r")
                || t.ends_with(b"\r\n\r\n")
                || t.ends_with(b"\n\r\n")
        }
        fn sent(&mut self, chunk: &[u8]) {
            self.tail
                .extend_from_slice(&chunk[chunk.len().saturating_sub(4)..]);
            let cut = self.tail.len().saturating_sub(4);
            self.tail.drain(..cut);
        }
    }
    let merge = Merge {
        theirs,
        ours: Some(ours),
        held: std::collections::VecDeque::new(),
        tail: Vec::new(),
        quiet: Quiet::new(quiet),
    };
    futures::stream::unfold(merge, |mut merge| async move {
        loop {
            if merge.between_events()
                && let Some(event) = merge.held.pop_front()
            {
                merge.quiet.reset();
                return Some((Ok(event), merge));
            }
            let room = merge.held.len() < super::lines::NOTICES;
            tokio::select! {
                biased;
                chunk = merge.theirs.next() => {
                    let chunk = match chunk {
                        Some(Ok(chunk)) => chunk,
                        // rmcp's stream ended (the session closed) or failed.
                        Some(Err(_)) | None => return None,
                    };
                    merge.sent(&chunk);
                    merge.quiet.reset();
                    return Some((Ok(chunk), merge));
                }
                message = async { merge.ours.as_mut()?.recv().await }, if merge.ours.is_some() && room => {
                    match message {
                        Some(message) => merge.held.push_back(sse_event(&message)),
                        None => merge.ours = None,
                    }
                }
                () = merge.quiet.elapsed() => {
                    if merge.between_events() {
                        return Some((Ok(Bytes::from_static(KEEP_ALIVE_COMMENT)), merge));
                    }
                }
            }
        }
    })
}

/// One message as an SSE event.
fn sse_event(message: &[u8]) -> Bytes {
    let mut event = Vec::with_capacity(message.len() + 16);
    write_event(&mut event, Some("message"), None, message);
    Bytes::from(event)
}

/// A response that streams `body`, SSE events.
fn sse_response(body: Body) -> Response {
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
fn accept_list(headers: &HeaderMap) -> String {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether the request sends JSON and accepts both JSON and SSE.
fn media_types_plain(headers: &HeaderMap) -> bool {
    let accept = accept_list(headers);
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    json && accepts(&accept, "application/json") && accepts(&accept, "text/event-stream")
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

/// Whether the Accept list `accept` names `media` without `q=0`.
fn accepts(accept: &str, media: &str) -> bool {
    accept.split(',').any(|range| {
        let mut params = range.split(';');
        let named = params
            .next()
            .is_some_and(|m| m.trim().eq_ignore_ascii_case(media));
        named
            && !params.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            })
    })
}

/// The answer as a JSON body (a request about which no notification is
/// sent).
async fn json_answer(taken: Taken) -> Response {
    let (_stream, notices) = tokio::sync::mpsc::channel(1);
    let mut answer = None;
    taken
        .drive(notices, |bytes| {
            answer = Some(bytes);
            async { true }
        })
        .await;
    match answer {
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

/// The answer as an SSE stream: the notifications about the request, then
/// its answer. The call runs in a task of its own; the client going away
/// (the body dropped) cancels it.
fn sse_answer(
    front: &Front,
    taken: Taken,
    notices: tokio::sync::mpsc::Receiver<Bytes>,
) -> Response {
    let (messages, received) = futures::channel::mpsc::channel::<Bytes>(4);
    tokio::spawn(taken.drive(notices, move |message| {
        let mut messages = messages.clone();
        async move { messages.send(message).await.is_ok() }
    }));
    let gateway = front.gateway().clone();
    sse_response(Body::from_stream(sse_events(received, move || {
        gateway.deadline(KEEP_ALIVE)
    })))
}

/// How often a quiet SSE stream gets a comment, so that proxies between
/// the client and sluice do not close it as idle (a call may wait minutes:
/// `_timeout_s`, `sluice_result`'s `wait_s`), as rmcp's server did.
const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(15);

/// `messages` as SSE events, with a comment after every [`KEEP_ALIVE`]
/// without one (`quiet()` gives the wait: the gateway's shared deadlines,
/// not a timer of each stream's, see [`crate::deadlines`]); the stream ends
/// with `messages`.
fn sse_events<Q>(
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
    fn a_plain_request_is_taken_and_anything_unusual_is_left_to_rmcp() {
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
        // SEP-2243 headers are rmcp's to check.
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
        // Two Mcp-Method values, even equal ones: rmcp refuses them.
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

    /// rmcp's bytes pass as they come; sluice's message waits for the end of
    /// the event rmcp is in the middle of; a quiet merged stream gets a
    /// keep-alive comment, and it ends with rmcp's.
    #[tokio::test(start_paused = true)]
    async fn a_merged_get_stream_puts_sluices_events_between_rmcps() {
        use futures::StreamExt as _;
        let (mut theirs_tx, theirs) =
            futures::channel::mpsc::channel::<Result<Bytes, axum::Error>>(8);
        let (ours_tx, ours) = tokio::sync::mpsc::channel(8);
        let mut merged = Box::pin(merged_events(theirs, ours, || {
            tokio::time::sleep(KEEP_ALIVE)
        }));
        async fn next(
            merged: &mut (impl futures::Stream<Item = Result<Bytes, axum::Error>> + Unpin),
        ) -> String {
            use futures::StreamExt as _;
            let item = merged.next().await.unwrap().unwrap();
            String::from_utf8(item.to_vec()).unwrap()
        }
        // Half an event of rmcp's, then one of sluice's messages.
        theirs_tx
            .send(Ok(Bytes::from_static(b"id: 7\ndata: {\"a\":")))
            .await
            .unwrap();
        assert_eq!(next(&mut merged).await, "id: 7\ndata: {\"a\":");
        ours_tx
            .send(Bytes::from_static(br#"{"x":1.50}"#))
            .await
            .unwrap();
        theirs_tx
            .send(Ok(Bytes::from_static(b"1}\n\n")))
            .await
            .unwrap();
        assert_eq!(next(&mut merged).await, "1}\n\n");
        assert_eq!(
            next(&mut merged).await,
            "event: message\ndata: {\"x\":1.50}\n\n"
        );
        // Quiet: a keep-alive comment.
        assert_eq!(next(&mut merged).await, ": keep-alive\n\n");
        // rmcp's stream ends (the session closed): so does the merged one.
        drop(theirs_tx);
        assert!(merged.next().await.is_none());
    }
}
