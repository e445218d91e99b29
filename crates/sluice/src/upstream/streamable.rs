//! sluice's own Streamable HTTP client transport: each message is POSTed
//! as the bytes the engine made, and whatever the upstream answers (one
//! JSON body, or an SSE stream of messages) is read under `[limits]
//! max_message_mb` and handed to the engine as received.
//!
//! Both eras: a 2025-11-25 upstream gives a session (`Mcp-Session-Id`,
//! captured from its answer to `initialize`, sent with every later request)
//! and may keep a standalone GET stream for messages of its own; a
//! 2026-07-28 upstream has neither, and every request carries the headers
//! that mirror its body (`Mcp-Method`, and `Mcp-Name` for the requests
//! that name a tool, prompt or resource). Every answer to a request is read
//! in a task of its own, so a slow answer never holds up the next request
//! (a notification or a response is sent in order: `send` returns once the
//! upstream took it); nothing read
//! is kept beyond one message, and a message that cannot be read fails the
//! call it answers at once.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt as _;
use futures::future::BoxFuture;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::transport::{Answers, INBOUND_CAPACITY, Inbound, SendError, Transport};
use crate::FastMap;
use crate::http_client::{HttpClient, Response, chunk, error_chain};
use crate::jsonrpc::{Id, Kind, Message, MessageError, SseParser, salvage_id};

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long sending a notification (or a response) waits for the upstream
/// to take it.
const NOTIFICATION_WAIT: Duration = Duration::from_secs(10);
/// How much of an error body is quoted.
const EXCERPT_BYTES: usize = 512;
/// The longest an upstream's `retry:` makes sluice wait before resuming
/// a stream.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(10);

/// How many times a response stream cut short is resumed (GET with
/// `Last-Event-ID`), and the standalone GET stream reopened.
const RESUMPTIONS: usize = 3;

/// A Streamable HTTP connection to one upstream endpoint.
pub struct StreamableHttp {
    client: HttpClient,
    url: Uri,
    /// The configured headers (e.g. `Authorization`).
    headers: HeaderMap,
    /// The session the upstream gave (2025-11-25).
    session: Mutex<Option<HeaderValue>>,
    /// The negotiated protocol version.
    version: Mutex<Option<HeaderValue>>,
    /// 2026-07-28: no session; mirror headers on every request.
    stateless: AtomicBool,
    /// How the upstream ended the session ([`forgot_the_session`]), once it
    /// did: nothing more is sent, and what is under way ends on its own.
    session_ended: std::sync::OnceLock<String>,
    /// For each tool, the arguments its schema marks with `x-mcp-header`:
    /// their path from `arguments` and their header's name (SEP-2243).
    param_headers: Mutex<crate::FastMap<String, Vec<ParamHeader>>>,
    /// The tools left out of `tools/list` for invalid `x-mcp-header`
    /// annotations, each logged once.
    rejected: Mutex<HashSet<String>>,
    /// The answers being read to 2026-07-28 requests, by id: cancelling one
    /// closes its stream (that era's cancellation; nothing is POSTed).
    answering: Mutex<FastMap<Id, CancellationToken>>,
    inbound: mpsc::Sender<Inbound>,
    /// Where an answer that comes first on its response goes straight.
    answers: std::sync::OnceLock<Answers>,
    limit: usize,
    /// Stops every reading task (closing, or the transport dropped).
    stop: CancellationToken,
    /// Stops the standalone stream (with `stop`, or the session ended).
    listening: CancellationToken,
    me: Weak<StreamableHttp>,
}

impl Drop for StreamableHttp {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Opens a connection to `url`, sending `headers` with every request and
/// reading messages of at most `limit` bytes. An error says which setting
/// is wrong.
pub fn open(
    url: &str,
    headers: &BTreeMap<String, String>,
    limit: usize,
) -> Result<(Arc<StreamableHttp>, mpsc::Receiver<Inbound>), String> {
    let (client, url) = HttpClient::open(url, CONNECT_TIMEOUT)
        .map_err(|e| format!("could not make an HTTP client: {e}"))?;
    let mut configured = HeaderMap::new();
    for (name, value) in headers {
        let name = HeaderName::try_from(name.as_str())
            .map_err(|e| format!("has an invalid header name `{name}`: {e}"))?;
        let value = HeaderValue::try_from(value.as_str())
            .map_err(|e| format!("has an invalid value for header `{name}`: {e}"))?;
        configured.insert(name, value);
    }
    let (tx, rx) = mpsc::channel(INBOUND_CAPACITY);
    let stop = CancellationToken::new();
    let transport = Arc::new_cyclic(|me| StreamableHttp {
        client,
        url,
        headers: configured,
        session: Mutex::new(None),
        version: Mutex::new(None),
        stateless: AtomicBool::new(false),
        session_ended: std::sync::OnceLock::new(),
        param_headers: Mutex::new(crate::FastMap::default()),
        rejected: Mutex::new(HashSet::new()),
        answering: Mutex::default(),
        inbound: tx,
        answers: std::sync::OnceLock::new(),
        limit,
        stop: stop.clone(),
        listening: stop.child_token(),
        me: me.clone(),
    });
    Ok((transport, rx))
}

impl StreamableHttp {
    /// The session the upstream gave (2025-11-25), once it gave one.
    pub fn session_id(&self) -> Option<String> {
        lock(&self.session)
            .as_ref()
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }
}

/// An argument sent as a header too: its path from `arguments`, and the
/// header's name after `Mcp-Param-`.
type ParamHeader = (Vec<String>, String);

/// Forgets a request's entry in [`StreamableHttp::answering`] once its
/// answer is read (or not).
struct Answering {
    id: Id,
    of: Arc<StreamableHttp>,
}

impl Drop for Answering {
    fn drop(&mut self) {
        lock(&self.of.answering).remove(&self.id);
    }
}

/// What a POST carried, for reading its answer.
struct Posted {
    /// The request's id (`None` for a notification or a response).
    id: Option<Id>,
    /// Whether a session id went with it.
    with_session: bool,
    /// It was `notifications/initialized` of a session: once accepted, the
    /// standalone stream may open.
    opens_session: bool,
    /// It was `tools/list`: its answer says which arguments of which tools
    /// travel as `Mcp-Param-*` headers too.
    lists_tools: bool,
    /// It was `initialize`: the session id of its answer is the
    /// connection's (no other answer gives one; a 2026-07-28 one is ignored).
    initializes: bool,
    /// Stops reading the answer: the connection closing, or (2026-07-28)
    /// the request cancelled.
    stop: CancellationToken,
}

impl StreamableHttp {
    /// The headers every request of this connection carries.
    fn common_headers(&self) -> HeaderMap {
        let mut headers = self.headers.clone();
        if let Some(session) = lock(&self.session).clone() {
            headers.insert("mcp-session-id", session);
        }
        if let Some(version) = lock(&self.version).clone() {
            headers.insert("mcp-protocol-version", version);
        }
        headers
    }

    /// The headers of a GET that opens or resumes an event stream.
    fn stream_headers(&self) -> HeaderMap {
        let mut headers = self.common_headers();
        headers.insert(
            http::header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        headers
    }

    /// The upstream ended the session (`why`): nothing more is sent and
    /// nothing deleted on close, the standalone stream stops, and the
    /// requests under way end as their answers do (one that the upstream
    /// refuses the same way is [`Inbound::Unhandled`]). The supervisor makes a
    /// new connection for the next request.
    fn end_session(&self, why: &str) {
        // The first word on it stands.
        let _ = self.session_ended.set(why.to_owned());
        self.listening.cancel();
    }

    /// Hands `item` to the engine; `false` once it is gone.
    async fn deliver(&self, item: Inbound) -> bool {
        self.inbound.send(item).await.is_ok()
    }

    /// Hands `item`, the first message of a request's response, straight
    /// to its call if it is the answer ([`Transport::hand_answers_to`]);
    /// anything else to the engine.
    async fn deliver_first(&self, item: Inbound) -> bool {
        let item = match self.answers.get() {
            Some(answers) => match answers(item) {
                None => return true,
                Some(item) => item,
            },
            None => item,
        };
        self.deliver(item).await
    }

    /// Makes one POST and reads its answer (a request's in a task of its
    /// own). For a notification or a response: why the upstream did not
    /// take it, if it did not.
    async fn exchange(
        self: Arc<Self>,
        request: impl Future<Output = Result<Response, crate::http_client::Error>>,
        posted: Posted,
    ) -> Option<String> {
        let _forget = posted.id.clone().map(|id| Answering {
            id,
            of: self.clone(),
        });
        let stop = posted.stop.clone();
        let response = tokio::select! {
            response = request => response,
            () = stop.cancelled() => return None,
        };
        let response = match response {
            Ok(response) => response,
            Err(e) => {
                let why = format!(
                    "could not be reached: POST {}: {}",
                    self.url,
                    error_chain(&e)
                );
                match posted.id {
                    Some(id) => {
                        self.deliver(Inbound::Failed { id, why }).await;
                        return None;
                    }
                    None => return Some(why),
                }
            }
        };
        if posted.initializes
            && let Some(session) = response.headers().get("mcp-session-id")
        {
            *lock(&self.session) = Some(session.clone());
        }
        let status = response.status();
        if posted.opens_session && status.is_success() {
            tokio::spawn(self.clone().listen());
        }
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            if let Some(id) = posted.id {
                self.deliver(Inbound::Failed {
                    id,
                    why: format!("answered a request with HTTP {status} and no response"),
                })
                .await;
            }
            return None;
        }
        let is_sse = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
        if !status.is_success() {
            return self
                .refused(response, status, posted.id, posted.with_session)
                .await;
        }
        if is_sse {
            self.read_stream(
                response,
                posted.id,
                posted.lists_tools,
                &stop,
                RESUMPTIONS,
                false,
            )
            .await;
        } else {
            self.read_json(response, posted.id, posted.lists_tools, &stop)
                .await;
        }
        None
    }

    /// An answer with an error status: a JSON-RPC error for this request in
    /// its body is delivered as such; a refusal that says the upstream
    /// forgot the session ([`forgot_the_session`], to a request that named
    /// it) ends the session, the request [`Inbound::Unhandled`]; otherwise
    /// the request fails naming the status (for a notification: why it was
    /// refused).
    async fn refused(
        &self,
        mut response: Response,
        status: StatusCode,
        id: Option<Id>,
        with_session: bool,
    ) -> Option<String> {
        let body = body_start(&mut response).await;
        // Only an error naming this very request is its answer: one with
        // another id would wait for a call that is not there, and leave
        // this one waiting for ever.
        // (Or one naming none, `null`: it can only be this request's.)
        if let Ok(message) = Message::parse(Bytes::from(body.clone()))
            && message.kind() == Kind::Error
            && id.is_some()
            && (message.id() == id || message.id().is_none())
        {
            self.deliver(Inbound::Message {
                message,
                stream_of: id,
            })
            .await;
            return None;
        }
        if with_session && forgot_the_session(status, &body) {
            // The upstream ended the session and handled nothing of this
            // request, which may therefore go again in a new session.
            // Ended before anyone hears of it: a caller told to send again
            // finds this connection gone.
            let why = match status {
                // The spec's own word needs no quote.
                StatusCode::NOT_FOUND => "ended its session (HTTP 404)".to_owned(),
                _ => format!("ended its session (HTTP {status}{})", excerpt(&body)),
            };
            self.end_session(&why);
            return match id {
                Some(id) => {
                    self.deliver(Inbound::Unhandled { id, why }).await;
                    None
                }
                None => Some(format!("the upstream {why}")),
            };
        }
        let hint = match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                " (the upstream wants credentials sluice did not send or it refused: set them in its `headers` in sluice's config, e.g. `headers = { Authorization = \"Bearer …\" }`)"
            }
            _ => "",
        };
        let why = format!("answered HTTP {status}{}{hint}", excerpt(&body));
        match id {
            Some(id) => {
                self.deliver(Inbound::Failed { id, why }).await;
                None
            }
            None => Some(why),
        }
    }

    /// One JSON body, under the limit.
    async fn read_json(
        &self,
        mut response: Response,
        id: Option<Id>,
        lists_tools: bool,
        stop: &CancellationToken,
    ) {
        let mut body = Vec::new();
        loop {
            let chunk = tokio::select! {
                chunk = chunk(&mut response) => chunk,
                () = stop.cancelled() => return,
            };
            match chunk {
                Ok(Some(chunk)) => {
                    if body.len() + chunk.len() > self.limit {
                        let error = MessageError::TooLarge {
                            bytes: body.len() + chunk.len(),
                            limit: self.limit,
                        };
                        let found = id.clone().or_else(|| salvage_id(&body));
                        self.deliver(Inbound::Unreadable {
                            id: found,
                            why: format!("the upstream's answer cannot be read: {error}"),
                        })
                        .await;
                        return;
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => {
                    if let Some(id) = id {
                        self.deliver(Inbound::Failed {
                            id,
                            why: format!("its answer was cut short: {}", error_chain(&e)),
                        })
                        .await;
                    }
                    return;
                }
            }
        }
        if body.trim_ascii().is_empty() {
            if let Some(id) = id {
                self.deliver(Inbound::Failed {
                    id,
                    why: "answered with an empty body".to_owned(),
                })
                .await;
            }
            return;
        }
        let mut item = checked(Bytes::from(body), id.clone(), id);
        if lists_tools {
            item = self.learn_param_headers(item);
        }
        self.deliver_first(item).await;
    }

    /// An SSE stream: each event one message, in order. A stream cut short
    /// before the answer to `id` is resumed when the upstream gave event
    /// ids (2025-11-25), at most `resumptions` times; otherwise the call
    /// fails. The answer to `id`, when it is the first message of its
    /// response (`delivered`: something came before it, on the stream this
    /// one resumes), goes straight to its call.
    async fn read_stream(
        &self,
        mut response: Response,
        id: Option<Id>,
        lists_tools: bool,
        stop: &CancellationToken,
        resumptions: usize,
        mut delivered: bool,
    ) {
        let mut parser = SseParser::new(self.limit);
        let mut answered = false;
        loop {
            let chunk = tokio::select! {
                chunk = chunk(&mut response) => chunk,
                () = stop.cancelled() => return,
            };
            let chunk = match chunk {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!("an upstream's event stream broke: {}", error_chain(&e));
                    break;
                }
            };
            for event in parser.feed(&chunk) {
                match event {
                    Ok(event) if event.data.trim_ascii().is_empty() => {}
                    Ok(event) => {
                        let mut item = checked(event.data, None, id.clone());
                        if let Inbound::Message { message, .. } = &item
                            && answers_request(message, id.as_ref())
                        {
                            answered = true;
                            if lists_tools {
                                item = self.learn_param_headers(item);
                            }
                        }
                        if let Inbound::Unreadable {
                            id: Some(failed), ..
                        } = &item
                            && Some(failed) == id.as_ref()
                        {
                            answered = true;
                        }
                        let taken = if delivered || id.is_none() {
                            self.deliver(item).await
                        } else {
                            delivered = true;
                            self.deliver_first(item).await
                        };
                        if !taken {
                            return;
                        }
                    }
                    Err(error) => {
                        // The stream cannot be resynchronised: the call it
                        // was for fails with why.
                        let failed = match &error {
                            crate::jsonrpc::SseError::TooLarge { id: found, .. } => {
                                found.clone().or_else(|| id.clone())
                            }
                        };
                        self.deliver(Inbound::Unreadable {
                            id: failed,
                            why: format!("the upstream's answer cannot be read: {error}"),
                        })
                        .await;
                        return;
                    }
                }
            }
        }
        let Some(id) = id.filter(|_| !answered) else {
            return;
        };
        match parser.last_event_id() {
            Some(last) if resumptions > 0 && !self.stateless.load(Ordering::Relaxed) => {
                let last = last.to_owned();
                // The server said how long to wait before reconnecting
                // (`retry:`); honoured up to a bound, as a server's word.
                if let Some(ms) = parser.retry() {
                    let wait = Duration::from_millis(ms).min(MAX_RETRY_WAIT);
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = stop.cancelled() => return,
                    }
                }
                match self.resume(&last).await {
                    Some(resumed) => {
                        Box::pin(self.read_stream(
                            resumed,
                            Some(id),
                            lists_tools,
                            stop,
                            resumptions - 1,
                            delivered,
                        ))
                        .await;
                    }
                    None => {
                        self.deliver(Inbound::Failed {
                            id,
                            why: "closed the response stream before answering, and it could not be resumed".to_owned(),
                        })
                        .await;
                    }
                }
            }
            _ => {
                self.deliver(Inbound::Failed {
                    id,
                    why: "closed the response stream before answering".to_owned(),
                })
                .await;
            }
        }
    }

    /// Keeps, from a `tools/list` answer, which arguments of which tools
    /// go as `Mcp-Param-*` headers too; from a 2026-07-28 upstream, leaves
    /// out of the answer every tool whose `x-mcp-header` annotations break
    /// SEP-2243's rules ([`crate::param_headers::annotation_fault`]), as a conforming
    /// client must: its calls could not carry the headers the upstream
    /// checks. Each such tool is logged once; the other tools stay as sent.
    fn learn_param_headers(&self, item: Inbound) -> Inbound {
        let Inbound::Message { message, stream_of } = &item else {
            return item;
        };
        let Some(edited) = self.learn_from_list(message) else {
            return item;
        };
        Inbound::Message {
            message: edited,
            stream_of: stream_of.clone(),
        }
    }

    /// [`Self::learn_param_headers`] of one `tools/list` response: the
    /// response without the tools left out, `None` when it keeps them all.
    fn learn_from_list(&self, response: &Message) -> Option<Message> {
        let result = response.result()?;
        // Cheap to skip: most servers mark no argument.
        memchr::memmem::find(result.as_bytes(), b"x-mcp-header")?;
        #[derive(serde::Deserialize)]
        struct ListedTool {
            name: String,
            #[serde(rename = "inputSchema", default)]
            input_schema: serde_json::Value,
        }
        let mut object = crate::jsonrpc::RawObject::parse(result).ok()?;
        let listed: Vec<&RawValue> = serde_json::from_str(object.get_parsed("tools")?).ok()?;
        let checked = self.stateless.load(Ordering::Relaxed);
        let mut kept: Vec<&RawValue> = Vec::with_capacity(listed.len());
        {
            let mut known = lock(&self.param_headers);
            for &sent in &listed {
                let Ok(tool) = serde_json::from_str::<ListedTool>(sent.get()) else {
                    kept.push(sent);
                    continue;
                };
                if checked
                    && let Some(fault) = crate::param_headers::annotation_fault(&tool.input_schema)
                {
                    if lock(&self.rejected).insert(tool.name.clone()) {
                        tracing::warn!(
                            tool = %tool.name,
                            url = %self.url,
                            "the upstream's tool is left out: its x-mcp-header annotations are invalid ({fault}), so its calls could not carry the headers SEP-2243 requires; fix its input schema"
                        );
                    }
                    known.remove(&tool.name);
                    continue;
                }
                kept.push(sent);
                let marked = crate::param_headers::mirrored(&tool.input_schema);
                if marked.is_empty() {
                    known.remove(&tool.name);
                } else {
                    known.insert(tool.name, marked);
                }
            }
        }
        if kept.len() == listed.len() {
            return None;
        }
        object.insert("tools", serde_json::value::to_raw_value(&kept).ok()?);
        response.with_result(&object.to_json()).ok()
    }

    /// The `Mcp-Param-*` headers of a `tools/call` of `name` (SEP-2243).
    /// Its arguments are read only when the tool marks some of them: most
    /// mark none, and a call's arguments may be large.
    fn param_headers_of(&self, message: &Message, name: &str) -> Vec<(HeaderName, HeaderValue)> {
        let known = lock(&self.param_headers);
        let Some(marked) = known.get(name) else {
            return Vec::new();
        };
        let Some(params) = message.params() else {
            return Vec::new();
        };
        // Walked as text: the arguments are not decoded (see
        // `gateway::NamedParams`), only the value found.
        let Some(arguments) = crate::jsonrpc::object::value_at(params, &["arguments"]) else {
            return Vec::new();
        };
        let mut arguments = crate::param_headers::MarkedArguments::new(Some(arguments));
        marked
            .iter()
            .filter_map(|(path, header)| {
                let path: Vec<&str> = path.iter().map(String::as_str).collect();
                let text = arguments.text_at(&path)?;
                let name = HeaderName::try_from(format!("mcp-param-{header}")).ok()?;
                let value = HeaderValue::try_from(header_value(&text)).ok()?;
                Some((name, value))
            })
            .collect()
    }

    /// `GET` with `Last-Event-ID`: the rest of a stream (2025-11-25).
    async fn resume(&self, last_event_id: &str) -> Option<Response> {
        let value = HeaderValue::try_from(last_event_id).ok()?;
        let mut headers = self.stream_headers();
        headers.insert("last-event-id", value);
        let response = self
            .client
            .send(Method::GET, &self.url, headers, Bytes::new())
            .await
            .ok()?;
        response.status().is_success().then_some(response)
    }

    /// The standalone GET stream of a 2025-11-25 session: messages the
    /// upstream sends on its own (list changes, requests outside any
    /// call). Reopened while the connection lives, after a backoff that
    /// grows while it keeps failing; a refusal (405: there is none) ends it.
    /// A refusal that says the session is gone ([`forgot_the_session`]),
    /// where a stream was open before, means the upstream ended the session
    /// (it restarted, say): the session ends here too, so that the next
    /// request starts a new one rather than finding out itself.
    async fn listen(self: Arc<Self>) {
        const FIRST_WAIT: Duration = Duration::from_secs(1);
        const LONGEST_WAIT: Duration = Duration::from_secs(30);
        let mut wait = FIRST_WAIT;
        // Whether a stream was open: a server that answers every GET 404
        // (where the spec says 405) has no stream, and its session lives.
        let mut opened_before = false;
        loop {
            let opened = tokio::time::Instant::now();
            let response = tokio::select! {
                response = self
                    .client
                    .send(Method::GET, &self.url, self.stream_headers(), Bytes::new()) => response,
                () = self.listening.cancelled() => return,
            };
            match response {
                Ok(response) if response.status().is_success() => {
                    opened_before = true;
                    self.read_stream(response, None, false, &self.listening, 0, true)
                        .await;
                }
                Ok(mut response) => {
                    let status = response.status();
                    if opened_before && forgot_the_session(status, &body_start(&mut response).await)
                    {
                        self.end_session(&format!(
                            "ended its session (HTTP {status} to its event stream)"
                        ));
                    } else {
                        tracing::debug!("no standalone stream: HTTP {status}");
                    }
                    return;
                }
                Err(e) => {
                    tracing::debug!("the standalone stream failed: {}", error_chain(&e));
                }
            }
            // A stream that lasted was healthy: start the backoff again.
            if opened.elapsed() > LONGEST_WAIT * 2 {
                wait = FIRST_WAIT;
            }
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.listening.cancelled() => return,
            }
            wait = (wait * 2).min(LONGEST_WAIT);
        }
    }
}

/// Whether `message`, on the response stream of request `id`, is its
/// answer: a response or an error naming it, or an error naming no request
/// (`null`: the upstream could not read the request's id), which on this
/// stream can only be this request's (the engine gives it the id).
fn answers_request(message: &Message, id: Option<&Id>) -> bool {
    match message.kind() {
        Kind::Response => message.id().as_ref() == id,
        Kind::Error => id.is_some() && (message.id().is_none() || message.id().as_ref() == id),
        _ => false,
    }
}

/// One message's bytes as the engine reads them; one that cannot be read
/// names `answers` (the request whose answer it was) or the id in it.
fn checked(bytes: Bytes, answers: Option<Id>, stream_of: Option<Id>) -> Inbound {
    match Message::parse(bytes.clone()) {
        Ok(message) => Inbound::Message { message, stream_of },
        Err(error) => Inbound::Unreadable {
            id: answers.or_else(|| salvage_id(&bytes)).or(stream_of),
            why: format!("the upstream's answer cannot be read: {error}"),
        },
    }
}

/// The start of a body (enough to quote, and to read an error in it).
async fn body_start(response: &mut Response) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < EXCERPT_BYTES * 8 {
        match chunk(response).await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    body
}

/// Whether an error answer (`status`, its `body` begun) to a request that
/// named the session says that the upstream no longer knows the session:
/// HTTP 404, as the spec says, or 400 with a body that speaks of the
/// session, as servers made from the TypeScript SDK's examples answer
/// (server-everything among them: "Bad Request: No valid session ID
/// provided"). Either way the upstream handled nothing of the request: a
/// 4xx that is not a JSON-RPC answer refused it before any handling.
fn forgot_the_session(status: StatusCode, body: &[u8]) -> bool {
    status == StatusCode::NOT_FOUND
        || (status == StatusCode::BAD_REQUEST
            && body.windows(7).any(|w| w.eq_ignore_ascii_case(b"session")))
}

/// ": BODY" for an error's body, cut short; "" for none.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return String::new();
    }
    let cut = sluice_core::budget::floor_boundary(text, EXCERPT_BYTES);
    if cut < text.len() {
        format!(": {}… ({} bytes)", &text[..cut], body.len())
    } else {
        format!(": {text}")
    }
}

/// A value as SEP-2243 puts it in a header: as it is when it can be,
/// else `=?base64?…?=` (leading or trailing blanks, control or non-ASCII
/// characters, or text that looks like that form already).
fn header_value(text: &str) -> String {
    let blank_edge = |c: Option<char>| matches!(c, Some(' ' | '\t'));
    let needs_base64 = blank_edge(text.chars().next())
        || blank_edge(text.chars().next_back())
        || text.chars().any(|c| (c as u32) < 0x20 || (c as u32) > 0x7e)
        || (text.starts_with("=?base64?") && text.ends_with("?="));
    if needs_base64 {
        use base64::Engine as _;
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(text)
        )
    } else {
        text.to_owned()
    }
}

/// A header value for `Mcp-Name`, when the name can be one as it is.
fn name_header(routing: &crate::jsonrpc::Routing<'_>, method: &str) -> Option<HeaderValue> {
    let name = match method {
        "tools/call" | "prompts/get" => routing.name.as_deref()?,
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
            routing.uri.as_deref()?
        }
        _ => return None,
    };
    HeaderValue::try_from(header_value(name)).ok()
}

impl Transport for StreamableHttp {
    fn hand_answers_to(&self, answers: Answers) {
        let _ = self.answers.set(answers);
    }

    fn send(&self, message: Message) -> BoxFuture<'_, Result<(), SendError>> {
        async move {
            if self.stop.is_cancelled() {
                return Err(SendError::Closed("was closed by sluice".into()));
            }
            if let Some(why) = self.session_ended() {
                return Err(SendError::Closed(why));
            }
            let Some(me) = self.me.upgrade() else {
                return Err(SendError::Closed("was closed by sluice".into()));
            };
            let stateless_now = self.stateless.load(Ordering::Relaxed);
            if stateless_now && message.method() == Some("notifications/cancelled") {
                // 2026-07-28: a request is cancelled by closing its stream;
                // the upstream sees the connection go.
                if let Some(ct) = message
                    .cancelled_request()
                    .and_then(|id| lock(&self.answering).remove(&id))
                {
                    ct.cancel();
                }
                return Ok(());
            }
            let mut headers = self.common_headers();
            let with_session = headers.contains_key("mcp-session-id");
            // A 2026-07-28 request names its version in `_meta` (before
            // the handshake settled one, `server/discover` does): the
            // headers follow what it says.
            // The params read once, for the version and `Mcp-Name`; not
            // at all when neither can matter: an upstream of sessions, and
            // nothing in the text that could declare a version (its key,
            // or an escape that could spell it). A small call over HTTP:
            // ~4,800 instructions less (callgrind, 2026-11-27).
            let text = message.as_str();
            let may_declare = text.contains("protocolVersion") || text.contains('\\');
            let routing = (stateless_now || may_declare)
                .then(|| message.routing().ok())
                .flatten();
            let declared = routing.as_ref().and_then(|r| r.protocol_version.clone());
            if let Some(version) = declared
                .as_deref()
                .and_then(|v| HeaderValue::try_from(v).ok())
            {
                headers.insert("mcp-protocol-version", version);
            }
            let stateless = match declared.as_deref() {
                Some(version) => version >= "2026-07-28",
                None => stateless_now,
            };
            if stateless && let Some(method) = message.method() {
                if let Ok(value) = HeaderValue::try_from(method) {
                    headers.insert("mcp-method", value);
                }
                if let Some(routing) = &routing
                    && let Some(value) = name_header(routing, method)
                {
                    headers.insert("mcp-name", value);
                }
                if method == "tools/call"
                    && let Some(tool) = routing.as_ref().and_then(|r| r.name.as_deref())
                {
                    for (name, value) in self.param_headers_of(&message, tool) {
                        headers.insert(name, value);
                    }
                }
            }
            let id = (message.kind() == Kind::Request)
                .then(|| message.id())
                .flatten();
            let lists_tools = message.method() == Some("tools/list");
            let initializes = message.method() == Some("initialize");
            let opens_session = with_session
                && !self.stateless.load(Ordering::Relaxed)
                && message.method() == Some("notifications/initialized");
            headers.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            headers.insert(
                http::header::ACCEPT,
                HeaderValue::from_static("application/json, text/event-stream"),
            );
            let request = self
                .client
                .send(Method::POST, &self.url, headers, message.into_bytes());
            let stop = self.stop.child_token();
            if let Some(id) = &id
                && stateless
            {
                lock(&self.answering).insert(id.clone(), stop.clone());
            }
            let posted = Posted {
                id,
                with_session,
                opens_session,
                lists_tools,
                initializes,
                stop,
            };
            if posted.id.is_some() {
                // A request's answer may take long: read in a task of its
                // own. Boxed first: the task's future is then a pointer,
                // not the reading's whole state copied at each step of the
                // spawn (a small call over HTTP: ~1,000 fewer instructions,
                // callgrind, 2026-11-28).
                tokio::spawn(Box::pin(me.exchange(request, posted)));
            } else {
                // A notification or a response is done when the upstream
                // took it: waiting keeps them in order with what follows
                // (`notifications/initialized` before the first request),
                // for a bounded time (an upstream that never answers one
                // must not hold up its sender).
                match tokio::time::timeout(NOTIFICATION_WAIT, me.exchange(request, posted)).await {
                    Err(_) => tracing::debug!(
                        "an upstream took more than {NOTIFICATION_WAIT:?} to take a notification"
                    ),
                    Ok(Some(why)) => return Err(SendError::Refused(why)),
                    Ok(None) => {}
                }
            }
            Ok(())
        }
        .boxed()
    }

    fn session_ended(&self) -> Option<String> {
        self.session_ended.get().cloned()
    }

    fn negotiated(&self, version: &str) {
        if let Ok(value) = HeaderValue::try_from(version) {
            *lock(&self.version) = Some(value);
        }
        self.stateless
            .store(version >= "2026-07-28", Ordering::Relaxed);
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        async move {
            // Every request of a session names its version, DELETE too.
            let headers = self.common_headers();
            let session = lock(&self.session).take();
            if session.is_some() && self.session_ended().is_none() {
                let deleted = self
                    .client
                    .send(Method::DELETE, &self.url, headers, Bytes::new());
                if let Ok(Err(e)) = tokio::time::timeout(Duration::from_secs(3), deleted).await {
                    tracing::debug!("the session was not deleted: {}", error_chain(&e));
                }
            }
            self.stop.cancel();
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_left_out_leaves_the_others_as_sent() {
        // Nothing is sent: the list is only read.
        let (transport, _inbound) =
            open("http://127.0.0.1:9/mcp", &BTreeMap::new(), 1 << 20).unwrap();
        transport.negotiated("2026-07-28");
        let list = |tools: &str| {
            Message::parse(Bytes::from(format!(
                r#"{{"jsonrpc":"2.0","id":7,"result":{{"tools":[{tools}],"nextCursor":"n"}}}}"#
            )))
            .unwrap()
        };
        let good = r#"{"name":"a","x":1.50,"inputSchema":{"properties":{"r":{"type":"string","x-mcp-header":"R"}}}}"#;
        let bad = r#"{"name":"b","inputSchema":{"properties":{"r":{"type":"object","x-mcp-header":"B"}}}}"#;
        let plain = r#"{"name":"c","y":-0}"#;
        assert!(
            transport
                .learn_from_list(&list(&format!("{good},{plain}")))
                .is_none(),
            "all kept: unchanged"
        );
        let edited = transport
            .learn_from_list(&list(&format!("{good},{bad},{plain}")))
            .unwrap();
        assert_eq!(
            std::str::from_utf8(edited.as_bytes()).unwrap(),
            format!(
                r#"{{"jsonrpc":"2.0","id":7,"result":{{"tools":[{good},{plain}],"nextCursor":"n"}}}}"#
            )
        );
        // What was learnt: the kept tool's header, none for the one left out.
        assert!(lock(&transport.param_headers).contains_key("a"));
        assert!(!lock(&transport.param_headers).contains_key("b"));
    }
    use axum::extract::State;
    use axum::response::IntoResponse;

    /// What the hand-written server saw: each request's method, headers
    /// and body.
    type Seen = Arc<Mutex<Vec<(http::Method, HeaderMap, Bytes)>>>;

    /// A server that records every request and answers it with `answer`.
    async fn server(
        answer: fn(&http::Method, &Bytes) -> axum::response::Response,
    ) -> (String, Seen) {
        let seen: Seen = Arc::default();
        let app = axum::Router::new()
            .route(
                "/mcp",
                axum::routing::any(
                    move |State(seen): State<Seen>,
                          method: http::Method,
                          headers: HeaderMap,
                          body: Bytes| async move {
                        let response = answer(&method, &body);
                        lock(&seen).push((method, headers, body));
                        response
                    },
                ),
            )
            .with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (url, seen)
    }

    fn message(text: &str) -> Message {
        Message::parse(Bytes::from(text.to_owned())).unwrap()
    }

    fn json(status: StatusCode, body: &'static str) -> axum::response::Response {
        (
            status,
            [(http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response()
    }

    #[tokio::test]
    async fn the_session_and_version_go_with_every_request_after_the_handshake() {
        let (url, seen) = server(|method, body| match method.as_str() {
            "POST" if body.starts_with(br#"{"jsonrpc":"2.0","id":1"#) => (
                [
                    ("mcp-session-id", "s-1"),
                    ("content-type", "application/json"),
                ],
                r#"{"jsonrpc":"2.0","id":1,"result":{"x":1.50}}"#,
            )
                .into_response(),
            "POST" => StatusCode::ACCEPTED.into_response(),
            "GET" => StatusCode::METHOD_NOT_ALLOWED.into_response(),
            _ => StatusCode::OK.into_response(),
        })
        .await;
        let configured = BTreeMap::from([("Authorization".to_owned(), "Bearer t".to_owned())]);
        let (transport, mut inbound) = open(&url, &configured, 1 << 20).unwrap();
        transport
            .send(message(
                r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
            ))
            .await
            .unwrap();
        match inbound.recv().await.unwrap() {
            Inbound::Message { message, stream_of } => {
                assert_eq!(message.result(), Some(r#"{"x":1.50}"#), "as sent");
                assert_eq!(stream_of, Some(Id::number(1)));
            }
            other => panic!("{other:?}"),
        }
        transport.negotiated("2025-11-25");
        transport
            .send(message(
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            ))
            .await
            .unwrap();
        // The standalone stream is asked for once the session is made (a
        // 405 says there is none), then the session is deleted on close.
        for _ in 0..200 {
            if lock(&seen).iter().any(|(m, _, _)| m == http::Method::GET) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        transport.close().await;
        let seen = lock(&seen).clone();
        let methods: Vec<&str> = seen.iter().map(|(m, _, _)| m.as_str()).collect();
        assert_eq!(methods, ["POST", "POST", "GET", "DELETE"]);
        let first = &seen[0].1;
        assert_eq!(first["authorization"], "Bearer t");
        assert!(first.get("mcp-session-id").is_none());
        for (_, headers, _) in &seen[1..] {
            assert_eq!(headers["mcp-session-id"], "s-1");
            assert_eq!(headers["authorization"], "Bearer t");
        }
        assert_eq!(seen[1].1["mcp-protocol-version"], "2025-11-25");
        assert!(seen[1].1.get("mcp-method").is_none(), "not in this era");
    }

    /// The test server's answer to request `id` (the digit after `"id":`):
    /// an SSE stream of the answer alone (1), of a notification then the
    /// answer (2), or one JSON body (3).
    fn answer_alone_or_after(_: &http::Method, body: &Bytes) -> axum::response::Response {
        let at = memchr::memmem::find(body, br#""id":"#).unwrap() + 5;
        let id = body[at] - b'0';
        let answer = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"n":{id}}}}}"#);
        let note = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}"#;
        let (kind, body) = match id {
            1 => ("text/event-stream", format!("data: {answer}\n\n")),
            2 => (
                "text/event-stream",
                format!("data: {note}\n\ndata: {answer}\n\n"),
            ),
            _ => ("application/json", answer),
        };
        ([(http::header::CONTENT_TYPE, kind)], body).into_response()
    }

    #[tokio::test]
    async fn an_answer_that_comes_first_goes_straight_to_its_call_and_one_after_other_messages_follows_them()
     {
        let (url, _) = server(answer_alone_or_after).await;
        let (transport, mut inbound) = open(&url, &BTreeMap::new(), 1 << 20).unwrap();
        let straight: Arc<Mutex<Vec<Message>>> = Arc::default();
        let taken = straight.clone();
        transport.hand_answers_to(Arc::new(move |item| match item {
            Inbound::Message { message, .. } if message.kind() == Kind::Response => {
                lock(&taken).push(message);
                None
            }
            other => Some(other),
        }));
        let straight_ids = || {
            lock(&straight)
                .iter()
                .map(|m| m.id().unwrap().to_string())
                .collect::<Vec<_>>()
        };
        let wait_for = |n: usize| {
            let straight = straight.clone();
            async move {
                for _ in 0..1000 {
                    if lock(&straight).len() >= n {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        };
        // Alone on its SSE stream, or in a JSON body: straight to its call.
        for id in [1, 3] {
            transport
                .send(message(&format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call"}}"#
                )))
                .await
                .unwrap();
        }
        wait_for(2).await;
        let mut ids = straight_ids();
        ids.sort();
        assert_eq!(ids, ["1", "3"]);
        assert!(inbound.try_recv().is_err(), "nothing went to the engine");
        // After a notification: both to the engine, in the order sent.
        transport
            .send(message(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call"}"#))
            .await
            .unwrap();
        assert!(matches!(
            inbound.recv().await.unwrap(),
            Inbound::Message { message, stream_of }
                if message.method() == Some("notifications/message") && stream_of == Some(Id::number(2))
        ));
        assert!(matches!(
            inbound.recv().await.unwrap(),
            Inbound::Message { message, .. } if message.id() == Some(Id::number(2))
        ));
        assert_eq!(
            straight_ids().len(),
            2,
            "the second answer did not go straight"
        );
    }

    #[tokio::test]
    async fn a_2026_request_carries_the_headers_that_mirror_its_body() {
        let (url, seen) = server(|_, _| {
            json(
                StatusCode::OK,
                r#"{"jsonrpc":"2.0","id":7,"result":{"content":[]}}"#,
            )
        })
        .await;
        let (transport, mut inbound) = open(&url, &BTreeMap::new(), 1 << 20).unwrap();
        transport.negotiated("2026-07-28");
        transport
            .send(message(
                r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{}}}"#,
            ))
            .await
            .unwrap();
        assert!(matches!(
            inbound.recv().await,
            Some(Inbound::Message { .. })
        ));
        let headers = lock(&seen)[0].1.clone();
        assert_eq!(headers["mcp-method"], "tools/call");
        assert_eq!(headers["mcp-name"], "echo");
        assert_eq!(headers["mcp-protocol-version"], "2026-07-28");
    }

    #[tokio::test]
    async fn an_error_status_fails_its_request_and_a_lost_session_ends_the_connection() {
        let (url, _) = server(|_, body| {
            if body.starts_with(br#"{"jsonrpc":"2.0","id":1"#) {
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    [("mcp-session-id", "s-2")],
                    "the database is down",
                )
                    .into_response()
            } else if body.starts_with(br#"{"jsonrpc":"2.0","id":2"#) {
                json(
                    StatusCode::BAD_REQUEST,
                    r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"bad"}}"#,
                )
            } else {
                StatusCode::NOT_FOUND.into_response()
            }
        })
        .await;
        let (transport, mut inbound) = open(&url, &BTreeMap::new(), 1 << 20).unwrap();
        transport
            .send(message(r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#))
            .await
            .unwrap();
        match inbound.recv().await.unwrap() {
            Inbound::Failed { id, why } => {
                assert_eq!(id, Id::number(1));
                assert!(
                    why.contains("HTTP 500") && why.contains("the database is down"),
                    "{why}"
                );
            }
            other => panic!("{other:?}"),
        }
        // A JSON-RPC error in an error status is the answer.
        transport
            .send(message(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#))
            .await
            .unwrap();
        match inbound.recv().await.unwrap() {
            Inbound::Message { message, .. } => assert_eq!(message.kind(), Kind::Error),
            other => panic!("{other:?}"),
        }
        // The session (given with the 500 to `initialize`) is gone: the
        // request was never handled, and nothing more is sent.
        transport
            .send(message(r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#))
            .await
            .unwrap();
        match inbound.recv().await.unwrap() {
            Inbound::Unhandled { id, why } => {
                assert_eq!(id, Id::number(3));
                assert!(why.contains("404"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        assert!(
            transport
                .session_ended()
                .is_some_and(|why| why.contains("404"))
        );
        assert!(matches!(
            transport
                .send(message(r#"{"jsonrpc":"2.0","id":4,"method":"tools/list"}"#))
                .await,
            Err(SendError::Closed(_))
        ));
    }

    #[test]
    fn a_session_is_forgotten_by_a_404_or_a_400_that_speaks_of_it() {
        let no_valid = br#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"}}"#;
        assert!(forgot_the_session(StatusCode::NOT_FOUND, b""));
        assert!(forgot_the_session(StatusCode::BAD_REQUEST, no_valid));
        assert!(forgot_the_session(
            StatusCode::BAD_REQUEST,
            b"unknown SESSION"
        ));
        assert!(!forgot_the_session(
            StatusCode::BAD_REQUEST,
            b"invalid params: `a` is required"
        ));
        assert!(!forgot_the_session(
            StatusCode::INTERNAL_SERVER_ERROR,
            no_valid
        ));
        assert!(!forgot_the_session(StatusCode::FORBIDDEN, b"session"));
    }

    #[tokio::test]
    async fn a_redirect_is_not_followed_and_fails_its_request_naming_it() {
        let (url, seen) = server(|_, _| {
            (
                StatusCode::TEMPORARY_REDIRECT,
                [(http::header::LOCATION, "/mcp")],
                "",
            )
                .into_response()
        })
        .await;
        let (transport, mut inbound) = open(&url, &BTreeMap::new(), 1 << 20).unwrap();
        transport
            .send(message(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#))
            .await
            .unwrap();
        match inbound.recv().await.unwrap() {
            Inbound::Failed { id, why } => {
                assert_eq!(id, Id::number(1));
                assert!(why.contains("HTTP 307"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        // Asked once: the `Location` (the same endpoint) was not asked again.
        assert_eq!(lock(&seen).len(), 1);
        // The connection goes on serving.
        transport
            .send(message(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#))
            .await
            .unwrap();
        assert!(matches!(
            inbound.recv().await.unwrap(),
            Inbound::Failed { id, .. } if id == Id::number(2)
        ));
    }

    #[tokio::test]
    async fn marked_arguments_travel_as_headers_too_once_the_tools_are_listed() {
        let (url, seen) = server(|_, body| {
            if body.windows(10).any(|w| w == b"tools/list") {
                json(
                    StatusCode::OK,
                    r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"geo","inputSchema":{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"},"where":{"type":"object","properties":{"zone":{"type":"integer","x-mcp-header":"Zone"}}}}}}]}}"#,
                )
            } else {
                json(
                    StatusCode::OK,
                    r#"{"jsonrpc":"2.0","id":2,"result":{"content":[]}}"#,
                )
            }
        })
        .await;
        let (transport, mut inbound) = open(&url, &BTreeMap::new(), 1 << 20).unwrap();
        transport.negotiated("2026-07-28");
        transport
            .send(message(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#))
            .await
            .unwrap();
        inbound.recv().await.unwrap();
        transport
            .send(message(
                r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"geo","arguments":{"region":"Zürich","where":{"zone":7}}}}"#,
            ))
            .await
            .unwrap();
        inbound.recv().await.unwrap();
        let call = lock(&seen)[1].1.clone();
        // Not ASCII: in SEP-2243's base64 form.
        assert_eq!(call["mcp-param-region"], "=?base64?WsO8cmljaA==?=");
        assert_eq!(call["mcp-param-zone"], "7");
        assert_eq!(call["mcp-name"], "geo");
        assert_eq!(header_value("plain"), "plain");
        assert_eq!(header_value(" edge"), "=?base64?IGVkZ2U=?=");
    }

    #[tokio::test]
    async fn a_401_says_which_setting_sends_credentials() {
        let (url, _) =
            server(|_, _| (StatusCode::UNAUTHORIZED, "missing bearer token").into_response()).await;
        let (transport, mut inbound) = open(&url, &BTreeMap::new(), 1 << 20).unwrap();
        transport
            .send(message(
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#,
            ))
            .await
            .unwrap();
        match inbound.recv().await.unwrap() {
            Inbound::Failed { id, why } => {
                assert_eq!(id, Id::number(1));
                assert!(
                    why.contains("401 Unauthorized: missing bearer token"),
                    "{why}"
                );
                assert!(why.contains("`headers`"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }
}
