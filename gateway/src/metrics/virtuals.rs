//! Calls through a virtual server (`[[virtual]]`, issue 42 point 6): each call, resource read or
//! prompt a virtual server routed to a member, by virtual server, member route and outcome
//! (`pforte_virtual_calls_total`). Both names come from the configuration and the outcome is one
//! of five: the series are bounded by the configured virtual servers and their members.

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};
use serde_json::Value;

use super::{Metrics, RouteName};

/// How a call through a virtual server ended at its member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum VirtualOutcome {
    /// The member answered with a result.
    Ok,
    /// The member answered with a tool error (`isError`).
    ToolError,
    /// A JSON-RPC error: the member's, or the gateway's when the member was unreachable.
    Error,
    /// The caller has not connected the member (a per-user route): its connect prompt.
    Connect,
    /// Refused by the gateway before the member (its route's policy, pins, rules, budgets).
    Refused,
    /// The member's event stream was being relayed when the client cancelled the call.
    Streamed,
}

impl VirtualOutcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::ToolError => "tool_error",
            Self::Error => "error",
            Self::Connect => "connect",
            Self::Refused => "refused",
            Self::Streamed => "streamed",
        }
    }

    /// The outcome of a member's JSON-RPC answer.
    pub(crate) fn of_answer(answer: &Value) -> Self {
        if answer.get("error").is_some() {
            Self::Error
        } else if answer["result"]["isError"] == Value::Bool(true) {
            Self::ToolError
        } else {
            Self::Ok
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    r#virtual: RouteName,
    member: RouteName,
    outcome: &'static str,
}

/// The calls through virtual servers.
#[derive(Clone, Debug, Default)]
pub(crate) struct VirtualMetrics {
    calls: Family<CallLabels, Counter>,
}

impl VirtualMetrics {
    /// The family, registered in `registry`.
    pub(super) fn register(registry: &mut Registry) -> Self {
        let virtuals = Self::default();
        registry.register(
            "pforte_virtual_calls",
            "Calls, resource reads and prompts a virtual server routed to a member, by virtual \
             server, member route and outcome (ok, tool_error, error, connect, refused)",
            virtuals.calls.clone(),
        );
        virtuals
    }
}

impl Metrics {
    /// A call through virtual server `name` to member route `member` ended with `outcome`.
    pub(crate) fn virtual_call(&self, name: &str, member: usize, outcome: VirtualOutcome) {
        self.virtuals
            .calls
            .get_or_create(&CallLabels {
                r#virtual: RouteName::from(name),
                member: self.route(Some(member)),
                outcome: outcome.as_str(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::VirtualOutcome;

    #[test]
    fn a_members_answer_is_ok_a_tool_error_or_an_error() {
        let ok = json!({"jsonrpc": "2.0", "id": 1, "result": {"content": []}});
        assert_eq!(VirtualOutcome::of_answer(&ok), VirtualOutcome::Ok);
        let tool = json!({"jsonrpc": "2.0", "id": 1, "result": {"isError": true}});
        assert_eq!(VirtualOutcome::of_answer(&tool), VirtualOutcome::ToolError);
        let error = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603}});
        assert_eq!(VirtualOutcome::of_answer(&error), VirtualOutcome::Error);
        assert_eq!(VirtualOutcome::Connect.as_str(), "connect");
    }
}
