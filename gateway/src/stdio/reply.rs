//! The one place where the bridge's answers and refusals become HTTP responses.

use std::convert::Infallible;

use axum::{
    body::{Body, Bytes},
    http::{HeaderValue, StatusCode, header},
    response::Response,
};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_stream::{StreamExt as _, wrappers::ReceiverStream};

use super::{
    KEEPALIVE,
    decide::{self, CapRefusal, Kind},
    session_env::{CREDENTIAL_REQUIRED, EnvRefusal},
};

pub(super) fn json(status: StatusCode, body: &Value) -> Response {
    let mut r = Response::new(Body::from(body.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

pub(super) fn empty(status: StatusCode) -> Response {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = status;
    r
}

pub(super) fn accepted() -> Response {
    empty(StatusCode::ACCEPTED)
}

pub(super) fn method_not_allowed() -> Response {
    let mut r = empty(StatusCode::METHOD_NOT_ALLOWED);
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
    r
}

/// A JSON-RPC error with `code`.
pub(super) fn protocol(status: StatusCode, id: Value, code: i64, message: &str) -> Response {
    json(status, &decide::error_response(id, code, message))
}

/// A JSON-RPC internal error (the child is down, restarting, …).
pub(super) fn error(status: StatusCode, id: Value, message: &str) -> Response {
    protocol(status, id, decide::INTERNAL_ERROR, message)
}

pub(super) fn cap_message(route: &str, refusal: CapRefusal) -> String {
    match refusal {
        CapRefusal::Route { max } => format!(
            "the stdio route `{route}` runs {max} servers already (max_children); retry later"
        ),
        CapRefusal::Principal { max } => format!(
            "you hold {max} sessions on the stdio route `{route}` already \
             (max_children_per_principal); close one or retry later"
        ),
    }
}

/// Why a stateless request is not served: the route (or this person on it) needs a session.
pub(super) fn sessions_only(route: &str) -> String {
    format!("the stdio route `{route}` serves sessions only: initialize first")
}

/// A person's child cannot get its per-user variables: 403 [`CREDENTIAL_REQUIRED`] (a plain
/// JSON body the gateway turns into its own answer) when the person lacks the credential, a
/// JSON-RPC error with 503 when the source did not answer (the reason only logged).
pub(super) fn env_refused(route: &str, id: Value, refusal: &EnvRefusal) -> Response {
    match refusal {
        EnvRefusal::Missing => {
            tracing::info!(route = %route, "stdio child refused: the person's upstream credential is missing");
            json(
                StatusCode::FORBIDDEN,
                &serde_json::json!({
                    "error": CREDENTIAL_REQUIRED,
                    "error_description": format!(
                        "connect your account for the route `{route}` first"
                    ),
                    "route": route,
                }),
            )
        }
        EnvRefusal::Unavailable(reason) => {
            tracing::warn!(route = %route, reason = %crate::logging::untrusted(reason), "stdio child refused: per-user environment unavailable");
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                id,
                &format!(
                    "the credentials of the stdio route `{route}` are unavailable; retry later"
                ),
            )
        }
    }
}

/// 503 + `Retry-After` for a client over a cap.
pub(super) fn over_cap(route: &str, id: Value, refusal: CapRefusal) -> Response {
    let message = cap_message(route, refusal);
    let mut r = protocol(
        StatusCode::SERVICE_UNAVAILABLE,
        id,
        decide::SERVER_BUSY,
        &message,
    );
    r.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(decide::CAP_RETRY_AFTER_SECS),
    );
    r
}

fn event(msg: &Value) -> Bytes {
    Bytes::from(format!("event: message\ndata: {msg}\n\n"))
}

fn event_stream(body: Body) -> Response {
    let mut r = Response::new(body);
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// One message as an event stream.
pub(super) fn sse_once(msg: &Value) -> Response {
    event_stream(Body::from(event(msg)))
}

/// A request's answer: every message of `rx` as an event stream, or only the response as
/// JSON when the client does not accept event streams.
pub(super) async fn answer(mut rx: mpsc::Receiver<Value>, sse: bool) -> Response {
    if sse {
        let stream = ReceiverStream::new(rx).map(|msg| Ok::<_, Infallible>(event(&msg)));
        return event_stream(Body::from_stream(stream));
    }
    while let Some(msg) = rx.recv().await {
        if let Kind::Response { .. } = decide::classify(&msg) {
            return json(StatusCode::OK, &msg);
        }
    }
    error(
        StatusCode::OK,
        Value::Null,
        "the stdio server did not answer",
    )
}

/// The standalone stream of a session, with keep-alive comments.
pub(super) fn standalone(mut rx: mpsc::Receiver<Value>) -> Response {
    let (tx, out) = mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(KEEPALIVE);
        tick.tick().await;
        loop {
            let frame = tokio::select! {
                msg = rx.recv() => match msg {
                    Some(msg) => event(&msg),
                    None => break,
                },
                _ = tick.tick() => Bytes::from_static(b": keep-alive\n\n"),
                // The client left: the stream ends now, not at the next keep-alive (an open
                // stream keeps its session from being closed at its person's cap).
                () = tx.closed() => break,
            };
            if tx.send(frame).await.is_err() {
                break;
            }
        }
    });
    let stream = ReceiverStream::new(out).map(Ok::<_, Infallible>);
    event_stream(Body::from_stream(stream))
}
