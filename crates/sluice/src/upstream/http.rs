//! Connecting to an upstream over Streamable HTTP, with sluice's own
//! transport ([`super::streamable`]).

use std::collections::BTreeMap;
use std::time::Instant;

use super::client::UpstreamClient;
use super::rpc::Lifecycle;
use super::{Connection, Upstream};

impl Upstream {
    /// Makes the MCP handshake with the upstream at `url`, sending
    /// `headers` with every request.
    pub(super) async fn connect_http(
        &self,
        url: &str,
        headers: &BTreeMap<String, String>,
        client: UpstreamClient,
        lifecycle: Lifecycle,
    ) -> Result<Connection, String> {
        let (transport, inbound) = super::streamable::open(url, headers, self.max_message_bytes)?;
        match self.handshake(transport, inbound, client, lifecycle).await {
            Ok((rpc, info)) => Ok(Connection {
                rpc,
                info,
                exit: None,
                stop: None,
                started: Instant::now(),
            }),
            Err(e) => Err(format!("at {} {e}", crate::shown_url(url))),
        }
    }
}
