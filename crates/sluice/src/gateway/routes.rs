//! Requests routed by name or URI to one upstream: prompts, resource reads
//! (and `sluice://result/` reads), subscriptions, completions, log levels.

use super::*;
use crate::era::Era;
use crate::govern::plain_result;
use crate::upstream::rpc::Decoded;

impl Gateway {
    /// Gets a prompt; the upstream's answer comes with the response it
    /// arrived in, to be forwarded as those bytes (an `input_required` one
    /// only to a client of the era that knows it).
    pub async fn get_prompt(
        &self,
        mut params: NamedParams,
        caller: &Caller,
    ) -> Result<Relayed<RoutedAnswer>, ErrorData> {
        let exposed = params.name.to_string();
        let Some((upstream, name)) = self.namer.route(&exposed) else {
            return Err(self.unknown("prompt", &exposed));
        };
        let upstream = self
            .upstream(upstream)
            .expect("routed to a known upstream")
            .clone();
        params.name = name.to_owned().into();
        params.meta = forwarded_meta(&caller.meta);
        // Made from the params (their arguments decoded) only for a request
        // sluice makes rather than forwards.
        let mut made = None::<GetPromptRequestParams>;
        // The first round goes as the client sent it, under the upstream's
        // name; a round with the client's answers to `input_required`
        // (which sluice asks for an older client) as sluice makes it.
        let mut text = forwarded_params(caller, |text| {
            if text.get_str("name").as_deref() != Some(name) {
                text.insert_value("name", name).ok()?;
            }
            Some(())
        });
        let mut round = 0;
        loop {
            let sent = text.take();
            let request = Request::text_or(GetPromptRequestMethod::VALUE, sent.as_deref(), || {
                let made = made.get_or_insert_with(|| params.to_prompt());
                ClientRequest::GetPromptRequest(GetPromptRequest::new(made.clone()))
            });
            let answer = self
                .send_as(&upstream, request, caller)
                .await
                .map_err(call_error)?;
            let answer = match as_sent(answer).await {
                Ok(raw) => return Ok(Relayed::sent(raw, caller, GetPromptRequestMethod::VALUE)),
                Err(answer) => answer,
            };
            match for_caller(&upstream, answer, caller).map_err(call_error)? {
                (ServerResult::GetPromptResult(r), raw) => {
                    return Ok(Relayed::as_sent(GetPromptResponse::Complete(r), raw));
                }
                (ServerResult::InputRequiredResult(r), _)
                    if crate::gateway::input::must_bridge(caller)
                        && round < crate::gateway::input::MAX_ROUNDS =>
                {
                    let made = made.get_or_insert_with(|| params.to_prompt());
                    (made.input_responses, made.request_state) =
                        crate::gateway::input::fulfil(r, caller, round).await?;
                    round += 1;
                }
                (ServerResult::InputRequiredResult(r), raw) => {
                    let response = GetPromptResponse::InputRequired(r);
                    return Ok(if caller.era.is_legacy() {
                        Relayed::made(response)
                    } else {
                        Relayed::as_sent(response, raw)
                    });
                }
                (other, _) => return Err(unexpected(&upstream, "prompts/get", &other)),
            }
        }
    }

    /// Reads a resource; an upstream's result within the budget comes with
    /// the response it arrived in, to be forwarded as those bytes.
    pub async fn read_resource(
        &self,
        mut params: ReadResourceRequestParams,
        caller: &Caller,
    ) -> Result<Relayed<RoutedAnswer>, ErrorData> {
        let budget = self.governor.budget_for(caller.client.as_deref());
        if params.uri.starts_with(RESULT_URI) {
            return self
                .governor
                .read_result_resource(&params.uri, &caller.owner, budget)
                .await
                .map(|mut r| {
                    if caller.era.is_legacy() {
                        r.result_type = None;
                    }
                    Relayed::made(ReadResourceResponse::Complete(r))
                });
        }
        let policy = Policy {
            owner: caller.owner.clone(),
            budget,
            source: format!("resources/read {}", params.uri),
            mode: Mode::Buffer,
            preview_depth: DEFAULT_PREVIEW_DEPTH,
            narrowing: Arc::default(),
        };
        params.meta = forwarded_meta(&caller.meta);
        // As the client sent it.
        let text = forwarded_params(caller, |_| Some(()));
        let candidates = self.resource_candidates(&params.uri).await;
        let mut last_error = None;
        for upstream in candidates {
            let request =
                Request::text_or(ReadResourceRequestMethod::VALUE, text.as_deref(), || {
                    ClientRequest::ReadResourceRequest(ReadResourceRequest::new(params.clone()))
                });
            // Governed from its bytes, as a tool's result is; decoded only
            // if they do not read as a resource's contents.
            let answer = match self.send_as(&upstream, request, caller).await {
                Ok(answer) if answer.undecoded().is_some() => {
                    let uri = &params.uri;
                    match self.governor.sent_resource(answer.raw, uri, &policy).await {
                        Ok(GovernedRead::Passes(raw)) => {
                            let method = ReadResourceRequestMethod::VALUE;
                            return Ok(Relayed::sent(raw, caller, method));
                        }
                        Ok(GovernedRead::Stored(r)) => {
                            return Ok(Relayed::made(ReadResourceResponse::Complete(r)));
                        }
                        Err(raw) => Ok(Decoded::sent_for(ReadResourceRequestMethod::VALUE, raw)),
                    }
                }
                other => other,
            };
            match answer.and_then(|answer| for_caller(&upstream, answer, caller)) {
                Ok((ServerResult::ReadResourceResult(r), raw)) => {
                    let uri = params.uri.clone();
                    return Ok(
                        match self.governor.resource_result(r, raw, &uri, policy).await {
                            Ok((r, raw)) => {
                                Relayed::as_sent(ReadResourceResponse::Complete(r), raw)
                            }
                            Err(stored) => Relayed::made(ReadResourceResponse::Complete(stored)),
                        },
                    );
                }
                Ok((ServerResult::InputRequiredResult(r), raw)) => {
                    let response = ReadResourceResponse::InputRequired(r);
                    return Ok(if caller.era.is_legacy() {
                        Relayed::made(response)
                    } else {
                        Relayed::as_sent(response, raw)
                    });
                }
                Ok((other, _)) => return Err(unexpected(&upstream, "resources/read", &other)),
                Err(CallError::Upstream(e)) => last_error = Some(e),
                Err(e) => return Err(call_error(e)),
            }
        }
        Err(last_error.unwrap_or_else(|| {
            ErrorData::resource_not_found(
                format!("no upstream serves the resource {}", params.uri),
                None,
            )
        }))
    }

    /// The upstreams that may serve `uri`, most likely first.
    pub(super) async fn resource_candidates(&self, uri: &str) -> Vec<Arc<Upstream>> {
        if self.upstreams.len() == 1 {
            return self.upstreams.clone();
        }
        let mut names = Vec::new();
        if let Some(owner) = lock(&self.resource_owners).get(uri) {
            names.push(owner.clone());
        }
        let mut templates: Vec<(String, String)> = lock(&self.template_owners)
            .iter()
            .filter(|(prefix, _)| !prefix.is_empty() && uri.starts_with(prefix.as_str()))
            .cloned()
            .collect();
        templates.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        names.extend(templates.into_iter().map(|(_, name)| name));
        let mut ordered: Vec<Arc<Upstream>> = Vec::new();
        for name in names {
            if let Some(u) = self.upstream(&name)
                && !ordered.iter().any(|o| Arc::ptr_eq(o, u))
            {
                ordered.push(u.clone());
            }
        }
        if ordered.is_empty() {
            for u in &self.upstreams {
                if declares(u, |c| c.resources.is_some()).await {
                    ordered.push(u.clone());
                }
            }
        }
        ordered
    }

    /// Subscribes to (or unsubscribes from) a resource for a session.
    pub async fn subscribe(
        &self,
        uri: String,
        subscribe: bool,
        caller: &Caller,
    ) -> Result<(), ErrorData> {
        let remaining = caller.session.map_or(usize::from(subscribe), |s| {
            self.hub.set_subscription(s, &uri, subscribe)
        });
        // Upstream, one subscription serves every session: unsubscribe only
        // when the last session does.
        if !subscribe && remaining > 0 {
            return Ok(());
        }
        for upstream in self.resource_candidates(&uri).await {
            let request = if subscribe {
                ClientRequest::SubscribeRequest(SubscribeRequest::new(SubscribeRequestParams::new(
                    uri.clone(),
                )))
            } else {
                ClientRequest::UnsubscribeRequest(UnsubscribeRequest::new(
                    UnsubscribeRequestParams::new(uri.clone()),
                ))
            };
            match self.send(&upstream, request, caller).await {
                Ok(_) => return Ok(()),
                Err(CallError::Upstream(_)) => continue,
                Err(e) => return Err(call_error(e)),
            }
        }
        Err(ErrorData::resource_not_found(
            format!(
                "no upstream accepted a subscription to {}",
                sluice_core::format::quoted_cut(&uri)
            ),
            None,
        ))
    }

    /// Completes a prompt or resource template argument; the upstream's
    /// answer comes with the response it arrived in.
    pub async fn complete(
        &self,
        mut params: CompleteRequestParams,
        caller: &Caller,
    ) -> Result<Relayed<RoutedAnswer>, ErrorData> {
        params.meta = forwarded_meta(&caller.meta);
        let (candidates, text) = match &mut params.r#ref {
            Reference::Prompt(prompt) => {
                let exposed = prompt.name.clone();
                let Some((upstream, name)) = self.namer.route(&exposed) else {
                    return Err(self.unknown("prompt", &exposed));
                };
                prompt.name = name.to_owned();
                // As the client sent it, under the upstream's name.
                let text = forwarded_params(caller, |text| {
                    text.edit_path(&["ref"], |reference| {
                        if reference.get_str("name").as_deref() != Some(name) {
                            reference.insert_value("name", name).ok()?;
                        }
                        Some(())
                    })
                    .ok()
                    .flatten()
                    .flatten()
                });
                let upstream = self.upstream(upstream).expect("known upstream").clone();
                (vec![upstream], text)
            }
            Reference::Resource(resource) => {
                let uri = resource.uri.clone();
                let text = forwarded_params(caller, |_| Some(()));
                (self.resource_candidates(&uri).await, text)
            }
            _ => {
                return Err(ErrorData::invalid_params(
                    "unsupported completion reference",
                    None,
                ));
            }
        };
        let mut last_error = None;
        for upstream in candidates {
            let request = Request::text_or(CompleteRequestMethod::VALUE, text.as_deref(), || {
                ClientRequest::CompleteRequest(CompleteRequest::new(params.clone()))
            });
            let answer = match self.send_as(&upstream, request, caller).await {
                Ok(answer) => match as_sent(answer).await {
                    Ok(raw) => {
                        return Ok(Relayed::sent(raw, caller, CompleteRequestMethod::VALUE));
                    }
                    Err(answer) => Ok(answer),
                },
                Err(e) => Err(e),
            };
            match answer.and_then(|answer| for_caller(&upstream, answer, caller)) {
                Ok((ServerResult::CompleteResult(r), raw)) => return Ok(Relayed::as_sent(r, raw)),
                Ok((other, _)) => {
                    return Err(unexpected(&upstream, "completion/complete", &other));
                }
                Err(CallError::Upstream(e)) => last_error = Some(e),
                Err(e) => return Err(call_error(e)),
            }
        }
        Err(last_error.unwrap_or_else(|| {
            ErrorData::invalid_params("no upstream can complete this reference", None)
        }))
    }

    /// Sets the log level of every upstream that logs.
    pub async fn set_level(
        &self,
        params: SetLevelRequestParams,
        caller: &Caller,
    ) -> Result<(), ErrorData> {
        let level = params.level;
        if let Some(session) = caller.session {
            self.hub.set_log_level(session, level);
        }
        self.on_all("logging/setLevel", |u| async move {
            if !declares(&u, |c| c.logging.is_some()).await {
                return Ok(());
            }
            // A 2026-07-28 upstream gets the level with each request.
            if caller.session.is_some()
                && u.current().await.is_some_and(|c| c.era() == Era::Stateless)
            {
                return Ok(());
            }
            let request = ClientRequest::SetLevelRequest(SetLevelRequest::new(
                SetLevelRequestParams::new(level),
            ));
            self.send(&u, request, caller).await.map(drop)
        })
        .await
        .map(drop)
    }
}

/// `answer`'s response when its result, left as sent, is a plain one (no
/// other answer: see [`plain_result`]), to be relayed as those bytes (read
/// off the async threads when large); else `answer`, to be decoded.
async fn as_sent(answer: Decoded) -> Result<crate::jsonrpc::Message, Decoded> {
    let plain = answer.undecoded().is_some()
        && crate::govern::read_result(&answer.raw, |text| plain_result(text).then_some(()))
            .await
            .is_some();
    if plain { Ok(answer.raw) } else { Err(answer) }
}

/// The answer to a request routed to one upstream (`prompts/get`,
/// `resources/read`, `completion/complete`) in a [`Relayed`]: made
/// (decoded, or sluice's own), or the upstream's result left as the bytes
/// it came in, which the client gets as they are; decoded only for whoever
/// needs it typed ([`Relayed::into_result`]).
#[derive(Debug)]
pub enum RoutedAnswer {
    /// The answer, decoded (boxed: rmcp's type is large).
    Made(Box<ServerResult>),
    /// In [`Relayed::raw`], not decoded.
    Sent {
        /// Whether the client speaks the initialize era.
        legacy: bool,
        /// The request's method, which says what its result is.
        method: &'static str,
    },
}

impl From<GetPromptResponse> for RoutedAnswer {
    fn from(response: GetPromptResponse) -> Self {
        RoutedAnswer::Made(Box::new(response.into()))
    }
}

impl From<ReadResourceResponse> for RoutedAnswer {
    fn from(response: ReadResourceResponse) -> Self {
        RoutedAnswer::Made(Box::new(response.into()))
    }
}

impl From<CompleteResult> for RoutedAnswer {
    fn from(result: CompleteResult) -> Self {
        RoutedAnswer::Made(Box::new(ServerResult::CompleteResult(result)))
    }
}

impl Relayed<RoutedAnswer> {
    /// The upstream's answer to `caller`'s request of `method`, as the
    /// response `raw` it came in.
    fn sent(raw: crate::jsonrpc::Message, caller: &Caller, method: &'static str) -> Self {
        Relayed {
            response: RoutedAnswer::Sent {
                legacy: caller.era.is_legacy(),
                method,
            },
            raw: Some(raw),
        }
    }

    /// The answer, decoded if it was left as sent; the error says why an
    /// upstream's result relayed unread cannot be decoded.
    pub fn into_result(self) -> Result<ServerResult, ErrorData> {
        let (legacy, method) = match self.response {
            RoutedAnswer::Made(result) => return Ok(*result),
            RoutedAnswer::Sent { legacy, method } => (legacy, method),
        };
        let raw = self
            .raw
            .ok_or_else(|| ErrorData::internal_error("the upstream's answer was lost", None))?;
        match Decoded::sent_for(method, raw).decoded() {
            Ok((result, _)) => Ok(in_clients_era(result, legacy)),
            Err(why) => Err(ErrorData::internal_error(
                format!("the upstream's answer to {method}: {why}"),
                None,
            )),
        }
    }
}
