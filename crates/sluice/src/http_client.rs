//! The HTTP client sluice makes requests with (Streamable HTTP upstreams,
//! `[auth.jwt] jwks_url`): hyper's pooled client over TCP or TLS (rustls
//! with the platform's verifier, the process's ring provider), with a
//! connect timeout and `TCP_NODELAY`.
//!
//! reqwest did this before, built without a TLS backend: an `https://` URL
//! got "invalid URL, scheme is not http" from a release build. Its own
//! layers also cost ~11 % of the gateway's CPU per request over HTTP (perf,
//! 8 kept-alive clients: the URL parsed and printed again for each
//! request, the redirect policy's service, its futures), where hyper's
//! connection work below them is what any client does. Redirects are not
//! followed: an upstream that answers with one gets the error of any other
//! status it should not send, which names it.

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// An upstream's answer, its body read as it comes ([`chunk`]).
pub type Response = http::Response<hyper::body::Incoming>;

/// Why a request got no answer: the connection could not be made, or
/// broke before the answer's head.
pub type Error = hyper_util::client::legacy::Error;

/// A pool of kept-alive connections to upstreams (cloning shares it).
#[derive(Clone)]
pub struct HttpClient(Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>);

impl HttpClient {
    /// A client for `url` that gives up connecting after `connect_timeout`;
    /// for an `https://` URL, an error if the platform's certificates
    /// cannot be loaded.
    pub fn for_url(url: &Uri, connect_timeout: Duration) -> Result<Self, String> {
        let tls = if url.scheme() == Some(&http::uri::Scheme::HTTPS) {
            platform_tls()?
        } else {
            no_tls()
        };
        let mut tcp = HttpConnector::new();
        tcp.set_connect_timeout(Some(connect_timeout));
        tcp.set_nodelay(true);
        // `https://` too: the TLS layer above takes those.
        tcp.enforce_http(false);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(tcp);
        Ok(Self(Client::builder(TokioExecutor::new()).build(connector)))
    }

    /// Sends `method` to `uri` with `headers` and `body`; the answer once
    /// its head came.
    pub async fn send(
        &self,
        method: Method,
        uri: &Uri,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<Response, Error> {
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = uri.clone();
        *request.headers_mut() = headers;
        self.0.request(request).await
    }
}

/// The TLS settings of `https://` requests: the platform's roots (or
/// `SSL_CERT_FILE`'s), loaded once, when the first client for such a URL
/// is made (a client is made at each connection): reading and parsing
/// them costs milliseconds and holds ~0.45 MB (RssAnon of a stdio gateway
/// after `tools/list`, an `https://` against an `http://` upstream), which
/// a gateway without an HTTPS upstream does not pay.
fn platform_tls() -> Result<rustls::ClientConfig, String> {
    use rustls_platform_verifier::ConfigVerifierExt as _;
    static CONFIG: OnceLock<Result<rustls::ClientConfig, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            crate::install_tls_provider();
            rustls::ClientConfig::with_platform_verifier()
                .map_err(|e| format!("could not load the certificates TLS is checked with: {e}"))
        })
        .clone()
}

/// The TLS settings of a client for an `http://` URL, which never uses
/// them: no roots at all.
fn no_tls() -> rustls::ClientConfig {
    static CONFIG: OnceLock<rustls::ClientConfig> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            crate::install_tls_provider();
            rustls::ClientConfig::builder()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth()
        })
        .clone()
}

/// The next piece of `response`'s body; `None` at its end (trailers are
/// skipped).
pub async fn chunk(response: &mut Response) -> Result<Option<Bytes>, hyper::Error> {
    while let Some(frame) = response.body_mut().frame().await {
        if let Ok(data) = frame?.into_data() {
            return Ok(Some(data));
        }
    }
    Ok(None)
}

/// An error with its causes ("client error (Connect): tcp connect error:
/// Connection refused (os error 111)").
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}
