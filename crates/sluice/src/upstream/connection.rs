//! [`Connection`]: one live MCP session with an upstream, whichever its
//! transport.

use super::*;

/// One live session with the upstream.
pub struct Connection {
    pub(super) rpc: rpc::Rpc,
    pub(super) info: Arc<ServerPeerInfo>,
    pub(super) exit: Option<watch::Receiver<Option<String>>>,
    pub(super) stop: Option<CancellationToken>,
    pub(super) started: Instant,
}

impl Drop for Connection {
    fn drop(&mut self) {
        // A connection no one uses any more stops its process (or its
        // in-memory server): stdin closes with the engine, then the child
        // has a grace period before it is killed.
        if let Some(stop) = &self.stop {
            stop.cancel();
        }
    }
}

impl Connection {
    pub(super) fn alive(&self) -> bool {
        self.rpc.is_open() && self.exit.as_ref().is_none_or(|e| e.borrow().is_none())
    }

    /// The protocol era of the session with the upstream.
    pub fn era(&self) -> Era {
        Era::of(Some(&self.info.protocol_version))
    }

    /// What the upstream declared about itself.
    pub fn info(&self) -> Option<Arc<ServerPeerInfo>> {
        Some(self.info.clone())
    }

    /// How the connection ended, waiting briefly for the exit status.
    pub(super) async fn how_it_ended(&self) -> String {
        match &self.exit {
            Some(exit) => {
                let mut exit = exit.clone();
                let waited =
                    tokio::time::timeout(Duration::from_secs(2), exit.wait_for(Option::is_some))
                        .await;
                match waited {
                    Ok(Ok(status)) => status.clone().unwrap_or_default(),
                    _ => self
                        .rpc
                        .ended()
                        .unwrap_or_else(|| "closed its stdout".to_owned()),
                }
            }
            None => self
                .rpc
                .session_ended()
                .or_else(|| self.rpc.ended())
                .unwrap_or_else(|| "closed the connection".to_owned()),
        }
    }
}

impl Connection {
    /// Cancels these requests (`notifications/cancelled`); their callers get
    /// a "cancelled" error at once.
    pub(super) async fn cancel(
        &self,
        upstream: &str,
        ids: Vec<rmcp::model::RequestId>,
        reason: &str,
    ) {
        tracing::debug!(%upstream, "cancelling {} requests: {reason}", ids.len());
        for id in ids {
            self.rpc.cancel(&rpc::own_id(&id), reason).await;
        }
    }

    /// Tells the upstream that the client's roots changed.
    pub async fn notify_roots_list_changed(&self) {
        self.rpc.notify_roots_list_changed().await;
    }
}
