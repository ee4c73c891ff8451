//! What a rule sees of one message ([`Input`]) and its CEL values: `user`, `client`, `route`,
//! `tool`, `args`, `method` and `request`. JSON arguments stay typed as sent (an integer is an
//! `int` — a `uint` only above `i64` —, a fraction a `double`); what a message does not have is
//! an empty string, an empty map or `null`, never an unknown variable. Pure.

use std::{collections::HashMap, net::IpAddr, sync::Arc};

use cel::Value;

/// Who calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct User<'a> {
    /// The OAuth user's name, or a static token's name.
    pub name: &'a str,
    /// An OAuth user's verified email (external sign-ins only).
    pub email: Option<&'a str>,
    pub groups: &'a [String],
    /// The `[oauth.roles]` the user holds.
    pub roles: &'a [String],
    /// `oauth` or `static`.
    pub kind: &'a str,
}

/// Through which client.
#[derive(Debug, Clone, Copy, Default)]
pub struct Client<'a> {
    /// The OAuth client id, or the static token's name.
    pub id: &'a str,
    /// The OAuth client's registered name.
    pub name: Option<&'a str>,
}

/// The tool a message calls (or, for `tools/list`, lists).
#[derive(Debug, Clone, Copy)]
pub struct Tool<'a> {
    pub name: &'a str,
    /// Its `annotations` object as the catalog last listed it.
    pub annotations: Option<&'a serde_json::Value>,
}

/// Everything a rule may read of one message.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    pub user: User<'a>,
    pub client: Client<'a>,
    /// The route's name.
    pub route: &'a str,
    pub tool: Option<Tool<'a>>,
    /// The call's `params.arguments`; `None`: an empty map.
    pub args: Option<&'a serde_json::Value>,
    /// The JSON-RPC method (empty for a client's answer).
    pub method: &'a str,
    /// The client's IP.
    pub ip: Option<IpAddr>,
    /// Now, milliseconds since the Unix epoch (the injected clock's).
    pub now_ms: u64,
}

impl Input<'_> {
    /// The CEL scope of this input, in `env`, with every variable.
    #[cfg(test)]
    pub(super) fn scope(&self, env: &Arc<cel::Env>) -> cel::Context<'static, 'static> {
        let mut scope = cel::Context::with_env(Arc::clone(env));
        for variable in 0..super::compile::KNOWN_VARIABLES.len() {
            self.add(&mut scope, variable);
        }
        scope
    }

    /// Adds variable `variable` (its index in `KNOWN_VARIABLES`: user, client, route, tool,
    /// args, method, request) of this input to `scope`; a rule's scope gets only what it reads.
    pub(super) fn add(&self, scope: &mut cel::Context<'static, 'static>, variable: usize) {
        let text = |s: &str| Value::String(Arc::new(s.to_owned()));
        let list =
            |items: &[String]| Value::List(Arc::new(items.iter().map(|s| text(s)).collect()));
        let maybe = |s: Option<&str>| s.map_or(Value::Null, text);
        let empty = || Value::Map(HashMap::<String, Value>::new().into());
        let (name, value) = match variable {
            0 => (
                "user",
                map([
                    ("name", text(self.user.name)),
                    ("email", maybe(self.user.email)),
                    ("groups", list(self.user.groups)),
                    ("roles", list(self.user.roles)),
                    ("kind", text(self.user.kind)),
                ]),
            ),
            1 => (
                "client",
                map([
                    ("id", text(self.client.id)),
                    ("name", maybe(self.client.name)),
                ]),
            ),
            2 => ("route", map([("name", text(self.route))])),
            3 => (
                "tool",
                match self.tool {
                    Some(t) => map([
                        ("name", text(t.name)),
                        ("annotations", t.annotations.map_or_else(empty, json)),
                    ]),
                    None => map([("name", text("")), ("annotations", empty())]),
                },
            ),
            4 => ("args", self.args.map_or_else(empty, json)),
            5 => ("method", text(self.method)),
            _ => {
                let time = chrono::DateTime::from_timestamp_millis(
                    i64::try_from(self.now_ms).unwrap_or(i64::MAX),
                )
                .unwrap_or_default()
                .fixed_offset();
                (
                    "request",
                    map([
                        (
                            "ip",
                            self.ip.map_or(Value::Null, |ip| text(&ip.to_string())),
                        ),
                        ("time", Value::Timestamp(time)),
                    ]),
                )
            }
        };
        scope.add_variable_from_value(name, value);
    }
}

/// A CEL map of string keys.
fn map<const N: usize>(entries: [(&str, Value); N]) -> Value {
    let map: HashMap<String, Value> = entries
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    Value::Map(map.into())
}

/// A JSON value as CEL's, typed as sent.
pub(crate) fn json(value: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    match value {
        J::Null => Value::Null,
        J::Bool(b) => Value::Bool(*b),
        J::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::Int(i)
            } else if let Some(u) = n.as_u64() {
                Value::UInt(u)
            } else {
                Value::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        J::String(s) => Value::String(Arc::new(s.clone())),
        J::Array(items) => Value::List(Arc::new(items.iter().map(json).collect())),
        J::Object(members) => {
            let map: HashMap<String, Value> =
                members.iter().map(|(k, v)| (k.clone(), json(v))).collect();
            Value::Map(map.into())
        }
    }
}

/// A call's `params.arguments` from its body (`None`: not there, or the body is not JSON).
pub(crate) fn arguments(body: &[u8]) -> Option<serde_json::Value> {
    #[derive(serde::Deserialize)]
    struct Call {
        params: Params,
    }
    #[derive(serde::Deserialize)]
    struct Params {
        arguments: Option<serde_json::Value>,
    }
    serde_json::from_slice::<Call>(body)
        .ok()
        .and_then(|c| c.params.arguments)
}
