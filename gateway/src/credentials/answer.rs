//! What the gateway answers, in place of the upstream, to an MCP message whose caller has no
//! working credential for the route's upstream yet: the connect URL, as a URL-mode elicitation
//! (JSON-RPC error `-32042`, MCP 2025-11-25) for a client that declared it, as a tool error
//! for a `tools/call` (Claude shows the text), else as a JSON-RPC error naming the URL. Pure.

use serde_json::{Value, json};

use crate::mcp::{Kind, Message};

/// MCP's `URLElicitationRequiredError`: the request needs the user to visit a URL first.
pub(crate) const URL_ELICITATION_REQUIRED: i64 = -32042;
/// A JSON-RPC server error (implementation-defined range): connect first, for clients that did
/// not declare URL-mode elicitation.
pub(crate) const CONNECT_REQUIRED: i64 = -32000;

/// Why the caller must visit the connect page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask {
    /// Nothing stored for this user and route.
    Connect,
    /// The stored credential stopped working (revoked or expired beyond refresh).
    Reconnect,
}

/// What to say to the caller: the route's title, the single-use connect URL, and an id for the
/// elicitation (the link's own id, so a client can tell retries of one prompt apart).
#[derive(Debug, Clone)]
pub(crate) struct Prompt<'a> {
    pub(crate) title: &'a str,
    pub(crate) url: &'a str,
    pub(crate) elicitation_id: &'a str,
    pub(crate) ask: Ask,
}

impl<'a> Prompt<'a> {
    /// The prompt for the connect link `url` of a route titled `title`: its elicitation id the
    /// link's first 16 characters after its last `=`.
    pub(crate) fn for_link(title: &'a str, url: &'a str, ask: Ask) -> Self {
        let id = url.rsplit('=').next().unwrap_or_default();
        Self {
            title,
            url,
            elicitation_id: id.get(..16).unwrap_or(id),
            ask,
        }
    }

    fn sentence(&self) -> String {
        match self.ask {
            Ask::Connect => format!(
                "{} needs your account there before it can answer. Open {} to connect it \
                 (the link works once, for a few minutes), then try again.",
                self.title, self.url
            ),
            Ask::Reconnect => format!(
                "Your connection to {} stopped working (it was revoked or has expired). Open {} \
                 to connect it again (the link works once, for a few minutes), then try again.",
                self.title, self.url
            ),
        }
    }
}

/// The JSON-RPC answer to `message` (`None`: a notification or a client's response, which the
/// gateway accepts with 202 and does not forward).
pub(crate) fn connect_answer(
    message: &Message,
    prompt: &Prompt<'_>,
    url_elicitation: bool,
) -> Option<Value> {
    if message.kind != Kind::Request {
        return None;
    }
    let id: Value = serde_json::from_str(&message.id).unwrap_or(Value::Null);
    let text = prompt.sentence();
    let answer = if url_elicitation {
        json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {
                "code": URL_ELICITATION_REQUIRED,
                "message": text,
                "data": {"elicitations": [{
                    "mode": "url",
                    "elicitationId": prompt.elicitation_id,
                    "url": prompt.url,
                    "message": text,
                }]},
            },
        })
    } else if message.method == "tools/call" {
        json!({
            "jsonrpc": "2.0",
            "id": id,
            "result": {"content": [{"type": "text", "text": text}], "isError": true},
        })
    } else {
        json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": CONNECT_REQUIRED, "message": text, "data": {"connect_url": prompt.url}},
        })
    };
    Some(answer)
}

/// The stand-in session's one tool, `connect` (its description the prompt's sentence, with the
/// link); a virtual server lists it under its member's prefix.
pub(crate) fn connect_tool(prompt: &Prompt<'_>) -> Value {
    json!({
        "name": "connect",
        "title": format!("Connect {}", prompt.title),
        "description": prompt.sentence(),
        "inputSchema": {"type": "object", "properties": {}},
        "annotations": {"readOnlyHint": true, "openWorldHint": false},
    })
}

/// The protocol versions the stand-in session speaks (MCP's dated revisions).
const PROTOCOL_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The stand-in session's answer to what a client sends before it can use the route: Pforte
/// answers `initialize` itself (the client's protocol version when Pforte knows it, else the
/// latest; the connect sentence as `instructions`), `ping`, and the lists — one tool, `connect`,
/// whose call (like any `tools/call`) gets the prompt. `None`: `message` is not one of these
/// (answer it with [`connect_answer`]). `body` is the request's JSON text.
pub(crate) fn standin_answer(message: &Message, body: &[u8], prompt: &Prompt<'_>) -> Option<Value> {
    if message.kind != Kind::Request {
        return None;
    }
    let id: Value = serde_json::from_str(&message.id).unwrap_or(Value::Null);
    let result = match message.method.as_str() {
        "initialize" => {
            let asked = serde_json::from_slice::<Value>(body)
                .ok()
                .and_then(|v| v["params"]["protocolVersion"].as_str().map(str::to_owned));
            let version = asked
                .as_deref()
                .and_then(|a| PROTOCOL_VERSIONS.iter().find(|v| **v == a))
                .or(PROTOCOL_VERSIONS.last())
                .copied()
                .unwrap_or_default();
            json!({
                "protocolVersion": version,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "pforte-connect", "title": prompt.title,
                    "version": env!("CARGO_PKG_VERSION")},
                "instructions": prompt.sentence(),
            })
        }
        "ping" => json!({}),
        "tools/list" => json!({"tools": [connect_tool(prompt)]}),
        "prompts/list" => json!({"prompts": []}),
        "resources/list" => json!({"resources": []}),
        "resources/templates/list" => json!({"resourceTemplates": []}),
        _ => return None,
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// The answer to `message` after the upstream refused a credential that Pforte has refreshed
/// since: the call did not happen; the next one carries the fresh credential.
pub(crate) fn retry_answer(message: &Message) -> Option<Value> {
    if message.kind != Kind::Request {
        return None;
    }
    let id: Value = serde_json::from_str(&message.id).unwrap_or(Value::Null);
    let text = "The upstream refused an expired credential; Pforte has refreshed it. Call again.";
    Some(if message.method == "tools/call" {
        json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": text}], "isError": true}})
    } else {
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": CONNECT_REQUIRED, "message": text}})
    })
}

/// Whether an `initialize` request's capabilities declare URL-mode elicitation
/// (`capabilities.elicitation.url`, MCP 2025-11-25). Anything unreadable: no.
pub(crate) fn declares_url_elicitation(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Init {
        params: Option<Params>,
    }
    #[derive(serde::Deserialize)]
    struct Params {
        capabilities: Option<Caps>,
    }
    #[derive(serde::Deserialize)]
    struct Caps {
        elicitation: Option<Elicitation>,
    }
    #[derive(serde::Deserialize)]
    struct Elicitation {
        url: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_slice::<Init>(body)
        .ok()
        .and_then(|i| i.params?.capabilities?.elicitation)
        .is_some_and(|e| e.url.is_some())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::mcp::inspect;

    fn prompt(ask: Ask) -> Prompt<'static> {
        Prompt {
            title: "GitHub",
            url: "https://gw.example/connect/github?link=abc",
            elicitation_id: "e1",
            ask,
        }
    }

    #[test]
    fn a_tool_call_gets_a_tool_error_with_the_url() {
        let m = inspect(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}"#)
            .unwrap();
        let a = connect_answer(&m, &prompt(Ask::Connect), false).unwrap();
        assert_eq!(a["id"], 7);
        assert_eq!(a["result"]["isError"], true);
        let text = a["result"]["content"][0]["text"].as_str().unwrap();
        assert!(
            text.contains("https://gw.example/connect/github?link=abc"),
            "{text}"
        );
        assert!(text.starts_with("GitHub needs your account"));
    }

    #[test]
    fn a_client_with_url_elicitation_gets_minus_32042() {
        let m = inspect(br#"{"jsonrpc":"2.0","id":"q","method":"tools/list"}"#).unwrap();
        let a = connect_answer(&m, &prompt(Ask::Reconnect), true).unwrap();
        assert_eq!(a["id"], "q");
        assert_eq!(a["error"]["code"], URL_ELICITATION_REQUIRED);
        let e = &a["error"]["data"]["elicitations"][0];
        assert_eq!(e["mode"], "url");
        assert_eq!(e["elicitationId"], "e1");
        assert_eq!(e["url"], "https://gw.example/connect/github?link=abc");
        assert!(e["message"].as_str().unwrap().contains("stopped working"));
    }

    #[test]
    fn other_requests_get_an_error_naming_the_url_and_notifications_nothing() {
        let m = inspect(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#).unwrap();
        let a = connect_answer(&m, &prompt(Ask::Connect), false).unwrap();
        assert_eq!(a["error"]["code"], CONNECT_REQUIRED);
        assert_eq!(
            a["error"]["data"]["connect_url"],
            "https://gw.example/connect/github?link=abc"
        );
        let n = inspect(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
        assert!(connect_answer(&n, &prompt(Ask::Connect), false).is_none());
    }

    #[test]
    fn the_stand_in_session_initializes_and_lists_one_tool() {
        let body = br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{}}}"#;
        let m = inspect(body).unwrap();
        let a = standin_answer(&m, body, &prompt(Ask::Connect)).unwrap();
        assert_eq!(a["id"], 0);
        assert_eq!(a["result"]["protocolVersion"], "2025-06-18");
        assert!(
            a["result"]["instructions"]
                .as_str()
                .unwrap()
                .contains("https://")
        );
        let odd = br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"1999-01-01"}}"#;
        let a = standin_answer(&inspect(odd).unwrap(), odd, &prompt(Ask::Connect)).unwrap();
        assert_eq!(a["result"]["protocolVersion"], "2025-11-25");
        let list = br#"{"jsonrpc":"2.0","id":"l","method":"tools/list"}"#;
        let a = standin_answer(&inspect(list).unwrap(), list, &prompt(Ask::Connect)).unwrap();
        assert_eq!(a["result"]["tools"][0]["name"], "connect");
        let call = br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"connect"}}"#;
        assert_eq!(
            standin_answer(&inspect(call).unwrap(), call, &prompt(Ask::Connect)),
            None
        );
        let note = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        assert_eq!(
            standin_answer(&inspect(note).unwrap(), note, &prompt(Ask::Connect)),
            None
        );
    }

    #[test]
    fn url_elicitation_is_read_from_initialize() {
        assert!(declares_url_elicitation(
            br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{"elicitation":{"url":{}}}}}"#
        ));
        assert!(!declares_url_elicitation(
            br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{"elicitation":{"form":{}}}}}"#
        ));
        assert!(!declares_url_elicitation(
            br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{"elicitation":{}}}}"#
        ));
        assert!(!declares_url_elicitation(b"{"));
    }
}
