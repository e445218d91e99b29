//! `[limits]`: bounds that hold for every message sluice reads, in every
//! direction and over every transport (a stdio line, an HTTP body, an SSE
//! event), whatever the SDK underneath would allow.

/// Work on an input larger than this many bytes (checking a message,
/// decoding, measuring, storing or paging a result) runs on a blocking
/// thread, not on the threads that serve other sessions (stdio runs one):
/// it takes milliseconds per MB.
pub const BLOCKING_BYTES: usize = 256 << 10;

/// How much of one string is read before its end is worth looking for on a
/// second thread too (a text block's unescape, a message's check): most
/// strings end within it, and a thread costs tens of microseconds, the
/// time this much takes.
pub const ALONE_BYTES: usize = 64 << 10;

/// The `[limits]` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageLimits {
    /// The largest JSON-RPC message sluice reads (`max_message_mb`, in MiB;
    /// default 1024). A larger one fails the call it answers with an error
    /// that names this key.
    pub max_message_bytes: usize,
    /// The requests of one client sluice answers at once
    /// (`max_requests_in_flight`, default 256): a stdio connection's, and
    /// over HTTP a principal's (`[auth]`), a session's or an anonymous
    /// address's. One more is refused at once with an error that names
    /// this key: a stdio client that sends requests without reading the
    /// answers holds at most this many, and then waits, as its writes do
    /// once sluice stops reading its input.
    pub max_requests_in_flight: usize,
    /// The requests one client may send a minute (`requests_per_minute`;
    /// none by default), counted per client as `max_requests_in_flight`
    /// is: a bucket of that many, refilled at that many a minute. One more
    /// is refused at once with an error that names this key and says when
    /// the next is taken.
    pub requests_per_minute: Option<u32>,
}

impl Default for MessageLimits {
    fn default() -> Self {
        Self {
            max_message_bytes: 1 << 30,
            max_requests_in_flight: 256,
            requests_per_minute: None,
        }
    }
}

impl MessageLimits {
    /// The limit as the config spells it, for messages that name the key.
    pub fn describe(&self) -> String {
        format!("[limits] max_message_mb = {}", self.max_message_bytes >> 20)
    }
}
