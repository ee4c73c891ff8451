//! `[[policy]]` as written and compiled: the serde type, the CEL environment, and the checks
//! `pforte check` reports — a `when` that does not parse, a variable that is not one of
//! [`KNOWN_VARIABLES`] (CEL here does not type check: the free identifiers of the parsed
//! expression are compared with the known names), a duplicate name, an unknown route — each
//! naming the rule and, within `when`, the line and column with a caret line. Pure.

use cel::common::ast::{EntryExpr, Expr, IdedExpr};

use super::{Effect, Rule};

/// The variables a rule may read.
pub(crate) const KNOWN_VARIABLES: [&str; 7] = [
    "user", "client", "route", "tool", "args", "method", "request",
];

/// CEL's own type names, which an expression may name as identifiers (`type(x) == int`).
const TYPE_NAMES: [&str; 13] = [
    "bool",
    "bytes",
    "double",
    "duration",
    "dyn",
    "int",
    "list",
    "map",
    "null_type",
    "string",
    "timestamp",
    "type",
    "uint",
];

/// One `[[policy]]` table as written.
#[derive(Debug, Clone, serde::Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Unique; named in refusals, audit lines and metrics.
    pub(crate) name: String,
    /// The routes the rule applies to (default: every route).
    #[serde(default)]
    pub(crate) routes: Option<Vec<String>>,
    /// The condition, in CEL.
    pub(crate) when: String,
    /// `deny`, `approve` or `allow`.
    pub(crate) effect: Effect,
    /// What a refused caller reads (deny, approve).
    #[serde(default)]
    pub(crate) message: Option<String>,
}

/// Why a `[[policy]]` rule was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("[[policy]] #{index}: name: required, and not empty")]
    Unnamed { index: usize },
    #[error("[[policy]] {rule:?}: name: another rule before it has this name")]
    Duplicate { rule: String },
    #[error("[[policy]] {rule:?}: routes: no route is named {route:?}")]
    UnknownRoute { rule: String, route: String },
    #[error("[[policy]] {rule:?}: message: only a deny or approve rule has a message")]
    MessageOnAllow { rule: String },
    #[error("[[policy]] {rule:?}: when:{line}:{column}: {reason}\n{caret}")]
    When {
        rule: String,
        line: usize,
        column: usize,
        reason: String,
        /// The line of `when` and a caret under the column.
        caret: String,
    },
}

/// The environment every rule is compiled and run in: CEL's standard library and the strings
/// extension (`lowerAscii`, `split`, …).
pub(crate) fn env() -> cel::Env {
    let mut env = cel::Env::stdlib();
    if let Err(e) = env.add_extension(cel::extensions::strings) {
        // The standard environment never declares these: a crate change, logged, not fatal.
        tracing::warn!(error = %e, "CEL strings extension not added");
    }
    env
}

/// Compiles rule `index` after the `earlier` ones: the program and which of
/// [`KNOWN_VARIABLES`] it reads (bit `i` for variable `i`).
pub(super) fn rule(
    env: &cel::Env,
    config: &RuleConfig,
    index: usize,
    earlier: &[Rule],
    routes: &[&str],
) -> Result<(cel::Program, u8), RuleError> {
    let name = &config.name;
    if name.trim().is_empty() {
        return Err(RuleError::Unnamed { index: index + 1 });
    }
    if earlier.iter().any(|r| &r.name == name) {
        return Err(RuleError::Duplicate { rule: name.clone() });
    }
    for route in config.routes.iter().flatten() {
        if !routes.contains(&route.as_str()) {
            return Err(RuleError::UnknownRoute {
                rule: name.clone(),
                route: route.clone(),
            });
        }
    }
    if config.effect == Effect::Allow && config.message.is_some() {
        return Err(RuleError::MessageOnAllow { rule: name.clone() });
    }
    let when = &config.when;
    let program = env.compile(when).map_err(|errors| {
        let first = errors.errors.first();
        let (line, column) = first.map_or((1, 1), |e| {
            (
                usize::try_from(e.pos.0).unwrap_or(1).max(1),
                // cel's columns count from 1 already.
                usize::try_from(e.pos.1).unwrap_or(1).max(1),
            )
        });
        let reason = first.map_or_else(|| "does not parse".to_owned(), |e| e.msg.clone());
        at(name, when, line, column, reason)
    })?;
    let mut free = Vec::new();
    free_identifiers(program.expression(), &mut Vec::new(), &mut free);
    let mut reads = 0u8;
    for (ident, id) in free {
        if let Some(i) = KNOWN_VARIABLES.iter().position(|v| *v == ident) {
            reads |= 1 << i;
            continue;
        }
        if TYPE_NAMES.contains(&ident) {
            continue;
        }
        let offset = program
            .source_info()
            .offset_for(id)
            .map_or(0, |(start, _)| start as usize);
        let (line, column) = line_column(when, offset);
        let reason = format!(
            "unknown variable `{ident}` (known: {})",
            KNOWN_VARIABLES.join(", ")
        );
        return Err(at(name, when, line, column, reason));
    }
    Ok((program, reads))
}

/// The error at `line`:`column` (1-based) of `when`, with its caret line.
fn at(rule: &str, when: &str, line: usize, column: usize, reason: String) -> RuleError {
    let text = when.lines().nth(line.saturating_sub(1)).unwrap_or_default();
    let caret = format!("  | {text}\n  | {}^", " ".repeat(column.saturating_sub(1)));
    RuleError::When {
        rule: rule.to_owned(),
        line,
        column,
        reason,
        caret,
    }
}

/// The 1-based line and column (in characters) of byte `offset` in `text`.
pub(crate) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[start..].chars().count() + 1)
}

/// The identifiers `e` reads that no comprehension around them binds, with their node ids, in
/// the order written.
fn free_identifiers<'e>(e: &'e IdedExpr, bound: &mut Vec<&'e str>, out: &mut Vec<(&'e str, u64)>) {
    match &e.expr {
        Expr::Ident(name) => {
            // `@`-names are the macros' own accumulators.
            if !name.starts_with('@') && !bound.contains(&name.as_str()) {
                out.push((name, e.id));
            }
        }
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                free_identifiers(target, bound, out);
            }
            for arg in &call.args {
                free_identifiers(arg, bound, out);
            }
        }
        Expr::Comprehension(c) => {
            free_identifiers(&c.iter_range, bound, out);
            free_identifiers(&c.accu_init, bound, out);
            let depth = bound.len();
            bound.push(&c.iter_var);
            if let Some(second) = &c.iter_var2 {
                bound.push(second);
            }
            bound.push(&c.accu_var);
            free_identifiers(&c.loop_cond, bound, out);
            free_identifiers(&c.loop_step, bound, out);
            free_identifiers(&c.result, bound, out);
            bound.truncate(depth);
        }
        Expr::List(list) => {
            for element in &list.elements {
                free_identifiers(element, bound, out);
            }
        }
        Expr::Map(map) => {
            for entry in &map.entries {
                entry_identifiers(&entry.expr, bound, out);
            }
        }
        Expr::Struct(s) => {
            for entry in &s.entries {
                entry_identifiers(&entry.expr, bound, out);
            }
        }
        Expr::Select(select) => free_identifiers(&select.operand, bound, out),
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn entry_identifiers<'e>(
    entry: &'e EntryExpr,
    bound: &mut Vec<&'e str>,
    out: &mut Vec<(&'e str, u64)>,
) {
    match entry {
        EntryExpr::MapEntry(m) => {
            free_identifiers(&m.key, bound, out);
            free_identifiers(&m.value, bound, out);
        }
        EntryExpr::StructField(f) => free_identifiers(&f.value, bound, out),
    }
}
