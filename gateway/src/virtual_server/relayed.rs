//! A member's messages relayed during a call through a virtual server (issue 42 point 3) — pure:
//! what each event of the member's stream is for the client (the call's response, a request of
//! the member's, anything else), and a message with only its `id`'s bytes replaced.

use serde_json::Value;

use crate::raw_json;

/// What one event of a member's stream is, for the call with the client's id `call` — pure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// The call's response: the stream's last event.
    Response,
    /// A request of the member's, with its id as written.
    Request(Vec<u8>),
    /// A notification, or anything else: relayed as it is.
    Other,
}

/// Classifies `data` (one event's JSON text) for the call with id `call` — pure.
pub(crate) fn classify(data: &[u8], call: &Value) -> Event {
    let Ok(message) = serde_json::from_slice::<Value>(data) else {
        return Event::Other;
    };
    let answers = message.get("result").is_some() || message.get("error").is_some();
    match (message.get("id"), message.get("method")) {
        (Some(id), None) if answers && id == call => Event::Response,
        (Some(id), Some(_)) if !id.is_null() => raw_json::get(data, raw_json::trimmed(data), "id")
            .and_then(|at| data.get(at))
            .map_or(Event::Other, |id| Event::Request(id.to_vec())),
        _ => Event::Other,
    }
}

/// `data` (a JSON-RPC message) with its top-level `id` replaced by the JSON text `id`, every
/// other byte as it was — pure; `None` when it has no `id`.
pub(crate) fn with_id(data: &[u8], id: &[u8]) -> Option<Vec<u8>> {
    if !raw_json::is_valid(data) {
        return None;
    }
    let at = raw_json::get(data, raw_json::trimmed(data), "id")?;
    let mut edits = raw_json::Edits::default();
    edits.replace(at, id.to_vec());
    let mut out = data.to_vec();
    edits.apply(&mut out);
    Some(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn events_are_the_response_a_request_or_anything_else() {
        let call = json!(5);
        assert_eq!(
            classify(br#"{"jsonrpc":"2.0","id":5,"result":{}}"#, &call),
            Event::Response
        );
        assert_eq!(
            classify(br#"{"jsonrpc":"2.0","id":5,"error":{"code":1}}"#, &call),
            Event::Response
        );
        assert_eq!(
            classify(br#"{"jsonrpc":"2.0","id":6,"result":{}}"#, &call),
            Event::Other,
            "another call's response is not this one's end"
        );
        assert_eq!(
            classify(
                br#"{"jsonrpc":"2.0","id": "s-1" ,"method":"sampling/createMessage"}"#,
                &call
            ),
            Event::Request(b"\"s-1\"".to_vec())
        );
        assert_eq!(
            classify(
                br#"{"jsonrpc":"2.0","method":"notifications/progress"}"#,
                &call
            ),
            Event::Other
        );
        assert_eq!(classify(b"not json", &call), Event::Other);
    }

    #[test]
    fn only_the_id_changes() {
        let data = br#"{"jsonrpc":"2.0", "id" : 17 ,"method":"elicitation/create","params":{"n":1.0,"id":17}}"#;
        assert_eq!(
            with_id(data, b"42").unwrap(),
            br#"{"jsonrpc":"2.0", "id" : 42 ,"method":"elicitation/create","params":{"n":1.0,"id":17}}"#
        );
        assert_eq!(with_id(br#"{"method":"x"}"#, b"1"), None);
    }
}
