//! sluice's own Streamable HTTP client transport
//! (`sluice::upstream::streamable`), driven directly as the upstream
//! engine drives it: messages in, `Inbound` items out.
//!
//! Against hand-written HTTP servers (here, with axum) that answer exact
//! bytes and record what they were sent: answers arrive as the bytes sent,
//! whatever their size under the limit; what cannot be read, an HTTP
//! error or a stream cut short fails the call at once; a request refused
//! for a session the server forgot is said to be unhandled, and through
//! sluice goes once more in a new session; the headers each era asks for
//! are sent. And against real servers:
//! `@modelcontextprotocol/server-everything` (2025-11-25, sessions, SSE;
//! restarted behind sluice, as rmcp's server is too) and the Python SDK's
//! (2026-07-28, stateless, validating headers).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use bytes::Bytes;
use futures::future::BoxFuture;
use http::{HeaderMap, Method, StatusCode};
use sluice::jsonrpc::{Id, Message, SseParser};
use sluice::upstream::streamable::{self, StreamableHttp};
use sluice::upstream::transport::{Inbound, SendError, Transport};
use tokio::sync::{Notify, mpsc};

use crate::support::*;

const MB: usize = 1024 * 1024;

// ------------------------------------------------------------ the fake server

/// One HTTP request the fake server received.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    headers: HeaderMap,
    body: Bytes,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The JSON-RPC method of its body, if any.
    fn rpc_method(&self) -> Option<String> {
        Message::parse(self.body.clone())
            .ok()
            .and_then(|m| m.method().map(str::to_owned))
    }
}

type Answer = Box<dyn Fn(Seen) -> BoxFuture<'static, Response> + Send + Sync>;

#[derive(Clone)]
struct Fake {
    seen: Arc<Mutex<Vec<Seen>>>,
    answer: Arc<Answer>,
}

/// A server at the returned URL that records each request and answers it
/// with `answer`.
async fn fake_server<F, Fut>(answer: F) -> (String, Arc<Mutex<Vec<Seen>>>)
where
    F: Fn(Seen) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response> + Send + 'static,
{
    let seen = Arc::new(Mutex::new(Vec::new()));
    let fake = Fake {
        seen: seen.clone(),
        answer: Arc::new(Box::new(move |s| Box::pin(answer(s)))),
    };
    let app = axum::Router::new()
        .fallback(|State(fake): State<Fake>, request: Request| async move {
            let (parts, body) = request.into_parts();
            let body = axum::body::to_bytes(body, usize::MAX)
                .await
                .unwrap_or_default();
            let seen = Seen {
                method: parts.method,
                headers: parts.headers,
                body,
            };
            fake.seen.lock().unwrap().push(seen.clone());
            (fake.answer)(seen).await
        })
        .with_state(fake);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

fn respond(status: u16, content_type: &str, body: impl Into<Body>) -> Response {
    let mut response = Response::new(body.into());
    *response.status_mut() = StatusCode::from_u16(status).unwrap();
    if !content_type.is_empty() {
        response
            .headers_mut()
            .insert("content-type", content_type.parse().unwrap());
    }
    response
}

fn json(body: impl Into<Body>) -> Response {
    respond(200, "application/json", body)
}

fn accepted() -> Response {
    respond(202, "", Body::empty())
}

/// An SSE body that sends what arrives on the returned sender, and ends
/// when it is dropped; `gone` is notified when the client stops reading.
fn sse_channel() -> (Response, mpsc::Sender<Bytes>, Arc<Notify>) {
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    let gone = Arc::new(Notify::new());
    let watcher = tx.clone();
    let notify = gone.clone();
    tokio::spawn(async move {
        watcher.closed().await;
        notify.notify_one();
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    (
        respond(200, "text/event-stream", Body::from_stream(stream)),
        tx,
        gone,
    )
}

/// A server that answers every request with an SSE stream of its own,
/// handing the test each stream's sender and its `gone` notice.
async fn streaming_server() -> (
    String,
    Arc<Mutex<Vec<Seen>>>,
    mpsc::Receiver<(mpsc::Sender<Bytes>, Arc<Notify>)>,
) {
    let (stream_tx, streams) = mpsc::channel(1);
    let (url, seen) = fake_server(move |_| {
        let stream_tx = stream_tx.clone();
        async move {
            let (response, events, gone) = sse_channel();
            stream_tx.send((events, gone)).await.unwrap();
            response
        }
    })
    .await;
    (url, seen, streams)
}

/// An SSE body of these whole events.
fn sse(events: &[(Option<&str>, &str)]) -> Response {
    let mut out = Vec::new();
    for (id, data) in events {
        sluice::jsonrpc::write_event(&mut out, Some("message"), *id, data.as_bytes());
    }
    respond(200, "text/event-stream", out)
}

// ------------------------------------------------------------ the client side

fn open(url: &str, limit: usize) -> (Arc<StreamableHttp>, mpsc::Receiver<Inbound>) {
    open_with(url, &BTreeMap::new(), limit)
}

fn open_with(
    url: &str,
    headers: &BTreeMap<String, String>,
    limit: usize,
) -> (Arc<StreamableHttp>, mpsc::Receiver<Inbound>) {
    streamable::open(url, headers, limit).expect("open the transport")
}

fn msg(text: &str) -> Message {
    Message::parse(Bytes::copy_from_slice(text.as_bytes())).expect("a message")
}

fn request(id: u64, method: &str, params: &str) -> Message {
    msg(&format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#
    ))
}

/// The next inbound item (a hang is a failure, not a wait for ever).
async fn next(inbound: &mut mpsc::Receiver<Inbound>) -> Inbound {
    tokio::time::timeout(Duration::from_secs(20), inbound.recv())
        .await
        .expect("an inbound item within 20 s")
        .expect("the inbound channel is open")
}

/// The next message, its bytes as text and the stream it came on.
async fn next_message(inbound: &mut mpsc::Receiver<Inbound>) -> (Message, Option<Id>) {
    match next(inbound).await {
        Inbound::Message { message, stream_of } => (message, stream_of),
        other => panic!("expected a message, got {other:?}"),
    }
}

fn text(message: &Message) -> &str {
    std::str::from_utf8(message.as_bytes()).unwrap()
}

// ------------------------------------------------------------ plain JSON bodies

#[tokio::test]
async fn a_40_mb_plain_json_answer_under_the_limit_arrives_byte_for_byte() {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{{"content":[{{"type":"text","text":"{}"}}],"x-trace":1.50}}}}"#,
        "a".repeat(40 * MB)
    );
    let sent = Bytes::from(body);
    let answer = sent.clone();
    let (url, _) = fake_server(move |_| {
        let answer = answer.clone();
        async move { json(answer) }
    })
    .await;
    let (transport, mut inbound) = open(&url, 64 * MB);
    transport
        .send(request(1, "tools/call", r#"{"name":"big"}"#))
        .await
        .unwrap();
    let (message, stream_of) = next_message(&mut inbound).await;
    assert_eq!(stream_of, Some(Id::number(1)));
    assert_eq!(message.id(), Some(Id::number(1)));
    assert!(
        message.as_bytes() == &sent,
        "the bytes the server sent, all 40 MB of them"
    );
}

#[tokio::test]
async fn answers_that_cannot_be_read_fail_their_call_at_once_with_what_was_wrong() {
    // Each body answers request 1; the limit is 1 MB.
    let nested = format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{{"deep":{}1{}}}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let mut not_utf8 = br#"{"jsonrpc":"2.0","id":1,"result":{"text":""#.to_vec();
    not_utf8.extend_from_slice(b"\xff\xfe");
    not_utf8.extend_from_slice(br#""}}"#);
    let too_large = format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{{"text":"{}"}}}}"#,
        "a".repeat(2 * MB)
    );
    let cases: Vec<(&str, Bytes, &str)> = vec![
        (
            "over the limit",
            Bytes::from(too_large.clone()),
            "`[limits] max_message_mb`",
        ),
        ("not UTF-8", Bytes::from(not_utf8.clone()), "not UTF-8"),
        (
            "nested 200 deep",
            Bytes::from(nested.clone()),
            "levels deep",
        ),
        (
            "not JSON",
            Bytes::from_static(b"<html>oops</html>"),
            "not JSON",
        ),
    ];
    for (what, body, says) in cases {
        let (url, _) = fake_server(move |_| {
            let body = body.clone();
            async move { json(body) }
        })
        .await;
        let (transport, mut inbound) = open(&url, MB);
        transport
            .send(request(1, "tools/call", r#"{"name":"x"}"#))
            .await
            .unwrap();
        match next(&mut inbound).await {
            Inbound::Unreadable { id, why } => {
                assert_eq!(id, Some(Id::number(1)), "{what}: the call it answers fails");
                assert!(why.contains(says), "{what}: {why}");
            }
            other => panic!("{what}: expected Unreadable, got {other:?}"),
        }
    }
    // The same over SSE: the id is found in the event (a server request's
    // would be its own), and the stream goes on.
    let big_event = format!(
        r#"{{"jsonrpc":"2.0","id":7,"result":{{"text":"{}"}}}}"#,
        "a".repeat(2 * MB)
    );
    let (url, _) = fake_server(move |_| {
        let big_event = big_event.clone();
        async move { sse(&[(None, &big_event)]) }
    })
    .await;
    let (transport, mut inbound) = open(&url, MB);
    transport
        .send(request(7, "tools/call", r#"{"name":"x"}"#))
        .await
        .unwrap();
    match next(&mut inbound).await {
        Inbound::Unreadable { id, why } => {
            assert_eq!(id, Some(Id::number(7)));
            assert!(why.contains("`[limits] max_message_mb`"), "{why}");
        }
        other => panic!("expected Unreadable, got {other:?}"),
    }
}

#[tokio::test]
async fn an_http_error_fails_the_call_with_its_status_and_an_excerpt_of_the_body() {
    let long_page = format!("upstream exploded: {}", "x".repeat(100_000));
    let (url, _) = fake_server(move |seen| {
        let long_page = long_page.clone();
        async move {
            match seen.rpc_method().as_deref() {
                Some("tools/call") => respond(500, "text/plain", long_page),
                // A JSON-RPC error response for the id: delivered as sent.
                _ => respond(
                    400,
                    "application/json",
                    r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32020,"message":"Header mismatch"}}"#,
                ),
            }
        }
    })
    .await;
    let (transport, mut inbound) = open(&url, MB);
    transport
        .send(request(1, "tools/call", r#"{"name":"x"}"#))
        .await
        .unwrap();
    match next(&mut inbound).await {
        Inbound::Failed { id, why } => {
            assert_eq!(id, Id::number(1));
            assert!(why.contains("500 Internal Server Error"), "{why}");
            assert!(why.contains("upstream exploded: xxx"), "{why}");
            // At most 512 bytes of the body, with the status around them.
            assert!(
                why.len() < 600,
                "an excerpt, not the page: {} bytes",
                why.len()
            );
        }
        other => panic!("expected Failed, got {other:?}"),
    }
    transport
        .send(request(2, "prompts/get", r#"{"name":"p"}"#))
        .await
        .unwrap();
    let (message, _) = next_message(&mut inbound).await;
    assert_eq!(
        text(&message),
        r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32020,"message":"Header mismatch"}}"#
    );
    // The same error for request 3 names another request: not its answer
    // (which would leave request 3 waiting for ever), so it fails quoting it.
    transport
        .send(request(3, "prompts/get", r#"{"name":"p"}"#))
        .await
        .unwrap();
    match next(&mut inbound).await {
        Inbound::Failed { id, why } => {
            assert_eq!(id, Id::number(3));
            assert!(why.contains("400 Bad Request"), "{why}");
            assert!(why.contains("Header mismatch"), "{why}");
        }
        other => panic!("expected Failed, got {other:?}"),
    }
}

#[tokio::test]
async fn an_unreachable_upstream_fails_each_request_and_refuses_notifications() {
    // A port nothing listens on.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let (transport, mut inbound) = open(&format!("http://127.0.0.1:{port}/mcp"), MB);
    transport
        .send(request(1, "tools/list", "{}"))
        .await
        .unwrap();
    match next(&mut inbound).await {
        Inbound::Failed { id, why } => {
            assert_eq!(id, Id::number(1));
            assert!(why.contains(&format!("127.0.0.1:{port}")), "{why}");
        }
        other => panic!("expected Failed, got {other:?}"),
    }
    let refused = transport
        .send(msg(
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        ))
        .await;
    assert!(matches!(refused, Err(SendError::Refused(_))), "{refused:?}");
}

// ------------------------------------------------------------ SSE answers

#[tokio::test]
async fn sse_events_arrive_in_order_on_their_requests_stream() {
    let (url, _) = fake_server(|_| async {
        sse(&[
            (Some("e1"), ""), // a priming event: nothing to deliver
            (None, r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1}}"#),
            (None, r#"{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{"x-keep":1.50}}"#),
            (None, r#"{"jsonrpc":"2.0","id":5,"result":{"n":1e2,"z":-0}}"#),
        ])
    })
    .await;
    let (transport, mut inbound) = open(&url, MB);
    transport
        .send(request(5, "tools/call", r#"{"name":"x"}"#))
        .await
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..3 {
        let (message, stream_of) = next_message(&mut inbound).await;
        assert_eq!(stream_of, Some(Id::number(5)));
        got.push(text(&message).to_owned());
    }
    assert_eq!(
        got,
        [
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1}}"#,
            r#"{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{"x-keep":1.50}}"#,
            r#"{"jsonrpc":"2.0","id":5,"result":{"n":1e2,"z":-0}}"#,
        ]
    );
}

#[tokio::test]
async fn an_sse_stream_that_ends_before_the_answer_without_event_ids_fails_the_call() {
    let (url, seen) = fake_server(|_| async {
        sse(&[(
            None,
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1}}"#,
        )])
    })
    .await;
    let (transport, mut inbound) = open(&url, MB);
    transport
        .send(request(3, "tools/call", r#"{"name":"x"}"#))
        .await
        .unwrap();
    let (progress, _) = next_message(&mut inbound).await;
    assert_eq!(progress.method(), Some("notifications/progress"));
    match next(&mut inbound).await {
        Inbound::Failed { id, why } => {
            assert_eq!(id, Id::number(3));
            assert!(
                why.contains("closed the response stream before answering"),
                "{why}"
            );
        }
        other => panic!("expected Failed, got {other:?}"),
    }
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "no resumption without event ids"
    );
}

#[tokio::test]
async fn an_sse_stream_with_event_ids_is_resumed_with_last_event_id_after_the_servers_retry() {
    // When the cut stream was answered, and how long after it the client
    // came back (the server asked for 600 ms).
    let cut: Arc<Mutex<Option<std::time::Instant>>> = Arc::default();
    let waited: Arc<Mutex<Option<Duration>>> = Arc::default();
    let (url, seen) = fake_server({
        let (cut, waited) = (cut.clone(), waited.clone());
        move |seen| {
            let (cut, waited) = (cut.clone(), waited.clone());
            async move {
        if seen.method == Method::GET {
            // The rest of the stream, after the event the client names.
            assert_eq!(seen.header("last-event-id"), Some("ev-2"));
            *waited.lock().unwrap() = cut.lock().unwrap().map(|at| at.elapsed());
            sse(&[(Some("ev-3"), r#"{"jsonrpc":"2.0","id":4,"result":{"resumed":true}}"#)])
        } else {
            *cut.lock().unwrap() = Some(std::time::Instant::now());
            let mut body = b"retry: 600\n\n".to_vec();
            sluice::jsonrpc::write_event(&mut body, None, Some("ev-1"), b"");
            sluice::jsonrpc::write_event(
                &mut body,
                None,
                Some("ev-2"),
                br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"half"}}"#,
            );
            respond(200, "text/event-stream", body)
        }
            }
        }
    })
    .await;
    let (transport, mut inbound) = open(&url, MB);
    transport
        .send(request(4, "tools/call", r#"{"name":"x"}"#))
        .await
        .unwrap();
    let (log, _) = next_message(&mut inbound).await;
    assert_eq!(log.method(), Some("notifications/message"));
    let (answer, stream_of) = next_message(&mut inbound).await;
    assert_eq!(stream_of, Some(Id::number(4)));
    assert_eq!(
        text(&answer),
        r#"{"jsonrpc":"2.0","id":4,"result":{"resumed":true}}"#
    );
    let methods: Vec<Method> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.method.clone())
        .collect();
    assert_eq!(methods, [Method::POST, Method::GET]);
    let waited = waited.lock().unwrap().expect("the client came back");
    assert!(
        waited >= Duration::from_millis(600),
        "the client came back after {waited:?}, before the server's retry"
    );
}

#[tokio::test]
async fn a_slow_answer_does_not_hold_up_the_next_request() {
    // The server answers request 1 only once it has received request 2.
    let second_arrived = Arc::new(Notify::new());
    let signal = second_arrived.clone();
    let (url, _) = fake_server(move |seen| {
        let signal = signal.clone();
        async move {
            let message = Message::parse(seen.body.clone()).unwrap();
            if message.id() == Some(Id::number(1)) {
                signal.notified().await;
            } else {
                signal.notify_one();
            }
            json(format!(
                r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#,
                message.id().unwrap()
            ))
        }
    })
    .await;
    let (transport, mut inbound) = open(&url, MB);
    transport
        .send(request(1, "tools/call", r#"{"name":"slow"}"#))
        .await
        .unwrap();
    transport
        .send(request(2, "tools/call", r#"{"name":"fast"}"#))
        .await
        .unwrap();
    // Both answered (1 was held until 2 arrived), in either order: the
    // two answers are released together, on two connections.
    let (first, _) = next_message(&mut inbound).await;
    let (second, _) = next_message(&mut inbound).await;
    let mut ids = [first.id(), second.id()];
    ids.sort_by_key(|id| id.as_ref().and_then(Id::as_u64));
    assert_eq!(ids, [Some(Id::number(1)), Some(Id::number(2))]);
}

// ------------------------------------------------------------ sessions and headers

/// A 2025-11-25 server: a session on `initialize`, 202 for notifications,
/// SSE on `GET`, 200 on `DELETE`; a request named `expire` gets 404.
async fn session_server() -> (String, Arc<Mutex<Vec<Seen>>>) {
    session_server_streaming(|_| {
        sse(&[(
            Some("g1"),
            r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#,
        )])
    })
    .await
}

/// [`session_server`], its `n`th `GET` (from 0) answered `stream(n)`.
async fn session_server_streaming(
    stream: impl Fn(usize) -> Response + Send + Sync + 'static,
) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let gets = Arc::new(AtomicUsize::new(0));
    let stream = Arc::new(stream);
    fake_server(move |seen| {
        let (gets, stream) = (gets.clone(), stream.clone());
        async move {
            match (seen.method.clone(), seen.rpc_method().as_deref()) {
                (Method::POST, Some("initialize")) => {
                    let mut response = json(
                        r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"fake","version":"1"}}}"#,
                    );
                    response
                        .headers_mut()
                        .insert("mcp-session-id", "session-1".parse().unwrap());
                    response
                }
                (Method::POST, Some("notifications/initialized")) => accepted(),
                (Method::POST, Some("expire")) => respond(404, "text/plain", "no such session"),
                (Method::POST, _) => {
                    let id = Message::parse(seen.body.clone()).unwrap().id().unwrap();
                    json(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#))
                }
                (Method::GET, _) => stream(gets.fetch_add(1, Ordering::SeqCst)),
                (Method::DELETE, _) => respond(200, "", Body::empty()),
                _ => respond(405, "", Body::empty()),
            }
        }
    })
    .await
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

/// Opens a session on `url`'s server, sending `headers` with every
/// request: `initialize`, then `notifications/initialized` (which opens
/// the standalone stream).
async fn open_session(
    url: &str,
    headers: &BTreeMap<String, String>,
) -> (Arc<StreamableHttp>, mpsc::Receiver<Inbound>) {
    let (transport, mut inbound) = open_with(url, headers, MB);
    transport.send(msg(INITIALIZE)).await.unwrap();
    next_message(&mut inbound).await;
    transport.negotiated("2025-11-25");
    transport
        .send(msg(
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        ))
        .await
        .unwrap();
    (transport, inbound)
}

#[tokio::test]
async fn the_session_and_protocol_version_go_with_every_later_request() {
    let (url, seen) = session_server().await;
    let headers = BTreeMap::from([("Authorization".to_owned(), "Bearer t0ken".to_owned())]);
    let (transport, mut inbound) = open_session(&url, &headers).await;
    assert_eq!(transport.session_id().as_deref(), Some("session-1"));
    transport
        .send(request(2, "tools/list", "{}"))
        .await
        .unwrap();
    // The GET stream's notification and the answer, in either order.
    let mut standalone = None;
    let mut answer = None;
    for _ in 0..2 {
        let (message, stream_of) = next_message(&mut inbound).await;
        match stream_of {
            None => standalone = Some(message),
            Some(id) => {
                assert_eq!(id, Id::number(2));
                answer = Some(message);
            }
        }
    }
    assert_eq!(
        standalone.unwrap().method(),
        Some("notifications/tools/list_changed"),
        "server-initiated messages come on the GET stream, with no request"
    );
    assert_eq!(answer.unwrap().id(), Some(Id::number(2)));
    transport.close().await;
    transport.close().await;

    let seen = seen.lock().unwrap().clone();
    let initialize = &seen[0];
    assert_eq!(initialize.rpc_method().as_deref(), Some("initialize"));
    assert_eq!(initialize.header("mcp-session-id"), None);
    assert_eq!(initialize.header("mcp-protocol-version"), None);
    assert_eq!(initialize.header("authorization"), Some("Bearer t0ken"));
    assert_eq!(initialize.header("content-type"), Some("application/json"));
    assert_eq!(
        initialize.header("accept"),
        Some("application/json, text/event-stream")
    );
    assert_eq!(
        initialize.body.as_ref(),
        INITIALIZE.as_bytes(),
        "the bytes given"
    );
    for later in &seen[1..] {
        assert_eq!(
            later.header("mcp-session-id"),
            Some("session-1"),
            "{later:?}"
        );
        assert_eq!(
            later.header("mcp-protocol-version"),
            Some("2025-11-25"),
            "{later:?}"
        );
        assert_eq!(
            later.header("authorization"),
            Some("Bearer t0ken"),
            "{later:?}"
        );
        assert_eq!(later.header("mcp-method"), None, "not in this era");
    }
    let get = seen
        .iter()
        .find(|s| s.method == Method::GET)
        .expect("a GET stream");
    assert_eq!(get.header("accept"), Some("text/event-stream"));
    let deletes: Vec<&Seen> = seen.iter().filter(|s| s.method == Method::DELETE).collect();
    assert_eq!(
        deletes.len(),
        1,
        "close ends the session once, however often called"
    );
    assert_eq!(deletes[0].header("mcp-session-id"), Some("session-1"));
    // Closed: nothing more is sent.
    assert!(matches!(
        transport.send(request(3, "tools/list", "{}")).await,
        Err(SendError::Closed(_))
    ));
}

#[tokio::test]
async fn a_404_for_the_session_ends_it_and_names_the_request_never_handled() {
    let (url, _) = session_server().await;
    let (transport, mut inbound) = open(&url, MB);
    transport.send(msg(INITIALIZE)).await.unwrap();
    next_message(&mut inbound).await;
    transport.send(request(2, "expire", "{}")).await.unwrap();
    match next(&mut inbound).await {
        Inbound::Unhandled { id, why } => {
            assert_eq!(id, Id::number(2), "the request never handled");
            assert!(why.contains("404"), "{why}");
        }
        other => panic!("expected Unhandled, got {other:?}"),
    }
    assert!(matches!(
        transport.send(request(3, "tools/list", "{}")).await,
        Err(SendError::Closed(_))
    ));
    // Without a session a 404 is an HTTP error like another.
    let (url, _) = fake_server(|_| async { respond(404, "text/plain", "not here") }).await;
    let (transport, mut inbound) = open(&url, MB);
    transport
        .send(request(1, "tools/list", "{}"))
        .await
        .unwrap();
    match next(&mut inbound).await {
        Inbound::Failed { id, why } => {
            assert_eq!(id, Id::number(1));
            assert!(why.contains("404 Not Found: not here"), "{why}");
        }
        other => panic!("expected Failed, got {other:?}"),
    }
}

/// A 2025-11-25 server whose standalone stream opens (and ends at once)
/// when `opens_first`, and whose every later `GET` gets 404, as the
/// session's does once the server forgot it.
async fn stream_then_404_server(opens_first: bool) -> (String, Arc<Mutex<Vec<Seen>>>) {
    session_server_streaming(move |n| match n {
        0 if opens_first => sse(&[]),
        _ => respond(404, "text/plain", "no such session"),
    })
    .await
}

#[tokio::test]
async fn a_404_to_the_event_stream_that_was_open_ends_the_connection() {
    // The stream opened, ended, and its reopening (a second later) got
    // 404: the upstream forgot the session (it restarted, say). The
    // connection ends, so the next request starts a new one.
    let (url, _) = stream_then_404_server(true).await;
    let (transport, _inbound) = open_session(&url, &BTreeMap::new()).await;
    for _ in 0..200 {
        if transport.session_ended().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let why = transport
        .session_ended()
        .expect("the session ended within 10 s");
    assert!(
        why.contains("HTTP 404 Not Found to its event stream"),
        "{why}"
    );
    assert!(matches!(
        transport.send(request(2, "tools/list", "{}")).await,
        Err(SendError::Closed(_))
    ));
    // A server that answers 404 to every GET (where the spec says 405)
    // just has no stream: its session lives.
    let (url, seen) = stream_then_404_server(false).await;
    let (transport, mut inbound) = open_session(&url, &BTreeMap::new()).await;
    for _ in 0..100 {
        if seen.lock().unwrap().iter().any(|s| s.method == Method::GET) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        seen.lock().unwrap().iter().any(|s| s.method == Method::GET),
        "the stream was asked for"
    );
    // Time for the 404 to reach the transport before the next request.
    tokio::time::sleep(Duration::from_millis(200)).await;
    transport
        .send(request(2, "tools/list", "{}"))
        .await
        .unwrap();
    let (answer, _) = next_message(&mut inbound).await;
    assert_eq!(answer.id(), Some(Id::number(2)));
}

/// How [`forgetful_server`] forgets.
#[derive(Clone, Copy, Default)]
struct Forgetting {
    /// Whenever a call arrives in the session (the call is refused).
    every_call: bool,
    /// A request of a session it does not know is refused as servers made
    /// from the TypeScript SDK's examples refuse it (server-everything
    /// among them: 400, "No valid session ID provided"), not with the 404
    /// the spec asks for.
    with_400: bool,
}

/// A 2025-11-25 MCP server with one tool, `echo`, that forgets its
/// session as one that restarted or expired it does: every `initialize`
/// opens a session `s-N`, and a request in any other session is refused
/// (see [`Forgetting`]). The test forgets the session through the
/// returned slot.
async fn forgetful_server(
    forgetting: Forgetting,
) -> (String, Arc<Mutex<Vec<Seen>>>, Arc<Mutex<Option<String>>>) {
    let refusal = move || match forgetting.with_400 {
        true => respond(
            400,
            "application/json",
            r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"}}"#,
        ),
        false => respond(404, "text/plain", "no such session"),
    };
    let live: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let opened = Arc::new(AtomicUsize::new(0));
    let slot = live.clone();
    let (url, seen) = fake_server(move |seen| {
        let (live, opened) = (live.clone(), opened.clone());
        async move {
            let Ok(message) = Message::parse(seen.body.clone()) else {
                return match seen.method {
                    Method::DELETE => respond(200, "", Body::empty()),
                    _ => respond(405, "", Body::empty()),
                };
            };
            let id = message.id().map(|id| id.to_string()).unwrap_or_default();
            let result = |result: &str| json(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#));
            match message.method() {
                Some("server/discover") => {
                    return json(format!(
                        r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32601,"message":"Method not found"}}}}"#
                    ));
                }
                Some("initialize") => {
                    let session = format!("s-{}", opened.fetch_add(1, Ordering::SeqCst) + 1);
                    *live.lock().unwrap() = Some(session.clone());
                    let mut response = result(
                        r#"{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"forgetful","version":"1"}}"#,
                    );
                    response
                        .headers_mut()
                        .insert("mcp-session-id", session.parse().unwrap());
                    return response;
                }
                _ => {}
            }
            let session = seen.header("mcp-session-id").map(str::to_owned);
            if session.is_none() || session != *live.lock().unwrap() {
                if message.method() == Some("tools/call") {
                    // Slow to say so: calls sent together are all under
                    // way when the first 404 arrives.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                return refusal();
            }
            let session = session.unwrap();
            match message.method() {
                Some(method) if method.starts_with("notifications/") => accepted(),
                Some("tools/list") => result(
                    r#"{"tools":[{"name":"echo","description":"Says in which session it ran.","inputSchema":{"type":"object"}}]}"#,
                ),
                Some("tools/call") if forgetting.every_call => {
                    live.lock().unwrap().take();
                    refusal()
                }
                Some("tools/call") => result(&format!(
                    r#"{{"content":[{{"type":"text","text":"handled in {session}"}}]}}"#
                )),
                _ => result("{}"),
            }
        }
    })
    .await;
    (url, seen, slot)
}

/// A client of sluice with a [`forgetful_server`] as its upstream `web`
/// (its config `dir/NAME.toml`); what the server saw, and its session's
/// slot.
async fn forgetful_behind_sluice(
    dir: &TempDir,
    name: &str,
    forgetting: Forgetting,
) -> (Client, Arc<Mutex<Vec<Seen>>>, Arc<Mutex<Option<String>>>) {
    let (url, seen, live) = forgetful_server(forgetting).await;
    let config = dir.file(
        &format!("{name}.toml"),
        &format!("[upstreams.web]\nurl = {url:?}\n"),
    );
    let (client, _) = connect(&via_config(&config)).await;
    (client, seen, live)
}

/// The session each `tools/call` the server received went in.
fn calls_by_session(seen: &Mutex<Vec<Seen>>) -> Vec<String> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|s| s.rpc_method().as_deref() == Some("tools/call"))
        .map(|s| s.header("mcp-session-id").unwrap_or("none").to_owned())
        .collect()
}

#[tokio::test]
async fn a_call_the_upstream_never_handled_for_its_ended_session_goes_once_more_in_a_new_one() {
    let dir = TempDir::new("forgetful");
    let (client, seen, live) = forgetful_behind_sluice(&dir, "404", Forgetting::default()).await;
    let first = call(&client, "echo", serde_json::json!({})).await;
    assert_eq!(first_text(&first), "handled in s-1");
    // The upstream forgets the session (it restarted, or expired it).
    live.lock().unwrap().take();
    let second = call(&client, "echo", serde_json::json!({})).await;
    assert_ne!(second.is_error, Some(true), "{}", first_text(&second));
    assert_eq!(first_text(&second), "handled in s-2");
    // It went in the old session (404: never handled), then once in the
    // new one.
    assert_eq!(calls_by_session(&seen), ["s-1", "s-1", "s-2"]);
    let third = call(&client, "echo", serde_json::json!({})).await;
    assert_eq!(first_text(&third), "handled in s-2");
    // An upstream that ends sessions is up: sluice connects again at once,
    // never waiting out a crash's growing backoff (after six crashes in a
    // row it would be 8 s, and a call would fail "down: retry then").
    for session in 3..=8 {
        live.lock().unwrap().take();
        let again = call(&client, "echo", serde_json::json!({})).await;
        assert_eq!(first_text(&again), format!("handled in s-{session}"));
    }
    // Three calls under way together when the session ends: each is told
    // 404 (the first does not stop the others), and each goes once more.
    live.lock().unwrap().take();
    let together =
        futures::future::join_all((0..3).map(|_| call(&client, "echo", serde_json::json!({}))))
            .await;
    for result in &together {
        assert_eq!(first_text(result), "handled in s-9");
    }
    let calls = calls_by_session(&seen);
    assert_eq!(
        calls[calls.len() - 6..],
        ["s-8", "s-8", "s-8", "s-9", "s-9", "s-9"]
    );

    // A server that ends every session a call arrives in: the call goes
    // twice, not more, and fails saying why.
    let every_call = Forgetting {
        every_call: true,
        ..Forgetting::default()
    };
    let (other, seen, _) = forgetful_behind_sluice(&dir, "every-call", every_call).await;
    let failed = call(&other, "echo", serde_json::json!({})).await;
    let text = first_text(&failed);
    assert_eq!(failed.is_error, Some(true), "{text}");
    assert!(
        text.contains("upstream `web` ended its session (HTTP 404) during the request"),
        "{text}"
    );
    assert_eq!(calls_by_session(&seen), ["s-1", "s-2"]);

    // A server that refuses a session it forgot with 400, as
    // server-everything does: the same.
    let with_400 = Forgetting {
        with_400: true,
        ..Forgetting::default()
    };
    let (third, seen, live) = forgetful_behind_sluice(&dir, "400", with_400).await;
    let first = call(&third, "echo", serde_json::json!({})).await;
    assert_eq!(first_text(&first), "handled in s-1");
    live.lock().unwrap().take();
    let second = call(&third, "echo", serde_json::json!({})).await;
    assert_eq!(first_text(&second), "handled in s-2");
    assert_eq!(calls_by_session(&seen), ["s-1", "s-1", "s-2"]);
    client.cancel().await.unwrap();
    other.cancel().await.unwrap();
    third.cancel().await.unwrap();
}

const META_2026: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}"#;

#[tokio::test]
async fn a_2026_request_mirrors_its_method_name_and_version_in_headers() {
    let (url, seen) = fake_server(|seen| async move {
        let id = Message::parse(seen.body.clone()).unwrap().id().unwrap();
        let mut response = json(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#));
        // A stateless server gives no session; one that does is ignored.
        response
            .headers_mut()
            .insert("mcp-session-id", "ignored".parse().unwrap());
        response
    })
    .await;
    let (transport, mut inbound) = open(&url, MB);
    let requests = [
        ("server/discover", format!("{{{META_2026}}}")),
        (
            "tools/call",
            format!(r#"{{"name":"get_weather","arguments":{{}},{META_2026}}}"#),
        ),
        (
            "prompts/get",
            format!(r#"{{"name":"Hello, 世界",{META_2026}}}"#),
        ),
        (
            "resources/read",
            format!(r#"{{"uri":"file:///a/b.json",{META_2026}}}"#),
        ),
    ];
    for (n, (method, params)) in requests.iter().enumerate() {
        transport
            .send(request(n as u64 + 1, method, params))
            .await
            .unwrap();
        next_message(&mut inbound).await;
        if n == 0 {
            transport.negotiated("2026-07-28");
        }
    }
    let seen = seen.lock().unwrap().clone();
    type Mirrored<'a> = [Option<&'a str>; 4];
    let headers: Vec<Mirrored> = seen
        .iter()
        .map(|s| {
            [
                s.header("mcp-protocol-version"),
                s.header("mcp-method"),
                s.header("mcp-name"),
                s.header("mcp-session-id"),
            ]
        })
        .collect();
    let v = Some("2026-07-28");
    assert_eq!(
        headers,
        [
            [v, Some("server/discover"), None, None],
            [v, Some("tools/call"), Some("get_weather"), None],
            [
                v,
                Some("prompts/get"),
                Some("=?base64?SGVsbG8sIOS4lueVjA==?="),
                None
            ],
            [v, Some("resources/read"), Some("file:///a/b.json"), None],
        ]
    );
    transport.close().await;
    let methods = seen.iter().filter(|s| s.method != Method::POST).count();
    assert_eq!(methods, 0, "no GET stream and no DELETE in this era");
}

#[tokio::test]
async fn cancelling_a_2026_request_closes_its_stream_and_sends_nothing() {
    let (url, seen, mut streams) = streaming_server().await;
    let (transport, mut inbound) = open(&url, MB);
    transport.negotiated("2026-07-28");
    transport
        .send(request(
            9,
            "subscriptions/listen",
            &format!("{{{META_2026}}}"),
        ))
        .await
        .unwrap();
    let (events, gone) = streams.recv().await.unwrap();
    let note = br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;
    let mut event = Vec::new();
    sluice::jsonrpc::write_event(&mut event, None, None, note);
    events.send(Bytes::from(event)).await.unwrap();
    let (message, stream_of) = next_message(&mut inbound).await;
    assert_eq!(message.as_bytes().as_ref(), note);
    assert_eq!(
        stream_of,
        Some(Id::number(9)),
        "the listen stream stays open"
    );
    transport
        .send(msg(
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9}}"#,
        ))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(20), gone.notified())
        .await
        .expect("the client closes the stream");
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "the cancellation is not POSTed"
    );
}

/// The engine closes its transport when its connection ends, whichever
/// way it ended (`upstream::rpc`): nothing the transport reads outlives it.
#[tokio::test]
async fn closing_the_transport_stops_its_streams() {
    let (url, _, mut streams) = streaming_server().await;
    let (transport, _inbound) = open(&url, MB);
    transport
        .send(request(1, "tools/call", r#"{"name":"long"}"#))
        .await
        .unwrap();
    let (_events, gone) = streams.recv().await.unwrap();
    transport.close().await;
    tokio::time::timeout(Duration::from_secs(20), gone.notified())
        .await
        .expect("the reading task stops and the stream is closed");
}

// ------------------------------------------------------------ real servers

/// A child process serving HTTP on `port`, stopped when dropped.
struct Served {
    child: tokio::process::Child,
    url: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

async fn serve(command: &[String], env: &[(&str, String)], port: u16) -> Served {
    let mut child = tokio::process::Command::new(&command[0]);
    child
        .args(&command[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    for (key, value) in env {
        child.env(key, value);
    }
    let child = child.spawn().expect("start the server");
    for _ in 0..300 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Served {
                child,
                url: format!("http://127.0.0.1:{port}/mcp"),
            };
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the server did not listen on port {port} within 30 s");
}

/// The message bytes of a raw answer (plain JSON, or the last event of an
/// SSE stream).
fn raw_answer(content_type: &str, body: &Bytes) -> Bytes {
    if content_type.starts_with("text/event-stream") {
        let events = SseParser::new(usize::MAX).feed(body);
        let last = events
            .into_iter()
            .filter_map(Result::ok)
            .rfind(|e| !e.data.is_empty())
            .expect("an event");
        last.data
    } else {
        body.clone()
    }
}

#[tokio::test]
async fn server_everything_over_streamable_http_in_the_2025_era() {
    let js = peers().join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let port = free_port();
    let server = serve(
        &[
            node().display().to_string(),
            js.display().to_string(),
            "streamableHttp".into(),
        ],
        &[("PORT", port.to_string())],
        port,
    )
    .await;
    let (transport, mut inbound) = open(&server.url, 64 * MB);
    transport.send(msg(INITIALIZE)).await.unwrap();
    let (initialized, stream_of) = next_message(&mut inbound).await;
    assert_eq!(stream_of, Some(Id::number(1)));
    assert!(
        text(&initialized).contains(r#""protocolVersion":"2025-11-25""#),
        "{}",
        text(&initialized)
    );
    let session = transport
        .session_id()
        .expect("server-everything gives a session");
    transport.negotiated("2025-11-25");
    transport
        .send(msg(
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        ))
        .await
        .unwrap();

    transport
        .send(request(2, "tools/list", "{}"))
        .await
        .unwrap();
    let listed = on_stream_of(&mut inbound, 2).await;
    assert_eq!(listed.id(), Some(Id::number(2)));
    // The same request, sent by hand: the same bytes (nothing dropped,
    // nothing respelled; e.g. a tool's `execution`, which rmcp drops).
    let raw = reqwest::Client::new()
        .post(&server.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .body(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#)
        .send()
        .await
        .unwrap();
    let content_type = raw.headers()["content-type"].to_str().unwrap().to_owned();
    let raw = raw_answer(&content_type, &raw.bytes().await.unwrap());
    assert_eq!(listed.as_bytes(), &raw, "the bytes the server sent");
    assert!(text(&listed).contains("\"trigger-long-running-operation\""));

    transport
        .send(request(
            3,
            "tools/call",
            r#"{"name":"trigger-long-running-operation","arguments":{"duration":1,"steps":3},"_meta":{"progressToken":"tok"}}"#,
        ))
        .await
        .unwrap();
    let (progress, answer) = notices_then_answer(&mut inbound, 3, "notifications/progress").await;
    assert_eq!(
        progress.len(),
        3,
        "each step's progress, before the answer: {progress:?}"
    );
    assert!(
        progress
            .iter()
            .all(|p| p.contains(r#""progressToken":"tok""#))
    );
    assert_eq!(answer.id(), Some(Id::number(3)));
    assert!(answer.result().is_some(), "{}", text(&answer));
    transport.close().await;
    // The session is gone: the server refuses it now.
    let after = reqwest::Client::new()
        .post(&server.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .body(r#"{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{}}"#)
        .send()
        .await
        .unwrap();
    // (server-everything answers an unknown session 400, not the 404 the
    // spec asks for; the same request worked before `close`.)
    assert!(
        after.status().is_client_error(),
        "DELETE ended the session: {}",
        after.status()
    );
}

/// Serves `command` on a free port (in `PORT` too), behind sluice over
/// stdio; kills it and starts it again twice, an `echo` (its argument
/// `key`) after each restart: each must answer `echoed(text)`.
async fn restarted_behind_sluice(command: &[String], key: &str, echoed: impl Fn(&str) -> String) {
    let port = free_port();
    let mut command = command.to_vec();
    for part in &mut command {
        *part = part.replace("{port}", &port.to_string());
    }
    let env = [("PORT", port.to_string())];
    let mut server = serve(&command, &env, port).await;
    let dir = TempDir::new("restarted");
    let config = dir.file(
        "sluice.toml",
        &format!("[upstreams.web]\nurl = {:?}\n", server.url),
    );
    let (client, _) = connect(&via_config(&config)).await;
    let echo = |text: &str| call(&client, "echo", serde_json::json!({ key: text }));
    assert_eq!(first_text(&echo("before").await), echoed("before"));
    for round in 1..=2 {
        server.child.kill().await.unwrap();
        server = serve(&command, &env, port).await;
        let after = echo("after a restart").await;
        assert_ne!(
            after.is_error,
            Some(true),
            "round {round}: {}",
            first_text(&after)
        );
        assert_eq!(first_text(&after), echoed("after a restart"));
    }
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn server_everything_restarted_behind_sluice_is_connected_to_again_and_the_calls_go_through()
{
    // server-everything forgets its sessions when it restarts, and refuses
    // the old one with 400 (not 404): sluice starts a new session and the
    // call goes through, and so does every later one.
    let js = peers().join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let command = [
        node().display().to_string(),
        js.display().to_string(),
        "streamableHttp".into(),
    ];
    restarted_behind_sluice(&command, "message", |text| format!("Echo: {text}")).await;
}

#[tokio::test]
async fn an_rmcp_server_restarted_behind_sluice_is_connected_to_again_and_the_calls_go_through() {
    // sluice's sample server serving HTTP (rmcp's Streamable HTTP server)
    // refuses a session it does not know with 404, as the spec says.
    let mut command = sample();
    command.extend(["--listen".to_owned(), "127.0.0.1:{port}".to_owned()]);
    restarted_behind_sluice(&command, "text", str::to_owned).await;
}

#[tokio::test]
async fn the_python_sdk_server_in_the_2026_era_accepts_the_mirrored_headers() {
    let port = free_port();
    let mut command = py_server();
    command.extend(["--http".to_owned(), port.to_string()]);
    let server = serve(&command, &[], port).await;
    let (transport, mut inbound) = open(&server.url, 64 * MB);
    transport
        .send(request(1, "server/discover", &format!("{{{META_2026}}}")))
        .await
        .unwrap();
    let (discovered, _) = next_message(&mut inbound).await;
    assert!(discovered.result().is_some(), "{}", text(&discovered));
    assert_eq!(transport.session_id(), None, "no session in this era");
    transport.negotiated("2026-07-28");
    transport
        .send(request(
            2,
            "tools/call",
            &format!(r#"{{"name":"echo","arguments":{{"text":"héllo 1.50"}},{META_2026}}}"#),
        ))
        .await
        .unwrap();
    let (echoed, stream_of) = next_message(&mut inbound).await;
    assert_eq!(stream_of, Some(Id::number(2)));
    assert!(
        echoed.result().is_some(),
        "the server took the headers: {}",
        text(&echoed)
    );
    assert!(text(&echoed).contains("1.50"), "{}", text(&echoed));
    // Progress on the request's own stream, then the answer.
    transport
        .send(request(
            3,
            "tools/call",
            &format!(
                r#"{{"name":"sleep","arguments":{{"seconds":0.5}},"_meta":{{"progressToken":7,{}}}}}"#,
                &META_2026[9..META_2026.len() - 1]
            ),
        ))
        .await
        .unwrap();
    let mut progress = 0;
    let answer = loop {
        let (message, stream_of) = next_message(&mut inbound).await;
        assert_eq!(stream_of, Some(Id::number(3)));
        if message.method() == Some("notifications/progress") {
            progress += 1;
        } else {
            break message;
        }
    };
    assert!(progress >= 1, "progress before the answer");
    assert!(answer.result().is_some(), "{}", text(&answer));
    transport.close().await;
}

/// The conformance fixture (Python SDK) over HTTP on a free port.
async fn conformance_over_http() -> Served {
    let port = free_port();
    let mut command = conformance_fixture();
    command.pop(); // --stdio
    command.extend(["--port".to_owned(), port.to_string()]);
    serve(&command, &[], port).await
}

/// The next message on the stream of request `id`, skipping what the
/// server sends on its own.
async fn on_stream_of(inbound: &mut mpsc::Receiver<Inbound>, id: u64) -> Message {
    loop {
        match next(inbound).await {
            Inbound::Message {
                stream_of: None, ..
            } => {}
            Inbound::Message { message, stream_of } => {
                assert_eq!(stream_of, Some(Id::number(id)));
                return message;
            }
            other => panic!("expected a message, got {other:?}"),
        }
    }
}

/// The messages with `method` on the stream of request `id`, then its
/// answer.
async fn notices_then_answer(
    inbound: &mut mpsc::Receiver<Inbound>,
    id: u64,
    method: &str,
) -> (Vec<String>, Message) {
    let mut notices = Vec::new();
    loop {
        let message = on_stream_of(inbound, id).await;
        if message.method() == Some(method) {
            notices.push(text(&message).to_owned());
        } else {
            return (notices, message);
        }
    }
}

#[tokio::test]
async fn x_mcp_header_arguments_are_mirrored_once_tools_list_declared_them() {
    let server = conformance_over_http().await;
    let (transport, mut inbound) = open(&server.url, 64 * MB);
    transport
        .send(request(1, "server/discover", &format!("{{{META_2026}}}")))
        .await
        .unwrap();
    on_stream_of(&mut inbound, 1).await;
    transport.negotiated("2026-07-28");
    let call = |id: u64| {
        request(
            id,
            "tools/call",
            &format!(
                r#"{{"name":"test_x_mcp_header","arguments":{{"region":"us-west1"}},{META_2026}}}"#
            ),
        )
    };
    // Before the transport has seen the tool's schema, the server refuses
    // the call (it checks the header), and says so as a JSON-RPC error.
    transport.send(call(2)).await.unwrap();
    let refused = on_stream_of(&mut inbound, 2).await;
    assert!(
        text(&refused).contains("-32020"),
        "HeaderMismatch: {}",
        text(&refused)
    );
    transport
        .send(request(3, "tools/list", &format!("{{{META_2026}}}")))
        .await
        .unwrap();
    let listed = on_stream_of(&mut inbound, 3).await;
    assert!(text(&listed).contains(r#""x-mcp-header":"Region""#));
    transport.send(call(4)).await.unwrap();
    let answered = on_stream_of(&mut inbound, 4).await;
    assert!(
        text(&answered).contains("region=us-west1"),
        "{}",
        text(&answered)
    );
    transport.close().await;
}

#[tokio::test]
async fn a_stream_the_python_sdk_closes_mid_call_is_resumed_and_answered() {
    let server = conformance_over_http().await;
    let (transport, mut inbound) = open(&server.url, 64 * MB);
    transport.send(msg(INITIALIZE)).await.unwrap();
    on_stream_of(&mut inbound, 1).await;
    assert!(transport.session_id().is_some());
    transport.negotiated("2025-11-25");
    transport
        .send(msg(
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        ))
        .await
        .unwrap();
    transport
        .send(request(
            2,
            "tools/call",
            r#"{"name":"test_reconnection","arguments":{}}"#,
        ))
        .await
        .unwrap();
    let (logs, answer) = notices_then_answer(&mut inbound, 2, "notifications/message").await;
    assert!(
        text(&answer).contains("Reconnection test completed"),
        "{}",
        text(&answer)
    );
    assert!(
        logs.iter().any(|l| l.contains("After reconnect")),
        "what was sent after the stream closed arrives too: {logs:?}"
    );
    transport.close().await;
}

/// A 2026-07-28 upstream's tool whose `x-mcp-header` annotation breaks
/// SEP-2243's rules (here, not an HTTP token) is left out of the tools
/// sluice lists, as a conforming client must, and logged once however
/// often the tools are listed; the upstream's valid annotated tool stays.
#[tokio::test]
async fn a_tool_with_an_invalid_x_mcp_header_is_left_out_and_logged_once() {
    let port = free_port();
    let mut command = conformance_fixture();
    command.pop(); // --stdio
    command.extend(["--port".to_owned(), port.to_string()]);
    let server = serve(
        &command,
        &[("SLUICE_FIXTURE_BAD_HEADER", "1".to_owned())],
        port,
    )
    .await;
    let dir = TempDir::new("bad-x-mcp-header");
    let config = dir.file(
        "sluice.toml",
        // The 2026-07-28 era, whichever era the client speaks (`auto`
        // would take the first client's, 2025-11-25 here).
        &format!(
            "[upstreams.conf]\nurl = {:?}\nprotocol = \"2026-07-28\"\n",
            server.url
        ),
    );
    let sluice = HttpSluice::start(&["--config", config.to_str().unwrap()], &[]).await;
    let (client, _) = connect_http(&sluice.url).await;
    for _ in 0..2 {
        let names = tool_names(&client).await;
        assert!(
            names.iter().any(|n| n == "test_x_mcp_header"),
            "the valid annotated tool is listed: {names:?}"
        );
        assert!(
            !names.iter().any(|n| n == "test_bad_x_mcp_header"),
            "the tool with an invalid annotation is left out: {names:?}"
        );
    }
    let warned = sluice
        .stderr
        .lock()
        .unwrap()
        .iter()
        .filter(|line| line.contains("test_bad_x_mcp_header") && line.contains("x-mcp-header"))
        .count();
    assert_eq!(
        warned,
        1,
        "logged once:\n{}",
        sluice.stderr.lock().unwrap().join("\n")
    );
    client.cancel().await.unwrap();
}
