//! A `[[policy]]` rule's refusal as the client reads it: 403 with the rule's name and message;
//! for a client on MCP 2026-07-28 or later a JSON-RPC error carrying the structured denial
//! (SEP-2643: `error.data.authorization`), for older ones the gateway's JSON error body.

use serde_json::json;

use super::Reply;
use crate::logging;

/// The JSON-RPC error code of a policy refusal.
pub(crate) const POLICY_DENIED: i64 = -32003;

/// A rule refused the message (`deny`), or holds it for a person's approval (`approve`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RuleRefusal {
    /// The rule's name.
    pub(crate) rule: String,
    /// The rule's message (empty: a sentence naming the rule is sent).
    pub(crate) message: String,
    /// `policy_denied`; for an `approve` rule's call that was rejected or whose approval
    /// expired, `approval_rejected` or `approval_expired`.
    pub(crate) reason: &'static str,
    /// The request's id (JSON text) when the client speaks 2026-07-28 or later: the answer is
    /// then a JSON-RPC error with the structured denial.
    pub(crate) structured: Option<String>,
}

impl RuleRefusal {
    /// The answer: always 403.
    pub(crate) fn reply(&self, request_id: &str) -> Reply {
        let rule = logging::clip(&self.rule, logging::MAX_NAME_BYTES);
        let message = if self.message.is_empty() {
            match self.reason {
                "approval_required" => {
                    format!("this call needs a person's approval (policy rule {rule})")
                }
                _ => format!("refused by policy rule {rule}"),
            }
        } else {
            self.message.clone()
        };
        let Some(id) = &self.structured else {
            return Reply::json(
                403,
                &json!({"error": "forbidden", "reason": self.reason, "rule": rule, "message": message, "request_id": request_id}),
            );
        };
        let id: serde_json::Value = serde_json::from_str(id).unwrap_or(serde_json::Value::Null);
        Reply::json(
            403,
            &json!({"jsonrpc": "2.0", "id": id, "error": {
                "code": POLICY_DENIED,
                "message": message,
                "data": {
                    "authorization": {
                        "reason": "insufficient_authorization",
                        "remediationHints": [],
                    },
                    "reason": self.reason,
                    "rule": rule,
                    "request_id": request_id,
                },
            }}),
        )
    }
}
