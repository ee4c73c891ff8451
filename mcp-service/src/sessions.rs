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
//!
//! Resumption, as rmcp's: every stream keeps its last events ([`replay::Replay`]: nothing
//! allocated before the first, at most 16 events and 256 KiB), under rmcp's event ids (`M/N`
//! on request stream `N`, `M` on the standalone stream). A `GET` with `Last-Event-ID` gets the
//! kept events after the one it names and then the rest of that stream: a request in flight
//! goes on on the new connection, an answered request's stream replays and ends (its events
//! are kept for [`SessionConfig::DEFAULT_COMPLETED_CACHE_TTL`] after the answer), the
//! standalone stream is taken over when its last connection is gone. Unlike rmcp, the event
//! named is not sent again, and a new `GET` without `Last-Event-ID` gets only the standalone
//! events no open stream took. An id this session did not issue, or a stream whose events are
//! gone, gets an error, which rmcp turns into an empty `200` stream. When the session ends
//! (`DELETE`, expiry, the service gone) everything it kept goes with it.

mod replay;
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

use replay::EventId;
use route::{NotResumed, Opened, Routes, Sink};

/// How many client messages may wait for the service per session.
const INBOUND_CAPACITY: usize = 16;

/// Why a session operation failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SessionError {
    #[error("session {0} not found")]
    NotFound(SessionId),
    #[error("the session has ended")]
    Ended,
    #[error("expected a request")]
    NotARequest,
    #[error("Last-Event-ID {0:?} was not issued by this session")]
    UnknownEventId(String),
    #[error("the events before Last-Event-ID {0:?} are no longer kept")]
    StreamGone(String),
}

/// Settings of [`Sessions`].
#[derive(Debug, Clone)]
pub(crate) struct SessionsConfig {
    /// A session ends after this long without a message either way; `None`: never.
    pub keep_alive: Option<Duration>,
    /// The `retry` of the priming event that starts each request stream; `None`: no priming.
    pub sse_retry: Option<Duration>,
    /// How long an answered request's events are kept for a reconnect.
    pub answered_ttl: Duration,
}

impl Default for SessionsConfig {
    /// rmcp's defaults (`SessionConfig`): 5 minutes, 3 seconds, 60 seconds.
    fn default() -> Self {
        Self {
            keep_alive: Some(SessionConfig::DEFAULT_KEEP_ALIVE),
            sse_retry: Some(SessionConfig::DEFAULT_SSE_RETRY),
            answered_ttl: SessionConfig::DEFAULT_COMPLETED_CACHE_TTL,
        }
    }
}

/// All sessions of the process; rmcp's `StreamableHttpService` calls it through
/// [`SessionManager`].
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    sessions: RwLock<HashMap<SessionId, Arc<Session>>>,
    config: SessionsConfig,
}

impl Sessions {
    #[cfg(test)]
    pub(crate) fn new(config: SessionsConfig) -> Self {
        Self {
            sessions: RwLock::default(),
            config,
        }
    }

    /// Sessions currently held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        read(&self.sessions).len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
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
pub(crate) struct SseStream {
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
            routes: Mutex::new(Routes::new(self.config.answered_ttl)),
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
        if !session
            .routes()
            .expect(route::INITIALIZE, request, progress, Sink::Once(tx))
        {
            return Err(SessionError::Ended);
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
                let priming = EventId {
                    stream: Some(n),
                    index: 0,
                };
                // Fails only if the stream is dropped already, which it is not.
                let _ = tx.send(Box::new(ServerSseMessage::priming(
                    priming.to_string(),
                    retry,
                )));
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
            session.routes().cancel(request, Instant::now());
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
        let Some(event) = EventId::parse(&last_event_id) else {
            return Err(SessionError::UnknownEventId(last_event_id));
        };
        let (tx, stream) = sse();
        let resumed = session.routes().resume(event, tx, Instant::now());
        match resumed {
            Ok(how) => {
                tracing::debug!(session = %id, %last_event_id, ?how, "stream resumed");
                Ok(stream)
            }
            Err(NotResumed::NotIssued) => Err(SessionError::UnknownEventId(last_event_id)),
            Err(NotResumed::Gone) => Err(SessionError::StreamGone(last_event_id)),
            Err(NotResumed::Ended) => Err(SessionError::Ended),
        }
    }
}

/// The service's end of a session: client messages in, its messages routed out to the streams.
#[derive(Debug)]
pub(crate) struct SessionTransport {
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
        let bytes = replay::json_len(&item);
        let delivered = self.session.routes().deliver(item, bytes, Instant::now());
        if delivered == route::Delivered::Dropped {
            tracing::debug!("a message of the service beside initialize was dropped");
        }
        std::future::ready(Ok(()))
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            // Answered streams' events go when their time is up, whatever else happens.
            let evict_at = self.session.routes().evict(Instant::now());
            let evict = async {
                match evict_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
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
                () = evict => {}
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
        assert_eq!(events[1].event_id.as_deref(), Some("1/0"));
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

    /// The ids and whether each event carries a message.
    async fn ids(stream: impl Stream<Item = ServerSseMessage>) -> Vec<(String, bool)> {
        stream
            .map(|e| (e.event_id.unwrap_or_default(), e.message.is_some()))
            .collect()
            .await
    }

    #[tokio::test]
    async fn a_dropped_request_stream_resumes_in_flight_or_answered() {
        let sessions = Sessions::default();
        let (id, mut transport) = sessions.create_session().await.unwrap();
        // Dropped before the answer; resumed while in flight: the answer comes on the new one.
        let first = sessions.create_stream(&id, ping(3)).await.unwrap();
        drop(first);
        let again = sessions.resume(&id, "0/0".into()).await.unwrap();
        transport.receive().await.unwrap();
        transport.send(answer(3)).await.unwrap();
        assert_eq!(ids(again).await, [("1/0".to_owned(), true)]);
        // Dropped, then answered while away: the answer is replayed, then the stream ends.
        let second = sessions.create_stream(&id, ping(4)).await.unwrap();
        drop(second);
        transport.receive().await.unwrap();
        transport.send(answer(4)).await.unwrap();
        for _ in 0..2 {
            let replayed = sessions.resume(&id, "0/1".into()).await.unwrap();
            assert_eq!(ids(replayed).await, [("1/1".to_owned(), true)]);
        }
        // After the last event: nothing more, the stream ends.
        let rest = sessions.resume(&id, "1/1".into()).await.unwrap();
        assert!(ids(rest).await.is_empty());
        // Ids this session did not issue.
        for unknown in ["2/1", "0/9", "nonsense", "5"] {
            assert!(
                matches!(
                    sessions.resume(&id, unknown.into()).await,
                    Err(SessionError::UnknownEventId(_))
                ),
                "{unknown}"
            );
        }
        // The standalone stream resumes from its priming id.
        assert!(sessions.resume(&id, "0".into()).await.is_ok());
    }

    #[tokio::test]
    async fn the_standalone_stream_resumes_after_the_last_event_seen() {
        let sessions = Sessions::default();
        let (id, mut transport) = sessions.create_session().await.unwrap();
        let note = || {
            ServerJsonRpcMessage::notification(
                rmcp::model::ServerNotification::ToolListChangedNotification(Default::default()),
            )
        };
        // Sent before any GET: the first GET gets it.
        transport.send(note()).await.unwrap();
        let mut get = sessions.create_standalone_stream(&id).await.unwrap();
        assert_eq!(get.next().await.unwrap().event_id.as_deref(), Some("1"));
        transport.send(note()).await.unwrap();
        assert_eq!(get.next().await.unwrap().event_id.as_deref(), Some("2"));
        drop(get);
        transport.send(note()).await.unwrap();
        transport.send(note()).await.unwrap();
        let mut back = sessions.resume(&id, "2".into()).await.unwrap();
        assert_eq!(back.next().await.unwrap().event_id.as_deref(), Some("3"));
        assert_eq!(back.next().await.unwrap().event_id.as_deref(), Some("4"));
        // While it is open, another reconnect is an idle stream and replays nothing.
        let idle = sessions.resume(&id, "0".into()).await.unwrap();
        transport.send(note()).await.unwrap();
        assert_eq!(back.next().await.unwrap().event_id.as_deref(), Some("5"));
        sessions.close_session(&id).await.unwrap();
        assert!(ids(idle).await.is_empty());
    }

    #[tokio::test]
    async fn answered_events_are_dropped_after_their_time() {
        let sessions = Sessions::new(SessionsConfig {
            answered_ttl: Duration::from_millis(200),
            ..SessionsConfig::default()
        });
        let (id, mut transport) = sessions.create_session().await.unwrap();
        let session = sessions.get(&id).unwrap();
        drop(sessions.create_stream(&id, ping(5)).await.unwrap());
        transport.receive().await.unwrap();
        transport.send(answer(5)).await.unwrap();
        assert_eq!(session.routes().answered(), 1);
        // The service waits for the next message; meanwhile the answer's time runs out.
        let waiting = tokio::spawn(async move { transport.receive().await.is_some() });
        let dropped = tokio::time::timeout(Duration::from_secs(10), async {
            while session.routes().answered() > 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert!(dropped.is_ok(), "still kept after 10 s");
        assert!(matches!(
            sessions.resume(&id, "0/0".into()).await,
            Err(SessionError::StreamGone(_))
        ));
        sessions.close_session(&id).await.unwrap();
        assert!(!waiting.await.unwrap());
    }

    #[tokio::test]
    async fn an_idle_session_expires() {
        let keep_alive = Duration::from_millis(400);
        let sessions = Sessions::new(SessionsConfig {
            keep_alive: Some(keep_alive),
            sse_retry: None,
            ..SessionsConfig::default()
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
