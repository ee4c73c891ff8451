//! A rule's guards: the leading `&&` terms of its `when` that read one plain field and a
//! literal (`tool.name == "x"`, `has(args.k)`, `"g" in user.groups`, `user.email != null`), so
//! that a call they rule out is decided without building the CEL scope or running the
//! program. Only the terms before the first other term are guards: CEL evaluates `&&` from the
//! left, so a guard that is false there makes the whole rule false, exactly as the program
//! would (a later term could fail, and a failing deny rule matches). Pure.

use cel::common::ast::{Expr, IdedExpr, LiteralValue, operators};

use super::input::Input;

/// A field a guard reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Field {
    ToolName,
    Method,
    RouteName,
    UserName,
    UserKind,
    UserEmail,
    ClientId,
    ClientName,
}

impl Field {
    fn of(path: &[&str]) -> Option<Self> {
        Some(match path {
            ["tool", "name"] => Self::ToolName,
            ["method"] => Self::Method,
            ["route", "name"] => Self::RouteName,
            ["user", "name"] => Self::UserName,
            ["user", "kind"] => Self::UserKind,
            ["user", "email"] => Self::UserEmail,
            ["client", "id"] => Self::ClientId,
            ["client", "name"] => Self::ClientName,
            _ => return None,
        })
    }

    /// The field's value in `input` (`None`: CEL's `null`).
    fn read<'a>(self, input: &Input<'a>) -> Option<&'a str> {
        match self {
            Self::ToolName => Some(input.tool.map_or("", |t| t.name)),
            Self::Method => Some(input.method),
            Self::RouteName => Some(input.route),
            Self::UserName => Some(input.user.name),
            Self::UserKind => Some(input.user.kind),
            Self::UserEmail => input.user.email,
            Self::ClientId => Some(input.client.id),
            Self::ClientName => input.client.name,
        }
    }
}

/// One guard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Guard {
    /// `FIELD == "text"` (either side).
    Equals(Field, String),
    /// `FIELD != null`.
    NotNull(Field),
    /// `has(args.KEY)`.
    HasArg(String),
    /// `has(tool.annotations.KEY)`.
    HasAnnotation(String),
    /// `"text" in user.groups`.
    InGroups(String),
    /// `"text" in user.roles`.
    InRoles(String),
}

impl Guard {
    /// Whether the term is true for `input`; `None` where CEL's answer is not plain (the
    /// arguments are not a map, say): then the program decides.
    fn holds(&self, input: &Input<'_>) -> Option<bool> {
        Some(match self {
            Self::Equals(field, text) => field.read(input) == Some(text.as_str()),
            Self::NotNull(field) => field.read(input).is_some(),
            Self::HasArg(key) => match input.args {
                None => false,
                Some(serde_json::Value::Object(members)) => members.contains_key(key),
                Some(_) => return None,
            },
            Self::HasAnnotation(key) => match input.tool.and_then(|t| t.annotations) {
                None => false,
                Some(serde_json::Value::Object(members)) => members.contains_key(key),
                Some(_) => return None,
            },
            Self::InGroups(text) => input.user.groups.iter().any(|g| g == text),
            Self::InRoles(text) => input.user.roles.iter().any(|r| r == text),
        })
    }
}

/// Whether `guards` rule the rule out for `input`: one of them is false, every one before it
/// plainly true.
pub(super) fn rules_out(guards: &[Guard], input: &Input<'_>) -> bool {
    for guard in guards {
        match guard.holds(input) {
            Some(true) => {}
            Some(false) => return true,
            None => return false,
        }
    }
    false
}

/// The guards of a rule's expression: its `&&` terms in the order CEL evaluates them, up to the
/// first term that is not a guard.
pub(super) fn guards(e: &IdedExpr) -> Vec<Guard> {
    let mut terms = Vec::new();
    conjuncts(e, &mut terms);
    terms.into_iter().map_while(guard).collect()
}

/// The leaves of the `&&` tree at `e`, left to right.
fn conjuncts<'e>(e: &'e IdedExpr, out: &mut Vec<&'e IdedExpr>) {
    match &e.expr {
        Expr::Call(call)
            if call.func_name == operators::LOGICAL_AND
                && call.target.is_none()
                && call.args.len() == 2 =>
        {
            conjuncts(&call.args[0], out);
            conjuncts(&call.args[1], out);
        }
        _ => out.push(e),
    }
}

/// The term as a guard, if it is one.
fn guard(e: &IdedExpr) -> Option<Guard> {
    match &e.expr {
        // `has(a.b.c)` is a select marked as a presence test.
        Expr::Select(select) if select.test => {
            let operand = path(&select.operand)?;
            match operand.as_slice() {
                ["args"] => Some(Guard::HasArg(select.field.clone())),
                ["tool", "annotations"] => Some(Guard::HasAnnotation(select.field.clone())),
                _ => None,
            }
        }
        Expr::Call(call) if call.target.is_none() && call.args.len() == 2 => {
            let (left, right) = (&call.args[0], &call.args[1]);
            match call.func_name.as_str() {
                operators::EQUALS => {
                    let (field, text) =
                        field_and_text(left, right).or_else(|| field_and_text(right, left))?;
                    Some(Guard::Equals(field, text))
                }
                operators::NOT_EQUALS => {
                    let field = path(left).and_then(|p| Field::of(&p))?;
                    matches!(right.expr, Expr::Literal(LiteralValue::Null))
                        .then_some(Guard::NotNull(field))
                }
                operators::IN => {
                    let text = text(left)?;
                    match path(right)?.as_slice() {
                        ["user", "groups"] => Some(Guard::InGroups(text)),
                        ["user", "roles"] => Some(Guard::InRoles(text)),
                        _ => None,
                    }
                }
                _ => None,
            }
        }
        _ => None,
    }
}

fn field_and_text(field: &IdedExpr, literal: &IdedExpr) -> Option<(Field, String)> {
    Some((Field::of(&path(field)?)?, text(literal)?))
}

/// A string literal's text.
fn text(e: &IdedExpr) -> Option<String> {
    match &e.expr {
        Expr::Literal(LiteralValue::String(s)) => Some(s.inner().to_owned()),
        _ => None,
    }
}

/// `a.b.c` as `["a", "b", "c"]` (plain selects on an identifier, no presence test).
fn path(e: &IdedExpr) -> Option<Vec<&str>> {
    match &e.expr {
        Expr::Ident(name) => Some(vec![name.as_str()]),
        Expr::Select(select) if !select.test => {
            let mut p = path(&select.operand)?;
            p.push(select.field.as_str());
            Some(p)
        }
        _ => None,
    }
}
