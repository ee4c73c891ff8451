//! What the caller of a held call gets instead of the upstream's answer: the approval link, as
//! a URL-mode elicitation (JSON-RPC error `-32042`, MCP 2025-11-25) carrying SEP-2643's
//! structured denial (`data.authorization`) for a client that declared URL elicitation;
//! otherwise, for a `tools/call`, a tool error naming the rule's message and the link with the
//! same authorization object in the result's `_meta` (`remediation: "available"`), and for any
//! other request a JSON-RPC error with it in `data`. Pure.

use std::ops::Not as _;

use serde_json::{Value, json};

use crate::mcp::{Kind, Message};

/// MCP's `URLElicitationRequiredError`.
pub(crate) const URL_ELICITATION_REQUIRED: i64 = -32042;
/// A JSON-RPC server error for a request that is not a tool call (implementation-defined).
pub(crate) const APPROVAL_REQUIRED: i64 = -32001;
/// The `_meta` key of the structured denial on a tool result.
pub(crate) const META_KEY: &str = "io.modelcontextprotocol/authorization";

/// What to tell the caller about one held call.
#[derive(Debug, Clone)]
pub(crate) struct Held<'a> {
    /// The approval's id (the SEP-2643 `authorizationContextId` and the elicitation's id).
    pub(crate) id: &'a str,
    /// The approval page.
    pub(crate) url: &'a str,
    /// The rule's message.
    pub(crate) message: &'a str,
    /// Minutes the approval waits.
    pub(crate) minutes: u64,
}

impl Held<'_> {
    /// The sentence the caller (and the person behind it) reads.
    pub(crate) fn sentence(&self) -> String {
        let lead = self.message.trim();
        let lead = if lead.is_empty() {
            "This call needs a person's approval.".to_owned()
        } else {
            lead.to_owned()
        };
        format!(
            "{lead} It is waiting for an approver at {} (approvers sign in there; the request \
             expires in {} min). Once it is approved, call again with the same arguments: the \
             approval is good for one call.",
            self.url, self.minutes
        )
    }

    /// SEP-2643's authorization object; `remediation: "available"` and the URL in the hint on
    /// a tool result, where no elicitation carries the URL beside it.
    fn authorization(&self, in_result: bool) -> Value {
        if in_result {
            json!({
                "reason": "insufficient_authorization",
                "authorizationContextId": self.id,
                "remediation": "available",
                "remediationHints": [{"type": "url", "url": self.url}],
            })
        } else {
            json!({
                "reason": "insufficient_authorization",
                "authorizationContextId": self.id,
                "remediationHints": [{"type": "url"}],
            })
        }
    }
}

/// The JSON-RPC answer to `message`, held for approval (`None`: not a request; it is accepted
/// with 202 and not forwarded). `url_elicitation`: the client declared URL-mode elicitation.
pub(crate) fn held_answer(
    message: &Message,
    held: &Held<'_>,
    url_elicitation: bool,
) -> Option<Value> {
    if message.kind != Kind::Request {
        return None;
    }
    let id: Value = serde_json::from_str(&message.id).unwrap_or(Value::Null);
    let text = held.sentence();
    let answer = if url_elicitation {
        json!({"jsonrpc": "2.0", "id": id, "error": {
            "code": URL_ELICITATION_REQUIRED,
            "message": text,
            "data": {
                "authorization": held.authorization(false),
                "elicitations": [{
                    "mode": "url",
                    "elicitationId": held.id,
                    "url": held.url,
                    "message": text,
                }],
            },
        }})
    } else if message.method == "tools/call" {
        json!({"jsonrpc": "2.0", "id": id, "result": {
            "content": [{"type": "text", "text": text}],
            "isError": true,
            "_meta": {META_KEY: held.authorization(true)},
        }})
    } else {
        json!({"jsonrpc": "2.0", "id": id, "error": {
            "code": APPROVAL_REQUIRED,
            "message": text,
            "data": {"authorization": held.authorization(true)},
        }})
    };
    Some(answer)
}

/// Whether a request's per-request capabilities (MCP 2026-07-28 stateless requests:
/// `params._meta["io.modelcontextprotocol/clientCapabilities"]`) declare URL-mode elicitation.
pub(crate) fn request_declares_url_elicitation(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body).is_ok_and(|v| {
        v["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]["elicitation"]["url"]
            .is_null()
            .not()
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::mcp::inspect;

    fn held() -> Held<'static> {
        Held {
            id: "apr_0123",
            url: "https://gw.example/admin/approvals/apr_0123",
            message: "Deleting needs a second person.",
            minutes: 15,
        }
    }

    #[test]
    fn a_client_with_url_elicitation_gets_32042_with_the_structured_denial() {
        let m =
            inspect(br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"rm"}}"#)
                .unwrap();
        let a = held_answer(&m, &held(), true).unwrap();
        assert_eq!(a["id"], 3);
        assert_eq!(a["error"]["code"], -32042);
        let data = &a["error"]["data"];
        assert_eq!(data["elicitations"][0]["mode"], "url");
        assert_eq!(data["elicitations"][0]["elicitationId"], "apr_0123");
        assert_eq!(data["elicitations"][0]["url"], held().url);
        assert_eq!(
            data["authorization"]["reason"],
            "insufficient_authorization"
        );
        assert_eq!(data["authorization"]["authorizationContextId"], "apr_0123");
        assert_eq!(
            data["authorization"]["remediationHints"],
            json!([{"type": "url"}])
        );
    }

    #[test]
    fn other_clients_get_a_tool_error_with_the_link_and_meta() {
        let m =
            inspect(br#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"rm"}}"#)
                .unwrap();
        let a = held_answer(&m, &held(), false).unwrap();
        assert_eq!(a["result"]["isError"], true);
        let text = a["result"]["content"][0]["text"].as_str().unwrap();
        assert!(
            text.starts_with("Deleting needs a second person."),
            "{text}"
        );
        assert!(text.contains(held().url), "{text}");
        let auth = &a["result"]["_meta"][META_KEY];
        assert_eq!(auth["remediation"], "available");
        assert_eq!(auth["authorizationContextId"], "apr_0123");
        assert_eq!(auth["remediationHints"][0]["url"], held().url);
        let n = inspect(br#"{"jsonrpc":"2.0","method":"notifications/x"}"#).unwrap();
        assert!(held_answer(&n, &held(), false).is_none());
        let r =
            inspect(br#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"p"}}"#)
                .unwrap();
        assert_eq!(
            held_answer(&r, &held(), false).unwrap()["error"]["code"],
            -32001
        );
    }

    #[test]
    fn per_request_capabilities_are_read() {
        let yes = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta":{"io.modelcontextprotocol/clientCapabilities":{"elicitation":{"url":{}}}}}}"#;
        let no = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta":{"io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}}}}}"#;
        assert!(request_declares_url_elicitation(yes));
        assert!(!request_declares_url_elicitation(no));
        assert!(!request_declares_url_elicitation(b"{"));
    }
}
