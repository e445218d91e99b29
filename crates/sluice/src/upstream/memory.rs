//! An upstream server run as a task of sluice's own, connected over an
//! in-memory pipe instead of a child's stdio: `sluice demo` and the test
//! harness ([`crate::testing`]) run the sample server this way, so neither
//! needs a process, and under tokio's paused clock the whole path (the
//! server's sleeps included) follows virtual time.
//!
//! It is chosen by calling [`Upstream::serve_in_memory`] before the
//! upstream starts, never by configuration: a user's config has no way to
//! name it. The upstream's spec keeps saying what the server stands for
//! (e.g. `sluice sample-server`), which its error messages quote.

use std::sync::Arc;
use std::time::Instant;

use rmcp::{ServerHandler, ServiceExt as _};
use tokio::io::DuplexStream;
use tokio_util::sync::CancellationToken;

use super::client::UpstreamClient;
use super::rpc::Lifecycle;
use super::{Connection, Upstream, lock};

/// The pipe's buffer in each direction: as a pipe's, writes wait when it
/// is full, so large results stream through it.
const PIPE_BYTES: usize = 1 << 20;

/// Starts one session of a server on its end of a pipe; called once per
/// connection (a restart makes a new one). The session ends when the pipe
/// closes or the token is cancelled.
type Start = dyn Fn(DuplexStream, CancellationToken) + Send + Sync;

/// A server that sluice runs in memory, one session per connection.
#[derive(Clone)]
pub struct InMemory {
    start: Arc<Start>,
}

impl std::fmt::Debug for InMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InMemory")
    }
}

impl InMemory {
    /// `server` (an rmcp server handler), served afresh from a clone for
    /// each connection.
    pub fn new<S>(server: S) -> Self
    where
        S: ServerHandler + Clone + Send + Sync + 'static,
    {
        Self {
            start: Arc::new(move |io: DuplexStream, stop: CancellationToken| {
                let server = server.clone();
                tokio::spawn(async move {
                    match server.serve_with_ct(io, stop).await {
                        Ok(running) => {
                            let _ = running.waiting().await;
                        }
                        Err(e) => tracing::debug!("in-memory server ended in its handshake: {e}"),
                    }
                });
            }),
        }
    }
}

impl Upstream {
    /// Serves this upstream from `server`, in memory, instead of what its
    /// spec says. Call it before the upstream starts (before the gateway's
    /// `begin`); a restart after the server's session ends serves it again.
    pub fn serve_in_memory(&self, server: InMemory) {
        *lock(&self.in_memory) = Some(server);
    }

    /// Starts a session of `server` and makes the MCP handshake with it.
    pub(super) async fn connect_memory(
        &self,
        server: InMemory,
        client: UpstreamClient,
        lifecycle: Lifecycle,
    ) -> Result<Connection, String> {
        let (ours, theirs) = tokio::io::duplex(PIPE_BYTES);
        let stop = CancellationToken::new();
        (server.start)(theirs, stop.clone());
        // A handshake dropped midway (sluice shutting down) stops the server.
        let stopped_if_dropped = stop.clone().drop_guard();
        let (read, write) = tokio::io::split(ours);
        let (lines, inbound) = super::lines::open(self.name(), read, write, self.max_message_bytes);
        match self.handshake(lines, inbound, client, lifecycle).await {
            Ok((rpc, info)) => {
                stopped_if_dropped.disarm();
                Ok(Connection {
                    rpc,
                    info,
                    exit: None,
                    stop: Some(stop),
                    started: Instant::now(),
                })
            }
            Err(e) => Err(format!("(in memory) {e}")),
        }
    }
}
