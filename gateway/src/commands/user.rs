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
    },
    /// Change a user's password (prompt or stdin).
    Passwd {
        /// An existing user.
        username: String,
    },
    /// List users with their creation and password-change times.
    List(ListArgs),
    /// Remove a user and revoke their grants.
    Remove {
        /// An existing user.
        username: String,
    },
}

/// Runs `pforte user ACTION`; `add` may create the store.
/// Runs `pforte user ACTION` on the authorization server's store.
pub(crate) async fn run(admin: Admin, action: UserAction, now: u64) -> CmdResult {
    match action {
        UserAction::Add { username } => {
            let password = read_password(&format!("Password for {username}: "))?;
            admin.add_user(&username, &password).await?;
            println!("added user {username:?}");
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
                    serde_json::json!({
                        "username": u.username,
                        "created_at": cli::rfc3339(u.created_at),
                        "password_changed_at": cli::rfc3339(u.updated_at),
                    })
                })
                .collect();
            let rows = users
                .iter()
                .map(|u| {
                    vec![
                        u.username.clone(),
                        cli::utc_minute(u.created_at),
                        format!(
                            "{} ({})",
                            cli::utc_minute(u.updated_at),
                            cli::relative(u.updated_at, now)
                        ),
                    ]
                })
                .collect();
            print_list(
                list,
                json,
                &["user", "created", "password changed"],
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
