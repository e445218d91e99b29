//! Sending one request upstream on a caller's behalf: its id, progress and
//! cancellation, the notifications about it forwarded to the client before
//! its response, and the result shaped for the client's protocol era.

use super::*;
use crate::upstream::rpc::ForClient;

impl Gateway {
    /// Sends one request to `upstream` on behalf of `caller`, routing its
    /// progress and server→client requests back to the caller.
    pub(super) async fn send(
        &self,
        upstream: &Arc<Upstream>,
        request: ClientRequest,
        caller: &Caller,
    ) -> Result<ServerResult, CallError> {
        self.send_keeping_raw(upstream, request, caller)
            .await
            .map(|(result, _)| result)
    }

    /// [`Self::send`], keeping the upstream's response as received beside
    /// its result (in the client's era): a result relayed unchanged is
    /// forwarded from those bytes.
    pub(super) async fn send_keeping_raw(
        &self,
        upstream: &Arc<Upstream>,
        request: ClientRequest,
        caller: &Caller,
    ) -> Result<(ServerResult, crate::jsonrpc::Message), CallError> {
        self.send_as(upstream, Request::Made(Box::new(request)), caller)
            .await
            .and_then(|answer| for_caller(upstream, answer, caller))
    }

    /// Sends `request` as [`Self::send_keeping_raw`] does; the answer as
    /// the upstream gave it, a small tool result not decoded yet
    /// ([`for_caller`] decodes it for the caller).
    pub(super) async fn send_as(
        &self,
        upstream: &Arc<Upstream>,
        request: Request<'_>,
        caller: &Caller,
    ) -> Result<crate::upstream::rpc::Decoded, CallError> {
        let hub = &self.hub;
        // Notifications about the request are forwarded from here, in the
        // order they came, and all of them before the response (see
        // `upstream::rpc`).
        let progress_token = caller.meta.get_progress_token();
        let (notices_tx, notices) = crate::hub::notice_queue();
        let for_client = || for_client(hub, caller);
        let listening = caller.stream.is_some();
        // A call that may become an operation always hears its progress.
        let progress = (listening && progress_token.is_some()) || caller.partial.is_some();
        let routes = |handle: &crate::upstream::rpc::Outgoing| {
            let mut guards: Vec<RouteGuard> = Vec::with_capacity(2);
            guards.push(hub.track_call(
                upstream.name(),
                handle.id.clone(),
                crate::hub::CallOrigin {
                    session: caller.session,
                    request: caller.request.clone(),
                    seq: 0,
                    notices: listening.then(|| notices_tx.clone()),
                    stream: caller.stream.clone().filter(|_| caller.stream_asks),
                    principal: match &caller.owner {
                        Owner::Principal(principal) => Some(principal.clone()),
                        _ => None,
                    },
                },
            ));
            if let Some(token) = &handle.progress_token {
                guards.push(hub.route_progress(upstream.name(), token.clone(), notices_tx.clone()));
            }
            guards
        };
        // Made in place and pinned once: a future bound to a local, then
        // awaited in one branch and pinned in another, takes its size
        // twice in this one's state, and every level above copies that
        // state whole. The typed form (no text: requests sluice makes) is
        // boxed, so that it does not size the common one.
        let mut call = std::pin::pin!(match request {
            Request::Text { method, params } => futures::future::Either::Left(
                upstream.send_text(method, params, progress, for_client, &caller.ct, routes),
            ),
            Request::Made(request) => futures::future::Either::Right(Box::pin(
                upstream.send(*request, progress, for_client, &caller.ct, routes),
            )),
        });
        if !listening && caller.partial.is_none() {
            return call.await;
        }
        let forward = |notice: Notice| {
            let partial = caller.partial.clone();
            // Once the call went on in the background, its client has its
            // answer: it hears no more about the call.
            let detached = partial.as_ref().is_some_and(|p| p.detached());
            let stream = caller.stream.clone().filter(|_| !detached);
            let token = progress_token.clone();
            async move {
                match (&notice, &partial) {
                    (Notice::Progress(params, _), Some(partial)) => partial.progress(params),
                    (Notice::Log(logged), Some(partial)) => partial.log(logged),
                    _ => {}
                }
                // Where sluice's own layer writes to the client, progress
                // goes as the upstream sent it, with the client's token.
                if let (Some(stream), Notice::Progress(_, raw), Some(token)) =
                    (&stream, &notice, &token)
                    && let Some(token) = serde_json::to_string(token)
                        .ok()
                        .and_then(|json| crate::jsonrpc::Id::from_json(&json))
                    && let Ok(relayed) = raw.with_notified_progress_token(&token)
                {
                    if stream.send(relayed.into_bytes()).await.is_err() {
                        tracing::debug!("notification not delivered: the client's stream closed");
                    }
                    return;
                }
                let notification = match notice {
                    Notice::Progress(mut params, _) => {
                        let Some(token) = token else { return };
                        params.progress_token = token;
                        rmcp::model::ServerNotification::ProgressNotification(
                            rmcp::model::ProgressNotification::new(*params),
                        )
                    }
                    // As the upstream sent it, on the stream that carries
                    // the answer.
                    Notice::Log(logged) => {
                        if let Some(stream) = stream
                            && stream.send(logged.raw.as_bytes().clone()).await.is_err()
                        {
                            tracing::debug!(
                                "log message not delivered: the client's stream closed"
                            );
                        }
                        return;
                    }
                };
                // On the stream that carries the answer, in order.
                let Some(stream) = stream else { return };
                let message = rmcp::model::ServerJsonRpcMessage::notification(notification);
                let bytes = serde_json::to_vec(&message).expect("rmcp's messages serialize");
                if stream.send(bytes::Bytes::from(bytes)).await.is_err() {
                    tracing::debug!("notification not delivered: the client's stream closed");
                }
            }
        };
        // While a notification waits for room on the client's stream, the
        // call is not polled: a client that cancels (or leaves) without
        // reading must not hold up its cancellation, which the call tells
        // the upstream. What was kept for an operation is kept first (the
        // forwarder's first step, before it waits).
        let forward = &forward;
        let forward_unless_cancelled = |notice: Notice| async move {
            tokio::select! {
                biased;
                () = forward(notice) => {}
                () = caller.ct.cancelled() => {}
            }
        };
        // Boxed: most calls hear of nothing before their answer, and the
        // forwarding's state (1.4 KB) would size every call's future.
        let result = loop {
            tokio::select! {
                biased;
                notice = notices.recv() => Box::pin(forward_unless_cancelled(notice)).await,
                result = &mut call => break result,
            }
        };
        while let Some(notice) = notices.try_recv() {
            Box::pin(forward_unless_cancelled(notice)).await;
        }
        let lost = notices.lost();
        if lost != crate::hub::Lost::default() {
            tracing::warn!(
                upstream = upstream.name(),
                "the client of request {} did not read its notifications as fast as the \
                 upstream sent them: {} progress notifications were replaced by later ones \
                 and {} log messages dropped (sluice holds at most {} notifications, {} MiB, \
                 for each request)",
                caller.request,
                lost.superseded,
                lost.logs,
                crate::hub::notices::HELD,
                crate::hub::notices::HELD_BYTES >> 20,
            );
        }
        result
    }
}

/// What a request on `caller`'s behalf tells a 2026-07-28 upstream of its
/// client: the log level its session set, and the capabilities its session
/// declared at `initialize` or its request declares, as sluice relays
/// them ([`crate::hub::mirrored`]). A caller that declares none (`sluice
/// call`, a cache refresh in the background) has no one to ask for input:
/// it declares none.
fn for_client(hub: &Hub, caller: &Caller) -> ForClient {
    let (declared, log_level) = match caller.session.and_then(|s| hub.as_told_upstream(s)) {
        Some((declared, log_level)) => (declared, log_level),
        None => (
            crate::hub::Mirrored::of(&caller.meta.client_capabilities().unwrap_or_default()),
            None,
        ),
    };
    ForClient {
        log_level,
        capabilities: Some(declared),
    }
}

/// What [`Gateway::send_as`] sends upstream.
pub(super) enum Request<'a> {
    /// A request sluice made (or a client's, decoded): serialized to be
    /// sent. Boxed: rmcp's requests are large, the other form small.
    Made(Box<ClientRequest>),
    /// A client's request of `method` whose `params` go as text: the
    /// client's, as sent, with sluice's edits (see [`forwarded_params`] and
    /// [`crate::upstream::Upstream::send_text`]). Nothing is decoded or
    /// copied to make it.
    Text {
        /// Its method (`tools/call`, …).
        method: &'static str,
        /// Its params.
        params: &'a str,
    },
}

impl<'a> Request<'a> {
    /// The request of `method` as `text` when there is one, else as
    /// `made` makes it.
    pub(super) fn text_or(
        method: &'static str,
        text: Option<&'a str>,
        made: impl FnOnce() -> ClientRequest,
    ) -> Request<'a> {
        match text {
            Some(params) => Request::Text { method, params },
            None => Request::Made(Box::new(made())),
        }
    }
}

/// `answer`'s result decoded (if it was left as sent) and shaped for the
/// caller's era, with the response it came in.
pub(super) fn for_caller(
    upstream: &Upstream,
    answer: crate::upstream::rpc::Decoded,
    caller: &Caller,
) -> Result<(ServerResult, crate::jsonrpc::Message), CallError> {
    in_era_decoded(upstream, answer, caller.era.is_legacy())
}

/// [`for_caller`] for a client of the initialize era (`legacy`) or not.
pub(super) fn in_era_decoded(
    upstream: &Upstream,
    answer: crate::upstream::rpc::Decoded,
    legacy: bool,
) -> Result<(ServerResult, crate::jsonrpc::Message), CallError> {
    upstream
        .decoded(answer)
        .map(|(result, raw)| (in_clients_era(result, legacy), raw))
}

/// The `_meta` keys of a client's request that its upstream request does
/// not carry: sluice sets its own progress token, and the 2026-07-28 keys
/// describe the client, not sluice.
pub(super) const NOT_FORWARDED_META: [&str; 4] = [
    "progressToken",
    crate::jsonrpc::PROTOCOL_VERSION_META,
    "io.modelcontextprotocol/clientInfo",
    "io.modelcontextprotocol/clientCapabilities",
];

/// The client's `_meta`, minus what sluice sets itself on the upstream
/// request (the progress token, and the 2026-07-28 keys that describe
/// sluice, not the client; the client's `logLevel` preference is kept).
pub(super) fn forwarded_meta(meta: &RequestMetaObject) -> Option<RequestMetaObject> {
    // Most have none to forward (a 2026-07-28 request's `_meta` describes
    // its client): nothing is copied then.
    if meta
        .0
        .0
        .keys()
        .all(|key| NOT_FORWARDED_META.contains(&key.as_str()))
    {
        return None;
    }
    let mut forwarded = meta.clone();
    forwarded
        .0
        .0
        .retain(|key, _| !NOT_FORWARDED_META.contains(&key.as_str()));
    (!forwarded.0.0.is_empty()).then_some(forwarded)
}

/// `params` (checked text, no escape in it) with its `_meta` member cut
/// out, when it has one `_meta`, an object of keys that are all
/// [`NOT_FORWARDED_META`]: what [`forwarded_params`] makes of such params
/// with nothing else to edit, found in one walk, every other member's
/// text (and the space around them) as the client sent it. `None` for
/// any other params.
pub(super) fn without_own_meta(params: &str) -> Option<String> {
    let mut walker = crate::jsonrpc::walk::members(params)?;
    // The text cut: after an earlier member, from that member's end (the
    // comma between them goes) to `_meta`'s end; first, from its key to
    // the next member's key (the comma after it goes), or to its end
    // when it is the only member.
    let mut cut: Option<std::ops::Range<usize>> = None;
    let mut cut_to_next_key = false;
    // Where the last member's value ended; `None` before the first.
    let mut last_end = None;
    while let Some(key) = walker.key() {
        let key_start = key.as_ptr() as usize - params.as_ptr() as usize;
        if std::mem::take(&mut cut_to_next_key) {
            cut.as_mut()?.end = key_start;
        }
        if key == "\"_meta\"" {
            if cut.is_some() || !walker.enter(b'{') {
                return None;
            }
            while let Some(meta_key) = walker.key() {
                let plain = meta_key.strip_prefix('"')?.strip_suffix('"')?;
                if !NOT_FORWARDED_META.contains(&plain) {
                    return None;
                }
                walker.value();
            }
            cut = Some(last_end.unwrap_or(key_start)..walker.position());
            cut_to_next_key = last_end.is_none();
        } else {
            walker.value();
        }
        last_end = Some(walker.position());
    }
    let cut = cut?;
    Some([&params[..cut.start], &params[cut.end..]].concat())
}

/// The params of the client's request as it sent them (when sluice's own
/// layer read it), with `edit` made (`None` from it: the params cannot be
/// sent as text) and without the `_meta` keys sluice sets itself (see
/// [`NOT_FORWARDED_META`]). Every other member, and the spelling of every
/// value, is the client's.
pub(super) fn forwarded_params(
    caller: &Caller,
    edit: impl FnOnce(&mut crate::jsonrpc::RawObject<'_>) -> Option<()>,
) -> Option<String> {
    let mut text =
        crate::jsonrpc::RawObject::of_checked(caller.sent_request.as_ref()?.params()?).ok()?;
    edit(&mut text)?;
    own_meta_removed(&mut text)?;
    Some(text.to_json())
}

/// Takes the keys of [`NOT_FORWARDED_META`] out of the params' `_meta`,
/// and `_meta` itself when nothing else is left in it; `None` when
/// `_meta` is no object.
fn own_meta_removed(params: &mut crate::jsonrpc::RawObject<'_>) -> Option<()> {
    if params.get("_meta").is_some() {
        let emptied = params
            .edit_path(&["_meta"], |meta| {
                for key in NOT_FORWARDED_META {
                    meta.remove(key);
                }
                meta.is_empty()
            })
            .ok()??;
        if emptied {
            params.remove("_meta");
        }
    }
    Some(())
}

/// An upstream's result in the shape of the client's protocol era: the
/// upstream may speak the other one. A 2026-07-28 client requires
/// `resultType`; an older one knows no cache hints.
pub(super) fn in_clients_era(result: ServerResult, legacy: bool) -> ServerResult {
    use rmcp::model::ResultType;
    let mut result = match result {
        ServerResult::ReadResourceResult(r) => {
            return ServerResult::ReadResourceResult(read_in_era(r, legacy));
        }
        _ if legacy => return result,
        other => other,
    };
    let result_type = match &mut result {
        ServerResult::CompleteResult(r) => &mut r.result_type,
        ServerResult::GetPromptResult(r) => &mut r.result_type,
        ServerResult::CallToolResult(r) => &mut r.result_type,
        _ => return result,
    };
    result_type.get_or_insert(ResultType::COMPLETE);
    result
}

/// [`in_clients_era`] for a resource's contents: no cache hints for the
/// initialize era, a `resultType` for 2026-07-28.
fn read_in_era(
    mut result: rmcp::model::ReadResourceResult,
    legacy: bool,
) -> rmcp::model::ReadResourceResult {
    if legacy {
        result.ttl_ms = None;
        result.cache_scope = None;
    } else {
        result
            .result_type
            .get_or_insert(rmcp::model::ResultType::COMPLETE);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::RawObject;

    /// Members as `(key, value)` texts: what the upstream reads of params.
    fn members(params: &str) -> Vec<(String, String)> {
        let object = RawObject::of_checked(params).unwrap();
        let members = object.iter().map(|(k, v)| (k.to_owned(), v.to_owned()));
        members.collect()
    }

    const VALUES: [&str; 6] = [r#""echo""#, "null", "-1.50", "[1,{}]", "{}", r#"{"a":"b"}"#];
    const SPACES: [&str; 3] = ["", " ", "\n  "];

    /// A `_meta` as a 2026-07-28 client sends it (what sluice sets
    /// itself), at times with a key it forwards, at times no object.
    fn meta(next: &mut impl FnMut(usize) -> usize) -> String {
        const META_KEYS: [&str; 6] = [
            r#""progressToken""#,
            r#""io.modelcontextprotocol/protocolVersion""#,
            r#""io.modelcontextprotocol/clientInfo""#,
            r#""io.modelcontextprotocol/clientCapabilities""#,
            r#""io.modelcontextprotocol/logLevel""#,
            r#""x""#,
        ];
        if next(4) == 0 {
            return VALUES[next(VALUES.len())].to_owned();
        }
        let members: Vec<String> = (0..next(4))
            .map(|_| {
                let keys = if next(5) == 0 { 6 } else { 4 };
                format!("{}:{}", META_KEYS[next(keys)], VALUES[next(VALUES.len())])
            })
            .collect();
        format!("{{{}}}", members.join(","))
    }

    #[test]
    fn the_cut_gives_what_the_edit_gives_in_params_made_at_random() {
        const KEYS: [&str; 4] = [r#""name""#, r#""arguments""#, r#""_meta""#, r#""x""#];
        let mut next = crate::test_support::pseudo_random(0xc07);
        let (mut cut_count, mut kept) = (0, 0);
        for _ in 0..4000 {
            let mut sent = Vec::new();
            for _ in 0..next(5) {
                let key = KEYS[next(KEYS.len())];
                let value = match key {
                    r#""_meta""# => meta(&mut next),
                    _ => VALUES[next(VALUES.len())].to_owned(),
                };
                let [a, b, c, d] = [0; 4].map(|_| SPACES[next(SPACES.len())]);
                sent.push(format!("{a}{key}{b}:{c}{value}{d}"));
            }
            let params = format!("{{{}{}}}", sent.join(","), SPACES[next(SPACES.len())]);
            let mut edited = RawObject::of_checked(&params).unwrap();
            let general = own_meta_removed(&mut edited).map(|()| edited.to_json());
            match without_own_meta(&params) {
                Some(cut) => {
                    cut_count += 1;
                    assert!(
                        serde_json::from_str::<serde::de::IgnoredAny>(&cut).is_ok(),
                        "{params:?} -> {cut:?}"
                    );
                    let general = general.expect("the edit takes what the cut takes");
                    assert_eq!(members(&cut), members(&general), "{params:?} -> {cut:?}");
                    assert!(!cut.contains("_meta"), "{cut:?}");
                }
                None => kept += 1,
            }
        }
        assert!(
            cut_count > 800 && kept > 800,
            "{cut_count} cut, {kept} left"
        );
    }
}
