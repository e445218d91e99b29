//! Serving clients over Streamable HTTP at `/mcp`: many sessions, and
//! 2026-07-28 stateless requests. The accept loop is sluice's own (hyper's
//! HTTP/1 builder) so it can set TCP_NODELAY, the header timeout and each
//! request's [`PeerAddr`].

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use sluice_core::http::HttpLimits;
use tokio_util::sync::CancellationToken;

use super::front::Front;
use super::http_front::AllowedHosts;
use super::http_guard::{self, Guard};
use super::http_sessions::SessionTable;
use super::session::Session;
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
    let mut config =
        StreamableHttpServerConfig::default().with_cancellation_token(shutdown.child_token());
    if access.allow_any {
        config = config.disable_allowed_hosts().disable_allowed_origins();
    } else {
        let mut hosts = vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
            "::1".to_owned(),
        ];
        hosts.extend(access.allowed_hosts.iter().cloned());
        let origins: Vec<String> = hosts
            .iter()
            .flat_map(|host| {
                let host = origin_host(host);
                [format!("http://{host}:*"), format!("https://{host}:*")]
            })
            .collect();
        config = config
            .with_allowed_hosts(hosts)
            .with_allowed_origins(origins);
    }
    let sessions = Arc::new(SessionTable::new(limits.session_idle));
    let service = StreamableHttpService::new(
        {
            let gateway = gateway.clone();
            move || Ok(Session::new(gateway.clone()))
        },
        sessions.clone(),
        config,
    );
    tokio::spawn(sessions.clone().close_idle(shutdown.child_token()));
    let stateless = Front::new(gateway.clone(), gateway.hub().new_session_id(), false);
    {
        let (stateless, shutdown) = (stateless.clone(), shutdown.clone());
        tokio::spawn(async move {
            shutdown.cancelled().await;
            stateless.end();
        });
    }
    let guard = Arc::new(Guard {
        stateless,
        limits,
        sessions: sessions.clone(),
        hosts: AllowedHosts::new(&access.allowed_hosts, access.allow_any),
    });
    let mut router = axum::Router::new().nest_service("/mcp", service).layer(
        axum::middleware::from_fn_with_state(guard, http_guard::guard),
    );
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
    tracing::info!("serving MCP at http://{bound}/mcp");
    ready(bound);
    let connections = hyper_util::server::graceful::GracefulShutdown::new();
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
        // Without TCP_NODELAY a keep-alive client's next request waits on
        // Nagle's algorithm and delayed ACKs: ~40 ms per request.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY on a connection: {e}");
        }
        let service = tower::ServiceExt::map_request(
            router.clone(),
            move |mut request: http::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(PeerAddr(peer));
                request
            },
        );
        let mut builder = hyper::server::conn::http1::Builder::new();
        // The header timeout also closes a keep-alive connection that stays
        // idle that long: half-open and idle connections cannot pile up.
        builder
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(limits.header_timeout);
        let connection = builder.serve_connection(
            hyper_util::rt::TokioIo::new(tcp),
            hyper_util::service::TowerToHyperService::new(service),
        );
        let connection = connections.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(%peer, "HTTP connection ended: {e}");
            }
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
    Ok(())
}

/// Lets the listener hold as many connections as the system allows: the
/// default soft limit of open files (often 1,024) is reached long before
/// the hard one.
fn raise_open_files_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => tracing::debug!("open files limit: {n}"),
        Err(e) => tracing::debug!("cannot raise the open files limit: {e}"),
    }
}

/// The host part of an allowed `host` or `host:port`, as it appears in an
/// `Origin` header (IPv6 addresses in brackets).
fn origin_host(host: &str) -> String {
    if let Some(rest) = host.strip_prefix('[') {
        return format!("[{}]", rest.split(']').next().unwrap_or_default());
    }
    match host.matches(':').count() {
        0 => host.to_owned(),
        1 => host.split(':').next().unwrap_or_default().to_owned(),
        _ => format!("[{host}]"),
    }
}
