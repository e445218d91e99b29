//! `--admin ADDR`: the operator's server, apart from `/mcp`.
//!
//! - `GET /metrics`: every figure of [`crate::metrics`] in the Prometheus
//!   text format (0.0.4);
//! - `GET /`: a live page for people (`page.html`, served as is: no
//!   external asset, it polls `/api/state` every 2 s);
//! - `GET /api/state`: what the page shows, as JSON ([`state`]).
//!
//! Who may ask: with `[auth]`, `/metrics` and `/api/state` need a bearer
//! token of `[auth]` (any principal, or one of `[admin] principals`: an
//! operator's view is of everyone's figures); the page itself holds no
//! data and is served to anyone (it asks for a token). Without `[auth]` the server may only listen on a loopback
//! address ([`AdminSettings::check`]), and a request must name a loopback
//! Host (and Origin), as `/mcp` requires: a page of another site reached
//! through DNS rebinding gets nothing.

pub mod state;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio_util::sync::CancellationToken;

use crate::downstream::auth::Authenticator;
use crate::downstream::http_front::AllowedHosts;
use crate::gateway::Gateway;

/// The page, served as is.
const PAGE: &str = include_str!("page.html");

/// How long a connection may take to send a request's headers, or stay
/// idle between requests.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections the admin listener serves at once: scrapers and a few
/// browsers; one more gets 503.
const MAX_CONNECTIONS: usize = 256;

/// Where the admin server listens and who may ask it.
#[derive(Debug)]
pub struct AdminSettings {
    /// `--admin ADDR` or `[admin] listen`.
    pub addr: SocketAddr,
    /// `[auth]`'s tokens, if configured.
    pub auth: Option<Arc<Authenticator>>,
    /// The principals of `[auth]` who may read the data (`[admin]
    /// principals`); `None`: any.
    pub principals: Option<Vec<String>>,
    /// Hosts besides localhost a request may name (`--allow-host`), or any.
    pub hosts: AllowedHosts,
    /// TLS with `[http] tls_cert`'s certificate: the admin server's tokens
    /// and data are not sent in clear either.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

/// Why the admin server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// Not loopback, and no `[auth]`.
    #[error(
        "--admin {0} is not a loopback address and no [auth] is configured: anyone who reaches it could read every session's figures and the handles of stored results. Add an [auth] table to the config file (its tokens then guard /metrics and /api/state), or listen on 127.0.0.1"
    )]
    Unguarded(SocketAddr),
    /// The address cannot be bound.
    #[error("cannot listen on {addr} for --admin: {why}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// What the system said.
        why: std::io::Error,
    },
}

impl AdminSettings {
    /// Refuses an address that is not loopback without `[auth]`.
    pub fn check(&self) -> Result<(), AdminError> {
        if self.auth.is_none() && !self.addr.ip().to_canonical().is_loopback() {
            return Err(AdminError::Unguarded(self.addr));
        }
        Ok(())
    }
}

/// What every request of the admin server reaches.
#[derive(Clone)]
struct Admin {
    gateway: Arc<Gateway>,
    auth: Option<Arc<Authenticator>>,
    principals: Option<Arc<[String]>>,
    hosts: Arc<AllowedHosts>,
    /// When the server started (the page's uptime).
    started: std::time::SystemTime,
}

/// Binds `settings.addr` and serves the admin endpoints there, in a task,
/// until `shutdown` fires; returns the bound address and the task. Also
/// keeps the tokens-saved history (a point every
/// [`crate::metrics::HISTORY_STEP`]).
pub async fn start(
    gateway: Arc<Gateway>,
    settings: AdminSettings,
    shutdown: CancellationToken,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), AdminError> {
    settings.check()?;
    let listener = tokio::net::TcpListener::bind(settings.addr)
        .await
        .map_err(|why| AdminError::Bind {
            addr: settings.addr,
            why,
        })?;
    let bound = listener.local_addr().map_err(|why| AdminError::Bind {
        addr: settings.addr,
        why,
    })?;
    let tls = settings.tls;
    let admin = Admin {
        gateway: gateway.clone(),
        auth: settings.auth,
        principals: settings.principals.map(Arc::from),
        hosts: Arc::new(settings.hosts),
        started: crate::clock::wall(),
    };
    let metrics = gateway.governor().metrics().clone();
    let sampling = shutdown.child_token();
    tokio::spawn({
        let sampling = sampling.clone();
        async move {
            let mut tick = tokio::time::interval(crate::metrics::HISTORY_STEP);
            loop {
                tokio::select! {
                    () = sampling.cancelled() => return,
                    _ = tick.tick() => metrics.sample(crate::clock::wall()),
                }
            }
        }
    });
    let router = axum::Router::new()
        .route("/", axum::routing::get(page))
        .route("/metrics", axum::routing::get(metrics_text))
        .route("/api/state", axum::routing::get(api_state))
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(admin.clone(), guard))
        .with_state(admin);
    let serving = tokio::spawn(async move {
        let bounds = crate::downstream::http::Connections {
            header_timeout: HEADER_TIMEOUT,
            max: MAX_CONNECTIONS,
            key: "the admin listener's bound",
            tls: tls.map(tokio_rustls::TlsAcceptor::from),
            // Counted are /mcp's clients, not the operator's.
            metrics: None,
        };
        crate::downstream::http::serve_connections(listener, router, bounds, shutdown).await;
        sampling.cancel();
    });
    Ok((bound, serving))
}

/// Checks who asks: the Host (without `[auth]`), then the bearer token
/// and whose it is (with `[auth]`, for everything but the page).
async fn guard(State(admin): State<Admin>, request: Request, next: Next) -> Response {
    match &admin.auth {
        // A bearer token is never sent by a browser on its own: a page of
        // another site cannot use it, whatever Host it names.
        Some(auth) if request.uri().path() != "/" => {
            let principal = match auth.principal_of(&request).await {
                Ok(principal) => principal,
                Err(crate::downstream::auth::Refused::Missing) => {
                    return unauthorized(
                        "this endpoint needs an `Authorization: Bearer <token>` header with a token of [auth]",
                    );
                }
                Err(crate::downstream::auth::Refused::Invalid(why)) => {
                    tracing::info!(reason = %why, "refused a request to the admin server");
                    return unauthorized(&why);
                }
            };
            if let Some(allowed) = &admin.principals
                && !allowed.iter().any(|p| **p == *principal.0)
            {
                tracing::info!(principal = %principal.0, "refused a request to the admin server: not one of [admin] principals");
                return forbidden(&principal.0);
            }
        }
        Some(_) => {}
        None => {
            if let Some(refusal) = admin.hosts.refusal(request.headers()) {
                return refusal;
            }
        }
    }
    next.run(request).await
}

/// The answer to a principal of `[auth]` that `[admin] principals` does
/// not name (the names it does are not told).
fn forbidden(principal: &str) -> Response {
    let why = format!(
        "principal {principal:?} may not read the admin server's data: it is not one of [admin] principals"
    );
    let body = serde_json::json!({"error": "forbidden", "error_description": why});
    (
        StatusCode::FORBIDDEN,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn unauthorized(why: &str) -> Response {
    let body = serde_json::json!({"error": "unauthorized", "error_description": why});
    let mut response = (
        StatusCode::UNAUTHORIZED,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"sluice admin\""),
    );
    response
}

/// `GET /`: the page. It loads nothing from elsewhere, which its policy
/// says to the browser too.
async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::CONTENT_SECURITY_POLICY, page_policy()),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        PAGE,
    )
        .into_response()
}

/// The page's Content-Security-Policy: nothing from elsewhere, and no
/// script but the page's own, allowed by its SHA-256 (a value that found
/// its way into the page as markup could not run).
fn page_policy() -> &'static str {
    static POLICY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    POLICY.get_or_init(|| {
        use base64::Engine as _;
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(inline_script(PAGE).as_bytes());
        let digest = base64::engine::general_purpose::STANDARD.encode(digest);
        format!(
            "default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        )
    })
}

/// The text of `page`'s one `<script>` element (what a CSP hash covers).
fn inline_script(page: &str) -> &str {
    let start = page.find("<script>").map_or(0, |at| at + "<script>".len());
    let end = page[start..]
        .find("</script>")
        .map_or(start, |at| start + at);
    &page[start..end]
}

/// `GET /metrics`.
async fn metrics_text(State(admin): State<Admin>) -> Response {
    let snapshot = state::snapshot(&admin.gateway).await;
    let text = admin.gateway.governor().metrics().encode(&snapshot);
    (
        [
            (header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE),
            (header::CACHE_CONTROL, "no-store"),
        ],
        text,
    )
        .into_response()
}

/// `GET /api/state`.
async fn api_state(State(admin): State<Admin>) -> Response {
    let body = state::state(&admin.gateway, admin.started).await;
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body.to_string(),
    )
        .into_response()
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        "Not Found: the admin server serves GET /, /metrics and /api/state",
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_has_one_inline_script_and_the_policy_allows_only_it() {
        assert_eq!(PAGE.matches("<script").count(), 1, "one script element");
        assert!(!PAGE.contains("<script src"));
        let script = inline_script(PAGE);
        assert!(script.len() > 1_000, "{}", script.len());
        assert!(script.contains("api/state"));
        let policy = page_policy();
        assert!(policy.contains("script-src 'sha256-"), "{policy}");
        assert!(!policy.contains("script-src 'unsafe-inline'"), "{policy}");
        assert_eq!(inline_script("<p>no script</p>"), "");
    }
}
