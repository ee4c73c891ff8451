//! `pforte user`: the users who log in on the consent page.

use crate::cli;
use clap::Subcommand;
use pforte_oauth::Admin;

use super::{
    CmdResult,
    admin::{ListArgs, print_list, read_password},
};

#[derive(Subcommand)]
pub enum UserAction {
    /// Add a user; the password is read from a prompt, or from stdin when it is not a terminal.
    /// Creates the store if the data dir has none (and says so).
    Add {
        /// 1-64 letters, digits, '.', '_', '-', '@'.
        username: String,
        /// `admin`: sees and revokes every user's connected apps at /account.
        #[arg(long, value_enum, default_value_t = Role::User)]
        role: Role,
    },
    /// Set a user's role: `admin` (sees and revokes every user's grants at /account) or `user`.
    Role {
        /// An existing user.
        username: String,
        #[arg(value_enum)]
        role: Role,
    },
    /// Change a user's password (prompt or stdin).
    Passwd {
        /// An existing user.
        username: String,
    },
    /// List users with where they come from (local, or the OpenID provider with the verified
    /// email) and their creation and password-change (or last identity change) times.
    List(ListArgs),
    /// Remove a user and revoke their grants.
    Remove {
        /// An existing user.
        username: String,
    },
}

/// Where a user comes from, for the table: `local`, `oidc NAME (email)` (signed in through an
/// OpenID provider) or `enterprise ISSUER (email)` (created by an enterprise grant).
fn origin(u: &pforte_oauth::UserInfo) -> String {
    match &u.external {
        None if u.password => "local".to_owned(),
        None => "local (no password)".to_owned(),
        Some(e) => match &e.email {
            Some(email) if *email != u.username => format!("{} ({email})", e.origin()),
            _ => e.origin(),
        },
    }
}

/// A local user's role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    User,
    Admin,
}

/// Runs `pforte user ACTION` on the authorization server's store; `add` may create it.
pub(crate) async fn run(admin: Admin, action: UserAction, now: u64) -> CmdResult {
    match action {
        UserAction::Add { username, role } => {
            let password = read_password(&format!("Password for {username}: "))?;
            admin.add_user(&username, &password).await?;
            if role == Role::Admin {
                admin.set_admin(&username, true).await?;
            }
            println!(
                "added user {username:?}{}",
                if role == Role::Admin { " (admin)" } else { "" }
            );
        }
        UserAction::Role { username, role } => {
            admin.set_admin(&username, role == Role::Admin).await?;
            println!(
                "{username:?} is now {}",
                if role == Role::Admin {
                    "an admin"
                } else {
                    "a user"
                }
            );
        }
        UserAction::Passwd { username } => {
            let password = read_password(&format!("New password for {username}: "))?;
            admin.set_password(&username, &password).await?;
            println!("changed the password of {username:?}");
        }
        UserAction::List(list) => {
            let users = admin.list_users().await?;
            let json = users
                .iter()
                .map(|u| {
                    let ext = u.external.as_ref();
                    serde_json::json!({
                        "username": u.username,
                        "origin": match ext.map(|e| e.via) {
                            None => "local",
                            Some(pforte_oauth::Via::Sso) => "oidc",
                            Some(pforte_oauth::Via::Enterprise) => "enterprise",
                        },
                        "provider": ext.map(|e| &e.provider),
                        "issuer": ext.map(|e| &e.issuer),
                        "subject": ext.map(|e| &e.subject),
                        "email": ext.and_then(|e| e.email.as_ref()),
                        "groups": ext.map(|e| &e.groups),
                        "created_at": cli::rfc3339(u.created_at),
                        "password_changed_at": u.password.then(|| cli::rfc3339(u.updated_at)),
                        "role": if u.admin { "admin" } else { "user" },
                    })
                })
                .collect();
            let rows = users
                .iter()
                .map(|u| {
                    vec![
                        u.username.clone(),
                        origin(u),
                        if u.admin { "admin" } else { "user" }.to_owned(),
                        cli::utc_minute(u.created_at),
                        if u.password {
                            format!(
                                "{} ({})",
                                cli::utc_minute(u.updated_at),
                                cli::relative(u.updated_at, now)
                            )
                        } else {
                            "-".to_owned()
                        },
                    ]
                })
                .collect();
            print_list(
                list,
                json,
                &["user", "origin", "role", "created", "password changed"],
                rows,
                "no users",
            )?;
        }
        UserAction::Remove { username } => {
            admin.remove_user(&username).await?;
            println!("removed user {username:?} and revoked their grants");
        }
    }
    Ok(())
}
