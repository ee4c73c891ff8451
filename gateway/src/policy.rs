//! Who may do what on `/mcp`: the scopes an MCP message needs (from the tool's annotations and
//! the operator's `[tools.NAME]`, `[prompts.NAME]` and `[resources."URI"]` rules) and the
//! decision for one principal. Pure: the message,
//! what the catalog knows of the tool and the principal in, a decision out.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::{
    auth::Principal,
    mcp::{Kind, Message},
};

/// The scope of everything that only reads.
pub(crate) const READ: &str = "mcp:read";
/// The scope of tools that change something (and of anything not known to only read).
pub(crate) const WRITE: &str = "mcp:write";

/// An operator's rule for one tool (`[tools.NAME]`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct ToolRule {
    /// The scopes a call needs, instead of the ones its annotations imply.
    pub(crate) scopes: Option<Vec<String>>,
    /// OAuth subjects allowed to call it; empty means everyone with the scopes.
    pub(crate) users: Vec<String>,
    /// Nobody may call it, and it is not listed.
    pub(crate) deny: bool,
}

/// What the gateway knows of a tool from the upstream's catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Annotation {
    /// `readOnlyHint: true`.
    ReadOnly,
    /// Listed without `readOnlyHint: true`: it may change things.
    Writes,
    /// Not in the catalog.
    Unknown,
}

/// Why a message is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Denial {
    /// The principal lacks scopes: `needed` is every scope the call needs (for a step-up
    /// challenge), `missing` those it lacks.
    InsufficientScope {
        needed: Vec<String>,
        missing: Vec<String>,
        tool: Option<String>,
    },
    /// `[tools.NAME] deny = true`.
    ToolDenied(String),
    /// `[tools.NAME] users` does not name this principal.
    UserNotAllowed(String),
    /// The tool's definition changed since it was approved, or it is new and held
    /// (`[pinning]`); `message` names the change and how to approve it.
    ToolHeld { tool: String, message: String },
}

impl Denial {
    /// A short, stable code for logs and the audit log.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Self::InsufficientScope { .. } => "insufficient_scope",
            Self::ToolDenied(_) => "tool_denied",
            Self::UserNotAllowed(_) => "user_not_allowed",
            Self::ToolHeld { .. } => "tool_held",
        }
    }
}

/// The policy: the operator's tool, prompt and resource rules and the scopes every request
/// needs.
#[derive(Debug, Clone, Default)]
pub(crate) struct Policy {
    pub(crate) rules: BTreeMap<String, ToolRule>,
    /// `[prompts.NAME]`: rules for `prompts/get` of a prompt (the same fields as a tool's;
    /// without one a prompt needs `mcp:read`).
    pub(crate) prompts: BTreeMap<String, ToolRule>,
    /// `[resources."URI"]`: rules for `resources/read` of a URI, or of every URI a template
    /// (`{name}` segments, RFC 6570 level 1) matches; an exact URI wins over a template.
    pub(crate) resources: BTreeMap<String, ToolRule>,
    /// `required_scopes`: what every `/mcp` request needs, whatever it is.
    pub(crate) baseline: Vec<String>,
}

impl Policy {
    /// The scopes calling `tool` needs, beyond the baseline.
    fn tool_scopes(&self, tool: &str, annotation: Annotation) -> Vec<&str> {
        match self.rules.get(tool).and_then(|r| r.scopes.as_ref()) {
            Some(scopes) => scopes.iter().map(String::as_str).collect(),
            None if annotation == Annotation::ReadOnly => vec![READ],
            None => vec![WRITE],
        }
    }

    /// The operator's rule for the prompt or resource a message names, with that name.
    fn named_rule<'a>(&'a self, message: &'a Message) -> Option<(&'a str, &'a ToolRule)> {
        let target = message.target.as_deref()?;
        let rule = match message.method.as_str() {
            "prompts/get" => self.prompts.get(target),
            "resources/read" => self.resources.get(target).or_else(|| {
                self.resources
                    .iter()
                    .find(|(template, _)| {
                        template.contains('{') && matches_template(template, target)
                    })
                    .map(|(_, rule)| rule)
            }),
            _ => None,
        }?;
        Some((target, rule))
    }

    /// The scopes a message needs, beyond the baseline. `annotation` is what the catalog says
    /// of the called tool (ignored for other messages).
    fn message_scopes<'a>(&'a self, message: &'a Message, annotation: Annotation) -> Vec<&'a str> {
        if let Some(tool) = message.tool() {
            return self.tool_scopes(tool, annotation);
        }
        if let Some(scopes) = self
            .named_rule(message)
            .and_then(|(_, r)| r.scopes.as_ref())
        {
            return scopes.iter().map(String::as_str).collect();
        }
        if message.kind == Kind::Response {
            // The client's answer to the server's own request (sampling, elicitation, roots).
            return vec![READ];
        }
        match message.method.as_str() {
            // Reading and session housekeeping; answers to the server's own requests.
            // Session setup and discovery (`server/discover`: MCP 2026-07-28), listing, the
            // caller's own log level and tasks (cancelling one's own task changes no data).
            "initialize" | "server/discover" | "ping" | "tools/list" | "logging/setLevel" => {
                vec![READ]
            }
            m if m.starts_with("tasks/") => vec![READ],
            m if m.starts_with("resources/")
                || m.starts_with("prompts/")
                || m.starts_with("completion/")
                || m.starts_with("notifications/") =>
            {
                vec![READ]
            }
            // Anything else (a method this gateway does not know) might change something.
            _ => vec![WRITE],
        }
    }

    /// Every scope a call of `tool` needs (the baseline first), and whether the operator's
    /// rule denies it to everyone: what the console's route page shows.
    pub(crate) fn needed_for_tool(
        &self,
        tool: &str,
        annotation: Annotation,
    ) -> (Vec<String>, bool) {
        let mut needed: Vec<String> = self.baseline.clone();
        for scope in self.tool_scopes(tool, annotation) {
            if !needed.iter().any(|s| s == scope) {
                needed.push(scope.to_owned());
            }
        }
        (needed, self.rules.get(tool).is_some_and(|r| r.deny))
    }

    /// Decides on one message for `principal`.
    pub(crate) fn decide(
        &self,
        principal: &Principal,
        message: &Message,
        annotation: Annotation,
    ) -> Result<(), Denial> {
        if let Some(tool) = message.tool() {
            self.tool_allowed(principal, tool)?;
        }
        if let Some((name, rule)) = self.named_rule(message) {
            rule_allows(rule, principal, name)?;
        }
        let mut needed: Vec<&str> = self.baseline.iter().map(String::as_str).collect();
        for scope in self.message_scopes(message, annotation) {
            if !needed.contains(&scope) {
                needed.push(scope);
            }
        }
        let held = |s: &&str| principal.scopes.iter().any(|p| p == s);
        if needed.iter().all(held) {
            return Ok(());
        }
        let missing = needed
            .iter()
            .filter(|s| !held(s))
            .map(|s| (*s).to_owned())
            .collect();
        Err(Denial::InsufficientScope {
            needed: needed.into_iter().map(str::to_owned).collect(),
            missing,
            tool: message.tool().map(str::to_owned),
        })
    }

    /// The `deny` and `users` rules of a tool.
    fn tool_allowed(&self, principal: &Principal, tool: &str) -> Result<(), Denial> {
        match self.rules.get(tool) {
            Some(rule) => rule_allows(rule, principal, tool),
            None => Ok(()),
        }
    }

    /// Whether `tools/list` shows `tool` to `principal`: exactly when a call would be allowed.
    pub(crate) fn may_list(
        &self,
        principal: &Principal,
        tool: &str,
        annotation: Annotation,
    ) -> bool {
        self.tool_allowed(principal, tool).is_ok()
            && self
                .tool_scopes(tool, annotation)
                .iter()
                .all(|s| principal.scopes.iter().any(|p| p == s))
    }

    /// Whether `tools/list` can be passed on unfiltered for `principal`: no rule restricts a
    /// tool and the principal holds every scope any tool could need.
    pub(crate) fn lists_everything(&self, principal: &Principal) -> bool {
        self.rules.is_empty()
            && [READ, WRITE]
                .iter()
                .all(|s| principal.scopes.iter().any(|p| p == s))
    }
}

/// A rule's `deny` and `users` for `principal` on the tool, prompt or resource `name`.
fn rule_allows(rule: &ToolRule, principal: &Principal, name: &str) -> Result<(), Denial> {
    if rule.deny {
        return Err(Denial::ToolDenied(name.to_owned()));
    }
    if !rule.users.is_empty() && !rule.users.contains(&principal.subject) {
        return Err(Denial::UserNotAllowed(name.to_owned()));
    }
    Ok(())
}

/// Whether `uri` is one the URI template `template` expands to: each `{name}` stands for one
/// or more characters up to the next `/` (RFC 6570 level 1, simple expansion); the rest must
/// be equal.
pub(crate) fn matches_template(template: &str, uri: &str) -> bool {
    let Some((literal, rest)) = template.split_once('{') else {
        return template == uri;
    };
    let Some(uri) = uri.strip_prefix(literal) else {
        return false;
    };
    let Some((_, after)) = rest.split_once('}') else {
        return false;
    };
    // The variable takes 1..n characters, none of them `/`; the rest of the template must
    // match what follows (templates are short: trying each length is cheap).
    let limit = uri.find('/').unwrap_or(uri.len());
    (1..=limit).any(|n| uri.is_char_boundary(n) && matches_template(after, &uri[n..]))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{auth::AuthKind, mcp};

    fn who(subject: &str, scopes: &[&str]) -> Principal {
        Principal {
            subject: subject.to_owned(),
            client: "c".to_owned(),
            client_name: None,
            kind: AuthKind::OAuth,
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
            binding: crate::auth::Binding::Any,
        }
    }

    fn call(tool: &str) -> Message {
        mcp::inspect(
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{tool}"}}}}"#
            )
            .as_bytes(),
        )
        .unwrap()
    }

    fn msg(method: &str) -> Message {
        mcp::inspect(format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}"}}"#).as_bytes())
            .unwrap()
    }

    fn policy() -> Policy {
        Policy {
            baseline: vec![READ.to_owned()],
            ..Policy::default()
        }
    }

    fn named(method: &str, key: &str, target: &str) -> Message {
        mcp::inspect(
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{{"{key}":"{target}"}}}}"#
            )
            .as_bytes(),
        )
        .unwrap()
    }

    #[test]
    fn prompts_and_resources_take_their_rules_scopes() {
        let mut p = policy();
        let admin = ToolRule {
            scopes: Some(vec![WRITE.to_owned(), "mcp:admin".to_owned()]),
            ..ToolRule::default()
        };
        p.prompts
            .insert("werkbaum/review".to_owned(), admin.clone());
        p.resources
            .insert("werkbaum://doc/{uuid}".to_owned(), admin.clone());
        p.resources
            .insert("werkbaum://doc/open".to_owned(), ToolRule::default());
        p.resources.insert(
            "werkbaum://secret".to_owned(),
            ToolRule {
                deny: true,
                ..ToolRule::default()
            },
        );
        let reader = who("alice", &[READ]);
        for message in [
            named("prompts/get", "name", "werkbaum/review"),
            named("resources/read", "uri", "werkbaum://doc/123e4567"),
        ] {
            assert_eq!(
                p.decide(&reader, &message, Annotation::Unknown),
                Err(Denial::InsufficientScope {
                    needed: vec![READ.to_owned(), WRITE.to_owned(), "mcp:admin".to_owned()],
                    missing: vec![WRITE.to_owned(), "mcp:admin".to_owned()],
                    tool: None,
                }),
                "{message:?}"
            );
            let all = who("alice", &[READ, WRITE, "mcp:admin"]);
            assert_eq!(p.decide(&all, &message, Annotation::Unknown), Ok(()));
        }
        // No rule, an exact rule without scopes, a nested path the template does not reach:
        // `mcp:read`.
        for message in [
            named("prompts/get", "name", "werkbaum/decompose"),
            named("resources/read", "uri", "werkbaum://doc/open"),
            named("resources/read", "uri", "werkbaum://doc/a/b"),
            named("resources/read", "uri", "werkbaum://guide"),
        ] {
            assert_eq!(
                p.decide(&reader, &message, Annotation::Unknown),
                Ok(()),
                "{message:?}"
            );
        }
        assert_eq!(
            p.decide(
                &reader,
                &named("resources/read", "uri", "werkbaum://secret"),
                Annotation::Unknown
            ),
            Err(Denial::ToolDenied("werkbaum://secret".to_owned()))
        );
    }

    #[test]
    fn templates_match_one_segment_per_variable() {
        assert!(matches_template("a://doc/{id}", "a://doc/x"));
        assert!(matches_template("a://doc/{id}/v/{n}", "a://doc/x/v/2"));
        assert!(matches_template("a://{x}.txt", "a://notes.txt"));
        assert!(!matches_template("a://doc/{id}", "a://doc/"));
        assert!(!matches_template("a://doc/{id}", "a://doc/x/y"));
        assert!(!matches_template("a://doc/{id}", "b://doc/x"));
        assert!(matches_template("a://plain", "a://plain"));
        assert!(!matches_template("a://{broken", "a://x"));
    }

    #[test]
    fn read_tools_need_read_and_the_rest_write() {
        let p = policy();
        let reader = who("alice", &[READ]);
        assert_eq!(
            p.decide(&reader, &call("whoami"), Annotation::ReadOnly),
            Ok(())
        );
        for annotation in [Annotation::Writes, Annotation::Unknown] {
            let denial = p
                .decide(&reader, &call("werkbaum_create"), annotation)
                .unwrap_err();
            assert_eq!(
                denial,
                Denial::InsufficientScope {
                    needed: vec![READ.to_owned(), WRITE.to_owned()],
                    missing: vec![WRITE.to_owned()],
                    tool: Some("werkbaum_create".to_owned()),
                }
            );
        }
        let writer = who("alice", &[READ, WRITE]);
        assert_eq!(
            p.decide(&writer, &call("werkbaum_create"), Annotation::Writes),
            Ok(())
        );
    }

    #[test]
    fn everything_but_tool_calls_needs_read() {
        let p = policy();
        let reader = who("alice", &[READ]);
        for m in [
            "initialize",
            "ping",
            "tools/list",
            "resources/list",
            "resources/read",
            "resources/templates/list",
            "prompts/list",
            "prompts/get",
            "completion/complete",
            "notifications/initialized",
        ] {
            assert_eq!(
                p.decide(&reader, &msg(m), Annotation::Unknown),
                Ok(()),
                "{m}"
            );
        }
        let answer = mcp::inspect(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#).unwrap();
        assert_eq!(p.decide(&reader, &answer, Annotation::Unknown), Ok(()));
        for m in [
            "server/discover",
            "tasks/get",
            "tasks/cancel",
            "logging/setLevel",
        ] {
            assert_eq!(
                p.decide(&reader, &msg(m), Annotation::Unknown),
                Ok(()),
                "{m}"
            );
        }
        assert!(
            p.decide(&reader, &msg("admin/reset"), Annotation::Unknown)
                .is_err()
        );
        assert!(
            p.decide(&who("x", &[]), &msg("ping"), Annotation::Unknown)
                .is_err()
        );
    }

    #[test]
    fn operator_rules_override() {
        let mut p = policy();
        p.rules.insert(
            "werkbaum_history".to_owned(),
            ToolRule {
                users: vec!["alice".to_owned()],
                ..ToolRule::default()
            },
        );
        p.rules.insert(
            "werkbaum_delete".to_owned(),
            ToolRule {
                deny: true,
                ..ToolRule::default()
            },
        );
        p.rules.insert(
            "werkbaum_inspect".to_owned(),
            ToolRule {
                scopes: Some(vec!["mcp:admin".to_owned()]),
                ..ToolRule::default()
            },
        );
        let alice = who("alice", &[READ, WRITE]);
        let bob = who("bob", &[READ, WRITE]);
        let history = call("werkbaum_history");
        assert_eq!(p.decide(&alice, &history, Annotation::ReadOnly), Ok(()));
        assert_eq!(
            p.decide(&bob, &history, Annotation::ReadOnly),
            Err(Denial::UserNotAllowed("werkbaum_history".to_owned()))
        );
        assert!(!p.may_list(&bob, "werkbaum_history", Annotation::ReadOnly));
        assert!(p.may_list(&alice, "werkbaum_history", Annotation::ReadOnly));
        assert_eq!(
            p.decide(&alice, &call("werkbaum_delete"), Annotation::Writes),
            Err(Denial::ToolDenied("werkbaum_delete".to_owned()))
        );
        assert!(!p.may_list(&alice, "werkbaum_delete", Annotation::Writes));
        let denial = p
            .decide(&alice, &call("werkbaum_inspect"), Annotation::ReadOnly)
            .unwrap_err();
        assert!(
            matches!(denial, Denial::InsufficientScope { ref missing, .. } if missing == &["mcp:admin".to_owned()])
        );
        assert!(!p.lists_everything(&alice));
    }

    #[test]
    fn listing_follows_calling() {
        let p = policy();
        let reader = who("alice", &[READ]);
        assert!(p.may_list(&reader, "whoami", Annotation::ReadOnly));
        assert!(!p.may_list(&reader, "werkbaum_create", Annotation::Writes));
        assert!(!p.may_list(&reader, "new_tool", Annotation::Unknown));
        assert!(!p.lists_everything(&reader));
        assert!(p.lists_everything(&who("a", &[READ, WRITE])));
    }
}
