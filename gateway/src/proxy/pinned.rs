//! The admission's and the answer's part of pinned tool definitions (`pins.rs`): a call to a
//! held tool refused before the upstream, and whether a `tools/list` (or `server/discover`)
//! answer is filtered — for the principal's policy, or because the route holds a tool.

use crate::{
    auth::Principal,
    logging,
    mcp::Message,
    policy::{Annotation, Denial},
    reply::Rejection,
};

use super::Gateway;

impl Gateway {
    /// A `tools/call` (or task request) naming a tool the route holds is refused, naming the
    /// change and how to approve it.
    pub(super) fn check_pinned(&self, message: &Message, route: usize) -> Result<(), Rejection> {
        let Some(tool) = message.tool() else {
            return Ok(());
        };
        let name = &self.settings.routes[route].name;
        match self.edge.pins.held(name, tool) {
            None => Ok(()),
            Some(change) => Err(Rejection::Forbidden(Denial::ToolHeld {
                message: change.message(name, &logging::untrusted_name(tool)),
                tool: tool.to_owned(),
            })),
        }
    }

    /// Whether the answer to `message` is filtered for `principal` on `route`: a `tools/list`
    /// or `server/discover` (which says whether there are tools at all) when the policy does
    /// not list everything for the principal, the route holds a tool, or a `[[policy]]` rule
    /// that does not read `args` applies on the route.
    pub(super) fn filters_list(
        &self,
        principal: &Principal,
        message: &Message,
        route: usize,
    ) -> bool {
        matches!(message.method.as_str(), "tools/list" | "server/discover")
            && ((self.settings.admission.tool_policy
                && !self.routes[route].policy.lists_everything(principal))
                || self.edge.pins.holds_any(&self.settings.routes[route].name)
                || self
                    .settings
                    .rules
                    .filters_lists(&self.settings.routes[route].name))
    }

    /// Whether `principal` sees `name` in `route`'s lists: the policy allows it (when on) and
    /// the route does not hold it.
    pub(super) fn listed(
        &self,
        principal: &Principal,
        route: usize,
        name: &str,
        annotation: Annotation,
    ) -> bool {
        (!self.settings.admission.tool_policy
            || self.routes[route]
                .policy
                .may_list(principal, name, annotation))
            && self
                .edge
                .pins
                .held(&self.settings.routes[route].name, name)
                .is_none()
    }
}
