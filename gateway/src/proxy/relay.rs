//! The lean path for long event streams: one admitted `GET` on an MCP route, relayed from the
//! upstream to the client without pingora's proxy state machine. The request runs through the
//! same phases as every other (`request_filter` … `logging`, the `ProxyHttp` methods of
//! [`Gateway`]), so admission, identity headers, the answer's rewrite, metrics, audit and the
//! request line are the proxy's own; what differs is only what is held while the stream stays
//! open: this future, the client's HTTP/1 session and the upstream connection's small reader
//! (`relay/wire.rs`), no more
//! (docs/performance.md, "Long streams"). `runtime/http1.rs` decides which requests come here.

use bytes::BytesMut;
use pingora::{
    Error, ErrorType, Result,
    connectors::TransportConnector,
    http::ResponseHeader,
    protocols::{Stream, http::ReusableHttpStream},
    proxy::{ProxyHttp, Session},
};

use super::{Gateway, RequestCtx};

mod wire;

use wire::Wire;

/// How many connects a request may try (the first and the retries a balanced route asks for);
/// pingora's own proxy allows the same.
const MAX_CONNECT_TRIES: usize = 3;

impl Gateway {
    /// Serves the request whose head is `head` (read by the connection loop) on `stream`; the
    /// stream back (with any bytes of a next request read past this one) when the connection
    /// may carry another request.
    pub(crate) async fn relay(
        &self,
        stream: Stream,
        head: BytesMut,
        upstreams: &TransportConnector,
    ) -> Option<ReusableHttpStream> {
        let mut session = Session::new_h1(stream);
        // The head's buffer, sized for reading, would be kept for the stream's life: the
        // session gets a copy of the head's size, and the buffer goes now.
        let exact = BytesMut::from(&head[..]);
        drop(head);
        session.downstream_session.set_pipelined_prefix(exact);
        session
            .downstream_session
            .set_keepalive(Some(super::FIRST_KEEPALIVE_SECS));
        match Box::pin(session.downstream_session.read_request()).await {
            Ok(true) => {}
            Ok(false) | Err(_) => return None,
        }
        let mut ctx = self.new_ctx();
        match self.relay_phases(&mut session, &mut ctx, upstreams).await {
            Ok(()) => {
                self.logging(&mut session, None, &mut ctx).await;
                drop(ctx);
                let finish = Box::pin(session.downstream_session.finish());
                finish.await.ok().flatten()
            }
            Err(e) => {
                self.fail_to_proxy(&mut session, &e, &mut ctx).await;
                if !self.suppress_error_log(&session, &ctx, &e) {
                    tracing::error!(request_id = %ctx.request_id, error = %e, "event stream failed");
                }
                self.logging(&mut session, Some(&e), &mut ctx).await;
                None
            }
        }
    }

    /// The phases in pingora's order, for a request without a body. The upstream connection
    /// serves this request only (a stream lives long; a connect is cheap beside it).
    async fn relay_phases(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        upstreams: &TransportConnector,
    ) -> Result<()> {
        if self.request_filter(session, ctx).await? {
            return Ok(());
        }
        self.request_body_filter(session, &mut None, true, ctx)
            .await?;
        // What is awaited once is boxed: its state (the connect's is 8 KiB) is not carried in
        // this future for the stream's life.
        let mut up = Box::pin(self.open_upstream(session, ctx, upstreams)).await?;
        let mut request = session.req_header().clone();
        self.upstream_request_filter(session, &mut request, ctx)
            .await?;
        up.send(&request).await.map_err(|e| e.into_up())?;
        drop(request);
        let mut answer = Box::pin(self.upstream_answer(session, &mut up)).await?;
        self.response_filter(session, &mut answer, ctx).await?;
        let done = up.is_done();
        Box::pin(session.write_response_header(answer, done))
            .await
            .map_err(|e| e.into_down())?;
        let mut ended = done;
        while !ended {
            let mut body = tokio::select! {
                body = up.body() => body.map_err(|e| e.into_up())?,
                gone = session.downstream_session.read_body_or_idle(true) => {
                    return Err(client_left(gone));
                }
            };
            ended = body.is_none() || up.is_done();
            self.response_body_filter(session, &mut body, ended, ctx)?;
            Box::pin(session.write_response_body(body, ended))
                .await
                .map_err(|e| e.into_down())?;
        }
        Ok(())
    }

    /// An upstream connection for the request, retried where a balanced route asks for it.
    async fn open_upstream(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        upstreams: &TransportConnector,
    ) -> Result<Wire> {
        let mut tries = 0;
        loop {
            tries += 1;
            let peer = self.upstream_peer(session, ctx).await?;
            match upstreams.new_stream(&*peer).await {
                Ok(stream) => return Ok(Wire::new(stream, peer.options.read_timeout)),
                Err(e) => {
                    let e = self.fail_to_connect(session, &peer, ctx, e.into_up());
                    if !e.retry() || tries >= MAX_CONNECT_TRIES {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// The upstream's answer head, or the client's leaving while it is awaited.
    async fn upstream_answer(
        &self,
        session: &mut Session,
        up: &mut Wire,
    ) -> Result<Box<ResponseHeader>> {
        tokio::select! {
            answer = up.answer() => answer.map_err(|e| e.into_up()),
            gone = session.downstream_session.read_body_or_idle(true) => Err(client_left(gone)),
        }
    }
}

/// The error for a client that closed its connection (or sent more) while its stream was open.
fn client_left(read: Result<Option<bytes::Bytes>>) -> Box<Error> {
    match read {
        Err(e) => e.into_down(),
        Ok(_) => Error::explain(
            ErrorType::ConnectionClosed,
            "client sent data while its event stream was open",
        )
        .into_down(),
    }
}
