//! `[routes.upstream_auth]`: the credential a route's upstream needs of its own, as written
//! ([`UpstreamAuthConfig`]) and validated ([`UpstreamAuth`]); and `[vault]`, where per-user
//! credentials are sealed. Pure: the files named here are read by `preflight` and at start.

use std::path::PathBuf;

use serde::Deserialize;

/// Environment names the gateway sets for a stdio child itself (the caller's identity): a
/// route's `env` or `upstream_auth` may not use them.
pub(crate) const RESERVED_ENV_PREFIX: &str = "PFORTE_";

/// `[routes.upstream_auth]` as written.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpstreamAuthConfig {
    /// `oauth`, `header`, `env` or `shared`.
    pub(crate) kind: String,
    /// `oauth`: `auto` (default), `cimd`, `dcr` or `static` (implied by `client_id`).
    pub(crate) registration: Option<String>,
    /// `oauth`: a client registered with the upstream's authorization server by hand.
    pub(crate) client_id: Option<String>,
    /// `oauth` with `client_id`: the client's secret (a confidential client).
    pub(crate) client_secret_file: Option<PathBuf>,
    /// `oauth`: the scopes asked for (default: the upstream's `scopes_supported`).
    pub(crate) scopes: Option<Vec<String>>,
    /// `oauth`: hosts (as written in URLs) the broker may reach over plain http or at a private
    /// address besides the upstream's own host.
    pub(crate) allow_hosts: Option<Vec<String>>,
    /// `header` and `shared` on an http route: the header the secret goes in.
    pub(crate) header: Option<String>,
    /// `header` and `shared`: written before the secret (`"Bearer "` by default for
    /// `Authorization`, nothing otherwise).
    pub(crate) prefix: Option<String>,
    /// `header` and `env`: what the connect page asks for ("GitHub token").
    pub(crate) label: Option<String>,
    /// `env`: the variables each user fills in.
    #[serde(default)]
    pub(crate) variables: Vec<String>,
    /// `shared` on a command route: the variable the secret goes in.
    pub(crate) variable: Option<String>,
    /// `shared`: the file holding the one credential.
    pub(crate) secret_file: Option<PathBuf>,
}

/// `[vault]` as written: the key ring that seals per-user credentials. `PFORTE_VAULT_KEY`
/// (or `PFORTE_VAULT_KEY_FILE`) gives the ring's text instead.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(crate) struct VaultConfig {
    /// A file of `KEYID:BASE64` lines; the first key seals, every key opens.
    pub(crate) key_file: Option<PathBuf>,
}

/// Where the vault's key ring comes from.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum VaultKey {
    File(PathBuf),
    /// The ring's text, from the environment.
    Text(String),
}

impl std::fmt::Debug for VaultKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(p) => f.debug_tuple("File").field(p).finish(),
            Self::Text(_) => f.write_str("Text(<redacted>)"),
        }
    }
}

/// How a route's upstream is authenticated, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UpstreamAuth {
    /// Pforte is an OAuth client of the upstream's authorization server, per user.
    OAuth {
        registration: Registration,
        scopes: Option<Vec<String>>,
        /// Hosts the broker may reach over plain http or at a private address besides the
        /// upstream's own host (`allow_hosts`).
        allow_hosts: Vec<String>,
    },
    /// A per-user secret in a header.
    Header { into: HeaderInto, label: String },
    /// Per-user secrets as a stdio child's environment.
    Env {
        variables: Vec<String>,
        label: String,
    },
    /// One credential for everyone, from a file.
    Shared { file: PathBuf, into: Injection },
}

impl UpstreamAuth {
    /// Whether each user brings a credential of their own (and the vault holds it).
    pub(crate) fn per_user(&self) -> bool {
        !matches!(self, Self::Shared { .. })
    }
    /// The name `kind = …` gives it.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::OAuth { .. } => "oauth",
            Self::Header { .. } => "header",
            Self::Env { .. } => "env",
            Self::Shared { .. } => "shared",
        }
    }
}

/// How Pforte registers as a client of an upstream's authorization server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Registration {
    /// Static if configured, else a client ID metadata document when the server supports it
    /// and Pforte is reached over https, else dynamic registration.
    Auto,
    Cimd,
    Dcr,
    Static {
        client_id: String,
        secret_file: Option<PathBuf>,
    },
}

/// A header a credential is written into: its (lower-case) name and the text before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeaderInto {
    pub(crate) name: http::HeaderName,
    pub(crate) prefix: String,
}

/// Where the shared credential goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Injection {
    Header(HeaderInto),
    Env(String),
}

/// Headers the gateway owns on the way upstream: an upstream credential cannot be put there.
const OWN_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "mcp-session-id",
    "mcp-protocol-version",
    "mcp-method",
    "mcp-name",
    "last-event-id",
    "accept",
    "content-type",
    "x-request-id",
    "x-forwarded-for",
    "x-forwarded-proto",
    "forwarded",
    "traceparent",
    "cookie",
];

/// `[routes.upstream_auth]` of a route; `stdio`: the route runs a command. An error names the
/// field (`upstream_auth.FIELD`) and what to write instead.
pub(crate) fn validate(
    c: &UpstreamAuthConfig,
    stdio: bool,
) -> Result<UpstreamAuth, (&'static str, String)> {
    let unused = |fields: &[(&'static str, bool)]| -> Result<(), (&'static str, String)> {
        match fields.iter().find(|(_, set)| *set) {
            Some((name, _)) => Err((
                "upstream_auth",
                format!("{name} is not for kind = {:?}", c.kind),
            )),
            None => Ok(()),
        }
    };
    let label = c
        .label
        .clone()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty());
    if label
        .as_ref()
        .is_some_and(|l| l.chars().count() > 100 || l.chars().any(char::is_control))
    {
        return Err((
            "upstream_auth",
            "label must be 1 to 100 characters without control characters".into(),
        ));
    }
    match c.kind.as_str() {
        "oauth" => {
            if stdio {
                return Err((
                    "upstream_auth",
                    "kind = \"oauth\" is for url routes (an MCP server that speaks OAuth); a \
                     command route takes kind = \"env\" or \"shared\""
                        .into(),
                ));
            }
            unused(&[
                ("header", c.header.is_some()),
                ("prefix", c.prefix.is_some()),
                ("label", c.label.is_some()),
                ("variables", !c.variables.is_empty()),
                ("variable", c.variable.is_some()),
                ("secret_file", c.secret_file.is_some()),
            ])?;
            let registration = match (c.registration.as_deref(), &c.client_id) {
                (None | Some("static"), Some(id)) => {
                    if id.trim().is_empty() {
                        return Err(("upstream_auth", "client_id is empty".into()));
                    }
                    Registration::Static {
                        client_id: id.clone(),
                        secret_file: c.client_secret_file.clone(),
                    }
                }
                (Some("static"), None) => {
                    return Err((
                        "upstream_auth",
                        "registration = \"static\" needs client_id".into(),
                    ));
                }
                (Some(other), Some(_)) => {
                    return Err((
                        "upstream_auth",
                        format!(
                            "client_id is a static registration; drop it or registration = {other:?}"
                        ),
                    ));
                }
                (None | Some("auto"), None) => Registration::Auto,
                (Some("cimd"), None) => Registration::Cimd,
                (Some("dcr"), None) => Registration::Dcr,
                (Some(other), None) => {
                    return Err((
                        "upstream_auth",
                        format!(
                            "registration {other:?} is not \"auto\", \"cimd\", \"dcr\" or \"static\""
                        ),
                    ));
                }
            };
            if c.client_secret_file.is_some() && c.client_id.is_none() {
                return Err((
                    "upstream_auth",
                    "client_secret_file goes with client_id".into(),
                ));
            }
            if let Some(scopes) = &c.scopes
                && let Some(bad) = scopes
                    .iter()
                    .find(|s| s.is_empty() || s.chars().any(|ch| ch.is_whitespace() || ch == '"'))
            {
                return Err((
                    "upstream_auth",
                    format!("scope {bad:?} is not an OAuth scope token"),
                ));
            }
            let allow_hosts = c.allow_hosts.clone().unwrap_or_default();
            if let Some(bad) = allow_hosts.iter().find(|h| {
                h.is_empty()
                    || h.contains(['/', '@', ' ', '?', '#'])
                    || url::Host::parse(h).is_err()
            }) {
                return Err((
                    "upstream_auth",
                    format!("allow_hosts: {bad:?} is not a host name or address"),
                ));
            }
            Ok(UpstreamAuth::OAuth {
                registration,
                scopes: c.scopes.clone(),
                allow_hosts,
            })
        }
        "header" => {
            if stdio {
                return Err((
                    "upstream_auth",
                    "kind = \"header\" is for url routes; a command route takes kind = \"env\""
                        .into(),
                ));
            }
            unused(&oauth_fields(c))?;
            unused(&[
                ("variables", !c.variables.is_empty()),
                ("variable", c.variable.is_some()),
                ("secret_file", c.secret_file.is_some()),
            ])?;
            let into = header_into(c)?;
            let label = label.unwrap_or_else(|| format!("{} value", into.name));
            Ok(UpstreamAuth::Header { into, label })
        }
        "env" => {
            if !stdio {
                return Err((
                    "upstream_auth",
                    "kind = \"env\" is for command routes; a url route takes kind = \"header\""
                        .into(),
                ));
            }
            unused(&oauth_fields(c))?;
            unused(&[
                ("header", c.header.is_some()),
                ("prefix", c.prefix.is_some()),
                ("variable", c.variable.is_some()),
                ("secret_file", c.secret_file.is_some()),
            ])?;
            if c.variables.is_empty() {
                return Err((
                    "upstream_auth",
                    "kind = \"env\" needs variables = [\"NAME\", …]".into(),
                ));
            }
            for v in &c.variables {
                env_name(v)?;
            }
            let mut seen = c.variables.clone();
            seen.sort();
            seen.dedup();
            if seen.len() != c.variables.len() {
                return Err(("upstream_auth", "variables names one twice".into()));
            }
            Ok(UpstreamAuth::Env {
                variables: c.variables.clone(),
                label: label.unwrap_or_else(|| c.variables.join(", ")),
            })
        }
        "shared" => {
            unused(&oauth_fields(c))?;
            unused(&[
                ("label", c.label.is_some()),
                ("variables", !c.variables.is_empty()),
            ])?;
            let Some(file) = c.secret_file.clone() else {
                return Err((
                    "upstream_auth",
                    "kind = \"shared\" needs secret_file (the one credential)".into(),
                ));
            };
            let into = if stdio {
                unused(&[
                    ("header", c.header.is_some()),
                    ("prefix", c.prefix.is_some()),
                ])?;
                let Some(v) = &c.variable else {
                    return Err((
                        "upstream_auth",
                        "a command route's shared credential needs variable = \"NAME\"".into(),
                    ));
                };
                env_name(v)?;
                Injection::Env(v.clone())
            } else {
                unused(&[("variable", c.variable.is_some())])?;
                Injection::Header(header_into(c)?)
            };
            Ok(UpstreamAuth::Shared { file, into })
        }
        "" => Err((
            "upstream_auth",
            "kind is missing: \"oauth\", \"header\", \"env\" or \"shared\"".into(),
        )),
        other => Err((
            "upstream_auth",
            format!("kind {other:?} is not \"oauth\", \"header\", \"env\" or \"shared\""),
        )),
    }
}

/// The `oauth`-only fields, with whether each is set.
fn oauth_fields(c: &UpstreamAuthConfig) -> [(&'static str, bool); 5] {
    [
        ("registration", c.registration.is_some()),
        ("client_id", c.client_id.is_some()),
        ("client_secret_file", c.client_secret_file.is_some()),
        ("scopes", c.scopes.is_some()),
        ("allow_hosts", c.allow_hosts.is_some()),
    ]
}

/// `header` and `prefix`: `Authorization` with `Bearer ` unless told otherwise.
fn header_into(c: &UpstreamAuthConfig) -> Result<HeaderInto, (&'static str, String)> {
    let raw = c.header.as_deref().unwrap_or("authorization");
    let name = http::HeaderName::from_bytes(raw.as_bytes()).map_err(|_| {
        (
            "upstream_auth",
            format!("header {raw:?} is not a header name"),
        )
    })?;
    if OWN_HEADERS.contains(&name.as_str()) || name.as_str().starts_with("x-pforte-") {
        return Err((
            "upstream_auth",
            format!("header {raw:?} is the gateway's own; choose another"),
        ));
    }
    let prefix = match &c.prefix {
        Some(p) => p.clone(),
        None if name == http::header::AUTHORIZATION => "Bearer ".to_owned(),
        None => String::new(),
    };
    if prefix.chars().any(|ch| ch.is_control() || !ch.is_ascii()) {
        return Err(("upstream_auth", "prefix must be printable ASCII".to_owned()));
    }
    Ok(HeaderInto { name, prefix })
}

/// An environment variable name a user's secret may go in: `[A-Za-z_][A-Za-z0-9_]*`, not one
/// of the gateway's `PFORTE_*`, not `PATH` or `HOME`.
fn env_name(v: &str) -> Result<(), (&'static str, String)> {
    let ok = v
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ok {
        return Err((
            "upstream_auth",
            format!("{v:?} is not an environment variable name"),
        ));
    }
    if v.starts_with(RESERVED_ENV_PREFIX) || v == "PATH" || v == "HOME" {
        return Err((
            "upstream_auth",
            format!("{v:?} is set by the gateway itself; choose another name"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse(toml_text: &str) -> UpstreamAuthConfig {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn each_kind_validates_its_own_fields() {
        let oauth = validate(&parse("kind = \"oauth\""), false).unwrap();
        assert_eq!(
            oauth,
            UpstreamAuth::OAuth {
                registration: Registration::Auto,
                scopes: None,
                allow_hosts: Vec::new(),
            }
        );
        let fixed = validate(&parse("kind = \"oauth\"\nclient_id = \"pforte\""), false).unwrap();
        assert!(matches!(
            fixed,
            UpstreamAuth::OAuth {
                registration: Registration::Static { .. },
                ..
            }
        ));
        let header = validate(&parse("kind = \"header\"\nheader = \"X-Api-Key\""), false).unwrap();
        assert_eq!(
            header,
            UpstreamAuth::Header {
                into: HeaderInto {
                    name: http::HeaderName::from_static("x-api-key"),
                    prefix: String::new()
                },
                label: "x-api-key value".into()
            }
        );
        let bearer = validate(&parse("kind = \"header\""), false).unwrap();
        assert!(matches!(bearer, UpstreamAuth::Header { into, .. } if into.prefix == "Bearer "));
        let env = validate(&parse("kind = \"env\"\nvariables = [\"API_KEY\"]"), true).unwrap();
        assert!(env.per_user());
        let shared = validate(
            &parse("kind = \"shared\"\nsecret_file = \"/k\"\nvariable = \"API_KEY\""),
            true,
        )
        .unwrap();
        assert!(!shared.per_user());
    }

    #[test]
    fn mistakes_are_named() {
        let err = |text: &str, stdio: bool| validate(&parse(text), stdio).unwrap_err().1;
        assert!(err("kind = \"oauth\"", true).contains("for url routes"));
        assert!(err("kind = \"env\"\nvariables = [\"A\"]", false).contains("command routes"));
        assert!(err("kind = \"env\"", true).contains("needs variables"));
        assert!(err("kind = \"env\"\nvariables = [\"PFORTE_X\"]", true).contains("gateway itself"));
        assert!(err("kind = \"env\"\nvariables = [\"1A\"]", true).contains("not an environment"));
        assert!(err("kind = \"header\"\nheader = \"x-pforte-subject\"", false).contains("own"));
        assert!(err("kind = \"header\"\nheader = \"Host\"", false).contains("own"));
        assert!(err("kind = \"header\"\nscopes = [\"a\"]", false).contains("scopes is not for"));
        assert!(err("kind = \"shared\"", false).contains("needs secret_file"));
        assert!(err("kind = \"shared\"\nsecret_file = \"/k\"", true).contains("variable"));
        assert!(err("kind = \"oauth\"\nregistration = \"static\"", false).contains("client_id"));
        assert!(err("kind = \"oauth\"\nregistration = \"magic\"", false).contains("magic"));
        assert!(err("kind = \"oauth\"\nclient_secret_file = \"/s\"", false).contains("client_id"));
        assert!(err("kind = \"\"", false).contains("missing"));
        assert!(err("kind = \"basic\"", false).contains("\"basic\""));
    }

    #[test]
    fn a_key_in_the_environment_is_not_printed() {
        let k = VaultKey::Text("k1:c2VjcmV0".into());
        assert!(!format!("{k:?}").contains("c2VjcmV0"));
    }
}
