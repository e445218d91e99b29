//! Serving one client over this process's stdin and stdout, or any
//! connection whose two ends are a reader and a writer (the demo's and the
//! test harness's in-memory pipes).
//!
//! Every message the client sends is read by sluice's own layer
//! ([`ClientLines`]) and answered by the connection's [`Front`]: the
//! lifecycle, the lists, the calls and every other request. rmcp's server
//! is not involved.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;

use super::front::Front;
use super::lines::ClientLines;
use super::link::ClientLink;
use crate::gateway::Gateway;

/// How long the requests still running when the client leaves (cancelled
/// then) may take to end.
const DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Serves one client over this process's stdin/stdout until it closes
/// stdin or `shutdown` fires.
pub async fn serve(gateway: Arc<Gateway>, shutdown: CancellationToken) -> anyhow::Result<()> {
    let (reader, writer) = super::stdio_fds::client_stdio();
    serve_connection(gateway, reader, writer, shutdown).await
}

/// Serves one client that writes to `reader` and reads from `writer`,
/// until its input ends or `shutdown` fires.
pub async fn serve_connection<R, W>(
    gateway: Arc<Gateway>,
    reader: R,
    writer: W,
    shutdown: CancellationToken,
) -> anyhow::Result<()>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out, written) = super::outbox::channel(super::lines::NOTICES);
    let link = Arc::new(ClientLink::new(out));
    let id = gateway.hub().new_session_id();
    let (max_line, max_in_flight) = (
        gateway.limits().max_message_bytes,
        gateway.limits().max_requests_in_flight,
    );
    let front = Front::new(gateway.clone(), id, true);
    front.set_link(link.clone());
    let mut lines = ClientLines::new(reader, writer)
        .with_limit(max_line)
        .with_in_flight(max_in_flight)
        .with_front(front.clone())
        .with_link(link, written)
        .on_end({
            let front = front.clone();
            move || front.end()
        });
    loop {
        let message = tokio::select! {
            () = shutdown.cancelled() => break,
            message = lines.receive_rest() => message,
        };
        match message {
            // What no one acts on: an answer to no request of sluice's, or
            // a notification it has no use for.
            Some(message) => tracing::debug!(session = id, "ignored {message:?}"),
            None => break,
        }
    }
    front.end();
    // Its calls still running upstream are cancelled there, and their
    // tasks given a moment to end, before sluice goes on (to exit, for
    // stdio, which stops the upstreams): a client that left wants no
    // answer, and the upstreams hear that it left.
    gateway.cancel_session_calls(id).await;
    let answering = lines.answering();
    answering.close();
    if tokio::time::timeout(DRAIN, answering.wait()).await.is_err() {
        tracing::debug!(
            session = id,
            "requests still running {DRAIN:?} after the client left"
        );
    }
    tracing::info!(session = id, "client session ended");
    Ok(())
}
