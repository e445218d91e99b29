//! Connecting to an upstream over Streamable HTTP.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use super::client::UpstreamClient;
use super::{CONNECT_TIMEOUT, Connection, Upstream, root_cause, tap};

impl Upstream {
    /// Makes the MCP handshake with the upstream at `url`, sending
    /// `headers` with every request.
    pub(super) async fn connect_http(
        &self,
        url: &str,
        headers: &BTreeMap<String, String>,
        client: UpstreamClient,
        lifecycle: ClientLifecycleMode,
    ) -> Result<Connection, String> {
        let mut custom = HashMap::new();
        for (name, value) in headers {
            let name = http::HeaderName::try_from(name.as_str())
                .map_err(|e| format!("has an invalid header name `{name}`: {e}"))?;
            let value = http::HeaderValue::try_from(value.as_str())
                .map_err(|e| format!("has an invalid value for header `{name}`: {e}"))?;
            custom.insert(name, value);
        }
        // TCP_NODELAY is on for upstream HTTP connections without a
        // client of sluice's own: rmcp 3.9's `from_config` builds its
        // `reqwest::Client` with `Client::builder()`, whose default is
        // `nodelay: true` (reqwest 0.13.5, `async_impl/client.rs`),
        // applied by its connector to every connection it opens
        // (`connect.rs`, `set_nodelay`). rmcp also turns pooling off
        // (`pool_max_idle_per_host(0)`), so no connection waits on a
        // delayed ACK from an earlier response.
        let mut config = StreamableHttpClientTransportConfig::with_uri(url);
        config.custom_headers = custom;
        config.allow_stateless = true;
        config.max_sse_event_size = self.max_message_bytes;
        let transport = tap::Tapped {
            inner: StreamableHttpClientTransport::from_config(config),
            hub: self.hub.clone(),
            upstream: self.spec.name.clone(),
        };
        match tokio::time::timeout(
            CONNECT_TIMEOUT,
            client.serve_with_lifecycle(transport, lifecycle),
        )
        .await
        {
            Ok(Ok(service)) => Ok(Connection {
                service,
                exit: None,
                stop: None,
                started: Instant::now(),
            }),
            Ok(Err(e)) => Err(format!(
                "at {url} failed during the MCP handshake: {}",
                root_cause(&e)
            )),
            Err(_) => Err(format!(
                "at {url} did not complete the MCP handshake within {} s",
                CONNECT_TIMEOUT.as_secs()
            )),
        }
    }
}
