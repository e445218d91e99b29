//! The table of 2025-11-25 HTTP sessions: rmcp's in-memory session manager,
//! counted (for `[http] max_sessions`), closed when idle, and emptied as
//! sessions end; and each session's [`Front`], which answers the requests
//! sluice has taken over from rmcp (`downstream::http_front`).
//!
//! rmcp's `LocalSessionManager` forgets a session only on `DELETE`: one that
//! ends otherwise (idle for `[http] session_idle_s`, or its worker failed)
//! stays in its map for ever. Here each session's transport carries a guard
//! that removes the entry when the session's service ends, whatever ended it.
//!
//! Idleness is counted here, not by rmcp's session worker, which sees only
//! the requests rmcp answers: every request that names the session
//! ([`SessionTable::touch`]) keeps it open; [`SessionTable::close_idle`]
//! closes those unused for `[http] session_idle_s`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::Stream;
use rmcp::RoleServer;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::common::server_side_http::{ServerSseMessage, SessionId};
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, LocalSessionWorker,
};
use rmcp::transport::worker::WorkerTransport;

use super::front::Front;

/// The sessions of the HTTP listener.
pub struct SessionTable {
    inner: Arc<LocalSessionManager>,
    open: Arc<AtomicUsize>,
    entries: Arc<Entries>,
    /// How long an unused session stays open.
    idle: Duration,
}

/// What sluice keeps of each open session, by its `Mcp-Session-Id`.
type Entries = Mutex<HashMap<SessionId, Entry>>;

struct Entry {
    /// Its front, once its `initialize` was answered.
    front: Option<Arc<Front>>,
    /// When a request last named it.
    seen: Instant,
}

fn lock(entries: &Entries) -> std::sync::MutexGuard<'_, HashMap<SessionId, Entry>> {
    entries.lock().unwrap_or_else(|p| p.into_inner())
}

impl Default for SessionTable {
    fn default() -> Self {
        Self::new(sluice_core::http::HttpLimits::default().session_idle)
    }
}

impl SessionTable {
    /// A table whose sessions end after `idle` without a request (once
    /// [`Self::close_idle`] runs).
    pub fn new(idle: Duration) -> Self {
        let mut inner = LocalSessionManager::default();
        // Counted here: see the module's documentation.
        inner.session_config.keep_alive = None;
        Self {
            inner: Arc::new(inner),
            open: Arc::default(),
            entries: Arc::default(),
            idle,
        }
    }

    /// Sessions open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Notes that a request named session `id` now; gives its front, if
    /// the session is open and initialized.
    pub fn touch(&self, id: &str) -> Option<Arc<Front>> {
        let mut entries = lock(&self.entries);
        let entry = entries.get_mut(id)?;
        entry.seen = Instant::now();
        entry.front.clone()
    }

    /// Forgets session `id`, which its client deleted: its front ends.
    pub fn forget(&self, id: &str) {
        if let Some(entry) = lock(&self.entries).remove(id)
            && let Some(front) = entry.front
        {
            front.end();
        }
    }

    /// Closes, every so often until `stop` fires, the sessions no request
    /// named for longer than the idle time. The HTTP listener runs it.
    pub async fn close_idle(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let period = (self.idle / 4).clamp(Duration::from_millis(250), Duration::from_secs(30));
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
            let idle: Vec<SessionId> = lock(&self.entries)
                .iter()
                .filter(|(_, entry)| entry.seen.elapsed() >= self.idle)
                .map(|(id, _)| id.clone())
                .collect();
            for id in idle {
                tracing::info!(session = %id, "closing a session unused for {} s (`[http] session_idle_s`)", self.idle.as_secs());
                if let Err(e) = self.inner.close_session(&id).await {
                    tracing::debug!(session = %id, "closing an idle session: {e}");
                }
                // Gone from the table even if rmcp's worker had ended.
                self.forget(&id);
            }
        }
    }
}

/// In the extensions of a session's `initialize` request: where the
/// session registers its [`Front`] once it has answered it.
#[derive(Clone)]
pub struct Registration {
    id: SessionId,
    entries: Arc<Entries>,
}

impl Registration {
    /// Makes `front` answer the session's requests it takes.
    pub fn register(&self, front: Arc<Front>) {
        if let Some(entry) = lock(&self.entries).get_mut(&self.id) {
            entry.front = Some(front);
        }
    }
}

/// A session's transport, which forgets the session when it is dropped
/// (its service ended).
pub struct Tracked {
    transport: WorkerTransport<LocalSessionWorker>,
    forget: Forget,
}

struct Forget {
    id: SessionId,
    manager: Arc<LocalSessionManager>,
    open: Arc<AtomicUsize>,
    entries: Arc<Entries>,
}

impl Drop for Forget {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
        if let Some(entry) = lock(&self.entries).remove(&self.id)
            && let Some(front) = entry.front
        {
            front.end();
        }
        // The map's lock is async; a session may end while it is held.
        let removed = match self.manager.sessions.try_write() {
            Ok(mut sessions) => {
                sessions.remove(&self.id);
                true
            }
            Err(_) => false,
        };
        if !removed && let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (id, manager) = (self.id.clone(), self.manager.clone());
            runtime.spawn(async move {
                manager.sessions.write().await.remove(&id);
            });
        }
    }
}

impl Transport<RoleServer> for Tracked {
    type Error = <WorkerTransport<LocalSessionWorker> as Transport<RoleServer>>::Error;

    fn send(
        &mut self,
        item: rmcp::service::TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.transport.send(item)
    }

    async fn receive(&mut self) -> Option<rmcp::service::RxJsonRpcMessage<RoleServer>> {
        let mut message = self.transport.receive().await?;
        if let rmcp::model::JsonRpcMessage::Request(request) = &mut message
            && matches!(
                request.request,
                rmcp::model::ClientRequest::InitializeRequest(_)
            )
        {
            use rmcp::model::GetExtensions as _;
            request.request.extensions_mut().insert(Registration {
                id: self.forget.id.clone(),
                entries: self.forget.entries.clone(),
            });
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.transport.close()
    }
}

impl SessionManager for SessionTable {
    type Error = LocalSessionManagerError;
    type Transport = Tracked;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.inner.create_session().await?;
        self.open.fetch_add(1, Ordering::Relaxed);
        lock(&self.entries).insert(
            id.clone(),
            Entry {
                front: None,
                seen: Instant::now(),
            },
        );
        let forget = Forget {
            id: id.clone(),
            manager: self.inner.clone(),
            open: self.open.clone(),
            entries: self.entries.clone(),
        };
        Ok((id, Tracked { transport, forget }))
    }

    fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<ServerJsonRpcMessage, Self::Error>> + Send {
        self.inner.initialize_session(id, message)
    }

    fn has_session(
        &self,
        id: &SessionId,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send {
        self.inner.has_session(id)
    }

    fn close_session(
        &self,
        id: &SessionId,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close_session(id)
    }

    fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.inner.create_stream(id, message)
    }

    fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.accept_message(id, message)
    }

    fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.inner.create_standalone_stream(id)
    }

    fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.inner.resume(id, last_event_id)
    }
}
