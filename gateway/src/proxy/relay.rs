//! The lean path for long event streams: one `GET` on an MCP route, served on a pingora HTTP/1
//! session of its own rather than through pingora's HTTP application. The request runs through
//! the same phases as every other (`request_filter`, which admits it and relays the answer
//! through `exchange.rs`, then `logging`; errors through `fail_to_proxy`); what differs is only
//! what is held while the stream stays open: this future, the client's HTTP/1 session and the
//! upstream connection's small reader (`wire.rs`), no more (docs/performance.md, "Long
//! streams"). `runtime/http1.rs` decides which requests come here.

use bytes::BytesMut;
use pingora::{
    protocols::{Stream, http::ReusableHttpStream},
    proxy::{ProxyHttp, Session},
};

use super::Gateway;
use crate::reply::Rejection;

impl Gateway {
    /// Serves the request whose head is `head` (read by the connection loop) on `stream`; the
    /// stream back (with any bytes of a next request read past this one) when the connection
    /// may carry another request.
    pub(crate) async fn relay(&self, stream: Stream, head: BytesMut) -> Option<ReusableHttpStream> {
        let mut session = Session::new_h1(stream);
        // The head's buffer, sized for reading, would be kept for the stream's life: the
        // session gets a copy of the head's size, and the buffer goes now.
        let exact = BytesMut::from(&head[..]);
        drop(head);
        session.downstream_session.set_pipelined_prefix(exact);
        session
            .downstream_session
            .set_keepalive(Some(super::FIRST_KEEPALIVE_SECS));
        let read = Box::pin(session.downstream_session.read_request()).await;
        let mut ctx = self.new_ctx();
        match read {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => {
                // A head pingora refuses (two `Host` lines, say) is answered as pingora's own
                // loop answers it, not dropped.
                tracing::debug!(request_id = %ctx.request_id, error = %e, "request head refused");
                if matches!(e.etype(), pingora::ErrorType::InvalidHTTPHeader) {
                    session.set_keepalive(None);
                    let reply = self.refusal(Rejection::BadRequest, &mut ctx);
                    let _ = Box::pin(crate::reply::write(&mut session, reply, ctx.framing())).await;
                }
                return None;
            }
        }
        match self.request_filter(&mut session, &mut ctx).await {
            Ok(_) => {
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
}
