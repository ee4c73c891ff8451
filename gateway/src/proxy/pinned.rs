//! The admission's and the answer's part of pinned tool definitions (`pins.rs`): a call to a
//! held tool refused before the upstream, and whether a `tools/list` (or `server/discover`)
//! answer is filtered — for the principal's policy, or because the route holds a tool.

use crate::{
    auth::Principal,
    logging,
    mcp::Message,
    pins::Listing,
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
    /// that does not read `args` applies on the route ([`Self::lists_privately`]); and every
    /// `tools/list` while the pins screen lists (mode `hold`: each listed definition compared
    /// with the approved one, `pins::listing`).
    pub(super) fn filters_list(
        &self,
        principal: &Principal,
        message: &Message,
        route: usize,
    ) -> bool {
        match message.method.as_str() {
            "tools/list" => self.edge.pins.screens() || self.lists_privately(principal, route),
            "server/discover" => self.lists_privately(principal, route),
            _ => false,
        }
    }

    /// Whether `route`'s lists differ for `principal` from the server's by more than the
    /// pins' cuts (the policy, or a held tool): such a list is `cacheScope: "private"`.
    pub(super) fn lists_privately(&self, principal: &Principal, route: usize) -> bool {
        (self.settings.admission.tool_policy
            && !self.routes[route].policy.lists_everything(principal))
            || self.edge.pins.holds_any(&self.settings.routes[route].name)
            || self
                .settings
                .rules
                .filters_lists(&self.settings.routes[route].name)
    }

    /// Whether a client is listed `route`'s tool `name` as the upstream described it (`tool`,
    /// its JSON text): its definition is the approved one. One the store has not seen is
    /// noted in `unseen` (name, text) to be recorded after the answer (`Pins::record_served`).
    pub(super) fn pin_lists(
        &self,
        route: usize,
        name: &str,
        tool: &[u8],
        unseen: &std::cell::RefCell<Vec<(String, Vec<u8>)>>,
    ) -> bool {
        let route = &self.settings.routes[route].name;
        match self.edge.pins.listing(route, name, tool) {
            Listing::Serve => true,
            Listing::Cut => false,
            Listing::CutUnseen => {
                unseen.borrow_mut().push((name.to_owned(), tool.to_vec()));
                false
            }
        }
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
