//! The table of 2025-11-25 HTTP sessions: rmcp's in-memory session manager,
//! counted (for `[http] max_sessions`) and emptied as sessions end.
//!
//! rmcp's `LocalSessionManager` forgets a session only on `DELETE`: one that
//! ends otherwise (idle for `[http] session_idle_s`, or its worker failed)
//! stays in its map for ever. Here each session's transport carries a guard
//! that removes the entry when the session's service ends, whatever ended it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

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

/// The sessions of the HTTP listener.
#[derive(Default)]
pub struct SessionTable {
    inner: Arc<LocalSessionManager>,
    open: Arc<AtomicUsize>,
}

impl SessionTable {
    /// A table whose sessions end after `idle` without a request.
    pub fn new(idle: std::time::Duration) -> Self {
        let mut inner = LocalSessionManager::default();
        inner.session_config.keep_alive = Some(idle);
        Self {
            inner: Arc::new(inner),
            open: Arc::default(),
        }
    }

    /// Sessions open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }
}

/// A session's transport, which forgets the session when it is dropped
/// (its service ended).
pub struct Tracked {
    transport: WorkerTransport<LocalSessionWorker>,
    _forget: Forget,
}

struct Forget {
    id: SessionId,
    manager: Arc<LocalSessionManager>,
    open: Arc<AtomicUsize>,
}

impl Drop for Forget {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
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

    fn receive(
        &mut self,
    ) -> impl Future<Output = Option<rmcp::service::RxJsonRpcMessage<RoleServer>>> + Send {
        self.transport.receive()
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
        let forget = Forget {
            id: id.clone(),
            manager: self.inner.clone(),
            open: self.open.clone(),
        };
        Ok((
            id,
            Tracked {
                transport,
                _forget: forget,
            },
        ))
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
