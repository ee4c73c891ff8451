//! The MCP sessions of the streamable HTTP transport: a session manager for rmcp's
//! `StreamableHttpService` that holds an idle session in little memory.
//!
//! rmcp's `LocalSessionManager` runs a worker task per session with five tokio channels of
//! unboxed messages of about 400 bytes; tokio allocates the first block of a channel (32 slots)
//! when it is made, so an idle session held about 64 KiB of empty channel blocks. Here a session
//! is one channel of boxed client messages into the service (`SessionTransport`, which the
//! service reads) and, per open SSE stream, one unbounded channel of boxed SSE messages out.
//! The service's own sends are routed synchronously, in the order it makes them
//! ([`route::Routes::deliver`]): an answer, and what belongs to a request, onto that request's
//! `POST` stream, everything else onto the standalone `GET` stream.
//!
//! What matches `LocalSessionManager`: `initialize` creates the session; an unknown or ended
//! session is `404` (rmcp answers that on `has_session` false); `DELETE` ends it and its
//! streams; it ends by itself after [`SessionConfig::DEFAULT_KEEP_ALIVE`] without a message
//! either way; request streams start with a priming event `0/N`; a second `GET` stream while
//! one is open only carries keep-alives (rmcp 3.11 does the same, it does not answer 409).
//! What does not: no message is kept for replay. A reconnect with `Last-Event-ID` gets the
//! standalone stream back (`0`) or the rest of an unanswered request's stream (`M/N`), without
//! the messages sent while it was away; a stream that has ended cannot be resumed (rmcp then
//! answers an empty stream).

mod route;

use std::{
    collections::HashMap,
    pin::Pin,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError, RwLock,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use futures::Stream;
use rmcp::{
    RoleServer,
    model::{
        ClientJsonRpcMessage, ClientNotification, GetMeta as _, RequestId, ServerJsonRpcMessage,
    },
    transport::{
        Transport,
        streamable_http_server::session::{
            ServerSseMessage, SessionId, SessionManager, local::SessionConfig,
        },
    },
};
use tokio::{
    sync::{mpsc, oneshot},
    time::Instant,
};
use tokio_util::sync::CancellationToken;

use route::{Opened, Routes, Sink};

/// How many client messages may wait for the service per session.
const INBOUND_CAPACITY: usize = 16;

/// Why a session operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("session {0} not found")]
    NotFound(SessionId),
    #[error("the session has ended")]
    Ended,
    #[error("expected a request")]
    NotARequest,
    #[error("Last-Event-ID {0:?} was not issued by this server")]
    UnknownEventId(String),
    #[error(
        "stream {0} of this session was answered or closed already; its messages are not kept for replay"
    )]
    StreamGone(u64),
}

/// Settings of [`Sessions`].
#[derive(Debug, Clone)]
pub struct SessionsConfig {
    /// A session ends after this long without a message either way; `None`: never.
    pub keep_alive: Option<Duration>,
    /// The `retry` of the priming event that starts each request stream; `None`: no priming.
    pub sse_retry: Option<Duration>,
}

impl Default for SessionsConfig {
    /// rmcp's defaults (`SessionConfig`): 5 minutes, 3 seconds.
    fn default() -> Self {
        Self {
            keep_alive: Some(SessionConfig::DEFAULT_KEEP_ALIVE),
            sse_retry: Some(SessionConfig::DEFAULT_SSE_RETRY),
        }
    }
}

/// All sessions of the process; rmcp's `StreamableHttpService` calls it through
/// [`SessionManager`].
#[derive(Debug, Default)]
pub struct Sessions {
    sessions: RwLock<HashMap<SessionId, Arc<Session>>>,
    config: SessionsConfig,
}

impl Sessions {
    pub fn new(config: SessionsConfig) -> Self {
        Self {
            sessions: RwLock::default(),
            config,
        }
    }

    /// Sessions currently held.
    pub fn len(&self) -> usize {
        read(&self.sessions).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn get(&self, id: &SessionId) -> Result<Arc<Session>, SessionError> {
        read(&self.sessions)
            .get(id)
            .filter(|s| !s.ended.is_cancelled())
            .cloned()
            .ok_or_else(|| SessionError::NotFound(id.clone()))
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

/// One session, shared by the HTTP side ([`Sessions`]) and the service's side
/// ([`SessionTransport`]).
#[derive(Debug)]
struct Session {
    inbound: mpsc::Sender<Box<ClientJsonRpcMessage>>,
    routes: Mutex<Routes>,
    ended: CancellationToken,
    started: Instant,
    /// Milliseconds from `started` to the last message either way.
    last_active: AtomicU64,
}

impl Session {
    fn routes(&self) -> MutexGuard<'_, Routes> {
        self.routes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn touch(&self) {
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_active.fetch_max(ms, Ordering::Relaxed);
    }

    /// When the session ends if nothing happens before.
    fn expires(&self, keep_alive: Duration) -> Instant {
        let last = Duration::from_millis(self.last_active.load(Ordering::Relaxed));
        self.started + last + keep_alive
    }

    /// Hands a client message to the service.
    async fn push(&self, message: ClientJsonRpcMessage) -> Result<(), SessionError> {
        self.touch();
        tokio::select! {
            sent = self.inbound.send(Box::new(message)) => sent.map_err(|_| SessionError::Ended),
            () = self.ended.cancelled() => Err(SessionError::Ended),
        }
    }

    fn end(&self) {
        self.ended.cancel();
        self.routes().close();
    }
}

/// A client request's id and the progress token in its `_meta`.
fn request_keys(
    message: &ClientJsonRpcMessage,
) -> Option<(RequestId, Option<rmcp::model::ProgressToken>)> {
    match message {
        ClientJsonRpcMessage::Request(request) => Some((
            request.id.clone(),
            request.request.get_meta().get_progress_token(),
        )),
        _ => None,
    }
}

/// The request a client's `notifications/cancelled` names.
fn cancelled_request(message: &ClientJsonRpcMessage) -> Option<&RequestId> {
    match message {
        ClientJsonRpcMessage::Notification(n) => match &n.notification {
            ClientNotification::CancelledNotification(c) => c.params.request_id.as_ref(),
            _ => None,
        },
        _ => None,
    }
}

/// One SSE stream out of a session.
#[derive(Debug)]
pub struct SseStream {
    rx: mpsc::UnboundedReceiver<Box<ServerSseMessage>>,
}

impl Stream for SseStream {
    type Item = ServerSseMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx).map(|m| m.map(|b| *b))
    }
}

fn sse() -> (route::SseSender, SseStream) {
    let (tx, rx) = mpsc::unbounded_channel();
    (tx, SseStream { rx })
}

impl SessionManager for Sessions {
    type Error = SessionError;
    type Transport = SessionTransport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let id: SessionId = uuid::Uuid::new_v4().simple().to_string().into();
        let (inbound, rx) = mpsc::channel(INBOUND_CAPACITY);
        let session = Arc::new(Session {
            inbound,
            routes: Mutex::default(),
            ended: CancellationToken::new(),
            started: Instant::now(),
            last_active: AtomicU64::new(0),
        });
        write(&self.sessions).insert(id.clone(), Arc::clone(&session));
        tracing::debug!(session = %id, "session created");
        let transport = SessionTransport {
            session,
            inbound: rx,
            keep_alive: self.config.keep_alive,
        };
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        let session = self.get(id)?;
        let (request, progress) = request_keys(&message).ok_or(SessionError::NotARequest)?;
        let (tx, rx) = oneshot::channel();
        {
            let mut routes = session.routes();
            let stream = routes.next_stream();
            if !routes.expect(stream, request, progress, Sink::Once(tx)) {
                return Err(SessionError::Ended);
            }
        }
        session.push(message).await?;
        tokio::select! {
            answer = rx => answer.map_err(|_| SessionError::Ended),
            () = session.ended.cancelled() => Err(SessionError::Ended),
        }
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.get(id).is_ok())
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        let removed = write(&self.sessions).remove(id);
        if let Some(session) = removed {
            session.end();
            tracing::debug!(session = %id, "session closed");
        }
        Ok(())
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let session = self.get(id)?;
        let (request, progress) = request_keys(&message).ok_or(SessionError::NotARequest)?;
        let (tx, stream) = sse();
        {
            let mut routes = session.routes();
            let n = routes.next_stream();
            if let Some(retry) = self.config.sse_retry {
                // Fails only if the stream is dropped already, which it is not.
                let _ = tx.send(Box::new(ServerSseMessage::priming(format!("0/{n}"), retry)));
            }
            if !routes.expect(n, request, progress, Sink::Sse(tx)) {
                return Err(SessionError::Ended);
            }
        }
        session.push(message).await?;
        Ok(stream)
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        let session = self.get(id)?;
        if let Some(request) = cancelled_request(&message) {
            session.routes().cancel(request);
        }
        session.push(message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let session = self.get(id)?;
        session.touch();
        let (tx, stream) = sse();
        match session.routes().open_get(tx) {
            Opened::Standalone | Opened::Idle => Ok(stream),
            Opened::Refused => Err(SessionError::Ended),
        }
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let session = self.get(id)?;
        session.touch();
        let Some(which) = route::resumed_stream(&last_event_id) else {
            return Err(SessionError::UnknownEventId(last_event_id));
        };
        let (tx, stream) = sse();
        let mut routes = session.routes();
        match which {
            Some(n) => {
                if routes.reattach(n, tx) {
                    Ok(stream)
                } else {
                    Err(SessionError::StreamGone(n))
                }
            }
            None => match routes.open_get(tx) {
                Opened::Standalone | Opened::Idle => Ok(stream),
                Opened::Refused => Err(SessionError::Ended),
            },
        }
    }
}

/// The service's end of a session: client messages in, its messages routed out to the streams.
#[derive(Debug)]
pub struct SessionTransport {
    session: Arc<Session>,
    inbound: mpsc::Receiver<Box<ClientJsonRpcMessage>>,
    keep_alive: Option<Duration>,
}

impl Transport<RoleServer> for SessionTransport {
    type Error = SessionError;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.session.touch();
        let delivered = self.session.routes().deliver(item);
        if delivered == route::Delivered::Dropped {
            tracing::debug!("a message of the service found no open stream");
        }
        std::future::ready(Ok(()))
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            let expiry = async {
                match self.keep_alive {
                    Some(keep_alive) => {
                        tokio::time::sleep_until(self.session.expires(keep_alive)).await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                message = self.inbound.recv() => return message.map(|b| *b),
                () = self.session.ended.cancelled() => return None,
                () = expiry => {
                    let idle = self.keep_alive.is_some_and(|k| Instant::now() >= self.session.expires(k));
                    if idle {
                        tracing::debug!("session expired");
                        self.session.end();
                        return None;
                    }
                }
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.session.end();
        std::future::ready(Ok(()))
    }
}

impl Drop for SessionTransport {
    /// The service is gone: so are the session's streams (rmcp removes the session itself).
    fn drop(&mut self) {
        self.session.end();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use futures::StreamExt as _;
    use rmcp::model::{
        ClientRequest, ClientResult, InitializeRequest, NumberOrString, PingRequest, ServerResult,
    };

    use super::*;

    fn ping(n: i64) -> ClientJsonRpcMessage {
        ClientJsonRpcMessage::request(
            ClientRequest::PingRequest(PingRequest::default()),
            NumberOrString::Number(n),
        )
    }

    fn answer(n: i64) -> ServerJsonRpcMessage {
        ServerJsonRpcMessage::response(ServerResult::empty(()), NumberOrString::Number(n))
    }

    #[tokio::test]
    async fn a_request_is_answered_on_its_stream_and_the_stream_ends() {
        let sessions = Sessions::default();
        let (id, mut transport) = sessions.create_session().await.unwrap();
        assert!(sessions.has_session(&id).await.unwrap());
        let stream = sessions.create_stream(&id, ping(1)).await.unwrap();
        assert!(matches!(
            transport.receive().await,
            Some(ClientJsonRpcMessage::Request(_))
        ));
        transport.send(answer(1)).await.unwrap();
        let events: Vec<_> = stream.collect().await;
        assert_eq!(events.len(), 2, "priming, then the answer: {events:?}");
        assert_eq!(events[0].event_id.as_deref(), Some("0/0"));
        assert!(events[1].message.is_some());
    }

    #[tokio::test]
    async fn initialize_waits_for_the_answer() {
        let sessions = Arc::new(Sessions::default());
        let (id, mut transport) = sessions.create_session().await.unwrap();
        let init = ClientJsonRpcMessage::request(
            ClientRequest::InitializeRequest(InitializeRequest::default()),
            NumberOrString::Number(0),
        );
        let answering = tokio::spawn(async move {
            let got = transport.receive().await;
            assert!(got.is_some());
            transport.send(answer(0)).await.unwrap();
            transport
        });
        let answer = sessions.initialize_session(&id, init).await.unwrap();
        assert!(matches!(answer, ServerJsonRpcMessage::Response(_)));
        drop(answering.await.unwrap());
    }

    #[tokio::test]
    async fn delete_ends_the_session_and_its_streams() {
        let sessions = Sessions::default();
        let (id, mut transport) = sessions.create_session().await.unwrap();
        let get = sessions.create_standalone_stream(&id).await.unwrap();
        sessions.close_session(&id).await.unwrap();
        assert!(!sessions.has_session(&id).await.unwrap());
        assert!(
            transport.receive().await.is_none(),
            "the service sees the end"
        );
        assert_eq!(get.collect::<Vec<_>>().await.len(), 0);
        assert!(matches!(
            sessions.create_stream(&id, ping(2)).await,
            Err(SessionError::NotFound(_))
        ));
        assert!(sessions.is_empty());
    }

    #[tokio::test]
    async fn notifications_go_to_the_standalone_stream() {
        let sessions = Sessions::default();
        let (id, mut transport) = sessions.create_session().await.unwrap();
        let mut get = sessions.create_standalone_stream(&id).await.unwrap();
        let note = ServerJsonRpcMessage::notification(
            rmcp::model::ServerNotification::ToolListChangedNotification(Default::default()),
        );
        transport.send(note).await.unwrap();
        assert!(get.next().await.unwrap().message.is_some());
        // A client's answer to a server request reaches the service.
        let reply =
            ClientJsonRpcMessage::response(ClientResult::empty(()), NumberOrString::Number(1000));
        sessions.accept_message(&id, reply).await.unwrap();
        assert!(matches!(
            transport.receive().await,
            Some(ClientJsonRpcMessage::Response(_))
        ));
    }

    #[tokio::test]
    async fn resume_reattaches_an_unanswered_request_or_says_why_not() {
        let sessions = Sessions::default();
        let (id, mut transport) = sessions.create_session().await.unwrap();
        let first = sessions.create_stream(&id, ping(3)).await.unwrap();
        drop(first);
        let again = sessions.resume(&id, "0/0".into()).await.unwrap();
        transport.receive().await.unwrap();
        transport.send(answer(3)).await.unwrap();
        assert_eq!(again.collect::<Vec<_>>().await.len(), 1);
        assert!(matches!(
            sessions.resume(&id, "0/0".into()).await,
            Err(SessionError::StreamGone(0))
        ));
        assert!(matches!(
            sessions.resume(&id, "nonsense".into()).await,
            Err(SessionError::UnknownEventId(_))
        ));
        // The standalone stream resumes from its priming id.
        assert!(sessions.resume(&id, "0".into()).await.is_ok());
    }

    #[tokio::test]
    async fn an_idle_session_expires() {
        let keep_alive = Duration::from_millis(400);
        let sessions = Sessions::new(SessionsConfig {
            keep_alive: Some(keep_alive),
            sse_retry: None,
        });
        let (id, mut transport) = sessions.create_session().await.unwrap();
        let _get = sessions.create_standalone_stream(&id).await.unwrap();
        tokio::time::sleep(Duration::from_millis(250)).await;
        sessions.accept_message(&id, ping(4)).await.unwrap();
        // The message counts as activity: the session lives a full keep-alive after it.
        assert!(transport.receive().await.is_some());
        let started = Instant::now();
        assert!(transport.receive().await.is_none());
        assert!(started.elapsed() >= Duration::from_millis(350));
        assert!(!sessions.has_session(&id).await.unwrap());
    }
}
