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
//!
//! What reqwest did that this client does too: credentials in the URL
//! (`http://user:p%40ss@host/mcp`) are sent as `Authorization: Basic` and
//! never in the request line; `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and
//! `NO_PROXY` (read once, with curl's rules) send requests through an
//! `http://` proxy: an `https://` URL through a `CONNECT` tunnel, an
//! `http://` URL as an absolute-form request to the proxy, with the
//! proxy's own credentials (from its URL) as `Proxy-Authorization`.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, PROXY_AUTHORIZATION};
use http::uri::Authority;
use http::{HeaderMap, HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioIo};

/// An upstream's answer, its body read as it comes ([`chunk`]).
pub type Response = http::Response<hyper::body::Incoming>;

/// Why a request got no answer: the connection could not be made, or
/// broke before the answer's head.
pub type Error = hyper_util::client::legacy::Error;

/// A pool of kept-alive connections to one URL's host (cloning shares it).
#[derive(Clone)]
pub struct HttpClient {
    /// Shared with the requests under way, which may have to be sent again
    /// (see [`HttpClient::send`]): one count, not a copy of the client.
    client: Arc<Client<hyper_rustls::HttpsConnector<Route>, Full<Bytes>>>,
    /// Sent with every request that does not set them itself: the URL's
    /// credentials (`Authorization`), a forward proxy's
    /// (`Proxy-Authorization`).
    added: HeaderMap,
}

impl HttpClient {
    /// A client for `url` that gives up connecting after
    /// `connect_timeout`, through the proxy the environment names for it,
    /// if any; and the URL to send its requests to (`url` without its
    /// credentials, which the client sends as `Authorization`). An error
    /// if `url` is not an `http://` or `https://` URL, if its proxy is not
    /// an `http://` one, or if the platform's certificates cannot be
    /// loaded for an `https://` URL.
    pub fn open(url: &str, connect_timeout: Duration) -> Result<(Self, Uri), String> {
        static FROM_ENV: OnceLock<Matcher> = OnceLock::new();
        let proxies = FROM_ENV.get_or_init(|| {
            for unusable in unusable_proxy_variables(|name| std::env::var(name).ok()) {
                tracing::warn!(
                    "{unusable} names no proxy sluice can use (not a URL, or not http://): ignored, so requests go straight to their upstream; give the proxy's URL (http://host:port)"
                );
            }
            Matcher::from_env()
        });
        Self::open_with(url, connect_timeout, proxies)
    }

    /// [`HttpClient::open`] with the proxies of `proxies`.
    fn open_with(
        url: &str,
        connect_timeout: Duration,
        proxies: &Matcher,
    ) -> Result<(Self, Uri), String> {
        let (uri, credentials) = split_credentials(url)?;
        let https = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        let mut added = HeaderMap::new();
        if let Some(credentials) = credentials {
            added.insert(AUTHORIZATION, credentials);
        }
        let mut tcp = HttpConnector::new();
        tcp.set_connect_timeout(Some(connect_timeout));
        tcp.set_nodelay(true);
        // `https://` too: the TLS layer above takes those.
        tcp.enforce_http(false);
        let route = match proxies.intercept(&uri) {
            None => Route::Direct(tcp),
            Some(proxy) => {
                // The matcher keeps a proxy's credentials apart: its URI
                // is safe to show.
                let shown = Arc::<str>::from(proxy.uri().to_string());
                if proxy.uri().scheme() != Some(&http::uri::Scheme::HTTP) {
                    return Err(format!(
                        "the proxy the environment names for {uri} (HTTPS_PROXY, HTTP_PROXY or ALL_PROXY) is {shown}: sluice goes through http:// proxies only; name one, or put the host in NO_PROXY to connect directly"
                    ));
                }
                tracing::debug!(%uri, proxy = %shown, "through a proxy");
                if https {
                    Route::Tunnel {
                        tcp,
                        proxy: proxy.uri().clone(),
                        auth: proxy.basic_auth().cloned(),
                        shown,
                        timeout: connect_timeout,
                    }
                } else {
                    if let Some(auth) = proxy.basic_auth() {
                        added.insert(PROXY_AUTHORIZATION, auth.clone());
                    }
                    Route::Forward {
                        tcp,
                        proxy: proxy.uri().clone(),
                        shown,
                    }
                }
            }
        };
        let tls = if https { platform_tls()? } else { no_tls() };
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(route);
        let client = Arc::new(Client::builder(TokioExecutor::new()).build(connector));
        Ok((Self { client, added }, uri))
    }

    /// Sends `method` to `uri` with `headers` and `body`; the answer once
    /// its head came. The request is made now: the future borrows nothing
    /// (a caller can move it into a task without a clone of the client).
    ///
    /// A request that went on a kept-alive connection which turned out to
    /// be closed (the server or a proxy closed it as the request was
    /// written: no answer's head came) is sent again on a new
    /// connection, at most [`STALE_RETRIES`] times, as browsers and curl
    /// do: a server that closes an idle connection never read what came on
    /// it. tinyproxy closes every connection after its answer without
    /// saying so, and Node's servers close idle ones after 5 s; sent as the
    /// close arrived, one request in several failed ("connection closed
    /// before message completed"). A request that fails so on a connection
    /// made for it is not sent again: the server may have taken it.
    pub fn send(
        &self,
        method: Method,
        uri: &Uri,
        mut headers: HeaderMap,
        body: Bytes,
    ) -> impl Future<Output = Result<Response, Error>> + Send + 'static {
        for (name, value) in &self.added {
            if !headers.contains_key(name) {
                headers.insert(name, value.clone());
            }
        }
        // What a second sending needs, in one box: the future stays small
        // (it is moved at each step of its caller's state machine).
        let again = Box::new(Resend {
            client: self.client.clone(),
            method: method.clone(),
            uri: uri.clone(),
            headers: headers.clone(),
            body: body.clone(),
            sent: std::time::Instant::now(),
        });
        let first = self
            .client
            .request(request(method, uri.clone(), headers, body));
        async move {
            let mut answer = first.await;
            let mut retries = 0;
            while retries < STALE_RETRIES
                && let Err(e) = &answer
                && closed_before_use(e, again.sent)
            {
                retries += 1;
                tracing::debug!(
                    "{} {}: the kept-alive connection was closed as the request went on it ({}): sending it again on a new connection",
                    again.method,
                    again.uri,
                    error_chain(e)
                );
                answer = again.send().await;
            }
            answer
        }
    }
}

/// A request as [`HttpClient::send`] keeps it to send it again.
struct Resend {
    client: Arc<Client<hyper_rustls::HttpsConnector<Route>, Full<Bytes>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
    /// When it was first sent.
    sent: std::time::Instant,
}

impl Resend {
    /// The request sent again.
    fn send(&self) -> hyper_util::client::legacy::ResponseFuture {
        self.client.request(request(
            self.method.clone(),
            self.uri.clone(),
            self.headers.clone(),
            self.body.clone(),
        ))
    }
}

/// The request `method uri` with `headers` and `body`.
fn request(method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Request<Full<Bytes>> {
    let mut request = Request::new(Full::new(body));
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.headers_mut() = headers;
    request
}

/// How often [`HttpClient::send`] sends a request again after a
/// kept-alive connection turned out to be closed (each retry may find
/// another one that is).
const STALE_RETRIES: usize = 3;

/// When a connection was made (each [`Conn`] tells hyper, which hands it
/// back with an error): one made before a request was sent was kept
/// alive from an earlier one.
#[derive(Debug, Clone, Copy)]
struct MadeAt(std::time::Instant);

/// Whether `error` is a kept-alive connection found closed: it was made
/// before the request was `sent`, and it ended before an answer's whole
/// head came, by the other side's close (EOF, reset, broken pipe). (hyper
/// does not say whether part of a head had come: a server that began to
/// answer and then closed is taken for one that closed first.)
fn closed_before_use(error: &Error, sent: std::time::Instant) -> bool {
    if error.is_connect() {
        return false;
    }
    let Some(connected) = error.connect_info() else {
        return false;
    };
    let mut extras = http::Extensions::new();
    connected.get_extras(&mut extras);
    if extras.get::<MadeAt>().is_none_or(|made| made.0 >= sent) {
        return false;
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        if let Some(e) = e.downcast_ref::<hyper::Error>()
            && e.is_incomplete_message()
        {
            return true;
        }
        if let Some(e) = e.downcast_ref::<std::io::Error>() {
            return matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::UnexpectedEof
            );
        }
        cause = e.source();
    }
    false
}

/// The proxy variables set to something that names no proxy (not a URL,
/// or a scheme no proxy speaks), as `get` reads them: hyper-util's matcher
/// ignores them, and requests would go straight to the upstream where the
/// user meant them to go through a proxy.
fn unusable_proxy_variables(get: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let probe = Uri::from_static("http://probe.invalid/");
    [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
    ]
    .into_iter()
    .filter_map(|name| {
        let value = get(name).filter(|value| !value.trim().is_empty())?;
        let matcher = Matcher::builder().http(value.as_str()).build();
        matcher
            .intercept(&probe)
            .is_none()
            .then(|| format!("{name}={}", crate::shown_url(&value)))
    })
    .collect()
}

/// `url` parsed and without the credentials it may carry, and those as an
/// `Authorization: Basic` value (percent-decoded first, as a browser or
/// curl does): in the request line they would reach a forward proxy and
/// every log that prints the URL.
fn split_credentials(url: &str) -> Result<(Uri, Option<HeaderValue>), String> {
    let uri =
        Uri::try_from(url).map_err(|e| format!("`{}` is not a URL: {e}", crate::shown_url(url)))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(format!(
            "`{}` is not an http:// or https:// URL",
            crate::shown_url(url)
        ));
    }
    let Some((userinfo, host)) = uri
        .authority()
        .and_then(|authority| authority.as_str().rsplit_once('@'))
        .map(|(userinfo, host)| (userinfo.to_owned(), host.to_owned()))
    else {
        return Ok((uri, None));
    };
    let decoded = |part: &str| {
        percent_encoding::percent_decode_str(part)
            .decode_utf8()
            .map(|text| text.into_owned())
            .map_err(|_| {
                format!(
                    "the credentials in `{}` are not UTF-8 once percent-decoded",
                    crate::shown_url(url)
                )
            })
    };
    let (user, password) = userinfo.split_once(':').unwrap_or((&userinfo, ""));
    let pair = format!("{}:{}", decoded(user)?, decoded(password)?);
    let mut credentials = {
        use base64::Engine as _;
        let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
        HeaderValue::try_from(format!("Basic {encoded}")).expect("base64 is a header value")
    };
    credentials.set_sensitive(true);
    let mut parts = uri.into_parts();
    parts.authority = Some(
        Authority::try_from(host.as_str())
            .map_err(|e| format!("`{}` has no host: {e}", crate::shown_url(url)))?,
    );
    let uri = Uri::from_parts(parts).map_err(|e| format!("`{}`: {e}", crate::shown_url(url)))?;
    Ok((uri, Some(credentials)))
}

/// Boxed, as hyper's connectors' errors are.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How a client's connections reach its URL's host.
#[derive(Clone)]
enum Route {
    /// A TCP connection to the host itself.
    Direct(HttpConnector),
    /// An `http://` URL through an HTTP proxy: a connection to the proxy,
    /// which gets each request in absolute form.
    Forward {
        tcp: HttpConnector,
        proxy: Uri,
        shown: Arc<str>,
    },
    /// An `https://` URL through an HTTP proxy: a `CONNECT` tunnel, TLS
    /// end to end inside it.
    Tunnel {
        tcp: HttpConnector,
        proxy: Uri,
        /// `Proxy-Authorization`, from the proxy's URL.
        auth: Option<HeaderValue>,
        shown: Arc<str>,
        /// How long the proxy may take to open the tunnel.
        timeout: Duration,
    },
}

impl tower::Service<Uri> for Route {
    type Response = Conn;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Conn, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match self {
            Route::Direct(tcp) | Route::Forward { tcp, .. } | Route::Tunnel { tcp, .. } => {
                tcp.poll_ready(cx).map_err(Into::into)
            }
        }
    }

    fn call(&mut self, destination: Uri) -> Self::Future {
        match self {
            Route::Direct(tcp) => {
                let connecting = tcp.call(destination);
                Box::pin(async move {
                    let io = connecting.await?;
                    Ok(Conn::new(io, false))
                })
            }
            Route::Forward { tcp, proxy, shown } => {
                let connecting = tcp.call(proxy.clone());
                let shown = shown.clone();
                Box::pin(async move {
                    let io = connecting
                        .await
                        .map_err(|e| proxy_unreachable(&shown, &e))?;
                    Ok(Conn::new(io, true))
                })
            }
            Route::Tunnel {
                tcp,
                proxy,
                auth,
                shown,
                timeout,
            } => {
                let connecting = tcp.call(proxy.clone());
                let (auth, shown, timeout) = (auth.clone(), shown.clone(), *timeout);
                Box::pin(async move {
                    let io = connecting
                        .await
                        .map_err(|e| proxy_unreachable(&shown, &e))?;
                    let opened = tokio::time::timeout(
                        timeout,
                        tunnel(io.into_inner(), &destination, auth.as_ref()),
                    )
                    .await
                    .unwrap_or_else(|_| {
                        Err(format!(
                            "did not answer `CONNECT` within {} s",
                            timeout.as_secs()
                        ))
                    });
                    match opened {
                        Ok(stream) => Ok(Conn::new(TokioIo::new(stream), false)),
                        Err(why) => Err(format!("the proxy {shown} {why}").into()),
                    }
                })
            }
        }
    }
}

/// Why a connection to `proxy` could not be made, naming it.
fn proxy_unreachable(proxy: &str, error: &(dyn std::error::Error + 'static)) -> String {
    format!(
        "the proxy {proxy} could not be reached: {}",
        error_chain(error)
    )
}

/// The longest answer head a proxy may give to `CONNECT`.
const TUNNEL_HEAD_MAX: usize = 8 * 1024;

/// Asks the proxy at the other end of `stream` for a tunnel to
/// `destination`'s host and port: the stream, once the proxy answered with
/// a 2xx; else what it answered.
async fn tunnel(
    mut stream: tokio::net::TcpStream,
    destination: &Uri,
    auth: Option<&HeaderValue>,
) -> Result<tokio::net::TcpStream, String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let host = destination.host().unwrap_or_default();
    let port = destination.port_u16().unwrap_or(443);
    // An IPv6 address is bracketed in an authority.
    let target = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let mut head = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n").into_bytes();
    if let Some(auth) = auth {
        head.extend_from_slice(b"Proxy-Authorization: ");
        head.extend_from_slice(auth.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    let broke =
        |e: std::io::Error| format!("broke the connection asked for a tunnel to {target}: {e}");
    stream.write_all(&head).await.map_err(broke)?;
    // The answer's head, read to its blank line: the proxy sends nothing
    // after it until the TLS handshake, which sluice begins.
    let mut answer = Vec::with_capacity(512);
    let mut piece = [0u8; 1024];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        if answer.len() > TUNNEL_HEAD_MAX {
            return Err(format!(
                "answered `CONNECT {target}` with a head over {TUNNEL_HEAD_MAX} bytes"
            ));
        }
        let read = stream.read(&mut piece).await.map_err(broke)?;
        if read == 0 {
            return Err(format!(
                "closed the connection asked for a tunnel to {target}"
            ));
        }
        answer.extend_from_slice(&piece[..read]);
    }
    let status_line = answer
        .split(|&b| b == b'\r')
        .next()
        .map(String::from_utf8_lossy)
        .unwrap_or_default();
    let status = status_line.split(' ').nth(1).unwrap_or_default();
    // Quoted in an error the model reads: whatever the proxy put there,
    // at most a line's worth.
    let status_line = sluice_core::format::cut(&status_line, 120);
    match status.as_bytes() {
        [b'2', _, _] => Ok(stream),
        b"407" => Err(format!(
            "asks for credentials to open a tunnel to {target} ({status_line}): give them in its URL, http://user:password@host:port"
        )),
        _ => Err(format!(
            "refused to open a tunnel to {target}: it answered `{status_line}`"
        )),
    }
}

/// A connection a [`Route`] made: TCP, and whether hyper must write its
/// requests for a forward proxy (absolute form).
struct Conn {
    io: TokioIo<tokio::net::TcpStream>,
    proxied: bool,
    made: MadeAt,
}

impl Conn {
    fn new(io: TokioIo<tokio::net::TcpStream>, proxied: bool) -> Self {
        Self {
            io,
            proxied,
            made: MadeAt(std::time::Instant::now()),
        }
    }
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        self.io.connected().proxy(self.proxied).extra(self.made)
    }
}

impl hyper::rt::Read for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::sync::mpsc;

    /// A server on a port of its own that answers each connection's first
    /// request with `answer` and closes it; each request's head (to its
    /// blank line) comes out of the receiver.
    async fn recording(answer: &'static str) -> (String, mpsc::UnboundedReceiver<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let (heads, received) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                let mut head = Vec::new();
                let mut piece = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tcp.read(&mut piece).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&piece[..n]),
                    }
                }
                let _ = heads.send(String::from_utf8_lossy(&head).into_owned());
                let _ = tcp.write_all(answer.as_bytes()).await;
            }
        });
        (address, received)
    }

    const OK: &str = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";

    /// A server that keeps connections alive but answers only the first
    /// `answered` requests of each: at the next one it closes the
    /// connection unanswered, as a server that closed an idle connection
    /// as the request came. Its answer is the connection's number (0, 1…);
    /// each request's first line and that number come out of the receiver.
    async fn closing_after(answered: usize) -> (String, mpsc::UnboundedReceiver<(String, usize)>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let (lines, received) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut number = 0;
            while let Ok((mut tcp, _)) = listener.accept().await {
                let lines = lines.clone();
                tokio::spawn(async move {
                    for served in 0.. {
                        let mut head = Vec::new();
                        let mut byte = [0u8; 1];
                        while !head.ends_with(b"\r\n\r\n") {
                            match tcp.read(&mut byte).await {
                                Ok(0) | Err(_) => return,
                                Ok(_) => head.push(byte[0]),
                            }
                        }
                        let head = String::from_utf8_lossy(&head).into_owned();
                        let first = head.lines().next().unwrap_or_default().to_owned();
                        let _ = lines.send((first, number));
                        if served == answered {
                            return;
                        }
                        let answer =
                            format!("HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n{number}");
                        if tcp.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
                number += 1;
            }
        });
        (address, received)
    }

    /// The body of `answer`, whole.
    async fn body(mut answer: Response) -> String {
        let mut text = Vec::new();
        while let Some(piece) = chunk(&mut answer).await.unwrap() {
            text.extend_from_slice(&piece);
        }
        String::from_utf8(text).unwrap()
    }

    #[tokio::test]
    async fn a_request_on_a_kept_alive_connection_found_closed_goes_again_on_a_new_one() {
        let (server, mut seen) = closing_after(1).await;
        let none = Matcher::builder().build();
        let (client, uri) =
            HttpClient::open_with(&format!("http://{server}/mcp"), timeout(), &none).unwrap();
        let first = client
            .send(Method::POST, &uri, HeaderMap::new(), Bytes::new())
            .await
            .unwrap();
        assert_eq!(body(first).await, "0");
        // Kept alive, then closed by the server as the next request came:
        // that one is sent again, on a new connection.
        let second = client
            .send(Method::POST, &uri, HeaderMap::new(), Bytes::new())
            .await
            .unwrap();
        assert_eq!(body(second).await, "1");
        let mut requests = Vec::new();
        while let Ok((line, connection)) = seen.try_recv() {
            requests.push((line, connection));
        }
        let post = "POST /mcp HTTP/1.1".to_owned();
        assert_eq!(
            requests,
            [(post.clone(), 0), (post.clone(), 0), (post, 1)],
            "the second request on connection 0, closed; again on connection 1"
        );
    }

    #[tokio::test]
    async fn a_request_whose_own_new_connection_closes_unanswered_is_not_sent_again() {
        // The server may have taken it: sending it again could run a tool
        // twice.
        let (server, mut seen) = closing_after(0).await;
        let none = Matcher::builder().build();
        let (client, uri) =
            HttpClient::open_with(&format!("http://{server}/mcp"), timeout(), &none).unwrap();
        let failed = client
            .send(Method::POST, &uri, HeaderMap::new(), Bytes::new())
            .await
            .unwrap_err();
        // Closed (or reset) once it had the request, not refused.
        assert!(!failed.is_connect(), "{}", error_chain(&failed));
        assert_eq!(
            seen.recv().await,
            Some(("POST /mcp HTTP/1.1".to_owned(), 0))
        );
        assert!(seen.try_recv().is_err(), "sent again");
    }

    /// A port nothing listens on (bound, then let go).
    fn closed_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    fn timeout() -> Duration {
        Duration::from_secs(5)
    }

    #[tokio::test]
    async fn credentials_in_the_url_are_sent_as_basic_authorization_and_never_in_the_request_line()
    {
        let (server, mut heads) = recording(OK).await;
        let none = Matcher::builder().build();
        let url = format!("http://us%65r:p%40ss@{server}/mcp");
        let (client, uri) = HttpClient::open_with(&url, timeout(), &none).unwrap();
        assert_eq!(uri.to_string(), format!("http://{server}/mcp"));

        let answer = client
            .send(Method::GET, &uri, HeaderMap::new(), Bytes::new())
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        let head = heads.recv().await.unwrap();
        assert!(head.starts_with("GET /mcp HTTP/1.1\r\n"), "{head}");
        // base64("user:p@ss"): decoded, as curl sends them.
        assert!(
            head.contains("authorization: Basic dXNlcjpwQHNz\r\n"),
            "{head}"
        );
        assert!(
            !head.contains("p%40ss") && !head.contains("us%65r"),
            "{head}"
        );
        assert!(head.contains(&format!("host: {server}\r\n")), "{head}");

        // A header the caller sets itself wins over the URL's credentials.
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer own"));
        client
            .send(Method::GET, &uri, headers, Bytes::new())
            .await
            .unwrap();
        let head = heads.recv().await.unwrap();
        assert!(head.contains("authorization: Bearer own\r\n"), "{head}");
        assert!(!head.contains("Basic"), "{head}");
    }

    #[tokio::test]
    async fn an_http_url_goes_through_its_proxy_in_absolute_form_with_the_proxys_credentials() {
        let (proxy, mut heads) = recording(OK).await;
        let proxies = Matcher::builder()
            .http(format!("http://pu:pp@{proxy}"))
            .build();
        // Nothing listens at the upstream's own port: only the proxy can
        // have answered.
        let upstream = format!("http://127.0.0.1:{}/mcp", closed_port());
        let (client, uri) = HttpClient::open_with(&upstream, timeout(), &proxies).unwrap();
        let answer = client
            .send(
                Method::POST,
                &uri,
                HeaderMap::new(),
                Bytes::from_static(b"{}"),
            )
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        let head = heads.recv().await.unwrap();
        assert!(
            head.starts_with(&format!("POST {upstream} HTTP/1.1\r\n")),
            "{head}"
        );
        // base64("pu:pp")
        assert!(
            head.contains("proxy-authorization: Basic cHU6cHA=\r\n"),
            "{head}"
        );
    }

    #[tokio::test]
    async fn a_host_in_no_proxy_is_reached_directly() {
        let (server, mut heads) = recording(OK).await;
        let proxies = Matcher::builder()
            .http(format!("http://127.0.0.1:{}", closed_port()))
            .no("127.0.0.1")
            .build();
        let (client, uri) =
            HttpClient::open_with(&format!("http://{server}/mcp"), timeout(), &proxies).unwrap();
        let answer = client
            .send(Method::GET, &uri, HeaderMap::new(), Bytes::new())
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        assert!(
            heads
                .recv()
                .await
                .unwrap()
                .starts_with("GET /mcp HTTP/1.1\r\n")
        );
    }

    #[tokio::test]
    async fn a_tunnel_the_proxy_refuses_fails_with_what_the_proxy_answered() {
        let refusing = [
            (
                "HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n",
                "refused to open a tunnel to upstream.example:8443: it answered `HTTP/1.1 403 Forbidden`",
            ),
            (
                "HTTP/1.1 407 Proxy Authentication Required\r\ncontent-length: 0\r\n\r\n",
                "asks for credentials to open a tunnel to upstream.example:8443 (HTTP/1.1 407 Proxy Authentication Required): give them in its URL",
            ),
        ];
        // A reason of 2,000 characters is cut where it is quoted.
        let long: &'static str = Box::leak(
            format!(
                "HTTP/1.1 403 {}\r\ncontent-length: 0\r\n\r\n",
                "x".repeat(2000)
            )
            .into_boxed_str(),
        );
        let refusing = refusing.into_iter().chain([(
            long,
            "refused to open a tunnel to upstream.example:8443: it answered `HTTP/1.1 403 xxx",
        )]);
        for (answer, said) in refusing {
            let (proxy, mut heads) = recording(answer).await;
            let proxies = Matcher::builder().https(format!("http://{proxy}")).build();
            let (client, uri) =
                HttpClient::open_with("https://upstream.example:8443/mcp", timeout(), &proxies)
                    .unwrap();
            let error = client
                .send(Method::POST, &uri, HeaderMap::new(), Bytes::new())
                .await
                .unwrap_err();
            let why = error_chain(&error);
            assert!(
                why.contains(&format!("the proxy http://{proxy}/ {said}")),
                "{why}"
            );
            assert!(why.len() < 500, "{why}");
            let head = heads.recv().await.unwrap();
            assert!(
                head.starts_with("CONNECT upstream.example:8443 HTTP/1.1\r\n"),
                "{head}"
            );
        }
    }

    #[test]
    fn a_url_that_is_not_http_or_one_whose_proxy_is_not_http_is_refused_saying_why() {
        let none = Matcher::builder().build();
        let refused = |url: &str, proxies: &Matcher| {
            HttpClient::open_with(url, timeout(), proxies)
                .err()
                .expect("refused")
        };
        assert!(refused("ftp://host/mcp", &none).contains("is not an http:// or https:// URL"));
        let why = refused("http://user:secret@exa mple/", &none);
        assert!(
            why.contains("is not a URL") && !why.contains("secret"),
            "{why}"
        );
        let socks = Matcher::builder().all("socks5://127.0.0.1:1080").build();
        let why = refused("http://upstream.example/mcp", &socks);
        assert!(
            why.contains("socks5://127.0.0.1:1080") && why.contains("http:// proxies only"),
            "{why}"
        );
    }

    #[test]
    fn a_proxy_variable_that_names_no_proxy_is_found() {
        let env = |name: &str| {
            match name {
                "HTTPS_PROXY" => Some("not a url at all"),
                "https_proxy" => Some("ftp://u:secret@proxy:21"),
                "HTTP_PROXY" => Some("http://proxy:3128"),
                "http_proxy" => Some("proxy:3128"),
                "ALL_PROXY" => Some("socks5://proxy:1080"),
                "all_proxy" => Some("  "),
                _ => None,
            }
            .map(str::to_owned)
        };
        assert_eq!(
            unusable_proxy_variables(env),
            ["HTTPS_PROXY=not a url at all", "https_proxy=ftp://proxy:21"]
        );
    }

    #[test]
    fn credentials_are_never_shown() {
        for (url, shown) in [
            (
                "redis://user:secret@redis.example:6379/0",
                "redis://redis.example:6379/0",
            ),
            ("rediss://:pw@r:6380", "rediss://r:6380"),
            ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
            ("https://u:p@host/a@b?c=@", "https://host/a@b?c=@"),
            ("http://host/path@x", "http://host/path@x"),
            ("not a url", "not a url"),
        ] {
            assert_eq!(crate::shown_url(url), shown);
        }
    }
}
