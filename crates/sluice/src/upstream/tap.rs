//! A transport wrapper that takes the notifications about one request
//! (progress; logs for 2026-07-28 clients) out of an upstream's message
//! stream, in order.
//!
//! rmcp handles each notification in a task of its own, so a progress
//! notification can reach sluice's handler after the response it preceded:
//! over Streamable HTTP the client's response stream is closed by then and
//! the progress is lost. Taken here, at the point where messages are read
//! one by one, every progress notification is queued for its request
//! before that request's response is even seen.

use std::sync::Arc;

use rmcp::model::{JsonRpcMessage, ServerNotification};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

use crate::hub::Hub;

/// `inner`, with progress for routed requests diverted to their routes.
pub struct Tapped<T> {
    /// The real transport.
    pub inner: T,
    /// Where the routes are.
    pub hub: Arc<Hub>,
    /// Whose messages these are.
    pub upstream: String,
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Tapped<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let message = self.inner.receive().await?;
            if let JsonRpcMessage::Notification(n) = &message {
                let diverted = match &n.notification {
                    ServerNotification::ProgressNotification(p) => {
                        self.hub.divert_progress(&self.upstream, &p.params)
                    }
                    ServerNotification::LoggingMessageNotification(l) => {
                        self.hub.divert_log(&self.upstream, &l.params)
                    }
                    _ => false,
                };
                if diverted {
                    continue;
                }
            }
            return Some(message);
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
