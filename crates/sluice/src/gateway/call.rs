//! `tools/call`: sluice's own tools, then routing to an upstream tool, with
//! `_timeout_s` (operations), `_fresh` (cache) and governing of the result.

use super::*;
use crate::metrics::Outcome;

impl Gateway {
    /// Calls a tool.
    pub async fn call_tool(
        self: &Arc<Self>,
        params: CallToolRequestParams,
        caller: &Caller,
    ) -> Result<CallToolResponse, ErrorData> {
        self.call_tool_relayed(params.into(), caller)
            .await
            .map(Relayed::into_response)
    }

    /// Calls a tool; an upstream's result that passes unchanged comes with
    /// the response it arrived in, to be forwarded as those bytes.
    pub async fn call_tool_relayed(
        self: &Arc<Self>,
        params: NamedParams,
        caller: &Caller,
    ) -> Result<Relayed, ErrorData> {
        let exposed = params.name.to_string();
        let budget = self.governor.budget_for(caller.client.as_deref());
        if let Some(builtin) = crate::tools::Builtin::from_name(&exposed) {
            let context = crate::tools::Context {
                governor: &self.governor,
                operations: &self.operations,
                cache: &self.cache,
                caches_anything: self.caches_anything(),
            };
            let arguments = match params.builtin_arguments() {
                Ok(arguments) => arguments,
                Err(message) => return Ok(Relayed::error_result(message)),
            };
            // Boxed: inline, a built-in tool's future would size every
            // routed call's too (see `fetch_keeping_raw`).
            let running = Box::pin(builtin.run(&context, arguments, caller, budget));
            return running.await.map(|answer| match answer {
                crate::govern::ToolAnswer::Made(r) => {
                    Relayed::made(CallToolResponse::Complete(era(r, caller)))
                }
                crate::govern::ToolAnswer::Sent(sent) => {
                    Relayed::sent(sent, caller.era.is_legacy())
                }
            });
        }
        let started = std::time::Instant::now();
        // No tool has a name this long (MCP names are at most 128
        // characters): refused here, not sent on and echoed back whole.
        let route = (exposed.len() <= MAX_TOOL_NAME_BYTES)
            .then(|| self.namer.route(&exposed))
            .flatten();
        let (answer, outcome) = match route {
            None => (Err(self.unknown("tool", &exposed)), Some(Outcome::Error)),
            Some(route) => {
                self.call_routed(params, caller, &exposed, route, budget)
                    .await
            }
        };
        // An `input_required` answer ends nothing: the client calls again
        // with its input, and that call is counted.
        let Some(outcome) = outcome else {
            return answer;
        };
        // Labelled by the tool only if its upstream lists it (the call
        // learned the list if none was): a name a client made up is not.
        self.governor
            .metrics()
            .tool(&exposed, || {
                let listed = route.is_some() && lock(&self.input_schemas).contains_key(&exposed);
                (
                    route.map(|(upstream, _)| upstream),
                    route.map(|(_, tool)| tool).filter(|_| listed),
                )
            })
            .record(outcome, started.elapsed());
        answer
    }

    /// A call of an upstream's tool (`exposed`, routed to `name` of
    /// `upstream`), with `_timeout_s`, `_fresh` and the limits on
    /// operations; and how it ended, for the metrics (the one place that
    /// tells).
    async fn call_routed(
        self: &Arc<Self>,
        mut params: NamedParams,
        caller: &Caller,
        exposed: &str,
        (upstream, name): (&str, &str),
        budget: sluice_core::budget::Budget,
    ) -> (Result<Relayed, ErrorData>, Option<Outcome>) {
        let upstream = self
            .upstream(upstream)
            .expect("routed to a known upstream")
            .clone();
        let settings = upstream.spec.tools.get(name).cloned().unwrap_or_default();
        if lock(&self.input_schemas).is_empty() {
            // The client called without listing: learn the input schemas
            // (for the arguments a stored answer suggests) once.
            // Boxed, as every path a plain call does not take (see
            // `fetch_keeping_raw`).
            let listing = Box::pin(self.list_tools());
            let _ = listing.await;
        }
        let narrowing = lock(&self.input_schemas)
            .get(exposed)
            .map(|listed| listed.narrowing.clone())
            .unwrap_or_default();
        let policy = Policy {
            owner: caller.owner.clone(),
            budget: budget.narrowed(&settings.budget()),
            source: exposed.to_owned(),
            mode: settings.mode.unwrap_or_default(),
            preview_depth: settings
                .preview_depth
                .map_or(DEFAULT_PREVIEW_DEPTH, |d| d as usize),
            narrowing,
        };
        params.name = name.to_owned().into();
        params.meta = forwarded_meta(&caller.meta);
        // `_timeout_s` is sluice's: the upstream never sees it.
        let timeout_arg = params.take_argument(sluice_core::operation::TIMEOUT_ARG);
        let settings = self.operations.settings();
        let timeout =
            match settings.timeout(timeout_arg.as_ref(), settings_timeout(&upstream, name)) {
                Ok(timeout) => timeout,
                Err(message) => return (Ok(Relayed::error_result(message)), Some(Outcome::Error)),
            };
        // So is `_fresh`, for the tools sluice caches.
        let cached = match self.cache_policy(exposed) {
            None => None,
            // Clients without a session or a principal cannot be told apart:
            // an entry "per session" would be shared by all of them.
            Some(cache_policy) if cache_policy.per_session && caller.owner == Owner::Anonymous => {
                // `_fresh` is still sluice's: the upstream never sees it.
                params.take_argument(sluice_core::cache::FRESH_ARG);
                None
            }
            // Its key would be its arguments, decoded and written again.
            Some(_) if !params.keyable() => {
                tracing::debug!(
                    tool = exposed,
                    bytes = params.arguments_len(),
                    "not cached: its arguments are over the largest a cached call takes"
                );
                // `_fresh` is still sluice's: the upstream never sees it.
                params.take_argument(sluice_core::cache::FRESH_ARG);
                None
            }
            Some(cache_policy) => {
                let fresh = match params.take_argument(sluice_core::cache::FRESH_ARG) {
                    None | Some(serde_json::Value::Bool(false)) => false,
                    Some(serde_json::Value::Bool(true)) => true,
                    Some(other) => {
                        let message = format!(
                            "`_fresh` must be true (skip the cached result and refresh it) or false, not {}",
                            sluice_core::format::quoted_cut(&other.to_string())
                        );
                        return (Ok(Relayed::error_result(message)), Some(Outcome::Error));
                    }
                };
                let owner = cache_policy.per_session.then(|| caller.owner.key());
                // Answered, but neither from the cache nor into it: the key
                // reads the last of a repeated key, an upstream may read the
                // first (`sluice_core::cache::repeats_a_key`).
                let repeats = caller
                    .sent_request
                    .as_ref()
                    .and_then(|m| m.params())
                    .is_some_and(sluice_core::cache::repeats_a_key);
                (!repeats).then(|| CachedCall {
                    key: sluice_core::cache::key(
                        upstream.name(),
                        name,
                        owner.as_deref(),
                        params.arguments().as_ref(),
                    ),
                    policy: cache_policy,
                    fresh,
                })
            }
        };
        // The call runs in a task of its own, which a timeout leaves running
        // in the background; until then the client's cancellation stops it.
        let started = tokio::time::Instant::now();
        let partial = Arc::new(crate::operations::Partial::default());
        let stop = CancellationToken::new();
        let mut inner = caller.clone();
        inner.ct = stop.clone();
        inner.partial = Some(partial.clone());
        let gateway = self.clone();
        // Polled here while the client waits (no task of its own, no hop
        // through the scheduler); moved to a task only when it must go on
        // without the client: past the timeout, or to finish cancelling.
        // A panic in it is caught, as a task's would be.
        // Built in place: a future bound to a local first keeps its size
        // in this one's state even once moved (rustc keeps a moved-from
        // local's storage across the awaits of its scope).
        let mut call = std::panic::AssertUnwindSafe(async move {
            gateway
                .call_upstream(&upstream, params, policy, &inner, cached)
                .await
        })
        .catch_unwind()
        .boxed();
        // In this order, and the deadline registered only when its branch
        // is first polled: the call goes as far as its write to the
        // upstream first (work before that write is added to the call's
        // time, work after it is not), and an answer that comes with its
        // deadline is the call's answer.
        let deadline = async { self.deadlines.after(timeout).await };
        let done = tokio::select! {
            biased;
            done = &mut call => done,
            () = caller.ct.cancelled() => return cancelled(call, &stop),
            // One timer for every call's timeout (see `deadlines`).
            () = deadline => {
                let detach = || {
                    self.operations.try_start(
                        caller.owner.clone(),
                        caller.quota.clone(),
                        exposed,
                        partial.clone(),
                        stop.clone(),
                        started,
                    )
                };
                match self.until_detached(&mut call, caller, exposed, detach).await {
                    Foreground::Ended(done) => done,
                    Foreground::Cancelled => return cancelled(call, &stop),
                    Foreground::Detached(op) => {
                        let detached = Box::pin(self.detached(op, call, caller, settings.retention));
                        return detached.await;
                    }
                }
            }
        };
        match done {
            Ok(Done::Answer(answer, outcome)) => (*answer, outcome),
            Ok(Done::Unavailable(message)) => {
                (Ok(Relayed::error_result(message)), Some(Outcome::Error))
            }
            Err(panic) => (
                Err(ErrorData::internal_error(
                    format!("sluice lost the call: {}", panic_message(&panic)),
                    None,
                )),
                Some(Outcome::Error),
            ),
        }
    }

    /// Waits, past its timeout, for `call` to become an operation
    /// (`detach`: when its client's operations and sluice's leave room for
    /// one more), to end, or to be cancelled by its client. While it waits
    /// it is a call like any other: its client waits for it, and it stops
    /// when its client does. A tool that never answers thus fills
    /// `[operations] max_running` with operations, and never more: the
    /// client's other calls go on, quick ones answered as ever.
    async fn until_detached(
        &self,
        call: &mut CallInFlight,
        caller: &Caller,
        exposed: &str,
        detach: impl Fn() -> Result<Arc<crate::operations::Operation>, crate::operations::Full>,
    ) -> Foreground {
        let mut told = false;
        loop {
            // Armed before the try: an end between the two is not missed.
            let mut freed = std::pin::pin!(self.operations.freed());
            freed.as_mut().enable();
            let full = match detach() {
                Ok(op) => return Foreground::Detached(op),
                Err(full) => full,
            };
            if !std::mem::replace(&mut told, true) {
                self.governor
                    .metrics()
                    .refused(crate::metrics::Limit::RunningOperations);
                tracing::info!(
                    tool = exposed,
                    "a call of `{exposed}` goes on past its timeout with its client waiting, not as an operation: {full}"
                );
            }
            tokio::select! {
                biased;
                done = &mut *call => return Foreground::Ended(done),
                () = caller.ct.cancelled() => return Foreground::Cancelled,
                () = freed => {}
            }
        }
    }

    /// Answers `caller` with operation `op`, now that `call` goes on in
    /// the background, and has the operation finish when the call ends.
    async fn detached(
        &self,
        op: Arc<crate::operations::Operation>,
        call: CallInFlight,
        caller: &Caller,
        retention: std::time::Duration,
    ) -> (Result<Relayed, ErrorData>, Option<Outcome>) {
        if let Some(session) = caller.session {
            self.hub.detach_calls(session, &caller.request);
        }
        let answer = if caller.tasks {
            let mut meta = rmcp::model::MetaObject::new();
            meta.insert(crate::operations::META.into(), op.meta());
            CallToolResponse::Task(
                rmcp::model::CreateTaskResult::new(op.task(retention)).with_meta(meta),
            )
        } else {
            CallToolResponse::Complete(era(self.operations.started_answer(&op), caller))
        };
        let recorded = op.clone();
        // The call goes on in its task first: it is not held up by the
        // record's write.
        tokio::spawn(async move {
            let outcome = match call.await {
                Ok(Done::Answer(answer, _)) => match *answer {
                    // Within the budget, as the upstream sent it: kept as
                    // those bytes, never decoded.
                    Ok(Relayed {
                        response: CallAnswer::Sent { .. },
                        raw: Some(sent),
                    }) => crate::operations::Outcome::Relayed(sent),
                    answer => match answer.map(Relayed::into_response) {
                        Ok(CallToolResponse::Complete(result)) => {
                            crate::operations::Outcome::Completed(result)
                        }
                        Ok(_) => crate::operations::Outcome::Failed(
                            "the upstream asked for input or answered with a task, which an operation cannot take".into(),
                        ),
                        Err(e) => crate::operations::Outcome::Failed(e.message.to_string()),
                    },
                },
                Ok(Done::Unavailable(why)) => crate::operations::Outcome::Failed(why),
                Err(panic) => crate::operations::Outcome::Failed(format!(
                    "sluice lost the call: {}",
                    panic_message(&panic)
                )),
            };
            op.finish(outcome);
        });
        let recording = Box::pin(self.operations.recorded(&recorded));
        recording.await;
        (Ok(Relayed::made(answer)), Some(Outcome::Operation))
    }

    /// Sends a tool call upstream (or answers it from the cache) and
    /// governs its result.
    pub(super) async fn call_upstream(
        self: &Arc<Self>,
        upstream: &Arc<Upstream>,
        params: NamedParams,
        policy: Policy,
        caller: &Caller,
        cached: Option<CachedCall>,
    ) -> Done {
        // The owner and budget a stored answer was made for (cached calls).
        let governed_key = cached
            .as_ref()
            .map(|_| format!("{}|{:?}", policy.owner.key(), policy.budget))
            .unwrap_or_default();
        let mut raw = None;
        let (sent, entry, hit) = match cached {
            None => {
                let fetched = self
                    .fetch_keeping_raw(upstream, params, caller, &policy.source)
                    .await;
                // A tool's result as the upstream sent it is governed from
                // its bytes, never decoded.
                if let Fetched::Sent(answer) = &fetched
                    && answer.undecoded().is_some()
                    && let Some((relayed, outcome)) = self
                        .governed_from_bytes(&answer.raw, &policy, caller, None, false)
                        .await
                {
                    return Done::Answer(Box::new(Ok(relayed)), Some(outcome));
                }
                let legacy = caller.era.is_legacy();
                let (sent, response) = fetched.decode_off_thread(upstream, legacy).await;
                raw = response;
                (sent, None, false)
            }
            Some(call) => {
                let fetch = self.fetcher(upstream, params, caller, &policy.source);
                match Box::pin(self.cache.serve(
                    call.key,
                    &policy.source,
                    call.policy,
                    call.fresh,
                    fetch,
                ))
                .await
                {
                    crate::cache::Served::Hit(entry) => {
                        // A large result this owner had stored with this
                        // budget: the same answer, while its handle lives.
                        let renewed = match entry.governed_for(&governed_key) {
                            Some(answer) => self.governor.renewed(answer, &policy.owner).await,
                            None => None,
                        };
                        if let Some(answer) = renewed {
                            return Done::Answer(
                                Box::new(Ok(Relayed::made(CallToolResponse::Complete(with_hit(
                                    answer, &entry,
                                ))))),
                                Some(Outcome::Cached),
                            );
                        }
                        // Governed from its bytes, never decoded.
                        if let Some(sent) = entry.raw()
                            && let Some((relayed, outcome)) = self
                                .governed_from_bytes(
                                    sent,
                                    &policy,
                                    caller,
                                    Some((&entry, &governed_key)),
                                    true,
                                )
                                .await
                        {
                            return Done::Answer(Box::new(Ok(relayed)), Some(outcome));
                        }
                        raw = entry.raw().cloned();
                        let result = ServerResult::CallToolResult(entry.result());
                        // An entry made for a client of the other era.
                        (
                            Ok(in_clients_era(result, caller.era.is_legacy())),
                            Some(entry),
                            true,
                        )
                    }
                    crate::cache::Served::Fetched(answer, entry) => match *answer {
                        // Governed from its bytes, never decoded; an entry
                        // made of it keeps a large result's stored answer.
                        Ok(crate::cache::Fetched::Sent { response, .. }) => {
                            let keeper = entry.as_deref().map(|e| (e, governed_key.as_str()));
                            if let Some((relayed, outcome)) = self
                                .governed_from_bytes(&response, &policy, caller, keeper, false)
                                .await
                            {
                                return Done::Answer(Box::new(Ok(relayed)), Some(outcome));
                            }
                            // Not reachable: the fetcher read these bytes as
                            // a tool's result.
                            let (result, response) =
                                Fetched::Sent(crate::upstream::rpc::Decoded::sent(response))
                                    .decode(upstream, caller.era.is_legacy());
                            raw = response;
                            (result, entry, false)
                        }
                        Ok(crate::cache::Fetched::Decoded(result)) => (
                            Ok(in_clients_era(*result, caller.era.is_legacy())),
                            entry,
                            false,
                        ),
                        Err(e) => (Err(e), entry, false),
                    },
                }
            }
        };
        // Told apart so that an operation can fail with the reason.
        if let Err(CallError::Unavailable(why)) = sent {
            return Done::Unavailable(why);
        }
        let answer = self.call_answer(upstream, sent);
        let answer = match answer {
            // Within the budget, as the upstream sent it: passed on as its bytes.
            Ok(CallToolResponse::Complete(result))
                if raw.is_some() && self.governor.passes(&result, &policy) =>
            {
                let (result, raw) = match &entry {
                    Some(entry) if hit => (
                        with_hit(result, entry),
                        raw.and_then(|sent| with_hit_as_sent(&sent, entry)),
                    ),
                    _ => (result, raw),
                };
                Ok(Relayed {
                    response: CallToolResponse::Complete(result).into(),
                    raw,
                })
            }
            Ok(CallToolResponse::Complete(result)) => {
                let result = Box::pin(self.governor.tool_result(result, policy)).await;
                if let Some(entry) = &entry
                    && crate::govern::stored_handle(&result).is_some()
                {
                    entry.keep_governed(governed_key, result.clone());
                }
                Ok(Relayed::made(CallToolResponse::Complete(match &entry {
                    Some(entry) if hit => with_hit(result, entry),
                    _ => result,
                })))
            }
            // The upstream's own error, governed like a result.
            Err(error) => {
                Err(Box::pin(self.governor.tool_error(error, upstream.name(), &policy)).await)
            }
            Ok(other) => Ok(Relayed::made(other)),
        };
        let outcome = match &answer {
            _ if hit => Some(Outcome::Cached),
            Err(_) => Some(Outcome::Error),
            Ok(relayed) => relayed.outcome(),
        };
        Done::Answer(Box::new(answer), outcome)
    }

    /// Governs a tool's result from the bytes of `sent` (the upstream's
    /// response, or a cache entry's, with the key of the stored answers
    /// the entry keeps): within the budget, relayed as those bytes (marked
    /// as a `hit` if it is one); over it, stored (the answer kept by the
    /// entry); and how the call ended. `None` if the bytes do not read as a
    /// tool's result, which must be decoded.
    async fn governed_from_bytes(
        &self,
        sent: &crate::jsonrpc::Message,
        policy: &Policy,
        caller: &Caller,
        cached: Option<(&crate::cache::Entry, &str)>,
        hit: bool,
    ) -> Option<(Relayed, Outcome)> {
        let legacy = caller.era.is_legacy();
        let hit = cached.map(|(entry, _)| entry).filter(|_| hit);
        match self.governor.sent_result(sent, policy).await? {
            Governed::Passes { is_error } => {
                let sent = match hit {
                    Some(entry) => with_hit_as_sent(sent, entry)?,
                    None => sent.clone(),
                };
                let outcome = if hit.is_some() {
                    Outcome::Cached
                } else if is_error {
                    Outcome::Error
                } else {
                    Outcome::Passed
                };
                Some((Relayed::sent(sent, legacy), outcome))
            }
            Governed::Stored(result) => {
                let mut result = call_in_era(result, legacy);
                if let Some((entry, governed_key)) = cached
                    && crate::govern::stored_handle(&result).is_some()
                {
                    entry.keep_governed(governed_key.to_owned(), result.clone());
                }
                let outcome = match hit {
                    Some(entry) => {
                        result = with_hit(result, entry);
                        Outcome::Cached
                    }
                    None => made_outcome(&result),
                };
                Some((Relayed::made(CallToolResponse::Complete(result)), outcome))
            }
        }
    }

    /// Makes the upstream call of a tool: as a task if the tool needs one,
    /// with sluice answering `input_required` for a client that cannot.
    /// The answer of one plain call, or of a task's `tasks/result`, comes as
    /// the upstream gave it (its result not decoded yet, see
    /// [`Fetched::Sent`]); the others decoded.
    pub(super) async fn fetch_keeping_raw(
        &self,
        upstream: &Arc<Upstream>,
        params: NamedParams,
        caller: &Caller,
        source: &str,
    ) -> Fetched {
        // The paths a plain call does not take are boxed: inline, their
        // state would size every call's future (call_as_task's is 11 KB).
        if lock(&self.task_tools).contains(source) {
            return Box::pin(self.call_as_task(upstream, params, caller, source)).await;
        }
        // A 2025-11-25 upstream may refuse a plain call to a tool that
        // needs a task: the call is kept to make it again as one.
        let legacy = upstream.current().await.is_none_or(|c| c.era().is_legacy());
        // One request, its params sent as the client's text (the typed
        // params kept, not copied, to call again), or made from a copy
        // where there is no text.
        let text = upstream_params(caller, &params, source);
        let request = Request::text_or(CallToolRequestMethod::VALUE, text.as_deref(), || {
            ClientRequest::CallToolRequest(CallToolRequest::new(params.to_rmcp()))
        });
        let fetched = match self.send_as(upstream, request, caller).await {
            // An answer that may ask for input, to a client that cannot
            // answer `input_required` itself: bridged (boxed, as every path
            // a plain call does not take: most answers are tools' results,
            // told from their bytes).
            Ok(answer) if crate::gateway::input::must_bridge(caller) && may_ask_input(&answer) => {
                match Box::pin(self.call_bridged(upstream, &params, caller, answer)).await {
                    Ok(fetched) => fetched,
                    Err(e) => Fetched::decoded(Err(CallError::Upstream(e)), None),
                }
            }
            Ok(answer) => Fetched::Sent(answer),
            Err(e) => Fetched::decoded(Err(e), None),
        };
        let again = legacy.then_some(params);
        let Some(params) = again else {
            return fetched;
        };
        match fetched.refuses_without_task() {
            Some(false) => return fetched,
            Some(true) => {}
            // Not read from the bytes: decoded to tell.
            None => {
                let (sent, raw) = fetched.decode(upstream, caller.era.is_legacy());
                if !task_call::refused_without_task(&sent) {
                    return Fetched::decoded(sent, raw);
                }
            }
        }
        tracing::info!(
            tool = %source,
            "the tool must be called as a task: sluice calls it as one and polls"
        );
        lock(&self.task_tools).insert(source.to_owned());
        Box::pin(self.call_as_task(upstream, params, caller, source)).await
    }

    /// [`Self::fetch_keeping_raw`] as the cache calls it: for `caller`, or for a
    /// background refresh that no client waits for.
    pub(super) fn fetcher(
        self: &Arc<Self>,
        upstream: &Arc<Upstream>,
        params: NamedParams,
        caller: &Caller,
        source: &str,
    ) -> crate::cache::Fetch {
        let (gateway, upstream, caller, source) = (
            self.clone(),
            upstream.clone(),
            caller.clone(),
            source.to_owned(),
        );
        Box::new(move |background| {
            let caller = if background {
                Caller {
                    session: None,
                    request: RequestId::Number(0),
                    meta: Default::default(),
                    ct: CancellationToken::new(),
                    era: caller.era,
                    owner: caller.owner.clone(),
                    quota: caller.quota.clone(),
                    client: None,
                    partial: None,
                    tasks: false,
                    sent_request: None,
                    stream: None,
                    stream_asks: false,
                    link: None,
                }
            } else {
                caller.clone()
            };
            let (gateway, upstream, params, source) = (
                gateway.clone(),
                upstream.clone(),
                params.clone(),
                source.clone(),
            );
            Box::pin(async move {
                let fetched = gateway
                    .fetch_keeping_raw(&upstream, params, &caller, &source)
                    .await;
                // A tool's result as sent is cached as its bytes, never
                // decoded; read to tell an error, which is not kept.
                if let Fetched::Sent(answer) = &fetched
                    && answer.undecoded().is_some()
                    && let Some(is_error) = crate::govern::read_result(&answer.raw, |text| {
                        crate::govern::SentCall::read(text).map(|call| call.is_error())
                    })
                    .await
                {
                    return Ok(crate::cache::Fetched::Sent {
                        response: answer.raw.clone(),
                        is_error,
                    });
                }
                let (result, _) = fetched
                    .decode_off_thread(&upstream, caller.era.is_legacy())
                    .await;
                result.map(|result| crate::cache::Fetched::Decoded(Box::new(result)))
            })
        })
    }

    /// Whether any tool may be cached.
    pub fn caches_anything(&self) -> bool {
        self.cache.settings().annotated
            || self
                .upstreams
                .iter()
                .any(|u| u.spec.tools.values().any(|t| t.cache_policy.is_some()))
    }

    /// The cache policy of a tool (by exposed name), if it is cached: its
    /// own `cache` table, else `[cache]`'s defaults when `annotated` is on
    /// and the tool is annotated read-only and idempotent.
    pub(super) fn cache_policy(&self, exposed: &str) -> Option<sluice_core::cache::CachePolicy> {
        let (upstream, name) = self.namer.route(exposed)?;
        let configured = self
            .upstream(upstream)?
            .spec
            .tools
            .get(name)
            .and_then(|s| s.cache_policy);
        let settings = self.cache.settings();
        configured.or_else(|| {
            (settings.annotated && lock(&self.annotated_idempotent).contains(exposed))
                .then_some(settings.defaults)
        })
    }

    /// Answers `input_required` for a client that cannot answer it
    /// itself: from `answer`, the upstream's to the call of `params`,
    /// sluice asks the client with ordinary requests and calls again, until
    /// an answer asks for nothing. The last answer as the upstream gave it:
    /// a tool's result, which needs no decoding to be told from
    /// `input_required`, is left as sent.
    pub(super) async fn call_bridged(
        &self,
        upstream: &Arc<Upstream>,
        params: &NamedParams,
        caller: &Caller,
        mut answer: crate::upstream::rpc::Decoded,
    ) -> Result<Fetched, ErrorData> {
        // A later round is made, its arguments decoded once.
        let mut made = None::<CallToolRequestParams>;
        let mut round = 0;
        loop {
            if !may_ask_input(&answer) {
                return Ok(Fetched::Sent(answer));
            }
            let again = match for_caller(upstream, answer, caller) {
                Ok((ServerResult::InputRequiredResult(result), _))
                    if round < crate::gateway::input::MAX_ROUNDS =>
                {
                    let made = made.get_or_insert_with(|| params.to_rmcp());
                    (made.input_responses, made.request_state) =
                        crate::gateway::input::fulfil(result, caller, round).await?;
                    round += 1;
                    made.clone()
                }
                Ok((answer, raw)) => return Ok(Fetched::decoded(Ok(answer), Some(raw))),
                Err(e) => return Ok(Fetched::decoded(Err(e), None)),
            };
            let request = Request::Made(Box::new(ClientRequest::CallToolRequest(
                CallToolRequest::new(again),
            )));
            answer = match self.send_as(upstream, request, caller).await {
                Ok(answer) => answer,
                Err(e) => return Ok(Fetched::decoded(Err(e), None)),
            };
        }
    }

    pub(super) fn call_answer(
        &self,
        upstream: &Upstream,
        answer: Result<ServerResult, CallError>,
    ) -> Result<CallToolResponse, ErrorData> {
        match answer {
            Ok(ServerResult::CallToolResult(result)) => Ok(CallToolResponse::Complete(result)),
            Ok(ServerResult::InputRequiredResult(result)) => {
                Ok(CallToolResponse::InputRequired(result))
            }
            Ok(ServerResult::CreateTaskResult(result)) => Ok(CallToolResponse::Task(result)),
            Ok(other) => Err(unexpected(upstream, "tools/call", &other)),
            // The model should read why its call failed: an error result,
            // not a JSON-RPC error that clients show as "internal error".
            Err(CallError::Unavailable(message)) => Ok(CallToolResponse::Complete(
                rmcp::model::CallToolResult::error(vec![rmcp::model::ContentBlock::text(message)]),
            )),
            Err(e) => Err(call_error(e)),
        }
    }

    /// `tasks/get`: an operation seen as an MCP task, a completed call's
    /// result kept as sent given as the response it came in (see
    /// `Operations::get_task_as_sent`).
    pub async fn get_task_as_sent(
        &self,
        task_id: &str,
        caller: &Caller,
    ) -> Result<(GetTaskResult, Option<crate::jsonrpc::Message>), ErrorData> {
        self.operations
            .get_task_as_sent(task_id, &caller.owner, |result| era(result, caller))
            .await
    }

    /// `tasks/cancel`: cancels an operation, as `sluice_cancel` does.
    pub async fn cancel_task(&self, task_id: &str, caller: &Caller) -> Result<(), ErrorData> {
        self.operations.cancel_task(task_id, &caller.owner).await
    }
}

/// Whether `answer` may be `input_required`, which says so in its
/// `resultType`: a result's text without those words is not one (nor is
/// it read further to tell).
fn may_ask_input(answer: &crate::upstream::rpc::Decoded) -> bool {
    answer
        .undecoded()
        .is_none_or(|text| memchr::memmem::find(text.as_bytes(), b"input_required").is_some())
}

/// `result` marked as served from the cache (`_meta["sluice/cache"]`).
pub(super) fn with_hit(
    mut result: rmcp::model::CallToolResult,
    entry: &crate::cache::Entry,
) -> rmcp::model::CallToolResult {
    result.meta = Some(crate::govern::with_meta(
        result.meta,
        crate::cache::META,
        hit_meta(entry),
    ));
    result
}

/// What `_meta["sluice/cache"]` says of a hit on `entry`.
fn hit_meta(entry: &crate::cache::Entry) -> serde_json::Value {
    let age = (entry.age().as_secs_f64() * 10.0).round() / 10.0;
    serde_json::json!({"hit": true, "age_s": age})
}

/// The upstream's response `sent`, its result marked as served from the
/// cache as [`with_hit`] marks it (see [`crate::govern::with_meta_as_sent`]).
fn with_hit_as_sent(
    sent: &crate::jsonrpc::Message,
    entry: &crate::cache::Entry,
) -> Option<crate::jsonrpc::Message> {
    crate::govern::with_meta_as_sent(sent, crate::cache::META, &hit_meta(entry))
}

/// A call the cache may answer.
pub(super) struct CachedCall {
    key: String,
    policy: sluice_core::cache::CachePolicy,
    /// `_fresh: true`: skip the entry and replace it.
    fresh: bool,
}

/// What a caught panic said.
/// A routed call on its way: the upstream's answer governed, or the panic
/// that lost it.
type CallInFlight = futures::future::BoxFuture<'static, std::thread::Result<Done>>;

/// How a call past its timeout stopped waiting in the foreground.
enum Foreground {
    /// It ended: its answer is the client's.
    Ended(std::thread::Result<Done>),
    /// Its client cancelled it.
    Cancelled,
    /// It became this operation.
    Detached(Arc<crate::operations::Operation>),
}

/// Stops `call` (it tells the upstream, in a task of its own, then ends)
/// and answers its client that it was cancelled.
fn cancelled(
    call: CallInFlight,
    stop: &CancellationToken,
) -> (Result<Relayed, ErrorData>, Option<Outcome>) {
    stop.cancel();
    tokio::spawn(call);
    (Err(call_error(CallError::Cancelled)), Some(Outcome::Error))
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "it panicked".to_owned())
}

/// How an upstream tool call ended.
pub(super) enum Done {
    /// An answer (governed), or a JSON-RPC error; and how the call ended
    /// (`None`: it has not: the upstream asked for input).
    Answer(Box<Result<Relayed, ErrorData>>, Option<Outcome>),
    /// The upstream could not be reached or died: why.
    Unavailable(String),
}

/// The params of a call to send upstream as the text the client sent
/// (`caller.sent_request`), edited only where sluice must, as `params` (the
/// same call decoded and edited) says: the tool's name upstream; without
/// `_timeout_s`, and `_fresh` where sluice took it; `_meta` without the
/// progress token (sluice sets its own) and the 2026-07-28 keys that
/// describe the client. `None` when there is no such text or it cannot be
/// edited: the decoded params are sent. `exposed`: the name the client
/// called the tool by.
pub(super) fn upstream_params<'a>(
    caller: &'a Caller,
    params: &NamedParams,
    exposed: &str,
) -> Option<std::borrow::Cow<'a, str>> {
    // Nothing to edit, seen without reading the params: the tool has the
    // same name upstream, and neither a `_meta`, nor sluice's arguments,
    // nor an escape (which could spell any of them) is anywhere in the
    // text. The params go as the client sent them.
    let sent = caller.sent_request.as_ref().and_then(|m| m.params())?;
    let edited = [
        sluice_core::operation::TIMEOUT_ARG,
        sluice_core::cache::FRESH_ARG,
        "\\",
    ];
    if exposed == params.name && !edited.iter().any(|key| sent.contains(key)) {
        if !sent.contains("_meta") {
            // The client's text itself, not a copy (it may be megabytes).
            return Some(sent.into());
        }
        // Nothing to edit but a `_meta` that holds only what sluice sets
        // itself (a 2026-07-28 request's version, client and
        // capabilities, a progress token): that member cut out.
        if let Some(cut) = super::forwarding::without_own_meta(sent) {
            return Some(cut.into());
        }
    }
    let keeps_fresh = params.has_argument(sluice_core::cache::FRESH_ARG);
    super::forwarding::forwarded_params(caller, |text| {
        if text.get_str("name").as_deref() != Some(params.name.as_ref()) {
            text.insert_value("name", params.name.as_ref()).ok()?;
        }
        // Read only if sluice's arguments may be there: a key is found in
        // the raw text, or written with escapes (or it is not an object,
        // which the edit refuses, and the params are then made).
        let may_hold_sluices = |raw: &str| {
            !raw.starts_with('{')
                || raw.contains(sluice_core::operation::TIMEOUT_ARG)
                || raw.contains(sluice_core::cache::FRESH_ARG)
                || raw.contains('\\')
        };
        if text.get("arguments").is_some_and(may_hold_sluices) {
            text.edit_path(&["arguments"], |arguments| {
                arguments.remove(sluice_core::operation::TIMEOUT_ARG);
                if !keeps_fresh {
                    arguments.remove(sluice_core::cache::FRESH_ARG);
                }
            })
            .ok()?;
        }
        Some(())
    })
    .map(std::borrow::Cow::Owned)
}

/// A tool call's answer from its upstream.
pub(super) enum Fetched {
    /// As the upstream gave it: the result may be left as sent (see
    /// [`crate::upstream::rpc::Decoded`]).
    Sent(crate::upstream::rpc::Decoded),
    /// Decoded, with the response it came in when the result is that
    /// response's own. Boxed: rmcp's results are large.
    Decoded(
        Box<(
            Result<ServerResult, CallError>,
            Option<crate::jsonrpc::Message>,
        )>,
    ),
}

impl Fetched {
    pub(super) fn decoded(
        result: Result<ServerResult, CallError>,
        raw: Option<crate::jsonrpc::Message>,
    ) -> Fetched {
        Fetched::Decoded(Box::new((result, raw)))
    }

    /// [`Self::decode`], on a blocking thread for a large result (over
    /// [`sluice_core::limits::BLOCKING_BYTES`]).
    pub(super) async fn decode_off_thread(
        self,
        upstream: &Arc<Upstream>,
        legacy: bool,
    ) -> (
        Result<ServerResult, CallError>,
        Option<crate::jsonrpc::Message>,
    ) {
        let large = match &self {
            Fetched::Sent(answer) => answer
                .undecoded()
                .is_some_and(|text| text.len() > sluice_core::limits::BLOCKING_BYTES),
            Fetched::Decoded(_) => false,
        };
        if !large {
            return self.decode(upstream, legacy);
        }
        let on_thread = upstream.clone();
        tokio::task::spawn_blocking(move || self.decode(&on_thread, legacy))
            .await
            .unwrap_or_else(|e| {
                let why = format!(
                    "upstream `{}`: decoding its result failed: {e}",
                    upstream.name()
                );
                (Err(CallError::Unavailable(why)), None)
            })
    }

    /// The result, decoded for a client of the initialize era (`legacy`)
    /// or not, and the response it came in.
    pub(super) fn decode(
        self,
        upstream: &Upstream,
        legacy: bool,
    ) -> (
        Result<ServerResult, CallError>,
        Option<crate::jsonrpc::Message>,
    ) {
        match self {
            Fetched::Sent(answer) => match in_era_decoded(upstream, answer, legacy) {
                Ok((result, raw)) => (Ok(result), Some(raw)),
                Err(e) => (Err(e), None),
            },
            Fetched::Decoded(decoded) => *decoded,
        }
    }

    /// Whether this is an upstream's refusal of a plain call to a tool that
    /// must be called as a task (see [`task_call::refused_without_task`]),
    /// told from the result's bytes when it is left as sent: an error
    /// result whose text says so. `None` if it must be decoded to tell.
    fn refuses_without_task(&self) -> Option<bool> {
        // A refusal is one short error message: a result that is longer,
        // or never says "task", is not read (governing reads it next).
        const REFUSAL_BYTES: usize = 16 << 10;
        match self {
            Fetched::Sent(answer) => {
                let text = answer.undecoded()?;
                // Each `t` found by memchr and the three bytes after it
                // compared, not every window of four.
                let mentions_task = || {
                    let bytes = text.as_bytes();
                    memchr::memchr2_iter(b't', b'T', bytes).any(|at| {
                        bytes
                            .get(at + 1..at + 4)
                            .is_some_and(|rest| rest.eq_ignore_ascii_case(b"ask"))
                    })
                };
                if text.len() > REFUSAL_BYTES || !mentions_task() {
                    return Some(false);
                }
                let call = crate::govern::SentCall::read(text)?;
                Some(call.is_error() && call.texts().any(task_call::says_task))
            }
            Fetched::Decoded(decoded) => Some(task_call::refused_without_task(&decoded.0)),
        }
    }
}

/// An answer, and when it is an upstream's result passed on unchanged, the
/// response it arrived in (a tool call's by default; prompts, resource
/// reads and completions have theirs too).
#[derive(Debug)]
pub struct Relayed<R = CallAnswer> {
    /// The answer.
    pub response: R,
    /// The upstream's response, when `response` is its result unchanged
    /// (within the budget): the client gets its `result` as
    /// the bytes the upstream sent, shaped for the client's era by whoever
    /// writes it (`resultType`, cache hints).
    pub raw: Option<crate::jsonrpc::Message>,
}

impl<R> Relayed<R> {
    /// An answer sluice made.
    pub fn made(response: impl Into<R>) -> Relayed<R> {
        Relayed {
            response: response.into(),
            raw: None,
        }
    }

    /// The answer with its response made another type (the raw response
    /// unchanged).
    pub fn map<T>(self, f: impl FnOnce(R) -> T) -> Relayed<T> {
        Relayed {
            response: f(self.response),
            raw: self.raw,
        }
    }

    /// The upstream's result `response`, which arrived as `raw`.
    pub fn as_sent(response: impl Into<R>, raw: crate::jsonrpc::Message) -> Relayed<R> {
        Relayed {
            response: response.into(),
            raw: Some(raw),
        }
    }
}

/// A tool call's answer in a [`Relayed`]: decoded (or sluice's own), or an
/// upstream's result within the budget left as the bytes it came in, which
/// the client gets as they are; it is decoded only for whoever needs it
/// typed (an operation's outcome, rmcp's server): see
/// [`Relayed::into_response`].
#[derive(Debug)]
pub enum CallAnswer {
    /// The answer, decoded (boxed: rmcp's type is large).
    Made(Box<CallToolResponse>),
    /// In [`Relayed::raw`], not decoded; `legacy`: for a client of the
    /// initialize era.
    Sent {
        /// Whether the client speaks the initialize era.
        legacy: bool,
    },
}

impl From<CallToolResponse> for CallAnswer {
    fn from(response: CallToolResponse) -> Self {
        CallAnswer::Made(Box::new(response))
    }
}

impl Relayed {
    /// An upstream's result within the budget, as the response `raw` it
    /// came in, for a client of the initialize era (`legacy`) or not.
    fn sent(raw: crate::jsonrpc::Message, legacy: bool) -> Relayed {
        Relayed {
            response: CallAnswer::Sent { legacy },
            raw: Some(raw),
        }
    }

    fn error_result(message: String) -> Relayed {
        Relayed::made(CallToolResponse::Complete(error_result(message)))
    }

    /// How the call this answers ended (not a cache hit): passed, stored,
    /// an error result, or an upstream's task (an operation); `None` for
    /// `input_required` (the call goes on when the client answers).
    fn outcome(&self) -> Option<Outcome> {
        match &self.response {
            // Results left as sent are told apart where they are read
            // (`governed_from_bytes`); none comes here.
            CallAnswer::Sent { .. } => Some(Outcome::Passed),
            CallAnswer::Made(response) => match &**response {
                CallToolResponse::Complete(result) => Some(made_outcome(result)),
                CallToolResponse::Task(_) => Some(Outcome::Operation),
                // (`CallToolResponse` is non-exhaustive.)
                _ => None,
            },
        }
    }

    /// The answer, decoded if it was left as sent. A result sluice relayed
    /// unread but cannot decode (rmcp knows no such content block) is an
    /// error result that says so, for those that need it typed.
    pub fn into_response(self) -> CallToolResponse {
        let legacy = match self.response {
            CallAnswer::Made(response) => return *response,
            CallAnswer::Sent { legacy } => legacy,
        };
        let text = self
            .raw
            .as_ref()
            .and_then(|raw| raw.result())
            .unwrap_or("{}");
        match serde_json::from_str::<rmcp::model::CallToolResult>(text) {
            Ok(result) => CallToolResponse::Complete(call_in_era(result, legacy)),
            Err(e) => CallToolResponse::Complete(error_result(format!(
                "the upstream's result could not be read: {e}"
            ))),
        }
    }
}

/// How a call answered with `result` (its own, or the answer that stands
/// for it) ended: an error (its `isError`, stored or not), stored, or
/// passed.
fn made_outcome(result: &rmcp::model::CallToolResult) -> Outcome {
    if result.is_error == Some(true) {
        Outcome::Error
    } else if crate::govern::stored_handle(result).is_some() {
        Outcome::Stored
    } else {
        Outcome::Passed
    }
}

pub(super) fn error_result(message: String) -> rmcp::model::CallToolResult {
    rmcp::model::CallToolResult::error(vec![rmcp::model::ContentBlock::text(message)])
}

/// The tool's configured `timeout_s`.
pub(super) fn settings_timeout(upstream: &Upstream, tool: &str) -> Option<f64> {
    upstream.spec.tools.get(tool).and_then(|s| s.timeout_s)
}

pub(super) fn call_error(error: CallError) -> ErrorData {
    match error {
        CallError::Upstream(e) => e,
        CallError::Unavailable(message) => ErrorData::internal_error(message, None),
        CallError::Cancelled => crate::cancel::cancelled_error(),
    }
}

/// An upstream's tool result in the client's era, as `in_clients_era`
/// shapes one: a 2026-07-28 client requires `resultType`.
fn call_in_era(
    mut result: rmcp::model::CallToolResult,
    legacy: bool,
) -> rmcp::model::CallToolResult {
    if !legacy {
        result
            .result_type
            .get_or_insert(rmcp::model::ResultType::COMPLETE);
    }
    result
}

/// A result sluice made itself, shaped to the client's era.
pub(super) fn era(
    mut result: rmcp::model::CallToolResult,
    caller: &Caller,
) -> rmcp::model::CallToolResult {
    if caller.era.is_legacy() {
        result.result_type = None;
    }
    result
}
