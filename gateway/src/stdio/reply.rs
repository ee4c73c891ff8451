//! The one place where the bridge's answers and refusals become HTTP responses. A child's
//! message goes out as the bytes it wrote (its id the client's again): a JSON body, or the
//! `data` of one event between a prefix and a suffix, never copied into a frame.

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
    conn::ServerMessage,
    decide::{self, CapRefusal, Framing, NULL_ID},
    session_env::{CREDENTIAL_REQUIRED, EnvRefusal},
};

pub(super) fn json(status: StatusCode, body: &Value) -> Response {
    json_text(status, body.to_string())
}

/// A JSON body as it is.
pub(super) fn json_text(status: StatusCode, body: impl Into<Bytes>) -> Response {
    let mut r = Response::new(Body::from(body.into()));
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

/// A JSON-RPC error with `code` (`id` as the client wrote it).
pub(super) fn protocol(status: StatusCode, id: &[u8], code: i64, message: &str) -> Response {
    json_text(status, decide::error_response(id, code, message))
}

/// A JSON-RPC internal error (the child is down, restarting, …).
pub(super) fn error(status: StatusCode, id: &[u8], message: &str) -> Response {
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
pub(super) fn env_refused(route: &str, id: &[u8], refusal: &EnvRefusal) -> Response {
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
pub(super) fn over_cap(route: &str, id: &[u8], refusal: CapRefusal) -> Response {
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

const EVENT_PREFIX: &[u8] = b"event: message\ndata: ";
const EVENT_SUFFIX: &[u8] = b"\n\n";

/// One message as the frames of one event: the prefix, the message's own bytes, the suffix.
fn event(text: Bytes) -> [Bytes; 3] {
    [
        Bytes::from_static(EVENT_PREFIX),
        text,
        Bytes::from_static(EVENT_SUFFIX),
    ]
}

/// Every frame of `first` and then of `rx`'s messages, as an event stream's body.
fn events(first: ServerMessage, rx: mpsc::Receiver<ServerMessage>) -> Body {
    let messages = futures::stream::once(async { first }).chain(ReceiverStream::new(rx));
    let frames = futures::StreamExt::flat_map(messages, |msg| {
        futures::stream::iter(event(msg.text).map(Ok::<_, Infallible>))
    });
    Body::from_stream(frames)
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

/// One message as a JSON body when the client accepts it, else as an event stream.
pub(super) fn single(text: Vec<u8>, framing: Framing) -> Response {
    if framing.json {
        return json_text(StatusCode::OK, text);
    }
    let frames = event(Bytes::from(text)).map(Ok::<_, Infallible>);
    event_stream(Body::from_stream(futures::stream::iter(frames)))
}

/// A request's answer. The first message decides: the response alone goes out as one JSON
/// body when the client accepts that (a client may cap an event's size: the Python SDK at
/// 1 MiB); anything else first (progress, a server request) starts an event stream with every
/// message of `rx` when the client accepts one, else only the response is sent, as JSON.
pub(super) async fn answer(mut rx: mpsc::Receiver<ServerMessage>, framing: Framing) -> Response {
    let Some(first) = rx.recv().await else {
        return error(StatusCode::OK, NULL_ID, "the stdio server did not answer");
    };
    if first.response && framing.json {
        return json_text(StatusCode::OK, first.text);
    }
    if framing.stream {
        return event_stream(events(first, rx));
    }
    let mut next = Some(first);
    while let Some(msg) = next {
        if msg.response {
            return json_text(StatusCode::OK, msg.text);
        }
        next = rx.recv().await;
    }
    error(StatusCode::OK, NULL_ID, "the stdio server did not answer")
}

/// The standalone stream of a session, with keep-alive comments.
pub(super) fn standalone(mut rx: mpsc::Receiver<ServerMessage>) -> Response {
    let (tx, out) = mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(KEEPALIVE);
        tick.tick().await;
        'stream: loop {
            let frames = tokio::select! {
                msg = rx.recv() => match msg {
                    Some(msg) => event(msg.text).to_vec(),
                    None => break,
                },
                _ = tick.tick() => vec![Bytes::from_static(b": keep-alive\n\n")],
                // The client left: the stream ends now, not at the next keep-alive (an open
                // stream keeps its session from being closed at its person's cap).
                () = tx.closed() => break,
            };
            for frame in frames {
                if tx.send(frame).await.is_err() {
                    break 'stream;
                }
            }
        }
    });
    let stream = ReceiverStream::new(out).map(Ok::<_, Infallible>);
    event_stream(Body::from_stream(stream))
}
