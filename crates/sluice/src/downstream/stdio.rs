//! Serving one client over this process's stdin and stdout.

use std::sync::Arc;

use anyhow::Context as _;
use rmcp::ServiceExt;
use tokio_util::sync::CancellationToken;

use super::lines::ClientLines;
use super::session::Session;
use crate::gateway::Gateway;

/// Serves one client over this process's stdin/stdout until it closes
/// stdin or `shutdown` fires.
pub async fn serve(gateway: Arc<Gateway>, shutdown: CancellationToken) -> anyhow::Result<()> {
    let session = Session::for_connection(gateway.clone());
    let id = session.id();
    let max_line = gateway.limits().max_message_bytes;
    let running = session
        .serve_with_ct(
            {
                let (reader, writer) = rmcp::transport::stdio_pipes();
                ClientLines::new(reader, writer)
                    .with_limit(max_line)
                    .on_end(move || {
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
