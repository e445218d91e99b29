//! [`Connection`]: one live MCP session with an upstream, whichever its
//! transport.

use super::*;

/// One live session with the upstream.
pub struct Connection {
    pub(super) service: RunningService<RoleClient, UpstreamClient>,
    pub(super) exit: Option<watch::Receiver<Option<String>>>,
    pub(super) stop: Option<CancellationToken>,
    pub(super) started: Instant,
}

impl Connection {
    pub(super) fn alive(&self) -> bool {
        !self.service.peer().is_transport_closed()
            && self.exit.as_ref().is_none_or(|e| e.borrow().is_none())
    }

    /// The protocol era of the session with the upstream.
    pub fn era(&self) -> Era {
        Era::of(
            self.info()
                .map(|info| info.protocol_version.clone())
                .as_ref(),
        )
    }

    /// What the upstream declared about itself.
    pub fn info(&self) -> Option<Arc<ServerPeerInfo>> {
        self.service.peer().peer_info()
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
                    _ => "closed its stdout".to_owned(),
                }
            }
            None => "closed the connection".to_owned(),
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
        for id in ids {
            let params =
                rmcp::model::CancelledNotificationParam::new(Some(id), Some(reason.to_owned()));
            let notification = rmcp::model::CancelledNotification::new(params);
            if let Err(e) = self
                .service
                .peer()
                .send_notification(notification.into())
                .await
            {
                tracing::debug!(%upstream, "cancellation not delivered: {e}");
            }
        }
    }

    /// Tells the upstream that the client's roots changed.
    pub async fn notify_roots_list_changed(&self) {
        if let Err(e) = self.service.peer().notify_roots_list_changed().await {
            tracing::debug!("roots/list_changed not delivered: {e}");
        }
    }
}
