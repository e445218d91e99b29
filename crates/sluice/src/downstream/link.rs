//! [`ClientLink`]: what sluice's own layer sends a client beside rmcp's
//! server, as bytes: an upstream's log messages (and the session's other
//! notifications, in their order), and the requests an upstream asks the
//! client (`roots/list`, sampling, elicitation), relayed with ids of
//! sluice's own and answered with the client's bytes. On a stdio
//! connection they go on the connection; in an HTTP session, a request on
//! the stream of the call that caused it, and the rest on the session's
//! GET stream while the client holds one open ([`ClientLink::attach_standalone`]).
//!
//! rmcp's server numbers the requests it sends the client (0, 1, 2, …);
//! the link's ids are strings (`"sluice-1"`, …), so the client's answers to
//! either can never be mistaken for the other's ([`ClientLink::answered`]).

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::jsonrpc::{CallFailed, Id, Kind, Message, Pending};

/// The prefix of the ids of the requests the link sends.
const ID_PREFIX: &str = "sluice-";

/// Messages for one client connection, written in the order given; or,
/// for an HTTP session ([`ClientLink::per_stream`]), the requests relayed on
/// the stream of the call that caused them.
pub struct ClientLink {
    out: Option<mpsc::Sender<Bytes>>,
    /// An HTTP session's GET stream, while one is open.
    standalone: std::sync::Mutex<Option<mpsc::Sender<Bytes>>>,
    asked: Pending<Message>,
    next: AtomicU64,
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
            standalone: std::sync::Mutex::new(None),
            asked: Pending::new(),
            next: AtomicU64::new(1),
        }
    }

    /// A link with no writer of its own (an HTTP session): requests are
    /// relayed on the stream of the call that caused them ([`Self::ask_on`]).
    pub fn per_stream() -> ClientLink {
        ClientLink {
            out: None,
            standalone: std::sync::Mutex::new(None),
            asked: Pending::new(),
            next: AtomicU64::new(1),
        }
    }

    /// Whether the link writes to the connection itself ([`Self::new`]).
    pub fn writes(&self) -> bool {
        self.out.is_some()
    }

    /// Makes `stream` (an HTTP session's GET stream) where the session's
    /// messages go that belong to no call, in place of the one before.
    pub fn attach_standalone(&self, stream: mpsc::Sender<Bytes>) {
        *self.standalone.lock().unwrap_or_else(|p| p.into_inner()) = Some(stream);
    }

    /// Where a message that belongs to no call goes: the connection, or
    /// an HTTP session's GET stream while the client holds it open. `None`:
    /// nowhere of the link's (rmcp's server sends it).
    pub fn sender(&self) -> Option<mpsc::Sender<Bytes>> {
        if let Some(out) = &self.out {
            return Some(out.clone());
        }
        let mut standalone = self.standalone.lock().unwrap_or_else(|p| p.into_inner());
        if standalone.as_ref().is_some_and(mpsc::Sender::is_closed) {
            *standalone = None;
        }
        standalone.clone()
    }

    /// Sends one message (its bytes as they are) on the connection, or an
    /// HTTP session's GET stream.
    pub async fn send(&self, message: Bytes) -> Result<(), AskError> {
        match self.sender() {
            Some(out) => out.send(message).await.map_err(|_| AskError::Gone),
            None => Err(AskError::Gone),
        }
    }

    /// Relays `request` (an upstream's, as it sent it) to the client under
    /// an id of the link's own, on the connection; gives the client's answer
    /// as it sent it (a result or an error, under that id). When `ct` fires
    /// first, the client is told (`notifications/cancelled`).
    pub async fn ask(
        &self,
        request: &Message,
        ct: &CancellationToken,
    ) -> Result<Message, AskError> {
        match self.sender() {
            Some(out) => self.ask_on(&out, request, ct).await,
            None => Err(AskError::Gone),
        }
    }

    /// [`Self::ask`], on `stream` (an HTTP response stream).
    pub async fn ask_on(
        &self,
        stream: &mpsc::Sender<Bytes>,
        request: &Message,
        ct: &CancellationToken,
    ) -> Result<Message, AskError> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let id = Id::string(&format!("{ID_PREFIX}{n}"));
        let waiter = self.asked.register_id(id.clone())?;
        let send =
            |message: Bytes| async move { stream.send(message).await.map_err(|_| AskError::Gone) };
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
    /// relayed; `false` leaves it to rmcp.
    pub fn answered(&self, message: &Message) -> bool {
        if !matches!(message.kind(), Kind::Response | Kind::Error) {
            return false;
        }
        let Some(id) = message.id() else { return false };
        if !id.is_string() || !id.as_json().starts_with(&format!("\"{ID_PREFIX}")) {
            return false;
        }
        // An answer nobody waits for any more (cancelled) is dropped here
        // too: rmcp never sent that id.
        self.asked.complete(&id, message.clone());
        true
    }

    /// The client left: every relayed request fails.
    pub fn end(&self) {
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
        // rmcp's own answers (numbers) are not the link's.
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

    /// An HTTP session's GET stream: messages of no call go on it while the
    /// client holds it open; a new GET stream replaces the old one; once
    /// the client let it go, the link has nowhere to send (rmcp's server
    /// does, typed) and says so instead of failing later.
    #[tokio::test]
    async fn an_http_sessions_get_stream_carries_messages_while_it_is_open() {
        let link = ClientLink::per_stream();
        assert!(link.sender().is_none());
        assert!(matches!(
            link.send(Bytes::from_static(b"{}")).await,
            Err(AskError::Gone)
        ));
        let (first, mut first_rx) = mpsc::channel(4);
        link.attach_standalone(first);
        link.send(Bytes::from_static(b"one")).await.unwrap();
        assert_eq!(first_rx.recv().await.unwrap().as_ref(), b"one");
        // The client opened another GET stream: messages go there.
        let (second, mut second_rx) = mpsc::channel(4);
        link.attach_standalone(second);
        link.send(Bytes::from_static(b"two")).await.unwrap();
        assert_eq!(second_rx.recv().await.unwrap().as_ref(), b"two");
        assert!(first_rx.recv().await.is_none(), "the old stream ends");
        // The client went away.
        drop(second_rx);
        assert!(link.sender().is_none());
        assert!(!link.writes());
    }
}
