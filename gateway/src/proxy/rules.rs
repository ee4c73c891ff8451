//! The admission's `[[policy]]` step (`rules.rs`), right after `check_pinned`: the message's
//! [`Input`] gathered (the person's attributes from the authorization server's cached member
//! lookup, the tool's annotations from the catalog, the call's arguments from the body when a
//! rule reads them, the client IP, the clock), the rules' first match applied — `deny` refused
//! with the rule's message, `approve` handed to `hold_for_approval`, `allow` on to the rest of
//! the admission — and what `tools/list` leaves out for a person (`hidden_by_rules`; a virtual
//! server's member whose list the rules refuse: `refuses_list`).

use pingora::http::RequestHeader;

use crate::{
    auth::{AuthKind, Principal},
    mcp::{self, Message},
    reply::{Rejection, RuleRefusal},
    rules::{Client, Effect, Input, Tool, User},
};

use super::{Gateway, approval::HeldCall};

/// What the rules read of a principal beyond its token: an OAuth user's email, groups and
/// roles (none for a static token).
#[derive(Debug, Clone, Default)]
pub(super) struct Attributes {
    email: Option<String>,
    groups: Vec<String>,
    roles: Vec<String>,
}

impl Gateway {
    /// The `[[policy]]` step: `Ok` when no rule matched or an `allow` did — with the person's
    /// attributes when the answer is a list a rule may cut (`hidden_by_rules`) —; a `deny`
    /// refused (403 naming the rule; `refusal` puts the rule on the audit line); an `approve`
    /// held (`hold_for_approval`).
    pub(super) async fn check_rules(
        &self,
        req: &RequestHeader,
        body: &[u8],
        message: &Message,
        principal: &Principal,
        route: usize,
        ip: Option<std::net::IpAddr>,
    ) -> Result<Option<Attributes>, Rejection> {
        let rules = &self.settings.rules;
        let name = self.settings.routes[route].name.as_str();
        if !rules.covers(name) {
            return Ok(None);
        }
        let attributes = self.attributes(principal).await?;
        let args = message
            .tool()
            .filter(|_| rules.reads_args(name))
            .and_then(|_| crate::rules::arguments(body));
        let annotations = message.tool().and_then(|tool| {
            self.edge
                .catalogs
                .get(route)
                .and_then(|c| c.annotations(tool))
        });
        let input = Input {
            user: user(principal, &attributes),
            client: client(principal),
            route: name,
            tool: message.tool().map(|tool| Tool {
                name: tool,
                annotations: annotations.as_deref(),
            }),
            args: args.as_ref(),
            method: &message.method,
            ip,
            now_ms: self.clock.now_ms(),
        };
        if let Some(verdict) = rules.decide(&input) {
            self.metrics
                .rule_decided(route, verdict.rule, verdict.effect.as_str());
            let version = req.headers.get("mcp-protocol-version");
            let refusal = RuleRefusal {
                rule: verdict.rule.to_owned(),
                message: verdict.message.to_owned(),
                reason: "policy_denied",
                structured: structured(version.map(|v| v.as_bytes()), message)
                    .then(|| message.id.clone()),
            };
            match verdict.effect {
                Effect::Allow => {}
                Effect::Deny => return Err(Rejection::PolicyRule(refusal)),
                Effect::Approve => {
                    let call = HeldCall {
                        req,
                        body,
                        message,
                        principal,
                        route,
                        ip,
                    };
                    self.hold_for_approval(call, refusal).await?;
                }
            }
        }
        let lists = matches!(message.method.as_str(), "tools/list" | "server/discover");
        Ok((lists && rules.filters_lists(name)).then_some(attributes))
    }

    /// An OAuth principal's email, groups and roles (cached by the authorization server's
    /// validator for `roles_recheck_secs`); nothing for a static token.
    pub(super) async fn attributes(&self, principal: &Principal) -> Result<Attributes, Rejection> {
        if principal.kind != AuthKind::OAuth {
            return Ok(Attributes::default());
        }
        let person = self.oauth.person(&principal.subject).await?;
        Ok(Attributes {
            email: person.email,
            groups: person.groups,
            roles: person.roles,
        })
    }

    /// Whether a rule denies `tool` to `principal` on `route` whatever its arguments: it is
    /// then absent from `tools/list` (`ctx.mcp.filter_list` is set when a rule may hide one).
    pub(super) fn hidden_by_rules(
        &self,
        principal: &Principal,
        attributes: &Attributes,
        route: usize,
        tool: &str,
        ip: Option<std::net::IpAddr>,
    ) -> bool {
        let name = self.settings.routes[route].name.as_str();
        let annotations = self
            .edge
            .catalogs
            .get(route)
            .and_then(|c| c.annotations(tool));
        self.settings.rules.hides(&Input {
            user: user(principal, attributes),
            client: client(principal),
            route: name,
            tool: Some(Tool {
                name: tool,
                annotations: annotations.as_deref(),
            }),
            args: None,
            method: "tools/call",
            ip,
            now_ms: self.clock.now_ms(),
        })
    }

    /// Whether `route`'s rules refuse `principal` its `tools/list` (the first match a `deny`,
    /// or an `approve`, which a list merged by a virtual server cannot wait for): that member
    /// then adds no tool to the virtual server's list, as `check_rules` would refuse the list
    /// on the route.
    pub(super) fn refuses_list(
        &self,
        principal: &Principal,
        attributes: &Attributes,
        route: usize,
        ip: Option<std::net::IpAddr>,
    ) -> bool {
        let input = Input {
            user: user(principal, attributes),
            client: client(principal),
            route: self.settings.routes[route].name.as_str(),
            tool: None,
            args: None,
            method: "tools/list",
            ip,
            now_ms: self.clock.now_ms(),
        };
        self.settings
            .rules
            .decide(&input)
            .is_some_and(|v| v.effect != Effect::Allow)
    }
}

/// The `user` a rule reads: an OAuth user by name with their attributes; a static token by its
/// name, without email, groups or roles.
fn user<'a>(principal: &'a Principal, attributes: &'a Attributes) -> User<'a> {
    match principal.kind {
        AuthKind::OAuth => User {
            name: &principal.subject,
            email: attributes.email.as_deref(),
            groups: &attributes.groups,
            roles: &attributes.roles,
            kind: "oauth",
        },
        AuthKind::Static => User {
            name: &principal.client,
            kind: "static",
            ..User::default()
        },
    }
}

fn client(principal: &Principal) -> Client<'_> {
    Client {
        id: &principal.client,
        name: principal.client_name.as_deref(),
    }
}

/// Whether the client speaks MCP 2026-07-28 or later (its `MCP-Protocol-Version` header, else
/// the body's `_meta` version): its refusal is then a JSON-RPC error with the structured denial.
fn structured(header: Option<&[u8]>, message: &Message) -> bool {
    mcp::requires_headers(header)
        || mcp::requires_headers(message.meta_version.as_deref().map(str::as_bytes))
}
