//! `pforte client`: registered OAuth clients.

use crate::cli;
use clap::Subcommand;
use pforte_oauth::Admin;

use super::{
    CmdResult,
    admin::{ListArgs, print_list},
};

#[derive(Subcommand)]
pub enum ClientAction {
    /// List registered clients: id, name, authentication method, redirect URIs, last use.
    List(ListArgs),
    /// Remove a client and revoke its grants.
    Remove {
        /// The client_id as `client list` shows it.
        client_id: String,
    },
}

/// Runs `pforte client ACTION` on the authorization server's store.
pub(crate) async fn run(admin: Admin, action: ClientAction, now: u64) -> CmdResult {
    match action {
        ClientAction::List(list) => {
            let clients = admin.list_clients().await?;
            let json = clients
                .iter()
                .map(|c| {
                    serde_json::json!({
                        "client_id": c.client_id,
                        "client_name": c.client_name,
                        "auth_method": c.auth_method.as_str(),
                        "redirect_uris": c.redirect_uris,
                        "created_at": cli::rfc3339(c.created_at),
                        "last_used_at": cli::rfc3339(c.last_used_at),
                    })
                })
                .collect();
            let rows = clients
                .iter()
                .map(|c| {
                    vec![
                        c.client_id.clone(),
                        c.client_name.clone().unwrap_or_else(|| "-".to_owned()),
                        c.auth_method.as_str().to_owned(),
                        cli::utc_minute(c.created_at),
                        format!(
                            "{} ({})",
                            cli::utc_minute(c.last_used_at),
                            cli::relative(c.last_used_at, now)
                        ),
                        c.redirect_uris.join(" "),
                    ]
                })
                .collect();
            print_list(
                list,
                json,
                &[
                    "client",
                    "name",
                    "auth",
                    "registered",
                    "last used",
                    "redirect URIs",
                ],
                rows,
                "no clients",
            )?;
        }
        ClientAction::Remove { client_id } => {
            admin.remove_client(&client_id).await?;
            println!("removed client {client_id:?} and revoked its grants");
        }
    }
    Ok(())
}
