//! Policy over claims and arguments (`[[policy]]`, issue 43 point 2): rules in CEL over who
//! calls (`user`, `client`), where (`route`), what (`tool`, `args`, `method`) and when
//! (`request`), compiled once with the configuration and decided per message, first match
//! wins in file order. Pure and sans-I/O: the caller gathers the [`Input`] (the person's
//! attributes, the catalog's annotations, the call's arguments, `now`) and applies the
//! [`Verdict`].
//!
//! An evaluation that fails (a missing key in `args`, a value of another type than the rule
//! expects, a result that is not a bool) is logged once per rule, by its name, and then:
//! an `allow` rule does not match (an error never grants); a `deny` or `approve` rule matches
//! when the message calls a tool (fail closed: the arguments are the caller's to shape, and a
//! shape the rule did not foresee must not slip past it) and does not match otherwise (a
//! message without a tool has no arguments to be wrong about).

mod compile;
mod guard;
mod input;
#[cfg(test)]
mod tests;

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

pub use compile::{RuleConfig, RuleError};
pub(crate) use input::arguments;
pub use input::{Client, Input, Tool, User};

/// What a matching rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    /// Stop evaluating: the message goes on (to the rest of the admission).
    Allow,
    /// Refused with the rule's message.
    Deny,
    /// Held for a person's approval.
    Approve,
}

impl Effect {
    /// The word in the configuration, the metrics and the logs.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny => "deny",
            Self::Approve => "approve",
        }
    }
}

/// The first matching rule's decision for one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict<'r> {
    /// The rule's `name`.
    pub rule: &'r str,
    pub effect: Effect,
    /// The rule's `message` (empty when it has none).
    pub message: &'r str,
}

/// One compiled `[[policy]]` rule.
#[derive(Debug)]
pub(crate) struct Rule {
    pub(crate) name: String,
    /// The routes it applies to; empty: every route.
    pub(crate) routes: Vec<String>,
    pub(crate) effect: Effect,
    pub(crate) message: String,
    program: cel::Program,
    /// Its leading `&&` terms decided without CEL (`guard.rs`).
    guards: Vec<guard::Guard>,
    /// The rule reads `args`: it cannot be decided before a call's arguments are known.
    reads_args: bool,
    /// Which variables it reads (bit `i`: `compile::KNOWN_VARIABLES[i]`).
    reads: u8,
    /// Its evaluation failed once already (logged).
    warned: AtomicBool,
}

impl Rule {
    /// Whether the rule applies on `route`.
    fn covers(&self, route: &str) -> bool {
        self.routes.is_empty() || self.routes.iter().any(|r| r == route)
    }

    /// Whether the rule matches: `Ok(bool)`, or why its evaluation failed.
    fn matches(&self, scope: &cel::Context<'_, '_>) -> Result<bool, String> {
        match self.program.execute(scope) {
            Ok(cel::Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!("the rule's value is {other:?}, not a bool")),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Logs the first failure of this rule's evaluation.
    fn failed(&self, error: &str) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(rule = %self.name, %error, "[[policy]] rule failed to evaluate (logged once per rule)");
        }
    }

    fn verdict(&self) -> Verdict<'_> {
        Verdict {
            rule: &self.name,
            effect: self.effect,
            message: &self.message,
        }
    }
}

/// The index of `args` in `compile::KNOWN_VARIABLES`.
const ARGS: usize = 4;

/// One message's CEL scope, built as rules need it: only the variables a rule reads, each once.
#[derive(Default)]
struct Scope {
    context: Option<cel::Context<'static, 'static>>,
    added: u8,
}

impl Scope {
    /// The scope with every variable in `reads` (bit `i`: `KNOWN_VARIABLES[i]`).
    fn prepared(
        &mut self,
        env: &Arc<cel::Env>,
        input: &Input<'_>,
        reads: u8,
    ) -> &cel::Context<'static, 'static> {
        let context = self
            .context
            .get_or_insert_with(|| cel::Context::with_env(Arc::clone(env)));
        let missing = reads & !self.added;
        for variable in 0..compile::KNOWN_VARIABLES.len() {
            if missing & (1 << variable) != 0 {
                input.add(context, variable);
            }
        }
        self.added |= missing;
        context
    }
}

/// Every `[[policy]]` rule in file order, and the CEL environment they run in.
#[derive(Clone, Default)]
pub struct Rules {
    rules: Arc<[Rule]>,
    env: Option<Arc<cel::Env>>,
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.rules.iter().map(|r| &r.name))
            .finish()
    }
}

impl Rules {
    /// The rules as written, compiled: `routes` are the configured route names. Errors name
    /// the rule and, for its `when`, the line and column.
    pub fn compile(configs: &[RuleConfig], routes: &[&str]) -> Result<Self, RuleError> {
        if configs.is_empty() {
            return Ok(Self::default());
        }
        let env = Arc::new(compile::env());
        let mut rules: Vec<Rule> = Vec::with_capacity(configs.len());
        for (i, config) in configs.iter().enumerate() {
            let (program, reads) = compile::rule(&env, config, i, &rules, routes)?;
            rules.push(Rule {
                name: config.name.clone(),
                routes: config.routes.clone().unwrap_or_default(),
                effect: config.effect,
                message: config.message.clone().unwrap_or_default(),
                guards: guard::guards(program.expression()),
                program,
                reads_args: reads & (1 << ARGS) != 0,
                reads,
                warned: AtomicBool::new(false),
            });
        }
        Ok(Self {
            rules: rules.into(),
            env: Some(env),
        })
    }

    /// What `pforte check` says of the rules: how many, and each one's name, effect and
    /// routes in order (`None`: no rules).
    pub(crate) fn describe(&self) -> Option<String> {
        if self.rules.is_empty() {
            return None;
        }
        let each: Vec<String> = self
            .rules
            .iter()
            .map(|r| {
                let routes = if r.routes.is_empty() {
                    "every route".to_owned()
                } else {
                    format!("routes {}", r.routes.join(", "))
                };
                format!("{} ({}, {routes})", r.name, r.effect.as_str())
            })
            .collect();
        Some(format!(
            "policy: {} rule(s) in order: {}",
            each.len(),
            each.join("; ")
        ))
    }

    /// Whether any rule applies on `route`.
    pub(crate) fn covers(&self, route: &str) -> bool {
        self.rules.iter().any(|r| r.covers(route))
    }

    /// Whether a rule that applies on `route` reads `args` (the caller parses a call's
    /// arguments only then).
    pub(crate) fn reads_args(&self, route: &str) -> bool {
        self.rules.iter().any(|r| r.covers(route) && r.reads_args)
    }

    /// Whether a rule that applies on `route` does not read `args`: `tools/list` is then
    /// filtered with [`Rules::hides`].
    pub(crate) fn filters_lists(&self, route: &str) -> bool {
        self.rules.iter().any(|r| r.covers(route) && !r.reads_args)
    }

    /// First matching rule for this call, in file order; None = no rule matched (go on).
    pub fn decide(&self, input: &Input<'_>) -> Option<Verdict<'_>> {
        let env = self.env.as_ref()?;
        // The scope gets the variables of the rules its guards do not rule out, when needed.
        let mut scope = Scope::default();
        for rule in self.rules.iter().filter(|r| r.covers(input.route)) {
            if guard::rules_out(&rule.guards, input) {
                continue;
            }
            let scope = scope.prepared(env, input, rule.reads);
            match rule.matches(scope) {
                Ok(true) => return Some(rule.verdict()),
                Ok(false) => {}
                Err(error) => {
                    rule.failed(&error);
                    if rule.effect != Effect::Allow && input.tool.is_some() {
                        return Some(rule.verdict());
                    }
                }
            }
        }
        None
    }

    /// Whether the tool in `input` (its `args` are not read) is denied to this person whatever
    /// its arguments: what `tools/list` leaves out. Rules are walked in file order as
    /// [`Rules::decide`] does; a rule that reads `args` might match or not, so an `allow` or
    /// `approve` one before the deciding rule leaves the tool listed, a `deny` one is passed
    /// (either way the call is refused if a later rule denies it). An evaluation that fails
    /// leaves the tool listed (the call is still decided when it comes).
    pub fn hides(&self, input: &Input<'_>) -> bool {
        let Some(env) = self.env.as_ref() else {
            return false;
        };
        let mut scope = Scope::default();
        for rule in self.rules.iter().filter(|r| r.covers(input.route)) {
            if rule.reads_args {
                if rule.effect == Effect::Deny {
                    continue;
                }
                return false;
            }
            if guard::rules_out(&rule.guards, input) {
                continue;
            }
            let scope = scope.prepared(env, input, rule.reads);
            match rule.matches(scope) {
                Ok(true) => return rule.effect == Effect::Deny,
                Ok(false) => {}
                Err(error) => {
                    rule.failed(&error);
                    return false;
                }
            }
        }
        false
    }
}
