//! [`ClientLink`]: what sluice sends a client beside the answers to its
//! requests, as bytes: an upstream's log messages (and the session's other
//! notifications, in their order), and the requests an upstream asks the
//! client (`roots/list`, sampling, elicitation), relayed with ids of
//! sluice's own and answered with the client's bytes. On a stdio
//! connection they go on the connection; in an HTTP session, a request on
//! the stream of the call that caused it, and the rest on the session's
//! GET stream ([`ClientLink::attach_standalone`]), held while the client
//! has none open (the last [`HELD`] of them: a client opens its GET stream
//! only after `initialize`, and an upstream may speak first).
//!
//! The link's ids are strings (`"sluice-1"`, …), so that a client's answer
//! to one cannot be mistaken for an answer to an id the client chose
//! ([`ClientLink::answered`]).

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::jsonrpc::{CallFailed, Id, Kind, Message, Pending};

/// The prefix of the ids of the requests the link sends.
const ID_PREFIX: &str = "sluice-";

/// How many messages of no call an HTTP session's link holds while the
/// client has no GET stream open (the oldest are dropped past it).
pub const HELD: usize = 64;

/// Messages for one client connection, written in the order given; or,
/// for an HTTP session ([`ClientLink::per_stream`]), the requests relayed on
/// the stream of the call that caused them.
pub struct ClientLink {
    out: Option<mpsc::Sender<Bytes>>,
    /// An HTTP session's GET stream, and what waits for one.
    standalone: std::sync::Mutex<Standalone>,
    asked: Pending<Message>,
    next: AtomicU64,
}

/// An HTTP session's GET stream, while one is open, and the messages held
/// while none is.
#[derive(Default)]
struct Standalone {
    stream: Option<mpsc::Sender<Bytes>>,
    held: std::collections::VecDeque<Bytes>,
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
    /// The client's answer could not be read, or the connection ended.
    #[error("{0}")]
    Failed(#[from] CallFailed),
}

impl ClientLink {
    /// A link whose messages go to `out` (the connection's writer).
    pub fn new(out: mpsc::Sender<Bytes>) -> ClientLink {
        ClientLink {
            out: Some(out),
            standalone: std::sync::Mutex::default(),
            asked: Pending::new(),
            next: AtomicU64::new(1),
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
    /// for [`HELD`] messages.
    pub fn attach_standalone(&self, stream: mpsc::Sender<Bytes>) {
        let mut standalone = self.standalone();
        while let Some(message) = standalone.held.pop_front() {
            if stream.try_send(message).is_err() {
                break;
            }
        }
        standalone.stream = Some(stream);
    }

    /// Sends one message (its bytes as they are) on the connection, or
    /// towards an HTTP session's GET stream: on it while one is open (a
    /// client that does not read it loses what its stream has no room
    /// for, rather than stalling sluice), else held for the next one.
    pub async fn send(&self, message: Bytes) -> Result<(), AskError> {
        if let Some(out) = &self.out {
            return out.send(message).await.map_err(|_| AskError::Gone);
        }
        let mut standalone = self.standalone();
        if let Some(stream) = &standalone.stream {
            match stream.try_send(message) {
                Ok(()) => return Ok(()),
                Err(mpsc::error::TrySendError::Full(_)) => {
                    tracing::debug!(
                        "a message of no call was dropped: the client does not read its GET stream"
                    );
                    return Ok(());
                }
                Err(mpsc::error::TrySendError::Closed(message)) => {
                    standalone.stream = None;
                    standalone.held.push_back(message);
                }
            }
        } else {
            standalone.held.push_back(message);
        }
        if standalone.held.len() > HELD {
            standalone.held.pop_front();
            tracing::debug!(
                "a message of no call was dropped: the client has held no GET stream open for {HELD} of them"
            );
        }
        Ok(())
    }

    /// Relays `request` (an upstream's, as it sent it) to the client under
    /// an id of the link's own, on the connection (or towards an HTTP
    /// session's GET stream: [`Self::send`]); gives the client's answer as
    /// it sent it (a result or an error, under that id). When `ct` fires
    /// first, the client is told (`notifications/cancelled`).
    pub async fn ask(
        &self,
        request: &Message,
        ct: &CancellationToken,
    ) -> Result<Message, AskError> {
        self.ask_with(request, ct, |message| self.send(message))
            .await
    }

    /// [`Self::ask`], on `stream` (an HTTP response stream).
    pub async fn ask_on(
        &self,
        stream: &mpsc::Sender<Bytes>,
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
                let cancel = format!(
                    r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id},"reason":"cancelled by the upstream"}}}}"#
                );
                let _ = send(Bytes::from(cancel)).await;
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
        *self.standalone() = Standalone::default();
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
        let (out, mut written) = mpsc::channel(4);
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
        let (out, mut written) = mpsc::channel(4);
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
        let (first, mut first_rx) = mpsc::channel(HELD + 4);
        link.attach_standalone(first);
        // The oldest three were dropped; the rest come first, in order.
        for n in 3..HELD + 3 {
            assert_eq!(first_rx.recv().await.unwrap(), format!("early {n}"));
        }
        link.send(Bytes::from_static(b"one")).await.unwrap();
        assert_eq!(first_rx.recv().await.unwrap().as_ref(), b"one");
        // The client opened another GET stream: messages go there.
        let (second, mut second_rx) = mpsc::channel(HELD + 4);
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
        tokio::task::yield_now().await;
        let (third, mut third_rx) = mpsc::channel(HELD + 4);
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
        // The session ended: its GET stream ends.
        link.end();
        assert!(third_rx.recv().await.is_none());
    }
}
