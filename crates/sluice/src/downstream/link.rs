//! [`ClientLink`]: what sluice sends a client beside the answers to its
//! requests, as bytes: an upstream's log messages (and the session's other
//! notifications, in their order), and the requests an upstream asks the
//! client (`roots/list`, sampling, elicitation), relayed with ids of
//! sluice's own and answered with the client's bytes. On a stdio
//! connection they go on the connection; in an HTTP session, a request on
//! the stream of the call that caused it, and the rest on the session's
//! GET stream ([`ClientLink::attach_standalone`]), held while the client
//! has none open (the last [`HELD`] of them: a client opens its GET stream
//! only after `initialize`, and an upstream may speak first). A notification
//! waits for room on the GET stream as on a connection: dropped there, a
//! `list_changed` left a client that read slowly with a stale list.
//!
//! The link's ids are strings (`"sluice-1"`, …), so that a client's answer
//! to one cannot be mistaken for an answer to an id the client chose
//! ([`ClientLink::answered`]).

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use crate::downstream::outbox::{self, TrySendError};
use crate::jsonrpc::{CallFailed, Id, Kind, Message, Pending};

/// The prefix of the ids of the requests the link sends.
const ID_PREFIX: &str = "sluice-";

/// How many messages of no call an HTTP session's link holds while the
/// client has no GET stream open (the oldest notifications are dropped
/// past it).
pub const HELD: usize = 64;

/// How many bytes of notifications an HTTP session's link holds at most
/// (the oldest go past it; an upstream's log message may be large).
pub const HELD_BYTES: usize = 4 << 20;

/// How long a request of no call waits, held, for the client to open a
/// GET stream (it opens one right after `initialize`, if ever).
pub const HELD_REQUEST_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The notification that tells the client request `id` is cancelled.
fn cancel_notice(id: &Id) -> Bytes {
    Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id},"reason":"cancelled by the upstream"}}}}"#
    ))
}

/// Where [`ClientLink::deliver`] put a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Delivery {
    /// On the connection or the GET stream (or dropped, for a notification
    /// the GET stream had no room for).
    Sent,
    /// Held for the next GET stream.
    Held,
}

/// Holds `message` (the request `request`, or a notification) for the next
/// GET stream, within [`HELD`] and [`HELD_BYTES`]: room is made by the
/// oldest notification (a request dropped would leave its upstream
/// waiting); a request that finds only requests held is refused.
fn hold(
    standalone: &mut Standalone,
    message: Bytes,
    request: Option<&Id>,
) -> Result<Delivery, AskError> {
    let bytes = if request.is_none() { message.len() } else { 0 };
    if bytes > HELD_BYTES {
        tracing::debug!("a message of no call was dropped: too large to hold");
        return Ok(Delivery::Sent);
    }
    while standalone.held.len() >= HELD || standalone.held_bytes + bytes > HELD_BYTES {
        let oldest = standalone.held.iter().position(|h| h.request.is_none());
        let Some(dropped) = oldest.and_then(|i| standalone.held.remove(i)) else {
            // Only requests held, as many as may be.
            if request.is_some() {
                return Err(AskError::Gone);
            }
            tracing::debug!("a message of no call was dropped: {HELD} requests wait");
            return Ok(Delivery::Sent);
        };
        standalone.held_bytes -= dropped.message.len();
        tracing::debug!(
            "a message of no call was dropped: the client has held no GET stream open for {HELD} of them ({} MiB at most)",
            HELD_BYTES >> 20
        );
    }
    standalone.held_bytes += bytes;
    standalone.held.push_back(Held {
        message,
        request: request.cloned(),
    });
    Ok(Delivery::Held)
}

/// A message held for the next GET stream, and the id of the request it
/// is, if it is one.
struct Held {
    message: Bytes,
    request: Option<Id>,
}

/// Messages for one client connection, written in the order given; or,
/// for an HTTP session ([`ClientLink::per_stream`]), the requests relayed on
/// the stream of the call that caused them.
pub struct ClientLink {
    out: Option<outbox::Sender>,
    /// An HTTP session's GET stream, and what waits for one.
    standalone: std::sync::Mutex<Standalone>,
    asked: Pending<Message>,
    next: AtomicU64,
    /// Wakes a [`ClientLink::send`] waiting on a GET stream when another
    /// replaces it or the session ends.
    replaced: tokio::sync::Notify,
}

/// An HTTP session's GET stream, while one is open, and the messages held
/// while none is.
#[derive(Default)]
struct Standalone {
    stream: Option<outbox::Sender>,
    held: std::collections::VecDeque<Held>,
    /// The bytes of the notifications held.
    held_bytes: usize,
    /// The session ended: nothing is held or sent any more.
    ended: bool,
}

impl std::fmt::Debug for ClientLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientLink")
            .field("waiting", &self.asked.len())
            .finish_non_exhaustive()
    }
}

/// Why a request relayed to the client got no answer.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    /// The client is gone.
    #[error("the client is gone")]
    Gone,
    /// The request was cancelled before the client answered.
    #[error("cancelled before the client answered")]
    Cancelled,
    /// An HTTP session's client held no GET stream open to be asked on.
    #[error(
        "the client held no GET stream open within {} s to be asked on (a Streamable HTTP client opens one after initialize to receive requests outside its calls)",
        HELD_REQUEST_WAIT.as_secs()
    )]
    NoStream,
    /// The client's answer could not be read, or the connection ended.
    #[error("{0}")]
    Failed(#[from] CallFailed),
}

impl ClientLink {
    /// A link whose messages go to `out` (the connection's writer).
    pub fn new(out: outbox::Sender) -> ClientLink {
        ClientLink {
            out: Some(out),
            standalone: std::sync::Mutex::default(),
            asked: Pending::new(),
            next: AtomicU64::new(1),
            replaced: tokio::sync::Notify::new(),
        }
    }

    /// A link with no writer of its own (an HTTP session): requests are
    /// relayed on the stream of the call that caused them ([`Self::ask_on`]).
    pub fn per_stream() -> ClientLink {
        ClientLink {
            out: None,
            standalone: std::sync::Mutex::default(),
            asked: Pending::new(),
            next: AtomicU64::new(1),
            replaced: tokio::sync::Notify::new(),
        }
    }

    /// Whether the link writes to the connection itself ([`Self::new`]).
    pub fn writes(&self) -> bool {
        self.out.is_some()
    }

    fn standalone(&self) -> std::sync::MutexGuard<'_, Standalone> {
        self.standalone.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes `stream` (an HTTP session's GET stream) where the session's
    /// messages go that belong to no call, in place of the one before
    /// (which ends); what was held for it goes first. `stream` needs room
    /// for [`HELD`] messages. After [`Self::end`], `stream` is dropped at
    /// once (the GET stream of a session that ended ends).
    pub fn attach_standalone(&self, stream: outbox::Sender) {
        let mut standalone = self.standalone();
        if standalone.ended {
            return;
        }
        while let Some(held) = standalone.held.pop_front() {
            if held.request.is_none() {
                standalone.held_bytes -= held.message.len();
            }
            // Bounded while held: all of it goes first, whatever its size.
            if let Err(e) = stream.try_send_unmetered(held.message) {
                let message = e.into_inner();
                if held.request.is_none() {
                    standalone.held_bytes += message.len();
                }
                // No room: it and the rest wait for the next stream.
                standalone.held.push_front(Held {
                    message,
                    request: held.request,
                });
                break;
            }
        }
        standalone.stream = Some(stream);
        self.replaced.notify_waiters();
    }

    /// Sends one notification (its bytes as they are) on the connection, or
    /// towards an HTTP session's GET stream: on it while one is open,
    /// waiting for room as on a connection (the session's forwarder keeps
    /// what comes meanwhile, within bounds: `session::Backlog`), else held
    /// for the next one (the oldest notification held goes past [`HELD`]).
    /// A GET stream replaced or let go while this waits takes nothing: the
    /// message goes to the next. Cancel-safe: cancelled, it sent nothing.
    pub async fn send(&self, message: Bytes) -> Result<(), AskError> {
        if let Some(out) = &self.out {
            return out.send(message).await.map_err(|_| AskError::Gone);
        }
        loop {
            let (stream, replaced) = {
                let mut standalone = self.standalone();
                if standalone.ended {
                    return Err(AskError::Gone);
                }
                let Some(stream) = standalone.stream.clone() else {
                    return hold(&mut standalone, message, None).map(drop);
                };
                // Made under the lock: a stream attached after it wakes it.
                (stream, self.replaced.notified())
            };
            tokio::select! {
                biased;
                sent = stream.send(message.clone()) => {
                    if sent.is_ok() {
                        return Ok(());
                    }
                    // The client let its GET stream go.
                    let mut standalone = self.standalone();
                    if standalone.stream.as_ref().is_some_and(|s| s.same_channel(&stream)) {
                        standalone.stream = None;
                    }
                }
                () = replaced => {}
            }
        }
    }

    /// Sends the request `request` (or, `None`, a notification that must
    /// not wait: a cancellation) on the connection, or towards an HTTP
    /// session's GET stream without waiting: a request the GET stream has
    /// no room for, or that finds [`HELD`] requests held, is refused, never
    /// dropped; a notification it has no room for is dropped.
    async fn deliver(&self, message: Bytes, request: Option<&Id>) -> Result<Delivery, AskError> {
        if let Some(out) = &self.out {
            out.send(message).await.map_err(|_| AskError::Gone)?;
            return Ok(Delivery::Sent);
        }
        let mut standalone = self.standalone();
        if standalone.ended {
            return Err(AskError::Gone);
        }
        let mut message = message;
        if let Some(stream) = &standalone.stream {
            // A request is bounded by the requests waiting for answers,
            // not by the bytes of the notifications ahead of it.
            let sent = match request {
                Some(_) => stream.try_send_unmetered(message),
                None => stream.try_send(message),
            };
            match sent {
                Ok(()) => return Ok(Delivery::Sent),
                Err(TrySendError::Full(_)) if request.is_some() => {
                    return Err(AskError::Gone);
                }
                Err(TrySendError::Full(_)) => {
                    tracing::debug!(
                        "a notification of no call was dropped: the client does not read its GET stream"
                    );
                    return Ok(Delivery::Sent);
                }
                Err(TrySendError::Closed(unsent)) => {
                    standalone.stream = None;
                    message = unsent;
                }
            }
        }
        hold(&mut standalone, message, request)
    }

    /// Takes request `id` back if it is still held (no GET stream took
    /// it): whether it was.
    fn unhold(&self, id: &Id) -> bool {
        let mut standalone = self.standalone();
        let before = standalone.held.len();
        standalone.held.retain(|h| h.request.as_ref() != Some(id));
        standalone.held.len() != before
    }

    /// Relays `request` (an upstream's, as it sent it) to the client under
    /// an id of the link's own, on the connection (or towards an HTTP
    /// session's GET stream: held up to [`HELD_REQUEST_WAIT`] while none is
    /// open); gives the client's answer as it sent it (a result or an
    /// error, under that id). When `ct` fires first, the client is told
    /// (`notifications/cancelled`; a request still held is taken back).
    pub async fn ask(
        &self,
        request: &Message,
        ct: &CancellationToken,
    ) -> Result<Message, AskError> {
        if let Some(out) = &self.out {
            return self.ask_on(out, request, ct).await;
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let id = Id::string(&format!("{ID_PREFIX}{n}"));
        let waiter = self.asked.register_id(id.clone())?;
        let delivery = self
            .deliver(request.with_id(&id).into_bytes(), Some(&id))
            .await?;
        let mut waiter = std::pin::pin!(waiter);
        if delivery == Delivery::Held {
            tokio::select! {
                answer = &mut waiter => return Ok(answer?),
                () = ct.cancelled() => {
                    if !self.unhold(&id) {
                        let _ = self.deliver(cancel_notice(&id), None).await;
                    }
                    return Err(AskError::Cancelled);
                }
                () = tokio::time::sleep(HELD_REQUEST_WAIT) => {
                    if self.unhold(&id) {
                        return Err(AskError::NoStream);
                    }
                }
            }
        }
        tokio::select! {
            answer = waiter => Ok(answer?),
            () = ct.cancelled() => {
                let _ = self.deliver(cancel_notice(&id), None).await;
                Err(AskError::Cancelled)
            }
        }
    }

    /// [`Self::ask`], on `stream` (an HTTP response stream).
    pub async fn ask_on(
        &self,
        stream: &outbox::Sender,
        request: &Message,
        ct: &CancellationToken,
    ) -> Result<Message, AskError> {
        self.ask_with(request, ct, |message: Bytes| async move {
            stream.send(message).await.map_err(|_| AskError::Gone)
        })
        .await
    }

    /// [`Self::ask`], each message written by `send`.
    async fn ask_with<F, Fut>(
        &self,
        request: &Message,
        ct: &CancellationToken,
        send: F,
    ) -> Result<Message, AskError>
    where
        F: Fn(Bytes) -> Fut,
        Fut: Future<Output = Result<(), AskError>>,
    {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let id = Id::string(&format!("{ID_PREFIX}{n}"));
        let waiter = self.asked.register_id(id.clone())?;
        send(request.with_id(&id).into_bytes()).await?;
        tokio::select! {
            answer = waiter => Ok(answer?),
            () = ct.cancelled() => {
                let _ = send(cancel_notice(&id)).await;
                Err(AskError::Cancelled)
            }
        }
    }

    /// Takes `message` if it is the client's answer to a request the link
    /// relayed.
    pub fn answered(&self, message: &Message) -> bool {
        if !matches!(message.kind(), Kind::Response | Kind::Error) {
            return false;
        }
        let Some(id) = message.id() else { return false };
        if !id.is_string() || !id.as_json().starts_with(&format!("\"{ID_PREFIX}")) {
            return false;
        }
        // An answer nobody waits for any more (cancelled) is dropped here.
        self.asked.complete(&id, message.clone());
        true
    }

    /// The client left: every relayed request fails, and the GET stream
    /// ends.
    pub fn end(&self) {
        *self.standalone() = Standalone {
            ended: true,
            ..Standalone::default()
        };
        self.replaced.notify_waiters();
        self.asked.fail_all(&CallFailed::ConnectionLost {
            reason: "the client left".to_owned(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(text: &str) -> Message {
        Message::parse(Bytes::from(text.to_owned())).unwrap()
    }

    #[tokio::test]
    async fn a_relayed_request_gets_the_clients_answer_as_sent() {
        let (out, mut written) = outbox::channel(4);
        let link = std::sync::Arc::new(ClientLink::new(out));
        let asking = {
            let link = link.clone();
            tokio::spawn(async move {
                let request = message(
                    r#"{"jsonrpc":"2.0","id":7,"method":"roots/list","params":{"x-n":1.50}}"#,
                );
                link.ask(&request, &CancellationToken::new()).await
            })
        };
        let sent = written.recv().await.unwrap();
        assert_eq!(
            sent.as_ref(),
            br#"{"jsonrpc":"2.0","id":"sluice-1","method":"roots/list","params":{"x-n":1.50}}"#
        );
        // Answers to ids the link did not choose (numbers) are not its.
        assert!(!link.answered(&message(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#)));
        let answer = r#"{"jsonrpc":"2.0","id":"sluice-1","result":{"roots":[], "x-r":-0}}"#;
        assert!(link.answered(&message(answer)));
        let got = asking.await.unwrap().unwrap();
        assert_eq!(got.as_bytes().as_ref(), answer.as_bytes());
    }

    #[tokio::test]
    async fn a_cancelled_request_tells_the_client_and_a_departed_client_fails_it() {
        let (out, mut written) = outbox::channel(4);
        let link = std::sync::Arc::new(ClientLink::new(out));
        let ct = CancellationToken::new();
        let asking = {
            let (link, ct) = (link.clone(), ct.clone());
            tokio::spawn(async move {
                link.ask(
                    &message(r#"{"jsonrpc":"2.0","id":1,"method":"roots/list"}"#),
                    &ct,
                )
                .await
            })
        };
        written.recv().await.unwrap();
        ct.cancel();
        assert!(matches!(asking.await.unwrap(), Err(AskError::Cancelled)));
        let cancel = written.recv().await.unwrap();
        assert!(
            std::str::from_utf8(&cancel)
                .unwrap()
                .contains(r#""requestId":"sluice-1""#)
        );

        let asking = {
            let link = link.clone();
            tokio::spawn(async move {
                link.ask(
                    &message(r#"{"jsonrpc":"2.0","id":2,"method":"roots/list"}"#),
                    &CancellationToken::new(),
                )
                .await
            })
        };
        written.recv().await.unwrap();
        link.end();
        assert!(matches!(asking.await.unwrap(), Err(AskError::Failed(_))));
    }

    /// An HTTP session's GET stream: messages of no call wait for one
    /// (the last [`HELD`]), go on it while the client holds it open, and
    /// wait again once it let it go; a new GET stream replaces the old one,
    /// which ends; a request of no call waits for one too.
    #[tokio::test]
    async fn an_http_sessions_messages_of_no_call_wait_for_its_get_stream() {
        let link = std::sync::Arc::new(ClientLink::per_stream());
        assert!(!link.writes());
        for n in 0..HELD + 3 {
            link.send(Bytes::from(format!("early {n}"))).await.unwrap();
        }
        let (first, mut first_rx) = outbox::channel(HELD + 4);
        link.attach_standalone(first);
        // The oldest three were dropped; the rest come first, in order.
        for n in 3..HELD + 3 {
            assert_eq!(first_rx.recv().await.unwrap(), format!("early {n}"));
        }
        link.send(Bytes::from_static(b"one")).await.unwrap();
        assert_eq!(first_rx.recv().await.unwrap().as_ref(), b"one");
        // The client opened another GET stream: messages go there.
        let (second, mut second_rx) = outbox::channel(HELD + 4);
        link.attach_standalone(second);
        link.send(Bytes::from_static(b"two")).await.unwrap();
        assert_eq!(second_rx.recv().await.unwrap().as_ref(), b"two");
        assert!(first_rx.recv().await.is_none(), "the old stream ends");
        // The client let it go: held again, and a request waits too.
        drop(second_rx);
        link.send(Bytes::from_static(b"three")).await.unwrap();
        let asking = {
            let link = link.clone();
            tokio::spawn(async move {
                link.ask(
                    &message(r#"{"jsonrpc":"2.0","id":9,"method":"roots/list"}"#),
                    &CancellationToken::new(),
                )
                .await
            })
        };
        // Held: it was asked before the stream opened.
        while link.standalone().held.len() < 2 {
            tokio::task::yield_now().await;
        }
        let (third, mut third_rx) = outbox::channel(HELD + 4);
        link.attach_standalone(third);
        assert_eq!(third_rx.recv().await.unwrap().as_ref(), b"three");
        let request = third_rx.recv().await.unwrap();
        assert_eq!(
            request.as_ref(),
            br#"{"jsonrpc":"2.0","id":"sluice-1","method":"roots/list"}"#
        );
        let answer = r#"{"jsonrpc":"2.0","id":"sluice-1","result":{"roots":[]}}"#;
        assert!(link.answered(&message(answer)));
        assert_eq!(
            asking.await.unwrap().unwrap().as_bytes().as_ref(),
            answer.as_bytes()
        );
        // The session ended: its GET stream ends, and nothing is held or
        // attached any more.
        link.end();
        assert!(third_rx.recv().await.is_none());
        assert!(matches!(
            link.send(Bytes::from_static(b"late")).await,
            Err(AskError::Gone)
        ));
        let (fourth, mut fourth_rx) = outbox::channel(4);
        link.attach_standalone(fourth);
        assert!(
            fourth_rx.recv().await.is_none(),
            "an ended link takes no stream"
        );
    }

    /// A request of no call is never dropped quietly: one a full GET stream
    /// has no room for is refused at once (it does not wait: its upstream
    /// waits for it), and one held while no GET stream opens is refused
    /// after [`HELD_REQUEST_WAIT`], taken back (the next stream does not get
    /// it); notifications make room for requests.
    #[tokio::test(start_paused = true)]
    async fn a_request_of_no_call_is_refused_rather_than_lost() {
        let roots = || message(r#"{"jsonrpc":"2.0","id":1,"method":"roots/list"}"#);
        let link = ClientLink::per_stream();
        let (full, _unread) = outbox::channel(1);
        full.try_send(Bytes::from_static(b"filler")).unwrap();
        link.attach_standalone(full);
        assert!(matches!(
            link.ask(&roots(), &CancellationToken::new()).await,
            Err(AskError::Gone)
        ));

        let link = ClientLink::per_stream();
        for n in 0..HELD {
            link.send(Bytes::from(format!("note {n}"))).await.unwrap();
        }
        let started = tokio::time::Instant::now();
        assert!(matches!(
            link.ask(&roots(), &CancellationToken::new()).await,
            Err(AskError::NoStream)
        ));
        assert_eq!(started.elapsed(), HELD_REQUEST_WAIT);
        let (stream, mut received) = outbox::channel(HELD + 4);
        link.attach_standalone(stream);
        drop(link);
        let mut got = Vec::new();
        while let Some(message) = received.recv().await {
            got.push(String::from_utf8(message.to_vec()).unwrap());
        }
        // The request made room by pushing out the oldest notification,
        // then was taken back.
        assert_eq!(got.len(), HELD - 1);
        assert_eq!(got[0], "note 1");
        assert!(got.iter().all(|m| !m.contains("roots/list")), "{got:?}");

        // Held notifications are bounded in bytes too: the oldest go.
        let link = ClientLink::per_stream();
        let half = Bytes::from(vec![b'h'; HELD_BYTES / 2 + 1]);
        link.send(half.clone()).await.unwrap();
        link.send(half).await.unwrap();
        link.send(Bytes::from(vec![b'x'; HELD_BYTES + 1]))
            .await
            .unwrap();
        link.send(Bytes::from_static(b"small")).await.unwrap();
        let (stream, mut received) = outbox::channel(HELD + 4);
        link.attach_standalone(stream);
        drop(link);
        let mut sizes = Vec::new();
        while let Some(message) = received.recv().await {
            sizes.push(message.len());
        }
        assert_eq!(sizes, [HELD_BYTES / 2 + 1, 5]);
    }

    /// Asks the link's client for its roots in a task of its own, the
    /// request padded past `pad` bytes.
    fn ask_roots(
        link: &std::sync::Arc<ClientLink>,
        pad: usize,
    ) -> tokio::task::JoinHandle<Result<Message, AskError>> {
        let link = link.clone();
        tokio::spawn(async move {
            let roots = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"roots/list","params":{{"x":"{}"}}}}"#,
                "r".repeat(pad)
            );
            link.ask(&message(&roots), &CancellationToken::new()).await
        })
    }

    /// What a link held while no GET stream was open goes whole onto the
    /// next one, first, whatever its bytes (it was bounded while held): the
    /// stream's own room in bytes left a request held behind 4 MiB of
    /// notifications, which waited for a GET stream that had come.
    #[tokio::test]
    async fn what_was_held_goes_whole_onto_the_next_get_stream() {
        let link = std::sync::Arc::new(ClientLink::per_stream());
        let note = Bytes::from(vec![b'n'; HELD_BYTES / 2]);
        link.send(note.clone()).await.unwrap();
        link.send(note).await.unwrap();
        let asking = ask_roots(&link, 1 << 20);
        while link.standalone().held.len() < 3 {
            tokio::task::yield_now().await;
        }
        let (stream, mut received) = outbox::channel(crate::downstream::lines::NOTICES + HELD);
        link.attach_standalone(stream);
        assert!(link.standalone().held.is_empty(), "nothing left behind");
        assert_eq!(received.recv().await.unwrap().len(), HELD_BYTES / 2);
        assert_eq!(received.recv().await.unwrap().len(), HELD_BYTES / 2);
        let request = received.recv().await.unwrap();
        assert!(request.len() > 1 << 20);
        let answer = r#"{"jsonrpc":"2.0","id":"sluice-1","result":{"roots":[]}}"#;
        assert!(link.answered(&message(answer)));
        assert!(asking.await.unwrap().is_ok());
    }

    /// A request of no call goes on a GET stream in use whatever the bytes
    /// of the notifications ahead of it (it is refused only when the
    /// stream has no room for one more message): counted in the stream's
    /// bytes, a request of 4 MiB behind an unread notification was refused
    /// as if the client were gone.
    #[tokio::test]
    async fn a_large_request_goes_on_a_get_stream_in_use() {
        let link = std::sync::Arc::new(ClientLink::per_stream());
        let (stream, mut received) = outbox::channel(crate::downstream::lines::NOTICES + HELD);
        link.attach_standalone(stream);
        link.send(Bytes::from(vec![b'n'; 1 << 20])).await.unwrap();
        let asking = ask_roots(&link, outbox::ROOM_BYTES);
        // Asked while the notification is still unread.
        while link.asked.is_empty() && !asking.is_finished() {
            tokio::task::yield_now().await;
        }
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!asking.is_finished(), "{:?}", asking.await);
        assert_eq!(received.recv().await.unwrap().len(), 1 << 20);
        assert!(received.recv().await.unwrap().len() > outbox::ROOM_BYTES);
        let answer = r#"{"jsonrpc":"2.0","id":"sluice-1","result":{"roots":[]}}"#;
        assert!(link.answered(&message(answer)));
        assert!(asking.await.unwrap().is_ok());
    }

    /// A notification waits for room on a full GET stream (dropped there, a
    /// `list_changed` left a client that read slowly with a stale list);
    /// one waiting goes to the GET stream that replaces the full one, and
    /// stops waiting when the session ends.
    #[tokio::test]
    async fn a_notification_waits_for_room_on_the_get_stream() {
        let link = std::sync::Arc::new(ClientLink::per_stream());
        let sending = |text: &'static str| {
            let link = link.clone();
            tokio::spawn(async move { link.send(Bytes::from_static(text.as_bytes())).await })
        };
        let settle = || async {
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
        };
        let (full, mut unread) = outbox::channel(1);
        full.try_send(Bytes::from_static(b"filler")).unwrap();
        link.attach_standalone(full.clone());
        let changed = sending("changed");
        settle().await;
        assert!(!changed.is_finished(), "it waits for room");
        assert_eq!(unread.recv().await.unwrap().as_ref(), b"filler");
        changed.await.unwrap().unwrap();
        assert_eq!(unread.recv().await.unwrap().as_ref(), b"changed");

        // Full again; another GET stream replaces it while a send waits.
        full.try_send(Bytes::from_static(b"filler")).unwrap();
        let moved = sending("moved");
        settle().await;
        assert!(!moved.is_finished());
        let (fresh, mut fresh_rx) = outbox::channel(1);
        link.attach_standalone(fresh);
        moved.await.unwrap().unwrap();
        assert_eq!(fresh_rx.recv().await.unwrap().as_ref(), b"moved");
        assert_eq!(unread.recv().await.unwrap().as_ref(), b"filler");
        drop(full);
        assert!(
            unread.recv().await.is_none(),
            "the old stream got nothing more"
        );

        // Full; the session ends while a send waits.
        link.send(Bytes::from_static(b"fills")).await.unwrap();
        let late = sending("late");
        settle().await;
        assert!(!late.is_finished());
        link.end();
        assert!(matches!(late.await.unwrap(), Err(AskError::Gone)));
        assert_eq!(fresh_rx.recv().await.unwrap().as_ref(), b"fills");
    }
}
