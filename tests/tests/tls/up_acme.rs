//! `pforte up --public-url https://HOST --acme EMAIL`: the one command of the VPS recipe, here
//! against pebble (its directory and CA given by `PFORTE_ACME_DIRECTORY`/`PFORTE_ACME_CA_FILE`)
//! and on a loopback port instead of 443: it prints the Claude.ai connector URL, obtains the
//! certificate by tls-alpn-01, and an MCP client trusting the CA's root initializes.

use std::{process::Command, time::Duration};

use pforte_tests::{McpClient, Proc, bin, eventually};

use crate::{
    pebble::{Pebble, PebbleOptions},
    port,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_with_acme_prints_the_connector_url_and_serves_a_trusted_certificate() {
    let gw_port = port();
    let Some(pebble) = Pebble::start(PebbleOptions {
        tls_port: gw_port,
        http_port: port(),
        validity_secs: 3600,
    })
    .await
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let public = format!("https://mcp.pforte.test:{gw_port}");
    let mut cmd = Command::new(bin("pforte"));
    cmd.args([
        "up",
        "--listen",
        &format!("127.0.0.1:{gw_port}"),
        "--public-url",
        &public,
    ])
    .args(["--acme", "ops@pforte.test", "--data-dir"])
    .arg(dir.path().join("data"))
    .env("PFORTE_MCP_SERVICE_BIN", bin("mcp-service"))
    .env("PFORTE_ACME_DIRECTORY", &pebble.directory)
    .env("PFORTE_ACME_CA_FILE", &pebble.https_ca);
    let mut up = Proc::spawn_logged(cmd, &dir.path().join("up.log")).unwrap();
    let banner = up
        .lines_until("Press Ctrl-C", Duration::from_secs(30))
        .unwrap();
    let text = banner.join("\n");
    assert!(
        text.contains(&format!(
            "Claude.ai: Settings → Connectors → Add custom connector, URL {public}/mcp"
        )),
        "{text}"
    );
    assert!(
        text.contains("certificate for mcp.pforte.test from https://127.0.0.1:"),
        "{text}"
    );
    let token = banner
        .iter()
        .find_map(|l| l.trim().strip_prefix("Token:"))
        .map(|t| t.trim().to_owned())
        .unwrap();

    let root = pebble.root().await;
    let client = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(root.as_bytes()).unwrap()])
        .resolve(
            "mcp.pforte.test",
            format!("127.0.0.1:{gw_port}").parse().unwrap(),
        )
        .build()
        .unwrap();
    let url = format!("{public}/mcp");
    let ok = eventually(Duration::from_secs(60), || {
        let mut mcp = McpClient::new(client.clone(), &url).bearer(&token);
        async move { mcp.try_initialize().await.is_ok_and(|r| r.status() == 200) }
    })
    .await;
    let log = std::fs::read_to_string(dir.path().join("up.log")).unwrap_or_default();
    assert!(ok, "{log}\n--- pebble:\n{}", pebble.log());
    assert_eq!(log.matches("acme order created").count(), 1, "{log}");
}
