//! What every POST to `/mcp` passes before the endpoint
//! ([`crate::downstream::http_endpoint`]) sees it: its body read whole
//! under `[http] max_body_mb` and a time limit, a new session refused while
//! `[http] max_sessions` are open (503), and the plainly well-formed
//! requests the front answers taken on the fast path ([`http_front`]).
//!
//! Reading the body here first bounds what a client can make sluice hold
//! (413, 408), whatever the request turns out to be.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http_body_util::BodyExt as _;
use serde::Deserialize;
use sluice_core::format::group;

use crate::downstream::http_endpoint::Endpoint;
use crate::downstream::http_front;
use crate::metrics::{Limit, Metrics};

/// The middleware: see the module's documentation.
pub async fn guard(State(guard): State<Arc<Endpoint>>, request: Request, next: Next) -> Response {
    if request.method() != http::Method::POST {
        return next.run(request).await;
    }
    let max = guard.limits.max_body_bytes;
    let declared = request
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let metrics = guard.gateway.governor().metrics();
    let within = guard.limits.body_timeout();
    if let Some(declared) = declared.filter(|&n| n > max) {
        // Past what is drained, the client is not read on: it said how
        // much it would send.
        let body = (declared <= DRAINED).then(|| request.into_body());
        return too_large(metrics, max, body, within);
    }
    let (parts, mut body) = request.into_parts();
    // (A body that came with the headers registers no timer: `timeout`
    // polls the read first.)
    let bytes = match tokio::time::timeout(within, collect(&mut body, max)).await {
        Err(_) => {
            return plain(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} s",
                    within.as_secs()
                ),
            );
        }
        Ok(Ok(None)) => return too_large(metrics, max, Some(body), within),
        Ok(Err(e)) => {
            return plain(
                StatusCode::BAD_REQUEST,
                format!("the request body could not be read: {e}"),
            );
        }
        Ok(Ok(Some(bytes))) => bytes,
    };
    if !parts.headers.contains_key("mcp-session-id")
        && guard.sessions.open() >= guard.limits.max_sessions
        && let Some(id) = initialize_id(&bytes)
    {
        return too_many_sessions(metrics, id, guard.sessions.open());
    }
    if let Some(answer) = http_front::answer(
        &guard.sessions,
        &guard.hosts,
        &guard.stateless,
        &parts,
        &bytes,
    )
    .await
    {
        return answer;
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// The refusal of a new session (`initialize` of request `id`) while
/// `open` sessions, the most allowed, are open; counted in `metrics`.
pub(super) fn too_many_sessions(metrics: &Metrics, id: serde_json::Value, open: usize) -> Response {
    metrics.refused(Limit::Sessions);
    let message = format!(
        "sluice has {} open sessions, the most allowed (`[http] max_sessions`): close sessions you no longer use (HTTP DELETE with their Mcp-Session-Id), let idle ones expire (`[http] session_idle_s`), or use the 2026-07-28 protocol, which needs no session",
        group(open as u64)
    );
    tracing::warn!(open, "refused a new session: [http] max_sessions reached");
    session_refused(StatusCode::SERVICE_UNAVAILABLE, id, message)
}

/// The refusal of a new session (`initialize` of request `id`) of
/// `principal`, who has `open` sessions open, the most one may; counted in
/// `metrics`. 429: the client's own share is used up, not sluice's.
pub(super) fn too_many_sessions_of(
    metrics: &Metrics,
    id: serde_json::Value,
    principal: &str,
    open: usize,
) -> Response {
    metrics.refused(Limit::SessionsPerPrincipal);
    let message = format!(
        "you have {} open sessions, the most one principal may (`[http] max_sessions_per_principal`): close sessions you no longer use (HTTP DELETE with their Mcp-Session-Id), let idle ones expire (`[http] session_idle_s`), or use the 2026-07-28 protocol, which needs no session",
        group(open as u64)
    );
    tracing::warn!(
        principal,
        open,
        "refused a new session: [http] max_sessions_per_principal reached"
    );
    session_refused(StatusCode::TOO_MANY_REQUESTS, id, message)
}

/// A JSON-RPC error answering `initialize` `id` with `message`, as HTTP
/// `status`.
fn session_refused(status: StatusCode, id: serde_json::Value, message: String) -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": super::SERVER_BUSY, "message": message},
    });
    (
        status,
        [(http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The id of an `initialize` request, if `body` is one.
fn initialize_id(body: &[u8]) -> Option<serde_json::Value> {
    #[derive(Deserialize)]
    struct Envelope<'a> {
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
        id: Option<serde_json::Value>,
    }
    let envelope: Envelope<'_> = serde_json::from_slice(body).ok()?;
    (envelope.method.as_deref() == Some("initialize"))
        .then(|| envelope.id.unwrap_or(serde_json::Value::Null))
}

/// How much of a body over `[http] max_body_mb` is read after its 413,
/// and dropped, at most: a client still sending it reads the answer. A
/// connection closed with bytes unread is reset, and the reset takes the
/// 413 with it (a client that wrote 2 MiB saw "broken pipe", not why).
const DRAINED: u64 = 64 << 20;

/// `body`, read whole; `None` as soon as more than `max` bytes have come
/// (the rest left in `body`).
async fn collect(body: &mut Body, max: u64) -> Result<Option<bytes::Bytes>, axum::Error> {
    let (mut chunks, mut read) = (Vec::new(), 0u64);
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            read += data.len() as u64;
            if read > max {
                return Ok(None);
            }
            chunks.push(data);
        }
    }
    // One chunk, the usual body, is not copied.
    Ok(Some(match chunks.len() {
        1 => chunks.pop().expect("one"),
        _ => chunks.concat().into(),
    }))
}

/// Reads what comes of `body` and drops it, until it ends, [`DRAINED`]
/// bytes have come, or `within` has passed.
async fn drain(mut body: Body, within: std::time::Duration) {
    let _ = tokio::time::timeout(within, async {
        let mut read = 0;
        while let Some(Ok(frame)) = body.frame().await {
            read += frame.data_ref().map_or(0, |d| d.len() as u64);
            if read > DRAINED {
                break;
            }
        }
    })
    .await;
}

/// The refusal of a body over `max` bytes; counted in `metrics`. The rest
/// of `body`, if given, is drained in the background (see [`DRAINED`]).
fn too_large(
    metrics: &Metrics,
    max: u64,
    body: Option<Body>,
    within: std::time::Duration,
) -> Response {
    metrics.refused(Limit::Body);
    if let Some(body) = body {
        tokio::spawn(drain(body, within));
    }
    plain(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "the request body is over {} MiB (`[http] max_body_mb`)",
            max >> 20
        ),
    )
}

fn plain(status: StatusCode, message: String) -> Response {
    (status, message).into_response()
}
