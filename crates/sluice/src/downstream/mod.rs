//! The client side of sluice (downstream): serving clients over stdio
//! ([`stdio`], framed by [`lines`]) or Streamable HTTP ([`http`], answered
//! by [`http_endpoint`], guarded by [`auth`] and [`http_guard`], sessions
//! in [`http_sessions`]). Every request is answered by a [`front`] (one per
//! connection or session, and one for the 2026-07-28 requests that stand
//! alone), which hands it to the gateway; rmcp's server is not involved.

use std::net::SocketAddr;
use std::sync::Arc;

pub mod answer;
pub mod auth;
mod bounds;
pub mod front;
pub mod http;
pub mod http_endpoint;
pub mod http_front;
pub mod http_guard;
pub mod http_headers;
pub mod http_sessions;
pub mod lines;
pub mod link;
pub mod outbox;
pub mod session;
pub mod stdio;
pub mod stdio_fds;
pub mod tls;

/// The address an HTTP request came from, in its extensions: anonymous
/// clients' limits are counted per address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// In an HTTP request's extensions when it came over sluice's own TLS
/// (`[http] tls_cert`): the URLs sluice gives back are `https://`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverTls;

/// The JSON-RPC error code of a refusal that is the server's state, not the
/// request's fault (too many sessions, connections, requests in flight).
pub(crate) const SERVER_BUSY: i32 = -32000;

/// The refusal of a request while `max` of its client's requests are being
/// answered (`[limits] max_requests_in_flight`): over stdio the client is
/// the connection, over HTTP its principal, session or address.
pub(crate) fn too_many_in_flight(max: usize) -> rmcp::model::ErrorData {
    rmcp::model::ErrorData::new(
        rmcp::model::ErrorCode(SERVER_BUSY),
        format!(
            "sluice is already answering {max} requests from this client, the most it answers at once (`[limits] max_requests_in_flight` in sluice's config): wait for their answers, then send this request again"
        ),
        None,
    )
}

/// Which Host and Origin headers the HTTP endpoint accepts, and which
/// bearer tokens.
#[derive(Debug, Clone, Default)]
pub struct HttpAccess {
    /// Bearer tokens checked on `/mcp` (`[auth]`); `None` serves anyone.
    pub auth: Option<Arc<crate::downstream::auth::Authenticator>>,
    /// Extra host names (or `host:port`) accepted besides localhost.
    pub allowed_hosts: Vec<String>,
    /// Accept any Host and Origin (for a server behind a trusted proxy).
    pub allow_any: bool,
    /// TLS on the listener (`[http] tls_cert`, `tls_key`): `https://`.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}
