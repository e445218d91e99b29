//! Waiting for a peer's answer while honouring the caller's cancellation.

use rmcp::model::{CancelledNotification, CancelledNotificationParam};
use rmcp::service::{RequestHandle, ServiceError, ServiceRole};
use tokio_util::sync::CancellationToken;

/// Waits for `handle`'s response; if `ct` fires first, tells the peer
/// (`notifications/cancelled` with `reason`) and returns `Cancelled`.
pub async fn await_or_cancel<R: ServiceRole>(
    handle: RequestHandle<R>,
    ct: &CancellationToken,
    reason: &str,
) -> Result<R::PeerResp, ServiceError> {
    let id = handle.id.clone();
    let peer = handle.peer.clone();
    tokio::select! {
        response = handle.await_response() => response,
        () = ct.cancelled() => {
            let params = CancelledNotificationParam::new(Some(id), Some(reason.to_owned()));
            let notification = CancelledNotification::new(params);
            if let Err(e) = peer.send_notification(notification.into()).await {
                tracing::debug!("cancellation not delivered: {e}");
            }
            Err(ServiceError::Cancelled { reason: Some(reason.to_owned()) })
        }
    }
}

/// The error a request gets when its client cancelled it (or left) before
/// sluice answered.
pub fn cancelled_error() -> rmcp::model::ErrorData {
    rmcp::model::ErrorData::new(
        rmcp::model::ErrorCode::INTERNAL_ERROR,
        "request cancelled",
        None,
    )
}
