//! The admission's header steps every MCP endpoint takes, a route's or a virtual server's
//! (`Endpoint`): origin → declared size → spent-IP pre-check → authenticate → the token's route
//! → one `Mcp-Method` / `Mcp-Name` line each → session binding → per-person limit →
//! sessions/streams bound; and the CORS preflight, answered without credentials.

use pingora::http::RequestHeader;

use super::principal_key;
use crate::{
    auth,
    config::normalise_origin,
    cors,
    limit::Class,
    proxy::{Gateway, Outcome, RequestCtx, mcp_headers::check_mcp_header_lines},
    reply::{Rejection, Reply},
};

/// An MCP endpoint as the header steps see it: a route or a virtual server.
#[derive(Debug, Clone, Copy)]
pub(in crate::proxy) struct Endpoint<'a> {
    /// The route's or virtual server's name (what a route-limited static token names).
    pub(in crate::proxy) name: &'a str,
    /// Its OAuth protected resource.
    pub(in crate::proxy) resource: &'a str,
    /// The foreign origins it allows (`allowed_origins`).
    pub(in crate::proxy) allowed_origins: &'a [String],
}

impl Gateway {
    /// A CORS preflight (`OPTIONS` with `Access-Control-Request-Method`) of an MCP endpoint
    /// whose foreign origins are `allowed`: answered without credentials (`None`: no
    /// preflight). Shared by routes and virtual servers.
    pub(in crate::proxy) fn preflight(
        &self,
        req: &RequestHeader,
        allowed: &[String],
    ) -> Option<Outcome> {
        if !cors::is_preflight(&req.method, &req.headers) {
            return None;
        }
        Some(
            self.check_origin(req, allowed)
                .map_or_else(Outcome::Refuse, |origin| {
                    let requested = req.headers.get("access-control-request-headers");
                    preflight(origin, requested.map(|v| v.as_bytes()))
                }),
        )
    }

    /// The header steps every MCP endpoint takes, a route's or a virtual server's: origin →
    /// declared size → spent-IP pre-check → authenticate → the token's route → one
    /// `Mcp-Method` / `Mcp-Name` line each → session binding → per-person limit →
    /// sessions/streams bound.
    pub(in crate::proxy) async fn header_steps(
        &self,
        req: &RequestHeader,
        at: Endpoint<'_>,
        ctx: &mut RequestCtx,
    ) -> Result<(), Rejection> {
        ctx.cors_origin = self.check_origin(req, at.allowed_origins)?;
        check_declared_size(req, self.settings.admission.max_body_bytes)?;
        self.refuse_spent_ip(ctx)?;
        let principal =
            (self.authenticate_counting_failures(req, (at.name, at.resource), ctx)).await?;
        if auth::check_route(&principal, at.name, at.resource).is_err() {
            ctx.principal = Some(principal);
            return Err(Rejection::RouteForbidden);
        }
        ctx.principal_key = principal_key(&principal);
        ctx.person_key = principal.person_key();
        ctx.principal = Some(principal);
        check_mcp_header_lines(req)?;
        self.check_session(req, ctx).await?;
        ctx.rate = self.limit(Class::Mcp, &ctx.person_key).await?;
        self.check_open(req, ctx).await
    }

    /// Origin: absent passes (non-browser clients); present must be the gateway's own or one
    /// the route allows. Returns the origin to answer with CORS headers (allowed foreign ones
    /// only).
    pub(super) fn check_origin(
        &self,
        req: &RequestHeader,
        allowed: &[String],
    ) -> Result<Option<String>, Rejection> {
        let Some(value) = req.headers.get(http::header::ORIGIN) else {
            return Ok(None);
        };
        let origin = value
            .to_str()
            .ok()
            .and_then(normalise_origin)
            .ok_or(Rejection::OriginForbidden)?;
        if allowed.contains(&origin) {
            Ok(Some(origin))
        } else if self.settings.own_origins.contains(&origin) {
            Ok(None)
        } else {
            Err(Rejection::OriginForbidden)
        }
    }

    /// Before any credential lookup: a client IP whose unauthenticated budget was refused a
    /// moment ago is refused again from memory (nothing charged, no token store or redis
    /// touched), whatever credential it sends, until its `Retry-After` has passed.
    fn refuse_spent_ip(&self, ctx: &RequestCtx) -> Result<(), Rejection> {
        let limits = &self.settings.limits;
        if !limits.enabled {
            return Ok(());
        }
        let policy = limits.policy(Class::Unauthenticated);
        let key = format!("{}:{}", Class::Unauthenticated.name(), ctx.ip_key());
        match self.limiter.peek(&key, policy) {
            None => Ok(()),
            Some(decision) => Err(Rejection::RateLimited {
                class: Class::Unauthenticated,
                policy,
                decision,
                oauth: false,
            }),
        }
    }
}

/// The answer to a CORS preflight of `/mcp` whose origin passed: 204, with the CORS headers
/// for an allowed foreign origin (same-origin pages need no preflight, nor CORS headers).
fn preflight(origin: Option<String>, requested: Option<&[u8]>) -> Outcome {
    let reply = match origin {
        Some(origin) => cors::preflight_headers(&origin, requested)
            .into_iter()
            .fold(Reply::empty(204), |reply, (name, value)| {
                reply.header(name, value)
            }),
        None => Reply::empty(204).header("allow", cors::ALLOW_METHODS),
    };
    Outcome::Answer(reply)
}

/// A declared body over the limit is refused before it is read (also with
/// `Expect: 100-continue`: the refusal replaces the 100).
fn check_declared_size(req: &RequestHeader, limit: u64) -> Result<(), Rejection> {
    let declared = req
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(n) if n > limit => Err(Rejection::PayloadTooLarge { limit }),
        _ => Ok(()),
    }
}
