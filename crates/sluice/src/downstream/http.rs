//! Serving clients over Streamable HTTP at `/mcp`: many sessions, and
//! 2026-07-28 stateless requests, answered by [`http_endpoint`]. The accept
//! loop is sluice's own (hyper's HTTP/1 builder) so it can set TCP_NODELAY,
//! the header timeout and each request's [`PeerAddr`], and speak TLS
//! ([`super::tls`]) when `[http] tls_cert` is set.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use sluice_core::http::HttpLimits;
use tokio_util::sync::CancellationToken;

use super::front::Front;
use super::http_endpoint::{self, Endpoint};
use super::http_front::AllowedHosts;
use super::http_guard;
use super::http_sessions::SessionTable;
use super::{HttpAccess, PeerAddr};
use crate::gateway::Gateway;

/// Serves clients at `http://ADDR/mcp` until `shutdown` fires; `ready`
/// receives the bound address.
pub async fn serve(
    gateway: Arc<Gateway>,
    addr: SocketAddr,
    access: HttpAccess,
    limits: HttpLimits,
    shutdown: CancellationToken,
    ready: impl FnOnce(SocketAddr),
) -> anyhow::Result<()> {
    let sessions = Arc::new(SessionTable::new(limits.session_idle));
    tokio::spawn(sessions.clone().close_idle(shutdown.child_token()));
    let stateless = Front::new(gateway.clone(), gateway.hub().new_session_id(), false);
    {
        let (stateless, sessions, shutdown) =
            (stateless.clone(), sessions.clone(), shutdown.clone());
        tokio::spawn(async move {
            shutdown.cancelled().await;
            stateless.end();
            // Their GET streams end, so their connections can close.
            sessions.close_all();
        });
    }
    let endpoint = Arc::new(Endpoint {
        gateway: gateway.clone(),
        limits,
        sessions: sessions.clone(),
        hosts: AllowedHosts::new(&access.allowed_hosts, access.allow_any),
        stateless,
    });
    let mut router = axum::Router::new()
        .route("/mcp", axum::routing::any(http_endpoint::handle))
        .with_state(endpoint.clone())
        .layer(axum::middleware::from_fn_with_state(
            endpoint,
            http_guard::guard,
        ));
    // Outermost: a request without a valid token is refused before its
    // body is read.
    if let Some(auth) = access.auth {
        router = crate::downstream::auth::protect(router, auth, sessions);
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let bound = listener.local_addr()?;
    raise_open_files_limit();
    let scheme = super::tls::scheme(&access.tls);
    tracing::info!("serving MCP at {scheme}://{bound}/mcp");
    ready(bound);
    let bounds = Connections {
        header_timeout: limits.header_timeout,
        max: limits.max_connections,
        key: "`[http] max_connections`",
        tls: access.tls.map(tokio_rustls::TlsAcceptor::from),
        metrics: Some(gateway.governor().metrics().clone()),
    };
    serve_connections(listener, router, bounds, shutdown).await;
    Ok(())
}

/// Serves `router` on every connection `listener` accepts (HTTP/1.1, each
/// request told its peer's address as a [`PeerAddr`]) until `shutdown`
/// fires; then waits for open connections to end, at most 5 s. A
/// connection idle for `header_timeout` (or slow to send its headers) is
/// closed.
pub(crate) async fn serve_connections(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    bounds: Connections,
    shutdown: CancellationToken,
) {
    let Connections {
        header_timeout,
        max,
        key,
        tls,
        metrics,
    } = bounds;
    let connections = hyper_util::server::graceful::GracefulShutdown::new();
    // One permit per open connection, held by its task.
    let open = Arc::new(tokio::sync::Semaphore::new(max));
    let mut refusing = false;
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors, most likely: the connections
                // that hold them end within the header timeout.
                tracing::warn!("cannot accept a connection: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(held) = open.clone().try_acquire_owned() else {
            if !std::mem::replace(&mut refusing, true) {
                tracing::warn!(open = max, "refusing connections: {key} reached");
            }
            if let Some(metrics) = &metrics {
                metrics.refused(crate::metrics::Limit::Connections);
            }
            // A TLS client could not read a plain answer: it is closed.
            if tls.is_none() {
                tokio::spawn(refuse_connection(tcp, max, key));
            }
            continue;
        };
        refusing = false;
        // Without TCP_NODELAY a keep-alive client's next request waits on
        // Nagle's algorithm and delayed ACKs: ~40 ms per request.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY on a connection: {e}");
        }
        let over_tls = tls.is_some();
        let service = tower::ServiceExt::map_request(
            router.clone(),
            move |mut request: http::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(PeerAddr(peer));
                if over_tls {
                    request.extensions_mut().insert(super::OverTls);
                }
                request
            },
        );
        let mut builder = hyper::server::conn::http1::Builder::new();
        // The header timeout also closes a keep-alive connection that stays
        // idle that long: half-open and idle connections cannot pile up.
        builder
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(header_timeout);
        let service = hyper_util::service::TowerToHyperService::new(service);
        let Some(acceptor) = &tls else {
            let connection = builder.serve_connection(hyper_util::rt::TokioIo::new(tcp), service);
            let connection = connections.watch(connection);
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(%peer, "HTTP connection ended: {e}");
                }
                drop(held);
            });
            continue;
        };
        let (accepting, watcher) = (acceptor.accept(tcp), connections.watcher());
        tokio::spawn(async move {
            // The handshake, like a request's headers, within the header
            // timeout: a client that connects and says nothing is closed.
            let tls = match tokio::time::timeout(header_timeout, accepting).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, "TLS handshake failed: {e}");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "no TLS handshake within the header timeout");
                    return;
                }
            };
            let connection = builder.serve_connection(hyper_util::rt::TokioIo::new(tls), service);
            if let Err(e) = watcher.watch(connection).await {
                tracing::debug!(%peer, "HTTPS connection ended: {e}");
            }
            drop(held);
        });
    }
    // Streams still open (a GET's event stream) end with the sessions,
    // which `shutdown` closes; do not wait on a client for long.
    tokio::select! {
        () = connections.shutdown() => {}
        () = tokio::time::sleep(std::time::Duration::from_secs(5)) => {
            tracing::debug!("HTTP connections still open at shutdown were dropped");
        }
    }
}

/// How many connections a listener serves at once, and for how long one
/// may take to send a request's headers.
pub(crate) struct Connections {
    /// A request whose headers have not all arrived by then is closed;
    /// so is a connection idle that long.
    pub header_timeout: std::time::Duration,
    /// Open connections at most; one more is answered 503 and closed.
    pub max: usize,
    /// The setting that says so, named in the refusal.
    pub key: &'static str,
    /// TLS on every connection (`[http] tls_cert`); `None`: plain HTTP.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// Where a refused connection is counted (`sluice_refusals_total`).
    pub metrics: Option<Arc<crate::metrics::Metrics>>,
}

/// Answers a connection over the bound 503, without reading its request,
/// and closes it. What the client sent is read and dropped until it closes
/// its side (a socket closed with unread input is reset, which can lose
/// the answer before the client reads it), for a second at most: the
/// answer fits the socket's buffer, and a client that does not take it
/// is not waited for.
async fn refuse_connection(mut tcp: tokio::net::TcpStream, max: usize, key: &str) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": super::SERVER_BUSY,
            "message": format!(
                "sluice has {max} open connections, the most it serves at once ({key}): close connections you no longer use, or retry in a moment"
            ),
        },
    })
    .to_string();
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let write = async {
        tcp.write_all(answer.as_bytes()).await?;
        tcp.shutdown().await?;
        let mut unread = [0u8; 4096];
        while tcp.read(&mut unread).await? > 0 {}
        Ok::<(), std::io::Error>(())
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), write).await;
}

/// Lets the listener hold as many connections as the system allows (up to
/// `[http] max_connections`): the default soft limit of open files (often
/// 1,024) is reached long before the hard one.
fn raise_open_files_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => tracing::debug!("open files limit: {n}"),
        Err(e) => tracing::debug!("cannot raise the open files limit: {e}"),
    }
}
