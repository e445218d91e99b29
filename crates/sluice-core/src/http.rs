//! `[http]`: the limits of the Streamable HTTP listener, which any client
//! that reaches the port can push against.

use std::time::Duration;

/// The `[http]` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// The largest request body accepted (`max_body_mb`); over it: 413.
    pub max_body_bytes: u64,
    /// Open 2025-11-25 sessions at most (`max_sessions`); a new one over it
    /// is refused with 503.
    pub max_sessions: usize,
    /// Open sessions of one principal at most, with `[auth]`
    /// (`max_sessions_per_principal`): one more is refused with 429, so
    /// that a client that leaks sessions cannot take every one of
    /// `max_sessions` from the others.
    pub max_sessions_per_principal: usize,
    /// A session unused this long is closed and its memory given back
    /// (`session_idle_s`).
    pub session_idle: Duration,
    /// A request whose headers have not all arrived by then is closed
    /// (`header_timeout_s`): half-open requests cannot pile up.
    pub header_timeout: Duration,
    /// Open connections at most (`max_connections`); one more is answered
    /// 503 and closed. Each costs memory (~14 KB for one that sent half a
    /// request) until it closes, and sluice raises its open-files limit to
    /// the hard one (20,000 on the machine this was measured on).
    pub max_connections: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_body_bytes: 16 << 20,
            max_sessions: 1_000,
            max_sessions_per_principal: 100,
            session_idle: Duration::from_secs(1_800),
            header_timeout: Duration::from_secs(10),
            max_connections: 10_000,
        }
    }
}

impl HttpLimits {
    /// How long a request body may take to arrive once its headers have
    /// (six header timeouts: 60 s by default): long enough for `max_body_mb`
    /// over a slow link, short enough that a client trickling a body cannot
    /// hold a connection for ever.
    pub fn body_timeout(&self) -> Duration {
        self.header_timeout * 6
    }
}
