//! `pforte grant`: OAuth grants (a user's consent to a client, with its tokens).

use crate::cli;
use clap::Subcommand;
use pforte_oauth::{Admin, GrantFilter};

use super::{
    CmdResult, Failure,
    admin::{ListArgs, print_list},
};

#[derive(Subcommand)]
pub enum GrantAction {
    /// List active grants, optionally for one user or client.
    List {
        /// Only this user's grants.
        #[arg(long)]
        user: Option<String>,
        /// Only this client's grants.
        #[arg(long)]
        client: Option<String>,
        /// Include revoked and expired grants.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        list: ListArgs,
    },
    /// Revoke grants: one by id, or every grant of a user and/or client.
    Revoke {
        /// The grant id as `grant list` shows it.
        id: Option<String>,
        /// Every grant of this user.
        #[arg(long)]
        user: Option<String>,
        /// Every grant of this client.
        #[arg(long)]
        client: Option<String>,
    },
}

/// A revocation by `pforte grant revoke` in the audit log (no client IP: a local command).
fn audit_revoke(
    log: Option<&crate::audit::AuditLog>,
    user: Option<&str>,
    client_id: Option<&str>,
    reason: &str,
) {
    use pforte_clock::Clock as _;
    if let Some(log) = log {
        log.record(&crate::audit::AccountRecord {
            time_ms: pforte_clock::SystemClock.now_ms(),
            event: "revoke",
            via: Some("cli"),
            user,
            client_id,
            outcome: "revoked",
            reason: Some(reason),
            scopes: None,
            resource: None,
            client_ip: None,
        });
    }
}

/// Runs `pforte grant ACTION` on the authorization server's store; revocations are written
/// to `audit` too.
pub(crate) async fn run(
    admin: Admin,
    action: GrantAction,
    now: u64,
    audit: Option<&crate::audit::AuditLog>,
) -> CmdResult {
    match action {
        GrantAction::List {
            user,
            client,
            all,
            list,
        } => {
            let filter = GrantFilter {
                username: user,
                client_id: client,
                include_inactive: all,
            };
            let grants = admin.list_grants(&filter).await?;
            let state = |g: &pforte_oauth::GrantRecord| {
                if g.revoked_at.is_some() {
                    "revoked"
                } else if g.expires_at <= now {
                    "expired"
                } else {
                    "active"
                }
            };
            let json = grants
                .iter()
                .map(|g| {
                    serde_json::json!({
                        "id": g.family_id,
                        "state": state(g),
                        "username": g.username,
                        "client_id": g.client_id,
                        "scopes": g.scopes,
                        "created_at": cli::rfc3339(g.created_at),
                        "last_used_at": cli::rfc3339(g.last_used_at),
                        "expires_at": cli::rfc3339(g.expires_at),
                        "revoked_at": g.revoked_at.map(cli::rfc3339),
                        "granted_by": g.granted_by.label(),
                    })
                })
                .collect();
            let rows = grants
                .iter()
                .map(|g| {
                    vec![
                        g.family_id.clone(),
                        state(g).to_owned(),
                        g.username.clone(),
                        g.client_id.clone(),
                        cli::utc_minute(g.created_at),
                        cli::expiry(Some(g.expires_at), now),
                        g.scopes.join(" "),
                        g.granted_by.label().to_owned(),
                    ]
                })
                .collect();
            print_list(
                list,
                json,
                &[
                    "grant", "state", "user", "client", "created", "expires", "scopes", "via",
                ],
                rows,
                "no grants",
            )?;
        }
        GrantAction::Revoke {
            id: Some(id),
            user: None,
            client: None,
        } => {
            admin.revoke_grant(&id).await?;
            audit_revoke(audit, None, None, &format!("by_cli: grant {id}"));
            println!("revoked grant {id}");
        }
        GrantAction::Revoke {
            id: None,
            user,
            client,
        } if user.is_some() || client.is_some() => {
            let n = admin
                .revoke_grants(&GrantFilter {
                    username: user.clone(),
                    client_id: client.clone(),
                    include_inactive: false,
                })
                .await?;
            audit_revoke(
                audit,
                user.as_deref(),
                client.as_deref(),
                &format!("by_cli: {n} grant(s)"),
            );
            println!("revoked {n} grant(s)");
        }
        GrantAction::Revoke { .. } => {
            return Err(Failure::Usage(
                "name one grant id, or --user and/or --client".to_owned(),
            ));
        }
    }
    Ok(())
}
