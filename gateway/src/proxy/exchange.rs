//! The exchange with the upstream for an admitted `/mcp` request, after every decision is made:
//! a connection (kept-alive from the pool for requests, a fresh one for a long event stream),
//! the rewritten head and the whole body in one write, the answer's head through
//! `response_filter`, its body through `response_body_filter` as it arrives. Nothing reaches
//! the upstream before `admission.rs` has admitted the request whole; an upstream's 401 to the
//! credential Pforte added is answered by the gateway instead (`respond.rs`).

use std::time::Duration;

use bytes::Bytes;
use pingora::{
    Error, ErrorType, Result,
    connectors::TransportConnector,
    http::ResponseHeader,
    proxy::{ProxyHttp, Session},
    upstreams::peer::{HttpPeer, Peer as _},
};

use super::{
    Gateway, RequestCtx,
    batched::Batched,
    pool::Pool,
    stream_gate::{self, Step},
    wire::Wire,
};
use crate::reply::Reply;

/// How many connects a request may try (the first and the retries a balanced route asks for);
/// pingora's own proxy allows the same.
const MAX_CONNECT_TRIES: usize = 3;

/// How long a kept-alive upstream connection waits in the pool for its next request when the
/// route sets no idle timeout.
const POOL_IDLE: Duration = Duration::from_secs(60);

/// The upstream connections of one per-core service: new ones through pingora's connector
/// (TCP, Unix socket or TLS per the peer), kept-alive ones in the service's own pool
/// (`pool.rs`).
pub(super) struct Upstreams {
    connector: TransportConnector,
    idle: Pool,
}

impl Default for Upstreams {
    fn default() -> Self {
        Self {
            connector: TransportConnector::new(None),
            idle: Pool::default(),
        }
    }
}

impl std::fmt::Debug for Upstreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Upstreams")
    }
}

/// What the exchange ended with.
pub(super) enum Relayed {
    /// The upstream's answer went to the client.
    Answered,
    /// The gateway answers in the upstream's place (it refused Pforte's credential).
    Replaced(Reply),
}

impl Gateway {
    /// Sends the admitted request with its whole `body` upstream and relays the answer. An
    /// error before the answer's head went out is answered by `fail_to_proxy`.
    pub(super) async fn exchange(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        body: Bytes,
    ) -> Result<Relayed> {
        // A long event stream keeps its connection to itself; requests share the pool.
        let pooled = session.req_header().method != http::Method::GET;
        // The steps that are not the relaying itself each in a box of their own: this future
        // lives as long as the answer is relayed (an event stream's whole life).
        let gated = Box::pin(self.stream_gate_step(session, ctx)).await;
        let sent = Box::pin(self.send_upstream(session, ctx, &body, pooled)).await;
        if let Some(opened) = gated {
            self.stream_gate.opened(&opened);
        }
        let (mut up, peer, mut answer) = sent?;
        drop(body);
        // What the pool needs of the peer once the answer has ended; a long event stream keeps
        // nothing of it (its connection is not pooled).
        let pool_as = pooled.then(|| {
            let idle = peer.options.idle_timeout.unwrap_or(POOL_IDLE);
            let idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
            (peer.reuse_hash(), idle_ms)
        });
        drop(peer);
        if answer.status == http::StatusCode::UNAUTHORIZED && ctx.upstream_auth.is_some() {
            return Ok(Relayed::Replaced(
                Box::pin(self.upstream_refused(ctx)).await,
            ));
        }
        // Hop-by-hop: the client's connection is the gateway's own.
        answer.remove_header(&http::header::CONNECTION);
        answer.remove_header("keep-alive");
        self.response_filter(session, &mut answer, ctx).await?;
        if up.until_close() {
            // The body ends when the connection does: the head says `Connection: close`.
            session.set_keepalive(None);
        }
        let answered = self.answer_client(session, ctx, &mut up, answer).await;
        Batched::hold(session.downstream_session.stream(), false);
        answered?;
        if let Some((key, idle_ms)) = pool_as
            && let Some(stream) = up.into_reusable()
        {
            (self.upstreams().idle).put(key, stream, idle_ms, self.clock.now_ms());
        }
        Ok(Relayed::Answered)
    }

    /// Writes the answer's head and relays its body as it arrives. While the next piece is
    /// already read from the upstream, the client's connection is held (`batched.rs`), so that
    /// what is at hand leaves in one write: the head with the first bytes, the last chunk with
    /// the terminator; nothing is held while the upstream is waited for.
    async fn answer_client(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        up: &mut Wire,
        answer: Box<ResponseHeader>,
    ) -> Result<()> {
        let done = up.is_done();
        let mut next = match done {
            true => None,
            false => up.buffered().map_err(|e| e.into_up())?,
        };
        Batched::hold(session.downstream_session.stream(), next.is_some());
        Box::pin(session.write_response_header(answer, done))
            .await
            .map_err(|e| e.into_down())?;
        let mut ended = done;
        while !ended {
            let mut piece = match next.take() {
                Some(piece) => piece,
                None => tokio::select! {
                    piece = up.body() => piece.map_err(|e| e.into_up())?,
                    gone = client_gone(session) => return Err(gone),
                },
            };
            ended = piece.is_none() || up.is_done();
            if !ended {
                next = up.buffered().map_err(|e| e.into_up())?;
            }
            self.response_body_filter(session, &mut piece, ended, ctx)?;
            if ended {
                // Recorded before the last bytes leave: the client's next request may use it.
                Box::pin(self.note_task(ctx)).await;
            }
            Batched::hold(session.downstream_session.stream(), next.is_some());
            Box::pin(session.write_response_body(piece, ended))
                .await
                .map_err(|e| e.into_down())?;
        }
        Ok(())
    }

    /// The request at the session stream gate (`stream_gate.rs`): `initialized` makes the
    /// session's stream expected, a request waits for it (bounded), the stream's `GET` comes
    /// back with its key, to be opened once its answer's head came (or it failed).
    async fn stream_gate_step(&self, session: &Session, ctx: &RequestCtx) -> Option<String> {
        let id = session
            .req_header()
            .headers
            .get(super::admission::SESSION_ID)?;
        let key = format!(
            "{:?}:{}",
            ctx.mcp_route,
            String::from_utf8_lossy(id.as_bytes())
        );
        let method = &session.req_header().method;
        match stream_gate::step(method, ctx.mcp.message.as_ref()) {
            Step::Expect => self.stream_gate.expect(key, std::time::Instant::now()),
            Step::Wait => self.stream_gate.wait(&key).await,
            Step::Open => {
                self.stream_gate.opening(&key, std::time::Instant::now());
                return Some(key);
            }
            Step::Pass => {}
        }
        None
    }

    /// Connects (a kept-alive connection first, when `pooled`), writes the request and reads
    /// the answer's head. A failed connect is retried where a balanced route asks for it; a
    /// kept-alive connection the upstream closed while it idled, on a new connection.
    async fn send_upstream(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        body: &Bytes,
        pooled: bool,
    ) -> Result<(Wire, Box<HttpPeer>, Box<ResponseHeader>)> {
        let mut connects = 0;
        let mut stale = 0;
        loop {
            let peer = self.upstream_peer(session, ctx).await?;
            let kept = match pooled && stale == 0 {
                true => (self.upstreams().idle).take(peer.reuse_hash(), self.clock.now_ms()),
                false => None,
            };
            let reused = kept.is_some();
            let stream = match kept {
                Some(stream) => stream,
                None => match self.upstreams().connector.new_stream(&*peer).await {
                    Ok(stream) => stream,
                    Err(e) => {
                        connects += 1;
                        let e = self.fail_to_connect(session, &peer, ctx, e.into_up());
                        if !e.retry() || connects >= MAX_CONNECT_TRIES {
                            return Err(e);
                        }
                        continue;
                    }
                },
            };
            let mut request = session.req_header().clone();
            self.upstream_request_filter(session, &mut request, ctx)
                .await?;
            frame_request(&mut request, body.len());
            let mut up = Wire::new(stream, peer.options.read_timeout).lean(!pooled);
            let answer = tokio::select! {
                answer = async {
                    up.send(&request, body).await?;
                    up.answer().await
                } => answer,
                gone = client_gone(session) => return Err(gone),
            };
            match answer {
                Ok(answer) => return Ok((up, peer, answer)),
                Err(_) if reused && up.unanswered() => stale += 1,
                Err(e) => return Err(e.into_up()),
            }
        }
    }
}

/// The request's framing as it goes upstream: the body is whole, so its length is known
/// (`Transfer-Encoding` from the client is replaced); `Expect: 100-continue` was the gateway's
/// to answer.
fn frame_request(request: &mut pingora::http::RequestHeader, body_len: usize) {
    request.remove_header(&http::header::EXPECT);
    let had_body = request.headers.contains_key(http::header::CONTENT_LENGTH)
        || request
            .headers
            .contains_key(http::header::TRANSFER_ENCODING);
    request.remove_header(&http::header::TRANSFER_ENCODING);
    if had_body || body_len > 0 {
        // A number's text is a valid header value.
        let _ = request.insert_header(http::header::CONTENT_LENGTH, body_len.to_string());
    }
}

/// Resolves when an HTTP/1 client closes its connection (or sends more) while its answer is
/// awaited or relayed; never for HTTP/2, where a reset stream fails the next write.
async fn client_gone(session: &mut Session) -> Box<Error> {
    if session.downstream_session.is_http2() {
        return std::future::pending().await;
    }
    match session.downstream_session.read_body_or_idle(true).await {
        Err(e) => e.into_down(),
        Ok(_) => Error::explain(
            ErrorType::ConnectionClosed,
            "client sent data while its answer was relayed",
        )
        .into_down(),
    }
}
