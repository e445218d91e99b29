//! Connecting to an upstream over Streamable HTTP.
//!
//! For now the HTTP exchange itself is rmcp's transport, adapted to
//! sluice's engine ([`RmcpHttp`]): messages cross it as rmcp's types, so an
//! HTTP upstream's answers still lose what those types do not know. sluice's
//! own HTTP transport replaces it next.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use rmcp::model::{ClientJsonRpcMessage, GetExtensions as _, JsonRpcMessage, ServerJsonRpcMessage};
use rmcp::service::{InboundStreamOrigin, RoleClient};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, Transport as _};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::client::UpstreamClient;
use super::rpc::{Lifecycle, own_id};
use super::transport::{INBOUND_CAPACITY, Inbound, SendError, Transport};
use super::{Connection, Upstream};
use crate::jsonrpc::Message;

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
        let (transport, inbound) =
            RmcpHttp::open(StreamableHttpClientTransport::from_config(config));
        match self.handshake(transport, inbound, client, lifecycle).await {
            Ok((rpc, info)) => Ok(Connection {
                rpc,
                info,
                exit: None,
                stop: None,
                started: Instant::now(),
            }),
            Err(e) => Err(format!("at {url} {e}")),
        }
    }
}

/// rmcp's Streamable HTTP client transport, driven by sluice's engine.
struct RmcpHttp {
    outgoing: mpsc::Sender<ClientJsonRpcMessage>,
    stop: CancellationToken,
}

impl Drop for RmcpHttp {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl RmcpHttp {
    fn open(
        mut inner: StreamableHttpClientTransport<reqwest::Client>,
    ) -> (Arc<dyn Transport>, mpsc::Receiver<Inbound>) {
        let (tx, rx) = mpsc::channel(INBOUND_CAPACITY);
        let (outgoing, mut to_send) = mpsc::channel::<ClientJsonRpcMessage>(INBOUND_CAPACITY);
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = stopped.cancelled() => break,
                    message = to_send.recv() => {
                        let Some(message) = message else { break };
                        // The future is rmcp's own task's: sending never
                        // waits for an answer.
                        let sending = transport_send(&mut inner, message);
                        tokio::spawn(async move {
                            if let Err(e) = sending.await {
                                tracing::debug!("sending over HTTP failed: {e}");
                            }
                        });
                    }
                    received = inner.receive() => {
                        let item = match received {
                            Some(message) => inbound(message),
                            None => Inbound::Closed { why: "closed the connection".to_owned() },
                        };
                        let last = matches!(item, Inbound::Closed { .. });
                        if tx.send(item).await.is_err() || last {
                            break;
                        }
                    }
                }
            }
            let _ = inner.close().await;
        });
        (Arc::new(RmcpHttp { outgoing, stop }), rx)
    }
}

/// rmcp's `Transport::send` for the client role.
fn transport_send(
    inner: &mut StreamableHttpClientTransport<reqwest::Client>,
    message: ClientJsonRpcMessage,
) -> impl Future<Output = Result<(), impl std::fmt::Display>> + Send + 'static {
    rmcp::transport::Transport::<RoleClient>::send(inner, message)
}

/// What rmcp received, as sluice's engine reads it.
fn inbound(message: ServerJsonRpcMessage) -> Inbound {
    let stream_of = match &message {
        JsonRpcMessage::Request(r) => match r.request.extensions().get::<InboundStreamOrigin>() {
            Some(InboundStreamOrigin::OutboundRequest(id)) => Some(own_id(id)),
            _ => None,
        },
        _ => None,
    };
    match serde_json::to_vec(&message)
        .map_err(|e| e.to_string())
        .and_then(|bytes| Message::parse(bytes.into()).map_err(|e| e.to_string()))
    {
        Ok(message) => Inbound::Message { message, stream_of },
        Err(why) => Inbound::Unreadable { id: None, why },
    }
}

impl Transport for RmcpHttp {
    fn send(&self, message: Message) -> BoxFuture<'_, Result<(), SendError>> {
        async move {
            let typed: ClientJsonRpcMessage = serde_json::from_slice(message.as_bytes())
                .map_err(|e| SendError::Refused(format!("could not be sent over HTTP: {e}")))?;
            self.outgoing
                .send(typed)
                .await
                .map_err(|_| SendError::Closed("the HTTP connection ended".into()))
        }
        .boxed()
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        async move { self.stop.cancel() }.boxed()
    }
}
