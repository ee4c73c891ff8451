//! A virtual server's calls and lists decided by their member route's governance (issue 43
//! through issue 42), with the route admission's own steps — no second copy of a check: a
//! `tools/call` (or search mode's `call_tool`) after the member route's policy takes
//! `check_pinned` and `check_rules` on the member's own tool name and the call's arguments (a
//! `deny` is the route's refusal, an `approve` the route's held call, its approval's `route` the
//! member route); a `tools/list` (or `find_tools`) leaves out what the member route's list
//! leaves out — every tool of a member whose rules refuse the caller its `tools/list`
//! (`refuses_list`), a tool the policy does not list for the caller or the route holds
//! (`listed`), a tool a rule without `args` denies the caller (`hidden_by_rules`, the person's
//! attributes fetched once per list), and in mode `hold` a definition that is not the approved one
//! (`Pins::listing`, an unseen one recorded after as the route's list filter does). A session
//! whose client declared URL elicitation is noted, so a held call's link takes the form it reads.

use std::collections::{HashMap, HashSet};

use pingora::http::RequestHeader;

use super::super::{Gateway, rules::Attributes};
use crate::{
    auth::Principal, credentials::answer, mcp::Message, pins::Listing, reply::Rejection,
    virtual_server::Entry,
};

/// What one caller's list through a virtual server may show, gathered once per list.
pub(super) struct ListView<'a> {
    principal: &'a Principal,
    ip: Option<std::net::IpAddr>,
    /// The person's attributes, when a `[[policy]]` rule applies on a member.
    attributes: Option<Attributes>,
    /// Member routes whose rules refuse the caller their `tools/list`: they add no tool.
    refused: HashSet<usize>,
    /// Per member route, its tools (by its own name) whose listed definition is not the
    /// approved one.
    cut: HashMap<usize, HashSet<String>>,
}

impl Gateway {
    /// The [`ListView`] of `principal` (from `ip`) over member routes `routes`: the attributes
    /// read once when a rule applies on one of them, the members whose rules refuse the caller
    /// their `tools/list`; in mode `hold` each member's listed definitions compared with the
    /// approved ones (an unseen one recorded).
    pub(super) async fn list_view<'a>(
        &self,
        principal: &'a Principal,
        routes: &[usize],
        ip: Option<std::net::IpAddr>,
    ) -> Result<ListView<'a>, Rejection> {
        let names = || {
            routes
                .iter()
                .filter_map(|&r| Some((r, self.settings.routes.get(r)?.name.as_str())))
        };
        let rules = &self.settings.rules;
        let attributes = if names().any(|(_, name)| rules.covers(name)) {
            Some(self.attributes(principal).await?)
        } else {
            None
        };
        let refused = attributes.as_ref().map_or_else(HashSet::new, |a| {
            names()
                .filter(|(r, name)| rules.covers(name) && self.refuses_list(principal, a, *r, ip))
                .map(|(r, _)| r)
                .collect()
        });
        let mut cut = HashMap::new();
        if self.edge.pins.screens() {
            for (route, name) in names() {
                let listed = self.edge.catalogs.get(route).and_then(|c| c.definitions());
                let (mut unseen, mut cuts) = (Vec::new(), HashSet::new());
                for tool in listed.iter().flat_map(|l| l.iter()) {
                    let Some(tool_name) = tool["name"].as_str() else {
                        continue;
                    };
                    let text = serde_json::to_vec(tool).unwrap_or_default();
                    match self.edge.pins.listing(name, tool_name, &text) {
                        Listing::Serve => continue,
                        Listing::Cut => {}
                        Listing::CutUnseen => unseen.push((tool_name.to_owned(), text)),
                    }
                    cuts.insert(tool_name.to_owned());
                }
                cut.insert(route, cuts);
                self.edge.pins.record_served(name, unseen);
            }
        }
        Ok(ListView {
            principal,
            ip,
            attributes,
            refused,
            cut,
        })
    }

    /// Whether `view`'s caller is listed (or found) `entry` of member route `route`: exactly
    /// what the member route's own list would show them of the tool.
    pub(super) fn lists(&self, view: &ListView<'_>, route: usize, entry: &Entry) -> bool {
        let tool = entry.original.as_str();
        route < self.routes.len()
            && !view.refused.contains(&route)
            && self.listed(view.principal, route, tool, entry.annotation())
            && !view.cut.get(&route).is_some_and(|c| c.contains(tool))
            && !view
                .attributes
                .as_ref()
                .is_some_and(|a| self.hidden_by_rules(view.principal, a, route, tool, view.ip))
    }

    /// A virtual server's session `id` just opened by the `initialize` `body`: a client that
    /// declared URL-mode elicitation is noted, as on a route, so a held call's link reaches it
    /// as `-32042` (`hold_for_approval`).
    pub(super) fn opened_virtual_session(&self, id: &str, body: &[u8]) {
        if answer::declares_url_elicitation(body) {
            self.edge.credentials.note_eliciting(id);
        }
    }

    /// The member route's steps after its policy for a call through a virtual server (`body`
    /// and `call` as the member gets them: its own tool name): `check_pinned`, then the
    /// `[[policy]]` rules — refused or held exactly as on the route.
    pub(super) async fn govern_call(
        &self,
        req: &RequestHeader,
        (body, call): (&[u8], &Message),
        principal: &Principal,
        route: usize,
        ip: Option<std::net::IpAddr>,
    ) -> Result<(), Rejection> {
        self.check_pinned(call, route)?;
        self.check_rules(req, body, call, principal, route, ip)
            .await
            .map(|_| ())
    }
}
