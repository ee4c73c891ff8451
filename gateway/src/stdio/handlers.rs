//! The bridge's HTTP endpoints on its socket: `POST /mcp` (in a session, opening one with
//! `initialize`, or stateless through the pool), `GET /mcp` (a session's standalone stream)
//! and `DELETE /mcp`.

use std::{sync::Arc, time::Instant};

use axum::{
    body::Bytes,
    extract::State,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::Response,
};

use super::{
    AUTH_KIND_HEADER, CLIENT_HEADER, GATEWAY_AUTH_KIND, INIT_TIMEOUT, SESSION_HEADER,
    SUBJECT_HEADER,
    children::{Session, Shared, short},
    decide::{self, Framing, Kind, NULL_ID},
    identity::{self, Caller},
    reply,
};
use crate::raw_json;

impl Shared {
    /// `initialize` without a session: caps, a new child, its answer with a fresh session id.
    async fn open_session(
        &self,
        msg: Vec<u8>,
        id: &[u8],
        headers: &HeaderMap,
        framing: Framing,
    ) -> Response {
        // The gateway's own session (its tool catalog, a client of every route for the
        // policy) is left out of the caps: `max_children` bounds the clients' children.
        let principal = person(headers);
        // The person's own variables (none for the gateway's session), then who calls: the
        // child learns its caller from its environment.
        let lent_by = lent_by(headers);
        let per_user = match self
            .per_user_env(principal.as_deref().or(lent_by.as_deref()))
            .await
        {
            Ok(vars) => vars,
            Err(refusal) => return reply::env_refused(&self.spec.route, id, &refusal),
        };
        let caller = Caller::from_headers(headers).env();
        let session_id = format!("{:032x}", rand::random::<u128>());
        let (conn, ready) = {
            let mut children = self.lock();
            if let Err(refusal) = self.make_room(&mut children, principal.as_deref()) {
                drop(children);
                return reply::over_cap(&self.spec.route, id, refusal);
            }
            let env = |base| identity::session_env(base, per_user, caller);
            let Some((conn, ready)) = self.start_conn(Some(msg), false, env) else {
                return reply::error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    id,
                    "the stdio bridge is not running",
                );
            };
            children
                .sessions
                .insert(session_id.clone(), Session::new(principal, conn.clone()));
            (conn, ready)
        };
        let failure = match tokio::time::timeout(INIT_TIMEOUT, ready).await {
            Ok(Ok(Ok(answer))) => Ok(answer),
            Ok(Ok(Err(message))) => Err(message),
            Ok(Err(_)) => Err("the stdio server stopped".to_owned()),
            Err(_) => Err("the stdio server did not answer initialize in time".to_owned()),
        };
        let mut answer = match failure {
            Ok(answer) if answer.ok => answer.text,
            Ok(refused) => {
                self.forget(&session_id, &conn);
                let mut text = refused.text;
                decide::restore_id(&mut text, id);
                return reply::json_text(StatusCode::OK, text);
            }
            Err(message) => {
                self.forget(&session_id, &conn);
                return reply::error(StatusCode::BAD_GATEWAY, id, &message);
            }
        };
        decide::restore_id(&mut answer, id);
        tracing::info!(route = %self.spec.route, session = %short(&session_id), pid = conn.pid(), "stdio session opened");
        let mut response = reply::single(answer, framing);
        if let Ok(v) = HeaderValue::from_str(&session_id) {
            response.headers_mut().insert(SESSION_HEADER, v);
        }
        response
    }
}

/// Whom a session counts against and whose per-user variables its child gets: the person
/// (`auth::person_key`). An OAuth user counts whatever the client, so registering more clients
/// buys no more children; a static token is its own person; any other caller by subject and
/// client. `None` for the gateway's own session (its tool catalog), which is outside the caps.
fn person(headers: &HeaderMap) -> Option<String> {
    let kind = header_str(headers, AUTH_KIND_HEADER);
    let subject = header_str(headers, SUBJECT_HEADER).unwrap_or_default();
    let client = header_str(headers, CLIENT_HEADER).unwrap_or_default();
    let key = |kind| crate::auth::person_key(kind, subject, client);
    match kind {
        Some(GATEWAY_AUTH_KIND) => None,
        Some("oauth") => Some(key(crate::auth::AuthKind::OAuth)),
        Some("static") => Some(key(crate::auth::AuthKind::Static)),
        _ => Some(format!(
            "{}\n{subject}\n{}",
            kind.unwrap_or_default(),
            header_str(headers, CLIENT_HEADER).unwrap_or_default()
        )),
    }
}

/// On the gateway's own session (its tool catalog on a route whose children need each
/// person's variables): the person whose variables it borrows (`x-pforte-lent-by`), if any.
fn lent_by(headers: &HeaderMap) -> Option<String> {
    if header_str(headers, AUTH_KIND_HEADER) != Some(GATEWAY_AUTH_KIND) {
        return None;
    }
    header_str(headers, crate::forward::header::LENT_BY).and_then(identity::percent_decode)
}

/// The caller on a client message to a child: a request gets
/// `params._meta["dev.pforte/identity"]` from the gateway's headers, a notification loses a
/// client-sent one (a server reads the key as the gateway's word). Every other byte is kept.
fn pass_identity(msg: &mut Vec<u8>, kind: &Kind, headers: &HeaderMap) {
    match kind {
        Kind::Request { .. } => {
            let meta = Caller::from_headers(headers).meta().to_string();
            identity::stamp(msg, meta.as_bytes());
        }
        Kind::Notification { .. } => identity::unstamp(msg),
        Kind::Response { .. } | Kind::Invalid => {}
    }
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

pub(super) async fn post_mcp(
    State(bridge): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !raw_json::is_valid(&body) {
        return reply::protocol(
            StatusCode::BAD_REQUEST,
            NULL_ID,
            -32700,
            "the body is not one JSON-RPC message",
        );
    }
    // The message goes on as the client wrote it, but for the identity and the id.
    let mut msg = Vec::from(body);
    let framing = decide::framing(header_str(&headers, header::ACCEPT.as_str()));
    let kind = decide::classify(&msg);
    pass_identity(&mut msg, &kind, &headers);
    let id = match &kind {
        Kind::Request { id, .. } => id.clone(),
        _ => NULL_ID.to_vec(),
    };
    if let Some(session) = header_str(&headers, SESSION_HEADER) {
        let Some(conn) = bridge.session(session) else {
            return reply::protocol(StatusCode::NOT_FOUND, &id, -32001, "session not found");
        };
        conn.touch(Instant::now());
        return match kind {
            Kind::Request { .. } => match conn.request(msg, framing.stream) {
                Ok(rx) => reply::answer(rx, framing).await,
                Err(message) => reply::error(StatusCode::OK, &id, &message),
            },
            Kind::Notification { .. } | Kind::Response { .. } => {
                conn.send(msg);
                reply::accepted()
            }
            Kind::Invalid => reply::protocol(
                StatusCode::BAD_REQUEST,
                &id,
                -32600,
                "not a JSON-RPC message",
            ),
        };
    }
    match kind {
        Kind::Request { method, .. } if method == "initialize" => {
            bridge.open_session(msg, &id, &headers, framing).await
        }
        // Stateless (MCP 2026-07-28, `server/discover` among them): the child answers itself.
        // Pool children are shared, so they get no one's own variables: a person who needs
        // some (or lacks them) is sent to a session.
        Kind::Request { .. } => {
            match bridge.per_user_env(person(&headers).as_deref()).await {
                Ok(vars) if vars.is_empty() => {}
                Ok(_) => {
                    let message = reply::sessions_only(&bridge.spec.route);
                    return reply::error(StatusCode::BAD_REQUEST, &id, &message);
                }
                Err(refusal) => return reply::env_refused(&bridge.spec.route, &id, &refusal),
            }
            let conn = match bridge.pool_conn().await {
                Ok(conn) => conn,
                Err((status, message)) => return reply::error(status, &id, &message),
            };
            conn.touch(Instant::now());
            match conn.request(msg, framing.stream) {
                Ok(rx) => reply::answer(rx, framing).await,
                Err(message) => reply::error(StatusCode::OK, &id, &message),
            }
        }
        // Nothing is waiting for a notification or response outside a session.
        Kind::Notification { .. } | Kind::Response { .. } => reply::accepted(),
        Kind::Invalid => reply::protocol(
            StatusCode::BAD_REQUEST,
            &id,
            -32600,
            "not a JSON-RPC message",
        ),
    }
}

pub(super) async fn get_mcp(State(bridge): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let Some(session) = header_str(&headers, SESSION_HEADER) else {
        return reply::method_not_allowed();
    };
    let Some(conn) = bridge.session(session) else {
        return reply::protocol(StatusCode::NOT_FOUND, NULL_ID, -32001, "session not found");
    };
    conn.touch(Instant::now());
    reply::standalone(conn.open_standalone())
}

pub(super) async fn delete_mcp(State(bridge): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let Some(session) = header_str(&headers, SESSION_HEADER) else {
        return reply::protocol(
            StatusCode::BAD_REQUEST,
            NULL_ID,
            -32600,
            "Mcp-Session-Id is required",
        );
    };
    let removed = bridge.lock().sessions.remove(session);
    match removed {
        Some(s) => {
            tracing::info!(route = %bridge.spec.route, session = %short(session), "stdio session deleted");
            tokio::spawn(async move { s.conn.stop_and_wait().await });
            reply::empty(StatusCode::OK)
        }
        None => reply::protocol(StatusCode::NOT_FOUND, NULL_ID, -32001, "session not found"),
    }
}
