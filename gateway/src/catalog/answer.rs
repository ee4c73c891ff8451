//! The catalog's answers to the requests its upstream server sends it (`roots/list`, `ping`,
//! an elicitation, sampling), and the client capabilities it declares at `initialize`.

use serde_json::{Value, json};

use super::{Catalog, CatalogError};

/// The client capabilities the catalog declares at `initialize`: those a server may list
/// tools for (roots, sampling, elicitation in both modes).
pub(super) fn client_capabilities() -> Value {
    json!({
        "roots": { "listChanged": false },
        "sampling": {},
        "elicitation": { "form": {}, "url": {} },
    })
}

/// The catalog's answer to a request the server sends it (`None`: `message` is no request):
/// no roots, `ping` answered, an elicitation declined, sampling and anything else refused.
/// The catalog never calls a tool, so nothing it does waits on these.
pub(crate) fn answer_server_request(message: &Value) -> Option<Value> {
    let method = message.get("method")?.as_str()?;
    let id = message.get("id")?.clone();
    if id.is_null() {
        return None;
    }
    let outcome = match method {
        "roots/list" => Ok(json!({ "roots": [] })),
        "ping" => Ok(json!({})),
        "elicitation/create" => Ok(json!({ "action": "decline" })),
        "sampling/createMessage" => Err((-1, "the gateway's tool catalog does not sample")),
        _ => Err((-32601, "method not found")),
    };
    Some(match outcome {
        Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
        Err((code, message)) => {
            json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
        }
    })
}

impl Catalog {
    /// Answers `data` if it is a request of the server's (`roots/list`, `ping`, …) on
    /// `session`; anything else is left alone. Best effort: a failed answer is the server's
    /// timeout.
    pub(super) async fn answer(&self, session: &str, data: &[u8]) {
        let Ok(message) = serde_json::from_slice::<Value>(data) else {
            return;
        };
        let Some(reply) = answer_server_request(&message) else {
            return;
        };
        let sent = match self.post(Some(session), &reply) {
            Ok(request) => request.send().await.map(drop).map_err(CatalogError::from),
            Err(e) => Err(e),
        };
        if let Err(e) = sent {
            tracing::debug!(error = %e, "tool catalog: answering the server's request failed");
        }
    }
}
