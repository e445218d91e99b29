//! What downstream sessions and upstream connections share: who is
//! connected, which upstream request belongs to which client request, and
//! the notifications every session should hear.
//!
//! Upstream connections are shared by all client sessions (a 2026-07-28
//! client has no session at all), so everything an upstream sends on its
//! own initiative (progress, server→client requests, list changes, logs)
//! is routed through here to the session it belongs to.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::FastMap;
use rmcp::model::{
    ClientCapabilities, LoggingLevel, ProgressNotificationParam, ProgressToken, RequestId,
};
use tokio::sync::broadcast;

pub mod notices;

/// What the first client said about itself: what sluice mirrors upstream.
#[derive(Debug, Clone, Default)]
pub struct FirstClient {
    /// Its capabilities.
    pub capabilities: ClientCapabilities,
    /// The version it asked for in `initialize`; `None` for a 2026-07-28
    /// client (or none at all, as in `sluice call`).
    pub initialize_version: Option<rmcp::model::ProtocolVersion>,
}

/// Identifies one downstream client session.
pub type SessionId = u64;

/// Something every interested session should hear about.
#[derive(Debug, Clone)]
pub enum Event {
    /// The union of the upstreams' tools changed.
    ToolsChanged,
    /// The union of the upstreams' prompts changed.
    PromptsChanged,
    /// The union of the upstreams' resources changed.
    ResourcesChanged,
    /// A subscribed resource changed.
    ResourceUpdated(String),
    /// An upstream logged a message.
    Log(Arc<Logged>),
}

/// An event as the hub's broadcast carries it: for every session, for one
/// alone ([`Hub::publish_to`]), or for one principal's
/// ([`Hub::publish_to_principal`]).
#[derive(Debug, Clone)]
pub struct Published {
    to: Audience,
    event: Event,
}

/// Who an event is for.
#[derive(Debug, Clone)]
enum Audience {
    Everyone,
    Session(SessionId),
    /// Every session of this principal: one entry in the broadcast
    /// however many sessions she has (one per session would fill its
    /// 1,024 places, and every slower session would lag).
    Principal(Arc<str>),
}

/// A log message an upstream sent, as it sent it: its level read, its
/// `data` (any JSON, of any size) never decoded. Decoded into a tree, 16 MB
/// of `[0,0,…]` as a log message's data made sluice hold 3.1 GB.
#[derive(Debug)]
pub struct Logged {
    /// Its level.
    pub level: LoggingLevel,
    /// The notification as the upstream sent it: relayed as those bytes.
    pub raw: crate::jsonrpc::Message,
}

impl Logged {
    /// `raw`, a `notifications/message`, read for its level; `None` when
    /// its params are not a log message's (no level MCP knows).
    pub fn read(raw: &crate::jsonrpc::Message) -> Option<Logged> {
        #[derive(serde::Deserialize)]
        struct Head {
            level: LoggingLevel,
        }
        let head: Head = serde_json::from_str(raw.params()?).ok()?;
        Some(Logged {
            level: head.level,
            raw: raw.clone(),
        })
    }

    /// Its `data`: a string's text, or any other value's JSON as sent.
    pub fn data(&self) -> Option<std::borrow::Cow<'_, str>> {
        let params = crate::jsonrpc::RawObject::of_checked(self.raw.params()?).ok()?;
        let data = params.get_parsed("data")?;
        Some(crate::jsonrpc::object::unquote(data).unwrap_or(std::borrow::Cow::Borrowed(data)))
    }
}

/// A downstream session that can receive requests and notifications.
#[derive(Debug, Clone)]
pub struct SessionEntry {
    /// What the client declared at `initialize`.
    pub capabilities: ClientCapabilities,
    /// What sluice tells a 2026-07-28 upstream the client can do.
    pub mirrored: Arc<Mirrored>,
    /// Resources the client subscribed to.
    pub subscriptions: HashSet<String>,
    /// The level the client set with `logging/setLevel`, if it did.
    pub log_level: Option<rmcp::model::LoggingLevel>,
    /// Where sluice's own layer writes to the client, as bytes (a stdio
    /// connection, an HTTP session's streams).
    pub link: Option<Arc<crate::downstream::link::ClientLink>>,
    /// Who the client is, for the operator's view (`--admin`).
    pub seen: SessionSeen,
}

/// What an operator is shown of a session: the client's `clientInfo.name`
/// (cut to 100 characters) and protocol version, its principal (with
/// `[auth]`), and when it opened.
#[derive(Debug, Clone)]
pub struct SessionSeen {
    /// `clientInfo.name`.
    pub client: String,
    /// The protocol version it asked for.
    pub version: String,
    /// Who it authenticated as, with `[auth]`.
    pub principal: Option<Arc<str>>,
    /// When it sent `initialize`.
    pub opened: std::time::SystemTime,
}

/// A notification an upstream sent about one request.
#[derive(Debug)]
pub enum Notice {
    /// Progress of the request, and the notification as the upstream sent
    /// it (relayed as those bytes, with the client's token spliced in,
    /// where sluice's own layer writes to the client).
    /// Boxed: as large as the rest of the enum several times over.
    Progress(Box<ProgressNotificationParam>, crate::jsonrpc::Message),
    /// A log message sent while the request ran (for 2026-07-28 clients,
    /// which have no session to receive it otherwise).
    Log(Arc<Logged>),
}

/// Where an upstream's notifications about one request go: to the task
/// waiting for that request, which forwards them in order, before the
/// response (held within bounds: see [`notices`]).
pub use notices::{Lost, NoticeQueue, NoticeRoute, queue as notice_queue};

/// Which client request an upstream request serves.
#[derive(Debug, Clone)]
pub struct CallOrigin {
    /// The client's session, if it has one (2026-07-28 requests do not).
    pub session: Option<SessionId>,
    /// The client's request id.
    pub request: RequestId,
    /// A clock value: later calls have larger ones.
    pub seq: u64,
    /// Where notifications about the call go.
    pub notices: Option<NoticeRoute>,
    /// The stream the client's request is answered on, when sluice's own
    /// layer answers it (`Caller::stream`): a server→client request the
    /// call causes can go there too.
    pub stream: Option<crate::downstream::outbox::Sender>,
    /// The principal the client authenticated as (`[auth]`); `None`
    /// without `[auth]`, and for sluice's own requests (lists, refreshes),
    /// which are no one's.
    pub principal: Option<Arc<str>>,
}

/// Whom an upstream's message that names no call may be for: what a stdio
/// upstream sends on its own (a log message, a server→client request),
/// or an HTTP upstream on its GET stream. One upstream connection serves
/// every client, and such a message says not which.
#[derive(Debug, Clone)]
pub enum Whose {
    /// The latest call waiting on the upstream: without `[auth]`, the
    /// latest of all; with it, the latest of the one principal whose
    /// calls are waiting.
    Call(CallOrigin),
    /// No call is waiting: the sessions (able to answer, for a request) of
    /// this principal, or, without `[auth]`, any.
    Sessions(Option<Arc<str>>),
    /// With `[auth]`: calls of several principals are waiting (or, with
    /// none waiting, sessions of several are open). sluice does not guess
    /// across principals: what one's call logs or asks is not another's
    /// to see or to answer.
    Several,
}

/// The shared routing state.
#[derive(Debug)]
pub struct Hub {
    sessions: Mutex<FastMap<SessionId, SessionEntry>>,
    progress: Mutex<FastMap<(String, ProgressToken), NoticeRoute>>,
    calls: Mutex<FastMap<(String, RequestId), CallOrigin>>,
    events: broadcast::Sender<Published>,
    next_session: AtomicU64,
    /// Random, per process: mixed into the owner of each session's
    /// results, so that a restarted sluice's sessions (numbered from 1
    /// again) own nothing an earlier process stored in a durable store.
    owner_base: u64,
    clock: AtomicU64,
    first_client: OnceLock<FirstClient>,
    /// Whether clients authenticate as principals (`[auth]`): then an
    /// upstream's message that names no call goes to one principal's
    /// clients or to none ([`Hub::whose`]).
    by_principal: bool,
}

impl Default for Hub {
    fn default() -> Self {
        Self {
            sessions: Mutex::default(),
            progress: Mutex::default(),
            calls: Mutex::default(),
            events: broadcast::channel(1024).0,
            next_session: AtomicU64::new(1),
            owner_base: {
                let mut bytes = [0u8; 8];
                sluice_core::store::random_bytes(&mut bytes);
                u64::from_le_bytes(bytes)
            },
            clock: AtomicU64::new(1),
            first_client: OnceLock::new(),
            by_principal: false,
        }
    }
}

/// The capabilities a client declared, as sluice declares them to an
/// upstream on its behalf: what sluice relays between them (sampling,
/// elicitation, roots), so that the upstream offers that client what it
/// would offer it directly. Nothing else: tasks are sluice's own
/// (operations), and an extension sluice does not know it cannot relay.
pub fn mirrored(declared: &ClientCapabilities) -> ClientCapabilities {
    let mut mirrored = ClientCapabilities::default();
    mirrored.sampling = declared.sampling.clone();
    mirrored.elicitation = declared.elicitation.clone();
    mirrored.roots = declared.roots.clone();
    mirrored
}

/// A client's [`mirrored`] capabilities, typed and as JSON text: what each
/// request on its behalf tells a 2026-07-28 upstream. A session's is made
/// once, at `initialize`.
#[derive(Debug)]
pub struct Mirrored {
    /// The capabilities.
    pub capabilities: ClientCapabilities,
    /// Their JSON text.
    pub json: Box<str>,
}

impl Mirrored {
    /// `declared`, mirrored.
    pub fn of(declared: &ClientCapabilities) -> Arc<Mirrored> {
        let capabilities = mirrored(declared);
        let json = serde_json::to_string(&capabilities)
            .expect("capabilities serialize")
            .into_boxed_str();
        Arc::new(Mirrored { capabilities, json })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere never leaves these maps inconsistent (each update is
    // one insert or remove), so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Hub {
    /// A hub whose clients authenticate as principals (`[auth]`).
    pub fn by_principal() -> Hub {
        Hub {
            by_principal: true,
            ..Hub::default()
        }
    }

    /// Records the first client; later calls change nothing. sluice declares
    /// the same capabilities (sampling, elicitation, roots) to its upstreams,
    /// and speaks the same protocol era, so that they offer that client
    /// exactly what they would offer it directly.
    pub fn set_first_client(&self, client: &FirstClient) {
        let _ = self.first_client.set(FirstClient {
            capabilities: mirrored(&client.capabilities),
            initialize_version: client.initialize_version.clone(),
        });
    }

    /// What sluice declares to its upstreams: the first client's
    /// capabilities, and its protocol era.
    pub fn first_client(&self) -> FirstClient {
        self.first_client.get().cloned().unwrap_or_default()
    }

    /// A new session id.
    pub fn new_session_id(&self) -> SessionId {
        self.next_session.fetch_add(1, Ordering::Relaxed)
    }

    /// Who owns the results of session `id` ([`Owner::Session`]): unique
    /// in this process, and unlike any other process's.
    ///
    /// [`Owner::Session`]: sluice_core::store::Owner::Session
    pub fn session_owner(&self, id: SessionId) -> u64 {
        self.owner_base ^ id
    }

    /// Registers a session that completed `initialize`.
    pub fn add_session(&self, id: SessionId, entry: SessionEntry) {
        lock(&self.sessions).insert(id, entry);
    }

    /// Forgets a session (it disconnected).
    pub fn remove_session(&self, id: SessionId) {
        lock(&self.sessions).remove(&id);
    }

    /// A registered session.
    pub fn session(&self, id: SessionId) -> Option<SessionEntry> {
        lock(&self.sessions).get(&id).cloned()
    }

    /// Records the log level a session asked for.
    pub fn set_log_level(&self, id: SessionId, level: rmcp::model::LoggingLevel) {
        if let Some(entry) = lock(&self.sessions).get_mut(&id) {
            entry.log_level = Some(level);
        }
    }

    /// What sluice tells a 2026-07-28 upstream of session `id`'s client,
    /// under one lock: what it can do ([`Mirrored`], made from what it
    /// declared at `initialize`) and the log level it set.
    pub fn as_told_upstream(
        &self,
        id: SessionId,
    ) -> Option<(Arc<Mirrored>, Option<rmcp::model::LoggingLevel>)> {
        lock(&self.sessions)
            .get(&id)
            .map(|e| (e.mirrored.clone(), e.log_level))
    }

    /// Whether a session is registered (cheaper than [`Self::session`]).
    pub fn has_session(&self, id: SessionId) -> bool {
        lock(&self.sessions).contains_key(&id)
    }

    /// How many sessions are open (without cloning them).
    pub fn session_count(&self) -> usize {
        lock(&self.sessions).len()
    }

    /// The sessions, for counting and broadcasting.
    pub fn sessions(&self) -> Vec<(SessionId, SessionEntry)> {
        lock(&self.sessions)
            .iter()
            .map(|(id, e)| (*id, e.clone()))
            .collect()
    }

    /// Records (or forgets, with `subscribe == false`) a resource subscription;
    /// returns how many sessions remain subscribed to `uri`.
    pub fn set_subscription(&self, id: SessionId, uri: &str, subscribe: bool) -> usize {
        let mut sessions = lock(&self.sessions);
        if let Some(entry) = sessions.get_mut(&id) {
            if subscribe {
                entry.subscriptions.insert(uri.to_owned());
            } else {
                entry.subscriptions.remove(uri);
            }
        }
        sessions
            .values()
            .filter(|e| e.subscriptions.contains(uri))
            .count()
    }

    /// Sends an event to every listening session.
    pub fn publish(&self, event: Event) {
        // No receiver is not an error: no session is listening yet.
        let _ = self.events.send(Published {
            to: Audience::Everyone,
            event,
        });
    }

    /// Sends an event to `session` alone, in order with every session's.
    pub fn publish_to(&self, session: SessionId, event: Event) {
        let _ = self.events.send(Published {
            to: Audience::Session(session),
            event,
        });
    }

    /// A receiver of future events (read with [`next_events`]).
    pub fn subscribe(&self) -> broadcast::Receiver<Published> {
        self.events.subscribe()
    }

    /// Routes progress for `token` of `upstream` to a client until the
    /// returned guard is dropped.
    pub fn route_progress(
        self: &Arc<Self>,
        upstream: &str,
        token: ProgressToken,
        route: NoticeRoute,
    ) -> RouteGuard {
        let key = (upstream.to_owned(), token);
        lock(&self.progress).insert(key.clone(), route);
        RouteGuard {
            hub: self.clone(),
            key: RouteKey::Progress(key),
        }
    }

    /// Queues progress from `upstream` for the request it belongs to;
    /// `false` if no request waits for it.
    pub fn divert_progress(
        &self,
        upstream: &str,
        params: &ProgressNotificationParam,
        raw: &crate::jsonrpc::Message,
    ) -> bool {
        lock(&self.progress)
            .get(&(upstream.to_owned(), params.progress_token.clone()))
            .is_some_and(|route| {
                route.send(Notice::Progress(Box::new(params.clone()), raw.clone()))
            })
    }

    /// Whom a message of `upstream` that names no call may be for
    /// ([`Whose`]): the latest call waiting on it; with `[auth]`, only if
    /// every client's call waiting on it is one principal's. With no call
    /// waiting, the sessions `able` to take it, as [`Self::whose_sessions`].
    pub fn whose(&self, upstream: &str, able: impl Fn(&SessionEntry) -> bool) -> Whose {
        if !self.by_principal {
            return match self.latest_call(upstream) {
                Some(origin) => Whose::Call(origin),
                None => Whose::Sessions(None),
            };
        }
        let calls = lock(&self.calls);
        let mut latest: Option<&CallOrigin> = None;
        for ((to, _), origin) in calls.iter() {
            // sluice's own requests are no one's: a list asked in the
            // background says nothing of whose a message is.
            let (true, Some(principal)) = (to == upstream, &origin.principal) else {
                continue;
            };
            match latest {
                Some(other) if other.principal.as_ref() != Some(principal) => {
                    return Whose::Several;
                }
                Some(other) if other.seq > origin.seq => {}
                _ => latest = Some(origin),
            }
        }
        match latest {
            Some(origin) => Whose::Call(origin.clone()),
            None => {
                drop(calls);
                self.whose_sessions(able)
            }
        }
    }

    /// Whom a message that names no call, with no call waiting, may be
    /// for: the sessions `able` to take it; with `[auth]`, only if they
    /// are all one principal's.
    pub fn whose_sessions(&self, able: impl Fn(&SessionEntry) -> bool) -> Whose {
        if !self.by_principal {
            return Whose::Sessions(None);
        }
        let mut one: Option<Arc<str>> = None;
        for entry in lock(&self.sessions).values().filter(|e| able(e)) {
            let Some(principal) = &entry.seen.principal else {
                continue;
            };
            match &one {
                Some(other) if other != principal => return Whose::Several,
                _ => one = Some(principal.clone()),
            }
        }
        Whose::Sessions(one)
    }

    /// Sends a log message `upstream` sent about no call it names to whom
    /// it may be for ([`Self::whose`]): the latest waiting call's stream
    /// if that call has no session (a 2026-07-28 client, which hears logs
    /// nowhere else), else every session (with `[auth]`: that principal's
    /// alone). `false` when it went to no one: calls or sessions of
    /// several principals, whom sluice does not guess between.
    pub fn publish_log(&self, upstream: &str, logged: &Arc<Logged>) -> bool {
        match self.whose(upstream, |_| true) {
            Whose::Call(origin) => {
                if origin.session.is_none()
                    && let Some(route) = &origin.notices
                    && route.send(Notice::Log(logged.clone()))
                {
                    return true;
                }
                let principal = origin.principal.filter(|_| self.by_principal);
                self.publish_to_principal(principal, Event::Log(logged.clone()));
                true
            }
            Whose::Sessions(principal) => {
                self.publish_to_principal(principal, Event::Log(logged.clone()));
                true
            }
            Whose::Several => false,
        }
    }

    /// Sends `event` to every session of `principal`, or, with `None`, to
    /// every session.
    pub fn publish_to_principal(&self, principal: Option<Arc<str>>, event: Event) {
        let Some(principal) = principal else {
            return self.publish(event);
        };
        let _ = self.events.send(Published {
            to: Audience::Principal(principal),
            event,
        });
    }

    /// Records that upstream request `id` serves the client request
    /// `origin` tells of, until the returned guard is dropped (`origin`'s
    /// `seq` is set here).
    pub fn track_call(
        self: &Arc<Self>,
        upstream: &str,
        id: RequestId,
        mut origin: CallOrigin,
    ) -> RouteGuard {
        let key = (upstream.to_owned(), id);
        origin.seq = self.clock.fetch_add(1, Ordering::Relaxed);
        lock(&self.calls).insert(key.clone(), origin);
        RouteGuard {
            hub: self.clone(),
            key: RouteKey::Call(key),
        }
    }

    /// Detaches the upstream requests serving `session`'s `request` from
    /// the session: they went on in the background as an operation, which
    /// the session leaving must not cancel.
    pub fn detach_calls(&self, session: SessionId, request: &RequestId) {
        for origin in lock(&self.calls).values_mut() {
            if origin.session == Some(session) && origin.request == *request {
                origin.session = None;
            }
        }
    }

    /// The client request an upstream request serves.
    pub fn call_origin(&self, upstream: &str, id: &RequestId) -> Option<CallOrigin> {
        lock(&self.calls)
            .get(&(upstream.to_owned(), id.clone()))
            .cloned()
    }

    /// The upstream requests still waiting on `upstream` (for `session`
    /// only, if given).
    pub fn calls_to(&self, upstream: &str, session: Option<SessionId>) -> Vec<RequestId> {
        lock(&self.calls)
            .iter()
            .filter(|((u, _), origin)| {
                u == upstream && session.is_none_or(|s| origin.session == Some(s))
            })
            .map(|((_, id), _)| id.clone())
            .collect()
    }

    /// The most recent client request still waiting on `upstream`: the best
    /// guess of whom a server→client request is for when the transport does
    /// not say (stdio).
    pub fn latest_call(&self, upstream: &str) -> Option<CallOrigin> {
        lock(&self.calls)
            .iter()
            .filter(|((u, _), _)| u == upstream)
            .map(|(_, origin)| origin.clone())
            .max_by_key(|o| o.seq)
    }
}

enum RouteKey {
    Progress((String, ProgressToken)),
    Call((String, RequestId)),
}

/// Removes a route when the request it belongs to ends.
pub struct RouteGuard {
    hub: Arc<Hub>,
    key: RouteKey,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        match &self.key {
            RouteKey::Progress(key) => {
                lock(&self.hub.progress).remove(key);
            }
            RouteKey::Call(key) => {
                lock(&self.hub.calls).remove(key);
            }
        }
    }
}

/// The most events [`next_events`] gives at once.
const EVENTS_AT_ONCE: usize = 256;

/// The next events of `events` for session `session`: the first to come,
/// with every one already waiting after it; `None` once the hub is gone.
/// A run of list changes is told once: each says only "list again" (a
/// server that adds its tools one by one says it once per tool, and each
/// would have its client list them all again). Events missed because the
/// client was slow are told as a change of every list: some may have been
/// list changes, and a client that never hears of one keeps a stale list.
/// An event for one session ([`Hub::publish_to`]) is that session's alone;
/// one for a principal, her sessions' (`principal`: the session's).
pub async fn next_events(
    events: &mut broadcast::Receiver<Published>,
    session: SessionId,
    principal: Option<&str>,
) -> Option<Vec<Event>> {
    use broadcast::error::{RecvError, TryRecvError};
    let lagged = |batch: &mut Vec<Event>, n: u64| {
        tracing::warn!(
            session,
            "dropped {n} notifications: the client is slow; it is told that every list changed"
        );
        batch.extend([
            Event::ToolsChanged,
            Event::PromptsChanged,
            Event::ResourcesChanged,
        ]);
    };
    // What is another session's is not this one's to see.
    let take = |batch: &mut Vec<Event>, published: Published| {
        let ours = match &published.to {
            Audience::Everyone => true,
            Audience::Session(to) => *to == session,
            Audience::Principal(to) => principal == Some(&**to),
        };
        if ours {
            batch.push(published.event);
        }
    };
    let mut batch = Vec::new();
    match events.recv().await {
        Ok(event) => take(&mut batch, event),
        Err(RecvError::Lagged(n)) => lagged(&mut batch, n),
        Err(RecvError::Closed) => return None,
    }
    while batch.len() < EVENTS_AT_ONCE {
        match events.try_recv() {
            Ok(event) => take(&mut batch, event),
            Err(TryRecvError::Lagged(n)) => lagged(&mut batch, n),
            Err(_) => break,
        }
    }
    let mut told = [false; 3];
    batch.retain(|event| {
        let list = match event {
            Event::ToolsChanged => 0,
            Event::PromptsChanged => 1,
            Event::ResourcesChanged => 2,
            _ => return true,
        };
        !std::mem::replace(&mut told[list], true)
    });
    Some(batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(batch: &[Event]) -> Vec<&'static str> {
        batch
            .iter()
            .map(|event| match event {
                Event::ToolsChanged => "tools",
                Event::PromptsChanged => "prompts",
                Event::ResourcesChanged => "resources",
                Event::ResourceUpdated(_) => "updated",
                Event::Log(_) => "log",
            })
            .collect()
    }

    #[tokio::test]
    async fn events_waiting_come_at_once_with_each_list_change_told_once() {
        let (sender, mut events) = broadcast::channel(16);
        let everyone = |event| {
            sender
                .send(Published {
                    to: Audience::Everyone,
                    event,
                })
                .unwrap();
        };
        for event in [
            Event::ToolsChanged,
            Event::ResourceUpdated("a".into()),
            Event::ToolsChanged,
            Event::PromptsChanged,
            Event::ToolsChanged,
            Event::ResourceUpdated("b".into()),
        ] {
            everyone(event);
        }
        let batch = next_events(&mut events, 1, None).await.unwrap();
        assert_eq!(
            kinds(&batch),
            ["tools", "updated", "prompts", "updated"],
            "in order, the updates all kept"
        );
        // Missed events (a slow client) are told as every list changing.
        for _ in 0..20 {
            everyone(Event::ResourceUpdated("c".into()));
        }
        let batch = next_events(&mut events, 1, None).await.unwrap();
        let told = kinds(&batch);
        assert_eq!(told[..3], ["tools", "prompts", "resources"], "{told:?}");
        assert!(told[3..].iter().all(|k| *k == "updated"), "{told:?}");
        drop(sender);
        assert!(next_events(&mut events, 1, None).await.is_none());
    }

    fn session_of(principal: Option<&str>, roots: bool) -> SessionEntry {
        let mut capabilities = ClientCapabilities::default();
        if roots {
            capabilities.roots = Some(Default::default());
        }
        SessionEntry {
            mirrored: Mirrored::of(&capabilities),
            capabilities,
            subscriptions: HashSet::new(),
            log_level: None,
            link: None,
            seen: SessionSeen {
                client: "test".into(),
                version: "2025-11-25".into(),
                principal: principal.map(Arc::from),
                opened: std::time::SystemTime::now(),
            },
        }
    }

    fn call_of(session: Option<SessionId>, principal: Option<&str>) -> CallOrigin {
        CallOrigin {
            session,
            request: RequestId::Number(session.unwrap_or(0) as i64),
            seq: 0,
            notices: None,
            stream: None,
            principal: principal.map(Arc::from),
        }
    }

    /// Which call or sessions `whose` names, as text: `call:S` (S the
    /// call's session), `sessions:P` (P a principal, or `any`), `several`.
    fn told(whose: Whose) -> String {
        match whose {
            Whose::Call(origin) => format!("call:{}", origin.session.unwrap_or(0)),
            Whose::Sessions(principal) => {
                format!("sessions:{}", principal.as_deref().unwrap_or("any"))
            }
            Whose::Several => "several".into(),
        }
    }

    /// Without `[auth]`, a message that names no call goes to the latest
    /// call waiting on its upstream (sluice's own requests too), else to
    /// any session. With `[auth]`, only to one principal's: the latest of
    /// her calls (sluice's own are no one's and never chosen), else, with
    /// none waiting, her sessions; calls or sessions of two principals are
    /// `Several`, and a log message then reaches no one.
    #[test]
    fn a_message_that_names_no_call_is_never_guessed_across_principals() {
        for by_principal in [false, true] {
            let hub = Arc::new(if by_principal {
                Hub::by_principal()
            } else {
                Hub::default()
            });
            let principal = |name| by_principal.then_some(name);
            let everyone = |_: &SessionEntry| true;
            hub.add_session(1, session_of(principal("alice"), false));
            hub.add_session(2, session_of(principal("alice"), true));
            let no_call = if by_principal {
                "sessions:alice"
            } else {
                "sessions:any"
            };
            assert_eq!(told(hub.whose("up", everyone)), no_call);
            let _first = hub.track_call(
                "up",
                RequestId::Number(10),
                call_of(Some(1), principal("alice")),
            );
            let _second = hub.track_call(
                "up",
                RequestId::Number(11),
                call_of(Some(2), principal("alice")),
            );
            // Another upstream's calls count for none of "up"'s messages.
            let _elsewhere = hub.track_call(
                "other",
                RequestId::Number(12),
                call_of(Some(3), Some("carol")),
            );
            // sluice's own request (a list), the latest: no one's.
            let own = hub.track_call("up", RequestId::Number(13), call_of(None, None));
            let latest = if by_principal { "call:2" } else { "call:0" };
            assert_eq!(
                told(hub.whose("up", everyone)),
                latest,
                "by principal: {by_principal}"
            );
            drop(own);
            assert_eq!(told(hub.whose("up", everyone)), "call:2");
            hub.add_session(3, session_of(principal("bob"), true));
            let bobs = hub.track_call(
                "up",
                RequestId::Number(14),
                call_of(Some(3), principal("bob")),
            );
            let (with_bob, bob_alone) = if by_principal {
                ("several", "sessions:bob")
            } else {
                ("call:3", "sessions:any")
            };
            assert_eq!(told(hub.whose("up", everyone)), with_bob);
            drop((_first, _second, bobs));
            // No call waiting: the sessions able to take it.
            let roots = |entry: &SessionEntry| entry.capabilities.roots.is_some();
            let alices = if by_principal {
                "several"
            } else {
                "sessions:any"
            };
            assert_eq!(told(hub.whose("up", everyone)), alices);
            hub.remove_session(2);
            assert_eq!(told(hub.whose("up", roots)), bob_alone);
        }
    }

    /// A log message of no call goes to every session of the principal
    /// whose call waits, and to no other; with two principals' calls
    /// waiting, to no one.
    #[tokio::test]
    async fn a_log_message_of_no_call_reaches_one_principals_sessions_or_none() {
        let hub = Arc::new(Hub::by_principal());
        let mut receivers: Vec<_> = (0..3).map(|_| hub.subscribe()).collect();
        hub.add_session(1, session_of(Some("alice"), false));
        hub.add_session(2, session_of(Some("alice"), false));
        hub.add_session(3, session_of(Some("bob"), false));
        let raw = crate::jsonrpc::Message::parse(bytes::Bytes::from_static(
            br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"alice's"}}"#,
        ))
        .unwrap();
        let logged = Arc::new(Logged::read(&raw).unwrap());
        let alices = hub.track_call("up", RequestId::Number(1), call_of(Some(1), Some("alice")));
        assert!(hub.publish_log("up", &logged));
        // One place in the broadcast, however many sessions she has.
        assert_eq!(hub.events.len(), 1);
        let bobs = hub.track_call("up", RequestId::Number(2), call_of(Some(3), Some("bob")));
        assert!(!hub.publish_log("up", &logged), "two principals: no one");
        drop((alices, bobs));
        // A fence every session hears: what came before it was published.
        hub.publish(Event::ToolsChanged);
        for ((session, principal), receiver) in [(1, "alice"), (2, "alice"), (3, "bob")]
            .into_iter()
            .zip(&mut receivers)
        {
            let batch = next_events(receiver, session, Some(principal))
                .await
                .unwrap();
            let expected: &[&str] = if session == 3 {
                &["tools"]
            } else {
                &["log", "tools"]
            };
            assert_eq!(kinds(&batch), expected, "session {session}");
        }
    }

    /// What is published to one session reaches it, in order with what is
    /// every session's, and no other session.
    #[tokio::test]
    async fn an_event_for_one_session_reaches_it_alone() {
        let hub = Hub::default();
        let (mut first, mut second) = (hub.subscribe(), hub.subscribe());
        let updated = |uri: &str| Event::ResourceUpdated(uri.into());
        hub.publish(updated("every-1"));
        hub.publish_to(2, updated("second's"));
        hub.publish(updated("every-2"));
        let uris = |batch: Vec<Event>| -> Vec<String> {
            batch
                .into_iter()
                .map(|event| match event {
                    Event::ResourceUpdated(uri) => uri,
                    other => panic!("{other:?}"),
                })
                .collect()
        };
        let batch = next_events(&mut first, 1, None).await.unwrap();
        assert_eq!(uris(batch), ["every-1", "every-2"]);
        let batch = next_events(&mut second, 2, None).await.unwrap();
        assert_eq!(uris(batch), ["every-1", "second's", "every-2"]);
    }
}
