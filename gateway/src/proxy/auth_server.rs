//! The bridge to the authorization server: a request for one of its paths is read whole
//! (bounded), rate limited per client IP when it writes, handed to its router with the
//! resolved client IP, and the router's answer is passed to the client as it is.

use pingora::{Error, ErrorType, Result, proxy::Session};

use crate::{limit::Class, oauth, reply::Rejection};

use super::{Gateway, Outcome, RequestCtx};

impl Gateway {
    pub(super) async fn auth_server(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Result<Outcome> {
        if session.req_header().method == http::Method::POST {
            match self.limit(Class::OAuth, &ctx.ip_key()).await {
                Ok(rate) => ctx.rate = rate,
                Err(rejection) => return Ok(Outcome::Refuse(rejection)),
            }
        }
        let Some(body) = read_body(session).await? else {
            let limit = oauth::MAX_AS_BODY as u64;
            return Ok(Outcome::Refuse(Rejection::PayloadTooLarge { limit }));
        };
        let req = session.req_header();
        let mut builder = http::Request::builder()
            .method(req.method.clone())
            .uri(req.uri.clone());
        for (name, value) in &req.headers {
            builder = builder.header(name, value);
        }
        let request = builder
            .body(body)
            .map_err(|e| Error::explain(ErrorType::InvalidHTTPHeader, e.to_string()))?;
        // The resolved client (socket, or X-Forwarded-For from a trusted proxy), never the raw
        // peer: behind a proxy the peer is the proxy, and every user would share its throttles.
        Ok(Outcome::Passed(
            self.oauth.call(request, ctx.client_ip).await,
        ))
    }
}

/// The request body, whole; `None` when it is larger than the authorization server takes.
async fn read_body(session: &mut Session) -> Result<Option<bytes::Bytes>> {
    let mut body = bytes::BytesMut::new();
    while let Some(chunk) = session.read_request_body().await? {
        if body.len() + chunk.len() > oauth::MAX_AS_BODY {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body.freeze()))
}
