//! Serving clients: over stdio (one session) or Streamable HTTP at `/mcp`
//! (many sessions, and 2026-07-28 stateless requests).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use axum::serve::ListenerExt as _;
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::client_lines::ClientLines;
use crate::gateway::Gateway;
use crate::session::Session;

/// Which Host and Origin headers the HTTP endpoint accepts, and which
/// bearer tokens.
#[derive(Debug, Clone, Default)]
pub struct HttpAccess {
    /// Bearer tokens checked on `/mcp` (`[auth]`); `None` serves anyone.
    pub auth: Option<Arc<crate::auth::Authenticator>>,
    /// Extra host names (or `host:port`) accepted besides localhost.
    pub allowed_hosts: Vec<String>,
    /// Accept any Host and Origin (for a server behind a trusted proxy).
    pub allow_any: bool,
}

/// Serves one client over this process's stdin/stdout until it closes
/// stdin or `shutdown` fires.
pub async fn stdio(gateway: Arc<Gateway>, shutdown: CancellationToken) -> anyhow::Result<()> {
    let session = Session::for_connection(gateway.clone());
    let id = session.id();
    let running = session
        .serve_with_ct(
            {
                let (reader, writer) = rmcp::transport::stdio_pipes();
                ClientLines::new(reader, writer).on_end(move || {
                    tokio::spawn(async move { gateway.cancel_session_calls(id).await });
                })
            },
            shutdown,
        )
        .await
        .context("serving the client over stdio")?;
    let reason = running.waiting().await?;
    tracing::info!(?reason, "client session ended");
    Ok(())
}

/// Serves clients at `http://ADDR/mcp` until `shutdown` fires; `ready`
/// receives the bound address.
pub async fn http(
    gateway: Arc<Gateway>,
    addr: SocketAddr,
    access: HttpAccess,
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
    let sessions = Arc::new(LocalSessionManager::default());
    let service = StreamableHttpService::new(
        move || Ok(Session::new(gateway.clone())),
        sessions.clone(),
        config,
    );
    let mut router = axum::Router::new().nest_service("/mcp", service);
    if let Some(auth) = access.auth {
        router = crate::auth::protect(router, auth, sessions);
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let bound = listener.local_addr()?;
    // Without TCP_NODELAY a keep-alive client's next request waits on
    // Nagle's algorithm and delayed ACKs: ~40 ms per request.
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY on a connection: {e}");
        }
    });
    tracing::info!("serving MCP at http://{bound}/mcp");
    ready(bound);
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .context("HTTP server failed")?;
    Ok(())
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
