//! What every client session shares, whichever transport it came over: who
//! asks each request ([`caller_of`]), and a session opened by `initialize`
//! ([`open`]), whose events (list changes, log messages) are forwarded to
//! it.

use std::sync::Arc;

use rmcp::model::{InitializeRequestParams, ServerNotification};

use sluice_core::store::Owner;

use crate::caller::{Caller, Quota};
use crate::downstream::PeerAddr;
use crate::downstream::auth::Principal;
use crate::era::Era;
use crate::gateway::Gateway;
use crate::hub::{Event, FirstClient, SessionEntry, SessionId, SessionSeen};

/// The [`Caller`] of one request of session `id` (`connection`: the whole
/// connection is the session, as stdio's is, or an HTTP session's).
pub(crate) fn caller_of(
    gateway: &Arc<Gateway>,
    id: SessionId,
    connection: bool,
    asking: &Asking<'_>,
) -> Caller {
    // Only sessions that completed `initialize` are registered; a
    // 2026-07-28 request stands alone.
    let session = gateway.hub().has_session(id).then_some(id);
    if session.is_none() {
        // A 2026-07-28 request declares its client's capabilities itself.
        gateway.begin(&FirstClient {
            capabilities: asking.capabilities.clone().unwrap_or_default(),
            initialize_version: None,
        });
    }
    let (owner, quota) = owner_of(
        gateway,
        id,
        session.is_some() || connection,
        asking.principal,
        asking.address,
    );
    Caller {
        era: asking.era,
        owner,
        quota,
        client: asking.client.clone(),
        session,
        request: asking.request.clone(),
        meta: std::sync::Arc::new(asking.meta.clone()),
        ct: asking.ct.clone(),
        partial: None,
        // Declared at `initialize`, or with this very request.
        tasks: asking
            .capabilities
            .as_ref()
            .is_some_and(|c| c.supports_tasks()),
        sent_request: asking.sent_request.clone(),
        stream: asking.stream.clone(),
        stream_asks: asking.stream_asks,
        link: asking.link.clone(),
    }
}

/// Who owns what a request of session `id` stores (`in_session`: it has
/// one, or its connection is one), and whose share of a limit it takes.
/// With `[auth]` everything belongs to the principal, whichever session it
/// comes with. Without, stored results belong to the session; a stateless
/// HTTP request has none, so its results are reachable by their
/// unguessable handle alone, and its limits are counted by the address it
/// came from.
pub(crate) fn owner_of(
    gateway: &Gateway,
    id: SessionId,
    in_session: bool,
    principal: Option<&Principal>,
    address: Option<&PeerAddr>,
) -> (Owner, Quota) {
    let owner = if let Some(principal) = principal {
        Owner::Principal(principal.0.clone())
    } else if in_session {
        Owner::Session(gateway.hub().session_owner(id))
    } else {
        Owner::Anonymous
    };
    let quota = match (&owner, address) {
        (Owner::Anonymous, Some(PeerAddr(addr))) => Quota::Address(addr.ip()),
        (owner, _) => Quota::Owner(owner.clone()),
    };
    (owner, quota)
}

/// What is known of one request's asker, for [`caller_of`].
pub(crate) struct Asking<'a> {
    /// The request's `_meta`.
    pub meta: &'a rmcp::model::RequestMetaObject,
    /// The request's id.
    pub request: rmcp::model::RequestId,
    /// Fires when the client cancels it or leaves.
    pub ct: tokio_util::sync::CancellationToken,
    /// The request's protocol era.
    pub era: Era,
    /// The client's capabilities (from `initialize`, or the request's `_meta`).
    pub capabilities: Option<rmcp::model::ClientCapabilities>,
    /// The client's `clientInfo.name`.
    pub client: Option<String>,
    /// Who an HTTP request authenticated as.
    pub principal: Option<&'a Principal>,
    /// Where an HTTP request came from.
    pub address: Option<&'a PeerAddr>,
    /// The request as sent, when sluice's own layer read it.
    pub sent_request: Option<crate::jsonrpc::Message>,
    /// Where notifications about the request go, when sluice's own layer
    /// answers it (see [`Caller::stream`]).
    pub stream: Option<crate::downstream::outbox::Sender>,
    /// Whether sluice's requests about it may go on `stream` (see
    /// [`Caller::stream_asks`]).
    pub stream_asks: bool,
    /// Where sluice's own layer asks the client.
    pub link: Option<Arc<crate::downstream::link::ClientLink>>,
}

/// Opens session `id` of a client that sent `request` (`initialize`):
/// starts the upstreams for the first client (and waits for them, within
/// bounds), registers the session in the Hub, and forwards the gateway's
/// events to it (through its `link`) until `closed` fires.
pub(crate) async fn open(
    gateway: &Arc<Gateway>,
    id: SessionId,
    request: &InitializeRequestParams,
    principal: Option<&Principal>,
    link: Option<Arc<crate::downstream::link::ClientLink>>,
    closed: tokio_util::sync::CancellationToken,
) {
    gateway
        .begin_and_wait(&FirstClient {
            capabilities: request.capabilities.clone(),
            initialize_version: Some(request.protocol_version.clone()),
        })
        .await;
    tracing::info!(
        session = id,
        client = %request.client_info.name,
        version = %request.protocol_version,
        "client connected"
    );
    let again = gateway.hub().has_session(id);
    gateway.hub().add_session(
        id,
        SessionEntry {
            capabilities: request.capabilities.clone(),
            mirrored: crate::hub::Mirrored::of(&request.capabilities),
            subscriptions: Default::default(),
            log_level: None,
            link,
            seen: SessionSeen {
                client: request.client_info.name.chars().take(100).collect(),
                version: request.protocol_version.to_string(),
                principal: principal.map(|p| p.0.clone()),
                opened: crate::clock::wall(),
            },
        },
    );
    // The client left while the upstreams started: no session to keep.
    if closed.is_cancelled() {
        gateway.hub().remove_session(id);
        return;
    }
    // A second `initialize` on a session renews its entry; its events
    // already flow.
    if !again {
        tokio::spawn(forward_events(gateway.clone(), id, closed));
    }
}

/// Forwards the gateway's events to a legacy (initialize) session until it
/// closes, through its link: a stdio connection, or an HTTP session's GET
/// stream (held by the link while none is open).
async fn forward_events(
    gateway: Arc<Gateway>,
    id: SessionId,
    closed: tokio_util::sync::CancellationToken,
) {
    let mut events = gateway.hub().subscribe();
    // Where the session's messages that belong to no call go: its link
    // (a stdio connection, or an HTTP session's GET stream, which comes and
    // goes: the link holds them meanwhile).
    let Some(link) = gateway.hub().session(id).and_then(|s| s.link) else {
        return;
    };
    // The gateway's events are taken as they come, whether or not the
    // client reads: one that lags keeps every event sent since in the
    // hub's broadcast (1,024 of them, each log message as large as an
    // upstream made it: 1,500 log messages of 256 KiB to a stdio client
    // that did not read grew sluice's peak by 298 MB). They wait here instead,
    // within a bound, while the link waits for its client to read (a stdio
    // connection, an HTTP session's GET stream).
    let mut backlog = Backlog::default();
    // What is for this session's principal is this session's too.
    let principal = gateway.hub().session(id).and_then(|s| s.seen.principal);
    loop {
        let first = backlog.first();
        let waiting = first.is_some();
        tokio::select! {
            biased;
            () = closed.cancelled() => return,
            // Cancel-safe: an event not sent yet stays first, to be sent
            // again (a link's send sends nothing when cancelled).
            () = async {
                if let Some(event) = first {
                    forward_event(&gateway, id, &link, event).await;
                }
            }, if waiting => {
                backlog.sent();
                if !gateway.hub().has_session(id) {
                    return;
                }
            }
            batch = crate::hub::next_events(&mut events, id, principal.as_deref()) => {
                let Some(batch) = batch else { return };
                for event in batch {
                    backlog.admit(event, id);
                }
            }
        }
    }
}

/// The events a session's client has not read yet: log messages up to
/// [`crate::hub::notices::HELD`] of them and
/// [`crate::hub::notices::HELD_BYTES`] (the later ones dropped, said once
/// per run of drops), and each list change or resource update once.
#[derive(Default)]
struct Backlog {
    events: std::collections::VecDeque<Event>,
    log_bytes: usize,
    /// Log messages are being dropped (said once per run of drops).
    dropping: bool,
}

impl Backlog {
    /// The first event waiting (cheap: a log message is shared).
    fn first(&self) -> Option<Event> {
        self.events.front().cloned()
    }

    /// The first event was sent.
    fn sent(&mut self) {
        if let Some(Event::Log(logged)) = self.events.pop_front() {
            self.log_bytes -= logged.raw.as_bytes().len();
        }
        if self.events.is_empty() {
            self.dropping = false;
        }
    }

    fn admit(&mut self, event: Event, session: SessionId) {
        use crate::hub::notices::{HELD, HELD_BYTES, has_room};
        match &event {
            Event::Log(logged) => {
                let size = logged.raw.as_bytes().len();
                if !has_room(self.events.len(), self.log_bytes, size) {
                    if !std::mem::replace(&mut self.dropping, true) {
                        tracing::warn!(
                            session,
                            "log messages dropped: the client does not read them as fast as \
                             the upstream sends them (sluice holds at most {HELD} of them, \
                             {} MiB, for a session)",
                            HELD_BYTES >> 20
                        );
                    }
                    return;
                }
                self.log_bytes += size;
            }
            // Told once however often it comes while the client is behind.
            Event::ToolsChanged | Event::PromptsChanged | Event::ResourcesChanged => {
                let same = std::mem::discriminant(&event);
                if self
                    .events
                    .iter()
                    .any(|e| std::mem::discriminant(e) == same)
                {
                    return;
                }
            }
            Event::ResourceUpdated(uri) => {
                if self
                    .events
                    .iter()
                    .any(|e| matches!(e, Event::ResourceUpdated(u) if u == uri))
                {
                    return;
                }
            }
        }
        self.events.push_back(event);
    }
}

/// Forwards one of the gateway's events to session `id` through its link.
async fn forward_event(
    gateway: &Gateway,
    id: SessionId,
    link: &crate::downstream::link::ClientLink,
    event: Event,
) {
    let notification = match event {
        Event::ToolsChanged => ServerNotification::ToolListChangedNotification(Default::default()),
        Event::PromptsChanged => {
            ServerNotification::PromptListChangedNotification(Default::default())
        }
        Event::ResourcesChanged => {
            ServerNotification::ResourceListChangedNotification(Default::default())
        }
        Event::ResourceUpdated(uri) => {
            let subscribed = gateway
                .hub()
                .session(id)
                .is_some_and(|s| s.subscriptions.contains(&uri));
            if !subscribed {
                return;
            }
            ServerNotification::ResourceUpdatedNotification(
                rmcp::model::ResourceUpdatedNotification::new(
                    rmcp::model::ResourceUpdatedNotificationParam::new(uri),
                ),
            )
        }
        // As the upstream sent it (on a stdio connection, an HTTP
        // session's GET stream).
        Event::Log(ref logged) => {
            if link.send(logged.raw.as_bytes().clone()).await.is_err() {
                tracing::debug!(session = id, "log message not delivered: the client left");
            }
            return;
        }
    };
    // In order with the log messages.
    let message = rmcp::model::ServerJsonRpcMessage::notification(notification);
    let bytes = serde_json::to_vec(&message).expect("rmcp's messages serialize");
    if link.send(bytes::Bytes::from(bytes)).await.is_err() {
        tracing::debug!(session = id, "notification not delivered: the client left");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(n: usize) -> Event {
        let text = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"info","data":{n}}}}}"#
        );
        let raw = crate::jsonrpc::Message::parse(bytes::Bytes::from(text)).unwrap();
        Event::Log(Arc::new(crate::hub::Logged::read(&raw).unwrap()))
    }

    /// What waits, in order: `l3` for the log message whose data is 3,
    /// `tools`, `updated a` for a resource update of `a`.
    fn waiting(backlog: &Backlog) -> Vec<String> {
        backlog
            .events
            .iter()
            .map(|event| match event {
                Event::Log(logged) => format!("l{}", logged.data().unwrap()),
                Event::ToolsChanged => "tools".to_owned(),
                Event::PromptsChanged => "prompts".to_owned(),
                Event::ResourcesChanged => "resources".to_owned(),
                Event::ResourceUpdated(uri) => format!("updated {uri}"),
            })
            .collect()
    }

    #[test]
    fn a_backlog_drops_log_messages_beyond_its_bound_and_keeps_each_change_once() {
        let mut backlog = Backlog::default();
        backlog.admit(Event::ToolsChanged, 1);
        for n in 0..crate::hub::notices::HELD {
            backlog.admit(log(n), 1);
        }
        // Full: log messages are dropped; a change already waiting is not
        // told twice; another change, and each resource's update once,
        // still wait.
        backlog.admit(log(1000), 1);
        backlog.admit(Event::ToolsChanged, 1);
        backlog.admit(Event::PromptsChanged, 1);
        backlog.admit(Event::ResourceUpdated("a".into()), 1);
        backlog.admit(Event::ResourceUpdated("a".into()), 1);
        // (The bound counts every event waiting: the list change took the
        // place of one log message.)
        let held = waiting(&backlog);
        assert_eq!(held.len(), crate::hub::notices::HELD + 2);
        assert_eq!(
            held[held.len() - 3],
            format!("l{}", crate::hub::notices::HELD - 2)
        );
        assert_eq!(held[0], "tools");
        assert_eq!(held[held.len() - 2..], ["prompts", "updated a"]);
        assert!(!held.contains(&"l1000".to_owned()), "{held:?}");
        assert!(backlog.dropping);
        // Sent: room again, and the next drop is said again.
        while backlog.first().is_some() {
            backlog.sent();
        }
        assert!(!backlog.dropping);
        backlog.admit(log(7), 1);
        assert_eq!(waiting(&backlog), ["l7"]);
    }
}
