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
use serde_json::{Value, json};

use super::{
    AUTH_KIND_HEADER, CLIENT_HEADER, GATEWAY_AUTH_KIND, INIT_TIMEOUT, SESSION_HEADER,
    SUBJECT_HEADER,
    children::{Session, Shared, short},
    decide::{self, Kind},
    identity::{self, Caller},
    reply,
};

impl Shared {
    /// `initialize` without a session: caps, a new child, its answer with a fresh session id.
    async fn open_session(
        &self,
        msg: &Value,
        id: Value,
        headers: &HeaderMap,
        sse: bool,
    ) -> Response {
        // The gateway's own session (its tool catalog, a client of every route for the
        // policy) is left out of the caps: `max_children` bounds the clients' children.
        let principal = person(headers);
        // The person's own variables (none for the gateway's session), then who calls: the
        // child learns its caller from its environment.
        let per_user = match self.per_user_env(principal.as_deref()).await {
            Ok(vars) => vars,
            Err(refusal) => return reply::env_refused(&self.spec.route, id, &refusal),
        };
        let caller = Caller::from_headers(headers).env();
        let session_id = format!("{:032x}", rand::random::<u128>());
        let params = msg.get("params").cloned().unwrap_or_else(|| json!({}));
        let (conn, ready) = {
            let mut children = self.lock();
            if let Err(refusal) = self.make_room(&mut children, principal.as_deref()) {
                drop(children);
                return reply::over_cap(&self.spec.route, id, refusal);
            }
            let env = |base| identity::session_env(base, per_user, caller);
            let Some((conn, ready)) = self.start_conn(Some(params), false, env) else {
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
            Ok(answer) if answer.get("result").is_some() => answer,
            Ok(mut refused) => {
                self.forget(&session_id, &conn);
                decide::restore_id(&mut refused, id);
                return reply::json(StatusCode::OK, &refused);
            }
            Err(message) => {
                self.forget(&session_id, &conn);
                return reply::error(StatusCode::BAD_GATEWAY, id, &message);
            }
        };
        decide::restore_id(&mut answer, id);
        tracing::info!(route = %self.spec.route, session = %short(&session_id), pid = conn.pid(), "stdio session opened");
        let mut response = if sse {
            reply::sse_once(&answer)
        } else {
            reply::json(StatusCode::OK, &answer)
        };
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

/// The caller on a client message to a child: a request gets
/// `params._meta["dev.pforte/identity"]` from the gateway's headers, a notification loses a
/// client-sent one (a server reads the key as the gateway's word).
fn pass_identity(msg: &mut Value, headers: &HeaderMap) {
    match decide::classify(msg) {
        Kind::Request { .. } => identity::stamp(msg, &Caller::from_headers(headers).meta()),
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
    let Ok(mut msg) = serde_json::from_slice::<Value>(&body) else {
        return reply::protocol(
            StatusCode::BAD_REQUEST,
            Value::Null,
            -32700,
            "the body is not one JSON-RPC message",
        );
    };
    let sse = decide::wants_event_stream(header_str(&headers, header::ACCEPT.as_str()));
    pass_identity(&mut msg, &headers);
    let kind = decide::classify(&msg);
    let id = match &kind {
        Kind::Request { id, .. } => (*id).clone(),
        _ => Value::Null,
    };
    if let Some(session) = header_str(&headers, SESSION_HEADER) {
        let Some(conn) = bridge.session(session) else {
            return reply::protocol(StatusCode::NOT_FOUND, id, -32001, "session not found");
        };
        conn.touch(Instant::now());
        return match kind {
            Kind::Request { .. } => match conn.request(msg, sse) {
                Ok(rx) => reply::answer(rx, sse).await,
                Err(message) => reply::error(StatusCode::OK, id, &message),
            },
            Kind::Notification { .. } | Kind::Response { .. } => {
                conn.send(msg);
                reply::accepted()
            }
            Kind::Invalid => reply::protocol(
                StatusCode::BAD_REQUEST,
                id,
                -32600,
                "not a JSON-RPC message",
            ),
        };
    }
    match kind {
        Kind::Request {
            method: "initialize",
            ..
        } => bridge.open_session(&msg, id, &headers, sse).await,
        // Stateless (MCP 2026-07-28, `server/discover` among them): the child answers itself.
        // Pool children are shared, so they get no one's own variables: a person who needs
        // some (or lacks them) is sent to a session.
        Kind::Request { .. } => {
            match bridge.per_user_env(person(&headers).as_deref()).await {
                Ok(vars) if vars.is_empty() => {}
                Ok(_) => {
                    let message = reply::sessions_only(&bridge.spec.route);
                    return reply::error(StatusCode::BAD_REQUEST, id, &message);
                }
                Err(refusal) => return reply::env_refused(&bridge.spec.route, id, &refusal),
            }
            let conn = match bridge.pool_conn().await {
                Ok(conn) => conn,
                Err((status, message)) => return reply::error(status, id, &message),
            };
            conn.touch(Instant::now());
            match conn.request(msg, sse) {
                Ok(rx) => reply::answer(rx, sse).await,
                Err(message) => reply::error(StatusCode::OK, id, &message),
            }
        }
        // Nothing is waiting for a notification or response outside a session.
        Kind::Notification { .. } | Kind::Response { .. } => reply::accepted(),
        Kind::Invalid => reply::protocol(
            StatusCode::BAD_REQUEST,
            id,
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
        return reply::protocol(
            StatusCode::NOT_FOUND,
            Value::Null,
            -32001,
            "session not found",
        );
    };
    conn.touch(Instant::now());
    reply::standalone(conn.open_standalone())
}

pub(super) async fn delete_mcp(State(bridge): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let Some(session) = header_str(&headers, SESSION_HEADER) else {
        return reply::protocol(
            StatusCode::BAD_REQUEST,
            Value::Null,
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
        None => reply::protocol(
            StatusCode::NOT_FOUND,
            Value::Null,
            -32001,
            "session not found",
        ),
    }
}
