//! A member's answer read as it arrives (issue 42 point 3): a request on a member session whose
//! answer is an event stream is handed on event by event (so a virtual server relays the
//! member's notifications and requests to its client while the call runs), each event at most
//! `max_answer_bytes`, the stream ended after the member's read timeout without a byte; and a
//! client's answer to a member's request POSTed back on that member session.

use std::{collections::VecDeque, time::Duration};

use serde_json::Value;

use super::{
    Catalog, CatalogError, PROTOCOL_HEADER, PROTOCOL_VERSION, SESSION_HEADER,
    member::{Extra, answered, is_event_stream},
    sse,
};

/// A member's answer to one request: one JSON message, or an event stream.
#[derive(Debug)]
pub(crate) enum MemberAnswer {
    /// The JSON body.
    Whole(Value),
    /// The event stream, read event by event.
    Events(Box<MemberEvents>),
}

/// A member's event stream, read event by event.
#[derive(Debug)]
pub(crate) struct MemberEvents {
    response: reqwest::Response,
    reader: sse::EventReader,
    /// Events read but not yet handed on.
    ready: VecDeque<Vec<u8>>,
    /// The longest wait for a byte.
    idle: Duration,
    ended: bool,
}

impl MemberEvents {
    /// The data of the next event (the member's bytes); `None` once the stream ended.
    pub(crate) async fn next(&mut self) -> Result<Option<Vec<u8>>, CatalogError> {
        loop {
            if let Some(data) = self.ready.pop_front() {
                return Ok(Some(data));
            }
            if self.ended {
                return Ok(None);
            }
            let chunk = tokio::time::timeout(self.idle, self.response.chunk())
                .await
                .map_err(|_| idle(self.idle))??;
            match chunk {
                Some(chunk) => self.ready.extend(self.reader.push(&chunk)?),
                None => {
                    self.ended = true;
                    self.ready.extend(self.reader.finish()?);
                }
            }
        }
    }

    /// Reads on to the JSON-RPC response with `id` (what else the member sends is dropped).
    pub(crate) async fn response(mut self: Box<Self>, id: &Value) -> Result<Value, CatalogError> {
        while let Some(data) = self.next().await? {
            if let Ok(v) = serde_json::from_slice::<Value>(&data)
                && v.get("id") == Some(id)
                && (v.get("result").is_some() || v.get("error").is_some())
            {
                return Ok(v);
            }
        }
        Err(CatalogError::Protocol(format!(
            "the stream ended without response {id}"
        )))
    }
}

/// The error of a wait for a member's byte that lasted `d`.
fn idle(d: Duration) -> CatalogError {
    CatalogError::Protocol(format!("no byte from the member in {} ms", d.as_millis()))
}

impl Catalog {
    /// One JSON-RPC request (`body`) on a member session: the member's answer as it comes
    /// (`timeout` for its head and between bytes), and the session id its answer carried.
    pub(crate) async fn member_send(
        &self,
        session: Option<&str>,
        body: Vec<u8>,
        extra: &Extra,
        timeout: Duration,
    ) -> Result<(MemberAnswer, Option<String>), CatalogError> {
        let request = self.member_post(session, body, extra)?;
        let mut response = tokio::time::timeout(timeout, request.send())
            .await
            .map_err(|_| idle(timeout))??;
        let new_session = answered(&response, session)?;
        let max = self.opts.max_answer_bytes;
        let answer = if is_event_stream(&response) {
            MemberAnswer::Events(Box::new(MemberEvents {
                response,
                reader: sse::EventReader::new(max),
                ready: VecDeque::new(),
                idle: timeout,
                ended: false,
            }))
        } else {
            let read = pforte_outbound::read_capped(&mut response, max);
            let bytes = tokio::time::timeout(timeout, read)
                .await
                .map_err(|_| idle(timeout))??;
            let value = serde_json::from_slice(&bytes)
                .map_err(|e| CatalogError::Protocol(e.to_string()))?;
            MemberAnswer::Whole(value)
        };
        Ok((answer, new_session))
    }

    /// The event stream of member session `session` (`GET`, with `extra`): what the member
    /// sends outside a call; ended after `stream_idle` without a byte.
    pub(crate) async fn member_listen(
        &self,
        session: &str,
        extra: &Extra,
    ) -> Result<Box<MemberEvents>, CatalogError> {
        let mut request = self
            .http
            .request(http::Method::GET, &self.target)?
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .header(SESSION_HEADER, session)
            .header(PROTOCOL_HEADER, PROTOCOL_VERSION);
        if let Some((name, value)) = &self.opts.header {
            request = request.header(name, value);
        }
        for (name, value) in extra {
            request = request.header(name, value);
        }
        let idle = self.opts.stream_idle;
        let response = tokio::time::timeout(self.opts.request_timeout, request.send())
            .await
            .map_err(|_| self::idle(self.opts.request_timeout))??;
        if !response.status().is_success() || !is_event_stream(&response) {
            return Err(CatalogError::Status(response.status()));
        }
        Ok(Box::new(MemberEvents {
            response,
            reader: sse::EventReader::new(self.opts.max_answer_bytes),
            ready: VecDeque::new(),
            idle,
            ended: false,
        }))
    }

    /// A client's answer (`body`, a JSON-RPC response) to the member's request, POSTed on the
    /// member session `session`: whether the member took it.
    pub(crate) async fn member_reply(
        &self,
        session: Option<&str>,
        body: Vec<u8>,
        extra: &Extra,
        timeout: Duration,
    ) -> Result<(), CatalogError> {
        let response = self
            .member_post(session, body, extra)?
            .timeout(timeout)
            .send()
            .await?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(CatalogError::Status(response.status()))
        }
    }
}
