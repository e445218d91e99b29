//! The contract between sluice's upstream JSON-RPC engine and a transport
//! (stdio lines, Streamable HTTP, in-memory).
//!
//! A transport moves whole messages and nothing else: it never decodes a
//! message into a typed model, so nothing an upstream sends is lost or
//! respelled on the way in. What it reads arrives on the [`Inbound`]
//! channel it was opened with, in the order the upstream sent it; what
//! cannot be read is reported there too (with the id of the request it
//! answered, when one can be found), so that no call waits for an answer
//! that will never come.
//!
//! Correlation (ids, waiters, progress tokens), the handshake and what
//! sluice does with each message are the engine's, not the transport's.

use futures::future::BoxFuture;

use crate::jsonrpc::{Id, Message};

/// How many inbound items may wait for the engine: a transport that
/// outruns it waits (backpressure), it never buffers without bound.
pub const INBOUND_CAPACITY: usize = 64;

/// What a transport hands the engine, in the order it happened.
#[derive(Debug)]
pub enum Inbound {
    /// A whole message (a response, a request or a notification).
    Message {
        /// The message, as received.
        message: Message,
        /// The request on whose response stream it arrived (Streamable
        /// HTTP says which call a server→client request belongs to; stdio
        /// cannot, and says `None`).
        stream_of: Option<Id>,
    },
    /// Bytes that are not a message sluice can read (over `[limits]
    /// max_message_mb`, not UTF-8, nested too deep, not JSON-RPC).
    Unreadable {
        /// The id found in it, or the id of the request whose response it
        /// was (HTTP knows): that call fails with `why`.
        id: Option<Id>,
        /// What was wrong, in words a user can act on (names the
        /// configuration key when a limit was passed).
        why: String,
    },
    /// The request `id` failed below JSON-RPC (an HTTP status, a reset
    /// connection, a body cut short): its caller gets `why` at once.
    Failed {
        /// The request that failed.
        id: Id,
        /// What happened.
        why: String,
    },
    /// The connection ended (the process exited, the HTTP session expired):
    /// every waiting call fails with `why`, and the supervisor starts a new
    /// connection for the next request.
    Closed {
        /// How it ended, as a sentence fragment ("exited with status 1").
        why: String,
    },
    /// The upstream said it never handled request `id`: it had ended the
    /// session the request went in (Streamable HTTP's 404, or a 400 that
    /// speaks of the session: `streamable::forgot_the_session`). By the time
    /// this arrives the transport says so ([`Transport::session_ended`]),
    /// and the request's caller may send it again on a new connection.
    Unhandled {
        /// The request, never handled.
        id: Id,
        /// How the session ended, as a sentence fragment.
        why: String,
    },
}

/// Why a message could not be sent.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SendError {
    /// The connection is gone: the message was not sent.
    #[error("the connection is closed: {0}")]
    Closed(String),
    /// This one message could not be sent (the connection may still work).
    #[error("{0}")]
    Refused(String),
}

/// Hands the answer to a request straight to the call waiting for it,
/// past the engine's channel and its task (one hop less for every call
/// over HTTP); gives back what is not an answer (a notification, a
/// request). An answer no one waits for is dropped, as the engine drops it.
pub type Answers = std::sync::Arc<dyn Fn(Inbound) -> Option<Inbound> + Send + Sync>;

/// One connection to an upstream, as the engine drives it.
///
/// Opening a transport gives the transport and the receiver of its
/// [`Inbound`] items (a bounded channel of [`INBOUND_CAPACITY`]).
pub trait Transport: Send + Sync + 'static {
    /// Sends one message (a request, a notification, or the response to a
    /// server→client request), as the bytes of `message`. Whatever the
    /// upstream sends back (the response, and anything it sends about the
    /// request before it) arrives as [`Inbound`] items, never as the
    /// result of this call.
    fn send(&self, message: Message) -> BoxFuture<'_, Result<(), SendError>>;

    /// Where answers may go straight (see [`Answers`]): a transport that
    /// reads each request's answer apart from everything else (Streamable
    /// HTTP: a POST's response) may hand an answer there when nothing came
    /// before it on its way, and one that reads everything on one stream
    /// (stdio's lines) when the engine has handled everything before it
    /// ([`Transport::handled`]), so that it cannot overtake a message sent
    /// before it; everything else goes to [`Inbound`], in order.
    fn hand_answers_to(&self, answers: Answers) {
        let _ = answers;
    }

    /// The engine handled one [`Inbound`] item this transport gave it (the
    /// reader, after each): a transport that hands answers straight
    /// to their calls from the same stream as everything else (stdio's
    /// lines) does so only when nothing it gave the engine waits.
    fn handled(&self) {}

    /// Whether every message the upstream sends comes on this one stream
    /// (stdio's lines): then an error that names no request (`null`), with
    /// one request waiting, can only be that one's. Streamable HTTP says
    /// which request each answer is for by the response it comes in, and
    /// sluice guesses nothing there.
    fn one_stream(&self) -> bool {
        false
    }

    /// The protocol version the handshake settled on (Streamable HTTP
    /// sends it with every later request as `MCP-Protocol-Version`).
    fn negotiated(&self, version: &str) {
        let _ = version;
    }

    /// Ends the connection politely (HTTP: `DELETE` the session; stdio:
    /// close the child's stdin, then stop it). Idempotent.
    fn close(&self) -> BoxFuture<'_, ()>;

    /// How the upstream ended the connection's session itself (HTTP 404, or
    /// a 400 that speaks of the session),
    /// once it has: nothing new is sent on the connection, the requests
    /// under way end on it (each answered, failed or [`Inbound::Unhandled`]),
    /// and a new connection need not wait out a restart backoff as after a
    /// crash: the upstream is up.
    fn session_ended(&self) -> Option<String> {
        None
    }
}
