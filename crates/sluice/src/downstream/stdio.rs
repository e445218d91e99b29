//! Serving one client over this process's stdin and stdout.

use std::sync::Arc;

use anyhow::Context as _;
use rmcp::ServiceExt;
use tokio_util::sync::CancellationToken;

use super::front::Front;
use super::lines::ClientLines;
use super::link::ClientLink;
use super::session::Session;
use crate::gateway::Gateway;

/// Serves one client over this process's stdin/stdout until it closes
/// stdin or `shutdown` fires.
pub async fn serve(gateway: Arc<Gateway>, shutdown: CancellationToken) -> anyhow::Result<()> {
    let (out, written) = tokio::sync::mpsc::channel(super::lines::NOTICES);
    let link = Arc::new(ClientLink::new(out));
    let session = Session::for_connection(gateway.clone()).with_link(link.clone());
    let id = session.id();
    let max_line = gateway.limits().max_message_bytes;
    let front = Front::new(gateway.clone(), id, true);
    let running = session
        .serve_with_ct(
            {
                let (reader, writer) = super::stdio_fds::client_stdio();
                let front = front.clone();
                ClientLines::new(reader, writer)
                    .with_limit(max_line)
                    .with_front(front.clone())
                    .with_link(link, written)
                    .on_end(move || {
                        front.end();
                        tokio::spawn(async move { gateway.cancel_session_calls(id).await });
                    })
            },
            shutdown,
        )
        .await
        .context("serving the client over stdio")?;
    front.attach(running.peer().clone());
    let reason = running.waiting().await?;
    tracing::info!(?reason, "client session ended");
    Ok(())
}
