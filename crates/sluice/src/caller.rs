//! [`Caller`]: who is asking, carried with every request through the
//! gateway and into sluice's own tools.

use std::sync::Arc;

use rmcp::model::{RequestId, RequestMetaObject};
use sluice_core::store::Owner;
use tokio_util::sync::CancellationToken;

use crate::hub::SessionId;
use crate::jsonrpc::Id;

/// The [`Caller::request`] of a peer's request whose id is `id`: `None`
/// when it is not one MCP allows that sluice reads. A request's id is a
/// string or an integer: `1.5` is not, and an integer beyond 64 bits is not
/// read (`-0`, `1.0` and `1e2` are, as rmcp reads them).
pub fn request_id(id: &Id) -> Option<RequestId> {
    use rmcp::model::NumberOrString;
    // The common forms read where they lie (every request reads its id
    // twice: `Front::id_fault`, then its `Caller`); rmcp's reading, through
    // a `Value`, for the rest.
    if let Some(n) = id.as_u64().and_then(|n| i64::try_from(n).ok()) {
        return Some(NumberOrString::Number(n));
    }
    let json = id.as_json();
    if id.is_string() && !json.contains('\\') {
        return Some(NumberOrString::String(json[1..json.len() - 1].into()));
    }
    serde_json::from_str(json).ok()
}

/// Why a request whose id is `id` is refused, when [`request_id`] does
/// not read it.
pub fn unread_request_id(id: &Id) -> String {
    format!(
        "the request's id {} is not a string or an integer sluice can read (64 bits): MCP request ids are strings or integers",
        sluice_core::format::quoted_cut(id.as_json())
    )
}

/// Who is asking: enough to route progress, cancellation and server→client
/// requests back to the client.
#[derive(Clone)]
pub struct Caller {
    /// The client's session (`None` for a 2026-07-28 request or `sluice call`).
    pub session: Option<SessionId>,
    /// The client's request id.
    pub request: RequestId,
    /// The request's `_meta` (progress token and anything else to forward).
    /// Shared: a call's caller is copied for the task it may go on in.
    pub meta: Arc<RequestMetaObject>,
    /// Fires when the client cancels or goes away.
    pub ct: CancellationToken,
    /// The client's protocol era: a legacy client's results must not carry
    /// the 2026-07-28 fields (cache hints).
    pub era: crate::era::Era,
    /// Who the results it stores belong to.
    pub owner: Owner,
    /// Whose share of the operation limits its calls take.
    pub quota: Quota,
    /// The client's `clientInfo.name`, which picks its budget.
    pub client: Option<String>,
    /// Where a call that may become an operation keeps the progress the
    /// upstream reports (its partial result).
    pub partial: Option<Arc<crate::operations::Partial>>,
    /// The client declared the MCP tasks extension (SEP-2663): a call that
    /// outlives its timeout is answered with a task, not a text.
    pub tasks: bool,
    /// The request as the client sent it, when sluice's own layer read it
    /// (`downstream::front`): a routed request's `params` then go upstream
    /// as that text, edited only where sluice must
    /// (`gateway/forwarding.rs`, `forwarded_params`). Shares the received
    /// bytes.
    pub sent_request: Option<crate::jsonrpc::Message>,
    /// Where the notifications about this request go, as the bytes of
    /// each message, when sluice's own layer answers it
    /// (`downstream::front`): on the stream that carries its answer,
    /// before it. `None`: nobody listens (`sluice call`, a call in the
    /// background).
    pub stream: Option<crate::downstream::outbox::Sender>,
    /// Whether sluice's requests to the client about this request
    /// (sampling, elicitation, roots) go on `stream` too: not for an HTTP
    /// client that takes only JSON answers (its `Accept`), which reads no
    /// stream there and is asked on its session's GET stream instead.
    pub stream_asks: bool,
    /// Where sluice's own layer asks the client for input (sampling,
    /// elicitation, roots).
    pub link: Option<Arc<crate::downstream::link::ClientLink>>,
}

/// Whose share of `[operations] max_running` a call takes: its owner's, or
/// for an anonymous client the address it came from (so that one client
/// cannot use up the share of every other sessionless client). Compared,
/// never formatted: it is made for every request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Quota {
    /// The owner's (a session's, a principal's; `sluice call`'s).
    Owner(Owner),
    /// An anonymous client's, by the address it came from.
    Address(std::net::IpAddr),
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::NumberOrString;

    /// The quick forms read as rmcp reads them; what MCP does not allow is
    /// not read.
    #[test]
    fn a_request_id_is_read_as_rmcp_reads_it() {
        for json in [
            "7",
            "0",
            "-3",
            "-0",
            "1.0",
            "1e2",
            r#""ab""#,
            r#""""#,
            r#""a\u0062""#,
            r#""é""#,
        ] {
            let id = Id::from_json(json).unwrap();
            let rmcp: RequestId = serde_json::from_str(json).unwrap();
            assert_eq!(request_id(&id), Some(rmcp), "{json}");
        }
        assert_eq!(
            request_id(&Id::from_json(r#""a\u0062""#).unwrap()),
            Some(NumberOrString::String("ab".into()))
        );
        for json in [
            "1.5",
            "1e400",
            "9223372036854775808",
            "123456789012345678901234567890",
        ] {
            assert_eq!(request_id(&Id::from_json(json).unwrap()), None, "{json}");
        }
    }
}
