//! `pforte token`: static bearer tokens.

use std::path::PathBuf;

use crate::{cli, tokens};
use anyhow::{Context as _, bail};
use clap::Subcommand;
use pforte_clock::{Clock as _, SystemClock};

use super::{
    CmdResult, Env, Failure,
    admin::{ListArgs, StoreSite, print_list},
};

#[derive(Subcommand)]
pub enum TokenAction {
    /// Create a token and print it once. Creates the store if the data dir has none (and says so).
    Create {
        /// 1-64 letters, digits, '.', '_', '-'.
        name: String,
        /// Scope to grant; repeat for several. Default: every configured scope.
        #[arg(long = "scope")]
        scopes: Vec<String>,
        /// Lifetime, e.g. 90d, 12h, 30m. Default: no expiry.
        #[arg(long)]
        expires: Option<String>,
        /// Route or virtual server the token opens (`mcp` for `[upstream]`); repeat for several.
        /// Default: every route and virtual server.
        #[arg(long = "route")]
        routes: Vec<String>,
    },
    /// List tokens (never their values).
    List(ListArgs),
    /// Revoke a token; a running gateway refuses it within a second.
    Revoke {
        /// The token's name.
        name: String,
    },
}

/// Runs `pforte token ACTION`; `create` may create the store.
pub fn run(
    action: TokenAction,
    config: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    env: &Env,
) -> CmdResult {
    let adds = matches!(action, TokenAction::Create { .. });
    // Without a config file the routes are unknown here: only their names are checked.
    let routes_known = config.is_some();
    let site = StoreSite::find(config, data_dir, adds, env)?;
    let cfg = &site.cfg;
    let stores = site.open()?;
    let store = stores.tokens()?;
    let now = SystemClock.now_secs();
    match action {
        TokenAction::Create {
            name,
            scopes,
            expires,
            routes,
        } => {
            if let Some(bad) = routes.iter().find(|r| !crate::config::valid_route_name(r)) {
                return Err(Failure::Usage(format!(
                    "--route {bad:?}: a route name is 1 to 63 characters of a-z, 0-9 and '-'"
                )));
            }
            // A virtual server's name too: the token opens it (and none of its members).
            let mut known = cfg.route_names();
            known.extend(cfg.virtuals.iter().map(|v| v.name.as_str()));
            if let Some(unknown) = routes
                .iter()
                .find(|r| routes_known && !known.contains(&r.as_str()))
            {
                return Err(Failure::Usage(format!(
                    "unknown route {unknown:?}; configured routes and virtual servers: {}",
                    known.join(" ")
                )));
            }
            let scopes = if scopes.is_empty() {
                cfg.scopes.clone()
            } else {
                scopes
            };
            if let Some(unknown) = scopes.iter().find(|s| !cfg.scopes.contains(s)) {
                return Err(Failure::Usage(format!(
                    "unknown scope {unknown:?}; configured scopes: {}",
                    cfg.scopes.join(" ")
                )));
            }
            let expires_at = expires
                .as_deref()
                .map(parse_lifetime)
                .transpose()
                .map_err(|e| Failure::Usage(format!("--expires {e:#}")))?
                .map(|secs| now + secs);
            let token = store.create(
                &crate::tokens::NewToken {
                    name: &name,
                    scopes: &scopes,
                    routes: &routes,
                    expires_at,
                },
                now,
                &mut rand::rng(),
            )?;
            let opens = if routes.is_empty() {
                "every route".to_owned()
            } else {
                format!("routes {:?}", routes.join(" "))
            };
            eprintln!(
                "Created token {name:?} with scopes {:?} for {opens}. It is shown once:",
                scopes.join(" ")
            );
            println!("{token}");
        }
        TokenAction::List(list) => {
            let tokens = store.list()?;
            let state = |t: &tokens::StaticToken| match (t.revoked_at, t.expires_at) {
                (Some(_), _) => "revoked",
                (None, Some(at)) if at <= now => "expired",
                _ => "active",
            };
            let json = tokens
                .iter()
                .map(|t| {
                    serde_json::json!({
                        "name": t.name,
                        "state": state(t),
                        "scopes": t.scopes,
                        "routes": t.routes,
                        "created_at": cli::rfc3339(t.created_at),
                        "expires_at": t.expires_at.map(cli::rfc3339),
                        "revoked_at": t.revoked_at.map(cli::rfc3339),
                    })
                })
                .collect();
            let rows = tokens
                .iter()
                .map(|t| {
                    vec![
                        t.name.clone(),
                        state(t).to_owned(),
                        cli::utc_minute(t.created_at),
                        cli::expiry(t.expires_at, now),
                        t.scopes.join(" "),
                        if t.routes.is_empty() {
                            "*".to_owned()
                        } else {
                            t.routes.join(" ")
                        },
                    ]
                })
                .collect();
            print_list(
                list,
                json,
                &["name", "state", "created", "expires", "scopes", "routes"],
                rows,
                "no tokens",
            )?;
        }
        TokenAction::Revoke { name } => {
            if store.revoke(&name, now)? {
                println!("revoked {name:?}");
                let person = crate::auth::person_key(crate::auth::AuthKind::Static, "", &name);
                site.forget_credentials(&stores, &person);
            } else {
                return Err(Failure::Other(anyhow::anyhow!(
                    "no active token named {name:?}"
                )));
            }
        }
    }
    site.announce();
    Ok(())
}

/// Parses `90d`, `12h`, `30m`, `45s` into seconds.
fn parse_lifetime(s: &str) -> anyhow::Result<u64> {
    let (num, unit) = s.split_at(s.trim_end_matches(|c: char| c.is_ascii_alphabetic()).len());
    let n: u64 = num
        .parse()
        .with_context(|| format!("{s:?}: expected e.g. 90d, 12h, 30m"))?;
    let factor = match unit {
        "d" => 86_400,
        "h" => 3_600,
        "m" => 60,
        "s" | "" => 1,
        _ => bail!("{s:?}: unit must be d, h, m or s"),
    };
    n.checked_mul(factor)
        .filter(|&v| v > 0)
        .context("lifetime out of range")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn lifetimes() {
        assert_eq!(parse_lifetime("90d").unwrap(), 90 * 86_400);
        assert_eq!(parse_lifetime("12h").unwrap(), 12 * 3_600);
        assert!(parse_lifetime("12x").is_err());
        assert!(parse_lifetime("0h").is_err());
        assert!(parse_lifetime("h").is_err());
    }
}
