//! sluice's client side of one upstream connection: what it does with
//! everything the upstream sends on its own initiative.
//!
//! Progress goes to the client whose request it is about (tokens mapped
//! back); server→client requests (sampling, elicitation, roots) and log
//! messages go to the client whose call caused them, when the transport
//! says which, else to whom they may be for (`Hub::whose`: with `[auth]`,
//! one principal's clients or none); list changes and resource updates
//! are published for every session.

use std::sync::Arc;

use rmcp::model::{ClientConfig, ClientResult, ErrorCode, ErrorData, RequestId};
use tokio_util::sync::CancellationToken;

use crate::hub::{Event, Hub, SessionEntry, Whose};
use crate::jsonrpc::Message;

/// The client's answer to a server→client request, to send upstream.
#[derive(Debug)]
pub enum ClientAnswer {
    /// Made by sluice, or decoded from the client's answer.
    Typed(ClientResult),
    /// The client's answer (a result or an error) as it sent it; its id is
    /// replaced by the upstream's.
    Relayed(Message),
}

/// The handler of one upstream connection.
pub struct UpstreamClient {
    /// The upstream's configured name.
    pub upstream: String,
    /// Shared routing state.
    pub hub: Arc<Hub>,
    /// What sluice declares to the upstream.
    pub info: ClientConfig,
}

impl UpstreamClient {
    /// The session a server→client request is for: the one whose call it
    /// arrived with (Streamable HTTP says so), else the latest call still
    /// waiting on this upstream (stdio does not say), else, for requests
    /// outside any call (e.g. `roots/list` right after connecting), the most
    /// recent session able to answer. With `[auth]`, never a guess across
    /// principals ([`Hub::whose`]): `Err` when calls (or, with none
    /// waiting, sessions) of several are candidates.
    ///
    /// [`Hub::whose`]: crate::hub::Hub::whose
    fn target(
        &self,
        stream_of: Option<&RequestId>,
        able: impl Fn(&SessionEntry) -> bool,
    ) -> Result<Option<(SessionEntry, Option<crate::hub::CallOrigin>)>, ErrorData> {
        let whose = match stream_of {
            Some(id) => match self.hub.call_origin(&self.upstream, id) {
                Some(origin) => Whose::Call(origin),
                None => self.hub.whose_sessions(&able),
            },
            None => self.hub.whose(&self.upstream, &able),
        };
        let principal = match whose {
            Whose::Call(origin) => {
                // A call of no session (a 2026-07-28 request standing alone,
                // which answers no server→client request) is asked of no
                // other client: whoever that is may not see its data.
                let Some(session) = origin.session.and_then(|s| self.hub.session(s)) else {
                    return Ok(None);
                };
                return Ok(Some((session, Some(origin))));
            }
            Whose::Sessions(principal) => principal,
            Whose::Several => {
                return Err(ErrorData::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    format!(
                        "sluice cannot tell which client this request of upstream `{}` is for: \
                         it names no call, and clients of several principals are using the \
                         upstream now; it is asked of no one rather than of the wrong one",
                        self.upstream
                    ),
                    None,
                ));
            }
        };
        Ok(self
            .hub
            .sessions()
            .into_iter()
            .filter(|(_, entry)| able(entry))
            .filter(|(_, entry)| principal.is_none() || entry.seen.principal == principal)
            .max_by_key(|(id, _)| *id)
            .map(|(_, entry)| (entry, None)))
    }

    async fn forward_to_client(
        &self,
        raw: &Message,
        stream_of: Option<RequestId>,
        ct: CancellationToken,
    ) -> Result<ClientAnswer, ErrorData> {
        let (what, able): (&str, fn(&SessionEntry) -> bool) = match raw.method() {
            Some("sampling/createMessage") => ("sampling", |e| e.capabilities.sampling.is_some()),
            Some("elicitation/create") => ("elicitation", |e| e.capabilities.elicitation.is_some()),
            Some("roots/list") => ("roots", |e| e.capabilities.roots.is_some()),
            _ => ("this request", |_| true),
        };
        let Some((session, origin)) = self.target(stream_of.as_ref(), able)? else {
            return Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("no client connected to sluice can answer {what} right now"),
                None,
            ));
        };
        if !able(&session) {
            return Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("the client connected to sluice does not support {what}"),
                None,
            ));
        }
        // Where sluice's own layer writes to the client, the request goes
        // as the upstream sent it, and the client's answer comes back as
        // the client sent it.
        // On a stdio connection, on the connection; in an HTTP session, on
        // the stream of the call that caused it, when sluice's own layer
        // answers that call.
        let stream = origin.as_ref().and_then(|o| o.stream.clone());
        let Some(link) = &session.link else {
            return Err(ErrorData::internal_error(
                "the client cannot be asked now: it holds no stream open",
                None,
            ));
        };
        let asked = match &stream {
            Some(stream) if !link.writes() => link.ask_on(stream, raw, &ct).await,
            // The connection; or an HTTP session's GET stream, for a
            // request of no call's (held until the client opens one).
            _ => link.ask(raw, &ct).await,
        };
        asked
            .map(ClientAnswer::Relayed)
            .map_err(|e| ErrorData::internal_error(format!("the client did not answer: {e}"), None))
    }
}

impl UpstreamClient {
    /// Answers a server→client request: a ping here, the rest by the client
    /// it is for. `stream_of` is the call on whose response stream it came
    /// (Streamable HTTP); `ct` fires when the upstream cancels it.
    pub async fn handle_request(
        &self,
        request: &Message,
        stream_of: Option<RequestId>,
        ct: CancellationToken,
    ) -> Result<ClientAnswer, ErrorData> {
        match request.method() {
            Some("ping") => Ok(ClientAnswer::Typed(ClientResult::empty(()))),
            _ => self.forward_to_client(request, stream_of, ct).await,
        }
    }

    /// Publishes what a notification announces, read from it as sent: only
    /// what routes it (a level, a resource's URI), never its payload (a log
    /// message's data is any JSON, of any size). A log message goes to the
    /// client of the call on whose response stream it came (`stream_of`:
    /// Streamable HTTP says so; to every session if that is no client's
    /// call), else to whom it may be for ([`Hub::publish_log`]). With
    /// `[auth]`, "every session" is every session of the one principal
    /// using the upstream; with several, the message is withheld (said in
    /// sluice's log at debug).
    ///
    /// [`Hub::publish_log`]: crate::hub::Hub::publish_log
    pub fn handle_notification(&self, notification: &Message, stream_of: Option<&RequestId>) {
        let event = match notification.method() {
            // Progress for a routed request never gets here (see `rpc`).
            Some("notifications/message") => match crate::hub::Logged::read(notification) {
                Some(logged) => {
                    let logged = Arc::new(logged);
                    let published = match stream_of {
                        Some(call) => {
                            self.log_about(call, &logged)
                                || match self.hub.whose_sessions(|_| true) {
                                    // On the stream of sluice's own request
                                    // (a list): no call's, as sent on no
                                    // stream with none waiting.
                                    Whose::Sessions(principal) => {
                                        self.hub
                                            .publish_to_principal(principal, Event::Log(logged));
                                        true
                                    }
                                    _ => false,
                                }
                        }
                        None => self.hub.publish_log(&self.upstream, &logged),
                    };
                    if !published {
                        tracing::debug!(
                            upstream = %self.upstream,
                            "log message withheld: it names no call, and clients of several \
                             principals are using the upstream"
                        );
                    }
                    return;
                }
                None => return self.ignored(notification, "a log message without a level"),
            },
            Some("notifications/resources/updated") => {
                #[derive(serde::Deserialize)]
                struct Updated {
                    uri: String,
                }
                match notification.params().map(serde_json::from_str::<Updated>) {
                    Some(Ok(updated)) => Event::ResourceUpdated(updated.uri),
                    _ => return self.ignored(notification, "no `uri`"),
                }
            }
            Some("notifications/resources/list_changed") => Event::ResourcesChanged,
            Some("notifications/tools/list_changed") => Event::ToolsChanged,
            Some("notifications/prompts/list_changed") => Event::PromptsChanged,
            // Cancellation of the upstream's own requests is handled by the
            // engine (it fires the request's token); the rest concern only
            // this connection.
            _ => return self.ignored(notification, "not one sluice passes on"),
        };
        self.hub.publish(event);
    }

    /// A log message the upstream sent about its request `call` (on the
    /// call's response stream): for that call's client alone. One upstream
    /// connection serves every client; published to every session, what a
    /// tool logs about one principal's call reached the others.
    ///
    /// It goes where the call's other notifications go (on the stream that
    /// carries the answer, before it, as the upstream sent it), or, for a
    /// client that reads no stream there (one that takes only JSON
    /// answers), to its session. `false` for a request no client listens
    /// to (sluice's own: a list, a refresh in the background; `sluice
    /// call`): no guess is needed, and the message is every session's, as
    /// any log message of no call.
    fn log_about(&self, call: &RequestId, logged: &Arc<crate::hub::Logged>) -> bool {
        let Some(origin) = self.hub.call_origin(&self.upstream, call) else {
            return false;
        };
        let reads_its_stream = origin.stream.is_some() || origin.session.is_none();
        match (&origin.notices, origin.session) {
            (Some(route), _) if reads_its_stream => {
                route.send(crate::hub::Notice::Log(logged.clone()));
                true
            }
            (_, Some(session)) => {
                self.hub.publish_to(session, Event::Log(logged.clone()));
                true
            }
            // A principal's call that no stream and no session hears (a
            // 2026-07-28 client that takes JSON answers, an operation's
            // call): hers alone, and she has nowhere to hear it. Withheld.
            (_, None) if origin.principal.is_some() => {
                tracing::debug!(
                    upstream = %self.upstream,
                    "log message withheld: its call's client hears no log messages"
                );
                true
            }
            (_, None) => false,
        }
    }

    fn ignored(&self, notification: &Message, why: &str) {
        tracing::debug!(
            upstream = %self.upstream,
            method = notification.method().unwrap_or_default(),
            "ignored notification: {why}"
        );
    }
}
