//! The client's side of a stdio connection: newline-delimited JSON-RPC.
//!
//! rmcp's own line transport skips a line that is not JSON without a word.
//! JSON-RPC asks for an answer: `-32700 Parse error` for a line that is not
//! JSON, `-32600 Invalid request` (with the request's id when it has one)
//! for JSON that is not a message. The session goes on either way.

use std::sync::Arc;

use futures::FutureExt as _;
use rmcp::model::{ErrorCode, ErrorData, JsonRpcMessage, NumberOrString};
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

/// The longest line accepted unless [`ClientLines::with_limit`] says
/// otherwise (64 MiB); a longer one is answered with an error and dropped.
/// `sluice` itself passes `[limits] max_message_mb`.
const MAX_LINE: usize = 64 << 20;

/// The notifications about one request that may wait to be written to the
/// client; the upstream's reader waits while they do.
pub(crate) const NOTICES: usize = 64;

/// Newline-delimited JSON-RPC over a reader and a writer.
pub struct ClientLines<R, W> {
    reader: BufReader<R>,
    /// The line being read; kept here so that a read cancelled by the
    /// service loop's `select!` resumes where it stopped.
    line: Vec<u8>,
    /// Whether the rest of a line over the limit (already answered) is
    /// being skipped.
    skipping: bool,
    /// The longest line accepted, in bytes.
    max_line: usize,
    writer: Arc<Mutex<W>>,
    /// Run once when the client's input ends.
    on_end: Option<Box<dyn FnOnce() + Send>>,
    /// Answers the client's requests.
    front: Option<Arc<super::front::Front>>,
    /// What sluice sends the client beside the answers to its requests,
    /// and the client's answers it waits for.
    link: Option<Arc<super::link::ClientLink>>,
    /// The tasks answering the requests the front took.
    answering: tokio_util::task::TaskTracker,
    /// The most requests answered at once (`[limits]
    /// max_requests_in_flight`); one more is refused at once.
    max_in_flight: usize,
    /// Whether the last request was refused for that (a refusal is
    /// logged once per run of them, not once per request).
    refusing: bool,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> ClientLines<R, W> {
    /// Reads from `reader`, writes to `writer`.
    pub fn new(reader: R, writer: W) -> Self {
        Self {
            reader: BufReader::with_capacity(64 << 10, reader),
            line: Vec::new(),
            skipping: false,
            max_line: MAX_LINE,
            writer: Arc::new(Mutex::new(writer)),
            on_end: None,
            front: None,
            link: None,
            answering: tokio_util::task::TaskTracker::new(),
            max_in_flight: sluice_core::limits::MessageLimits::default().max_requests_in_flight,
            refusing: false,
        }
    }

    /// Writes what `link` sends (its messages arrive on `out`) and hands
    /// it the client's answers to its requests.
    pub fn with_link(
        mut self,
        link: Arc<super::link::ClientLink>,
        mut out: crate::downstream::outbox::Receiver,
    ) -> Self
    where
        W: Send + 'static,
    {
        let writer = self.writer.clone();
        tokio::spawn(async move {
            while let Some(message) = out.recv().await {
                if let Err(e) = write_bytes(&writer, &message).await {
                    tracing::debug!("a message to the client was not delivered: {e}");
                    return;
                }
            }
        });
        self.link = Some(link);
        self
    }

    /// The tasks answering the requests the front took (to wait for them
    /// to finish once the client left).
    pub fn answering(&self) -> tokio_util::task::TaskTracker {
        self.answering.clone()
    }

    /// Hands the client's requests to `front`.
    pub fn with_front(mut self, front: Arc<super::front::Front>) -> Self {
        self.front = Some(front);
        self
    }

    /// Accepts lines up to `max_line` bytes (`[limits] max_message_mb`).
    pub fn with_limit(mut self, max_line: usize) -> Self {
        self.max_line = max_line.max(1);
        self
    }

    /// Answers at most `n` of the client's requests at once (`[limits]
    /// max_requests_in_flight`): one more is refused at once. Without a
    /// bound, a client that sends requests and never reads the answers
    /// made sluice hold every one of them, and their answers, in memory.
    pub fn with_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n.max(1);
        self
    }

    /// Runs `f` when the client's input ends (EOF or a read error), as soon
    /// as it does: a client that went away should not make its upstream
    /// calls wait.
    pub fn on_end(mut self, f: impl FnOnce() + Send + 'static) -> Self {
        self.on_end = Some(Box::new(f));
        self
    }

    fn ended(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        if let Some(f) = self.on_end.take() {
            f();
        }
        if let Some(link) = &self.link {
            link.end();
        }
        None
    }
}

/// Polls `work` once, here: `None` if that ended it (or it panicked: then
/// it is dropped, as a task that panics ends, and the connection goes on),
/// else the rest of it, for a task of its own. A panic in a request's work
/// must not end the loop that reads the client's lines.
fn first_poll<F: Future<Output = ()>>(work: F) -> Option<std::pin::Pin<Box<F>>> {
    let mut work = Box::pin(work);
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (&mut work).now_or_never())) {
        Ok(Some(())) => None,
        Ok(None) => Some(work),
        Err(_) => {
            tracing::error!(
                "answering a request of the client's failed (a panic): it gets no answer"
            );
            None
        }
    }
}

/// Writes one message sluice made itself, as a line.
async fn write_bytes<W: AsyncWrite + Unpin>(
    writer: &Mutex<W>,
    message: &[u8],
) -> std::io::Result<()> {
    let mut writer = writer.lock().await;
    crate::jsonrpc::write_line(&mut *writer, message).await
}

async fn write_line<W: AsyncWrite + Unpin>(
    writer: &Mutex<W>,
    message: &TxJsonRpcMessage<RoleServer>,
) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(message)?;
    bytes.push(b'\n');
    let mut writer = writer.lock().await;
    writer.write_all(&bytes).await?;
    writer.flush().await
}

/// The refusal of request `id` while `max` of the client's requests are
/// being answered.
fn too_many_in_flight(id: &crate::jsonrpc::Id, max: usize) -> bytes::Bytes {
    super::answer::answer_line(id, Err(super::too_many_in_flight(max)))
}

/// The error answer to a line that is not a JSON-RPC message: why, in
/// sluice's words where its own reading refuses the line (the same words
/// as over HTTP: "the message is a JSON-RPC batch (an array)…", "the
/// member \"jsonrpc\": \"2.0\" is missing"), which rmcp's error
/// (`error`, "unrecognized JSON-RPC message") does not say.
/// `refused`: why sluice's layer refused the line, if it read it.
fn answer_to(
    line: &[u8],
    error: &serde_json::Error,
    refused: Option<crate::jsonrpc::MessageError>,
) -> TxJsonRpcMessage<RoleServer> {
    let why = refused
        .or_else(|| crate::jsonrpc::Message::parse(bytes::Bytes::copy_from_slice(line)).err());
    match serde_json::from_slice::<serde_json::Value>(line) {
        Err(_) => JsonRpcMessage::error(
            ErrorData::new(
                ErrorCode::PARSE_ERROR,
                match why {
                    Some(why) => format!("Parse error: {why}"),
                    None => format!("Parse error: the line is not JSON ({error})"),
                },
                None,
            ),
            None,
        ),
        Ok(value) => {
            let id = match value.get("id") {
                Some(serde_json::Value::Number(n)) => n.as_i64().map(NumberOrString::Number),
                Some(serde_json::Value::String(s)) => {
                    Some(NumberOrString::String(s.as_str().into()))
                }
                _ => None,
            };
            let why = why.map_or_else(|| error.to_string(), |why| why.to_string());
            JsonRpcMessage::error(
                ErrorData::invalid_request(format!("Invalid request: {why}"), None),
                id,
            )
        }
    }
}

/// Reads past the next line break, keeping nothing: `Ok(true)` when one
/// was found, `Ok(false)` at the end of the input. Cancel-safe: what was
/// skipped stays skipped.
async fn skip_line<R: AsyncRead + Unpin>(reader: &mut BufReader<R>) -> std::io::Result<bool> {
    loop {
        let buffer = reader.fill_buf().await?;
        if buffer.is_empty() {
            return Ok(false);
        }
        match buffer.iter().position(|&b| b == b'\n') {
            Some(at) => {
                reader.consume(at + 1);
                return Ok(true);
            }
            None => {
                let n = buffer.len();
                reader.consume(n);
            }
        }
    }
}

impl<R, W> ClientLines<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    /// The refusal of request `message` at a limit the front's client
    /// reached, counted: `[limits] requests_per_minute`, then
    /// `max_requests_in_flight` (said in the log once per run of such
    /// refusals). `None`, the usual case, costs a branch or two: the
    /// request's id is read only for a refusal.
    fn refusal(&mut self, message: &crate::jsonrpc::Message) -> Option<bytes::Bytes> {
        let front = self.front.as_ref()?;
        if let Some(refused) = front.connection_over_rate() {
            return Some(super::answer::answer_line(&message.id()?, Err(refused)));
        }
        if self.answering.len() < self.max_in_flight {
            return None;
        }
        let id = message.id()?;
        if !std::mem::replace(&mut self.refusing, true) {
            tracing::warn!(
                in_flight = self.max_in_flight,
                "refusing the client's requests until it has some answers: [limits] max_requests_in_flight reached"
            );
        }
        let metrics = front.gateway().governor().metrics();
        metrics.refused(crate::metrics::Limit::RequestsInFlight);
        Some(too_many_in_flight(&id, self.max_in_flight))
    }

    /// Reads the client's lines until one holds a message that neither the
    /// front nor the link takes (with neither, every message), and gives
    /// it as rmcp reads it; answers a line that is not a message with an
    /// error and reads on. `None` when the input ends.
    pub async fn receive_rest(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            if self.skipping {
                match skip_line(&mut self.reader).await {
                    Ok(true) => self.skipping = false,
                    Ok(false) => return self.ended(),
                    Err(e) => {
                        tracing::warn!("reading from the client failed: {e}");
                        return self.ended();
                    }
                }
            }
            let read = (&mut self.reader)
                .take((self.max_line + 1 - self.line.len().min(self.max_line)) as u64)
                .read_until(b'\n', &mut self.line)
                .await;
            match read {
                Ok(0) if self.line.is_empty() => return self.ended(),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!("reading from the client failed: {e}");
                    return self.ended();
                }
            }
            if self.line.len() > self.max_line {
                let max = self.max_line;
                tracing::warn!("dropped a line of more than {max} bytes from the client");
                let error = JsonRpcMessage::error(
                    ErrorData::invalid_request(
                        format!(
                            "Invalid request: a message is longer than {max} bytes (the limit is `[limits] max_message_mb` = {} in sluice's config)",
                            max >> 20
                        ),
                        None,
                    ),
                    None,
                );
                // Answered now, not when the line ends (it may never); the
                // rest is skipped as it comes, without being kept.
                // (Unless its line break was the byte past the limit.)
                self.skipping = !self.line.ends_with(b"\n");
                self.line = Vec::new();
                if write_line(&self.writer, &error).await.is_err() {
                    return self.ended();
                }
                continue;
            }
            let eof = !self.line.ends_with(b"\n");
            let line = std::mem::take(&mut self.line);
            let text = line
                .strip_prefix(b"\xEF\xBB\xBF")
                .unwrap_or(&line)
                .trim_ascii();
            // Read by sluice's layer where it answers; why it refused the
            // line, kept for the answer below (the line is not read again).
            let parsed = (!text.is_empty() && (self.front.is_some() || self.link.is_some()))
                .then(|| crate::jsonrpc::Message::parse(bytes::Bytes::copy_from_slice(text)));
            let (parsed, refused) = match parsed {
                Some(Ok(message)) => (Some(message), None),
                Some(Err(why)) => (None, Some(why)),
                None => (None, None),
            };
            if let Some(message) = parsed {
                if let Some(link) = &self.link
                    && link.answered(&message)
                {
                    if eof {
                        return self.ended();
                    }
                    continue;
                }
                if let Some(front) = &self.front
                    && front.notified(&message)
                {
                    if eof {
                        return self.ended();
                    }
                    continue;
                } else if message.kind() == crate::jsonrpc::Kind::Request
                    && let Some(refusal) = self.refusal(&message)
                {
                    // Refused, not queued: the client's answers to
                    // sluice's own requests (sampling, elicitation), which
                    // the requests in flight may wait for, are still read.
                    // Writing the refusal waits for a client that does not
                    // read, and so does the next line then.
                    if write_bytes(&self.writer, &refusal).await.is_err() {
                        return self.ended();
                    }
                    if eof {
                        return self.ended();
                    }
                    continue;
                } else if let Some(front) = &self.front
                    && let (stream, notices) = super::outbox::channel(NOTICES)
                    && let Some(taken) = front.take_any(&message, None, stream)
                {
                    self.refusing = false;
                    let writer = self.writer.clone();
                    let answering = taken.drive(notices, move |line| {
                        let writer = writer.clone();
                        async move {
                            let written = write_bytes(&writer, &line).await;
                            if let Err(e) = &written {
                                tracing::debug!("a message to the client was not delivered: {e}");
                            }
                            written.is_ok()
                        }
                    });
                    // `initialize` is answered before the next line is read,
                    // so that what follows it belongs to the session it opens.
                    if message.method() == Some("initialize") {
                        answering.await;
                    } else {
                        // Polled once here before it has a task of its own:
                        // a call goes as far as its write to the upstream
                        // now, and the task is made and scheduled after that
                        // write, while the upstream works (work after a
                        // write costs the call almost nothing, work before
                        // it all it takes). The task polls it again at
                        // once, so what it waits for wakes the task, not
                        // the no-op waker of this first poll.
                        if let Some(rest) = first_poll(answering) {
                            self.answering.spawn(rest);
                        }
                    }
                    if eof {
                        return self.ended();
                    }
                    continue;
                }
            }
            if !text.is_empty() {
                match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(text) {
                    // A request rmcp reads but sluice's layer does not (its
                    // `params` null): where the front answers every request,
                    // it is refused with why, never left unanswered.
                    Ok(JsonRpcMessage::Request(request)) if self.front.is_some() => {
                        let why = refused.map_or_else(
                            || "not a request sluice reads".to_owned(),
                            |e| e.to_string(),
                        );
                        let error = JsonRpcMessage::error(
                            ErrorData::invalid_request(format!("Invalid request: {why}"), None),
                            Some(request.id),
                        );
                        if write_line(&self.writer, &error).await.is_err() {
                            return self.ended();
                        }
                    }
                    Ok(message) => return Some(message),
                    Err(e) => {
                        tracing::debug!("malformed message from the client: {e}");
                        if write_line(&self.writer, &answer_to(text, &e, refused))
                            .await
                            .is_err()
                        {
                            return self.ended();
                        }
                    }
                }
            }
            if eof {
                return self.ended();
            }
        }
    }
}

impl<R, W> Transport<RoleServer> for ClientLines<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let writer = self.writer.clone();
        async move { write_line(&writer, &item).await }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        self.receive_rest().await
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.writer.lock().await.flush().await
    }
}

#[cfg(test)]
mod tests {
    use super::first_poll;

    /// A request's work polled where its line is read: ended there, or
    /// given back for a task, and a panic in it stays in it.
    #[tokio::test]
    async fn a_first_poll_ends_the_work_gives_back_the_rest_or_contains_its_panic() {
        assert!(first_poll(async {}).is_none());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let rest = first_poll(async move {
            let _ = rx.await;
        })
        .expect("work that waits is given back");
        let task = tokio::spawn(rest);
        tx.send(()).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(10), task)
            .await
            .expect("the task's poll woke it, not the first poll's waker")
            .unwrap();
        assert!(first_poll(async { panic!("a bug in a request's work") }).is_none());
    }
}
