//! What the admission does with a call a `[[policy]]` rule with `effect = "approve"` matched:
//! for now it is refused like a denial, with the reason `approval_required` (issue 43 point 3,
//! approvals, replaces this function: the call held, the caller given a link).

use crate::{
    reply::{Rejection, RuleRefusal},
    rules::Input,
};

use super::Gateway;

impl Gateway {
    /// The answer to a call that needs a person's approval (`refusal` names the rule and its
    /// message; `_input` is what the rule saw: who, which tool, the arguments).
    pub(super) async fn hold_for_approval(
        &self,
        refusal: RuleRefusal,
        _input: &Input<'_>,
    ) -> Rejection {
        Rejection::PolicyRule(RuleRefusal {
            reason: "approval_required",
            ..refusal
        })
    }
}
