//! Every admin command beside a running gateway (`pforte up` and `pforte serve`): the CLI sees
//! what the gateway wrote, the gateway sees what the CLI wrote (a CLI-added user logs in, a CLI
//! revoke stops the token within a second), and `kill -9` of the gateway loses nothing committed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use pforte_tests::{
    PforteUp, Stack, eventually, http_client,
    oauth::{access_token_at, mcp_status},
};
use reqwest::StatusCode;

/// Where the admin commands find the running gateway's store, and how to reach the gateway.
struct Target {
    /// `--data-dir D` (up) or `--config F` (serve).
    store_args: Vec<String>,
    mcp_url: String,
    ca_pem: Option<String>,
}

impl Target {
    /// Runs `pforte ARGS… <store args>` with `stdin`; returns stdout, failing on a non-zero exit.
    fn admin(&self, args: &[&str], stdin: &str) -> String {
        let store: Vec<&str> = self.store_args.iter().map(String::as_str).collect();
        pforte_tests::pforte_cmd(args, &store, stdin).unwrap()
    }

    fn json(&self, args: &[&str]) -> Vec<serde_json::Value> {
        let mut all = args.to_vec();
        all.push("--json");
        serde_json::from_str(&self.admin(&all, "")).unwrap()
    }

    async fn token(&self, user: &str, password: &str) -> anyhow::Result<String> {
        access_token_at(
            &self.mcp_url,
            self.ca_pem.as_deref(),
            user,
            password,
            "mcp:read",
        )
        .await
    }

    async fn status(&self, token: &str) -> StatusCode {
        mcp_status(&http_client(self.ca_pem.as_deref()), &self.mcp_url, token).await
    }
}

fn ids(list: &[serde_json::Value], key: &str) -> Vec<String> {
    list.iter()
        .map(|v| v[key].as_str().unwrap().to_owned())
        .collect()
}

/// The whole round of admin commands against `target`, whose gateway `kill` stops with SIGKILL.
async fn admin_round(target: &Target, kill: impl FnOnce()) {
    // Read-only commands first: they used to delete the WAL the gateway was writing to.
    target.admin(&["user", "list"], "");
    target.admin(&["client", "list"], "");
    target.admin(&["grant", "list"], "");
    target.admin(&["user", "add", "alice"], "first-password-1\n");

    // A CLI-added user logs in through the gateway; the gateway's writes reach the CLI.
    let first = target.token("alice", "first-password-1").await.unwrap();
    assert_eq!(target.status(&first).await, StatusCode::OK);
    let grants = target.json(&["grant", "list", "--user", "alice"]);
    assert_eq!(grants.len(), 1, "{grants:?}");
    let clients = ids(&target.json(&["client", "list"]), "client_id");
    assert_eq!(clients.len(), 1, "{clients:?}");

    // A new password works at once; the old one no longer does.
    target.admin(&["user", "passwd", "alice"], "second-password-2\n");
    assert!(target.token("alice", "first-password-1").await.is_err());
    let second = target.token("alice", "second-password-2").await.unwrap();

    // A CLI revoke stops alice's tokens within a second.
    let out = target.admin(&["grant", "revoke", "--user", "alice"], "");
    assert!(out.contains("revoked 2 grant(s)"), "{out}");
    let revoked_at = Instant::now();
    let stopped = eventually(Duration::from_secs(1), || async {
        target.status(&first).await == StatusCode::UNAUTHORIZED
            && target.status(&second).await == StatusCode::UNAUTHORIZED
    })
    .await;
    assert!(
        stopped,
        "tokens still accepted {:?} after the revoke",
        revoked_at.elapsed()
    );

    // Add and remove, user and client.
    target.admin(&["user", "add", "bob"], "bob-password-3\n");
    target.admin(&["user", "remove", "bob"], "");
    let users = ids(&target.json(&["user", "list"]), "username");
    assert!(!users.contains(&"bob".to_owned()), "{users:?}");
    target.admin(&["client", "remove", &clients[0]], "");

    // What the gateway commits after all of that survives its SIGKILL.
    // Four registrations (the refused login registered one too), one of them removed.
    let third = target.token("alice", "second-password-2").await.unwrap();
    assert_eq!(target.status(&third).await, StatusCode::OK);
    let before = ids(&target.json(&["client", "list"]), "client_id");
    assert_eq!(before.len(), 3, "{before:?}");
    assert!(!before.contains(&clients[0]), "{before:?}");
    kill();
    let active = target.json(&["grant", "list", "--user", "alice"]);
    assert_eq!(active.len(), 1, "the last grant was lost: {active:?}");
    let after = ids(&target.json(&["client", "list"]), "client_id");
    assert_eq!(after, before, "clients lost after kill -9");
}

#[tokio::test(flavor = "multi_thread")]
async fn admin_commands_beside_pforte_up_lose_nothing() {
    let mut up = PforteUp::start().await.unwrap();
    let data: PathBuf = up.data_dir();
    let target = Target {
        store_args: vec!["--data-dir".into(), data.display().to_string()],
        mcp_url: up.mcp_url.clone(),
        ca_pem: None,
    };
    admin_round(&target, || {
        up.proc.child.kill().unwrap();
        up.proc.child.wait().unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn admin_commands_beside_pforte_serve_lose_nothing() {
    let mut gw = Stack::start().await;
    let target = Target {
        store_args: vec!["--config".into(), gw.config_path().display().to_string()],
        mcp_url: gw.mcp_url(),
        ca_pem: gw.ca_pem().map(str::to_owned),
    };
    admin_round(&target, || {
        gw.proc.child.kill().unwrap();
        gw.proc.child.wait().unwrap();
    })
    .await;
}
