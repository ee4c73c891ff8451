//! A real ACME CA for the tests: Debian's `pebble` with `pebble-challtestsrv` as its DNS
//! server (every name resolves to 127.0.0.1), both on loopback ports of their own, with real
//! challenge validation against the gateway's ports (`tlsPort`/`httpPort`). Stopped when
//! dropped.

use std::{path::PathBuf, process::Command, time::Duration};

use pforte_tests::{Proc, eventually, free_port, in_ci, which};

pub(crate) struct Pebble {
    pub(crate) proc: Option<Proc>,
    _dns: Proc,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) directory: String,
    /// The PEM of pebble's own https certificate (for `[tls.acme] ca_file`).
    pub(crate) https_ca: PathBuf,
    pub(crate) management: u16,
    config: PathBuf,
    dns_port: u16,
}

/// The ports pebble validates on, and how long its certificates live.
pub(crate) struct PebbleOptions {
    pub(crate) tls_port: u16,
    pub(crate) http_port: u16,
    pub(crate) validity_secs: u64,
}

impl Pebble {
    /// Starts challtestsrv and pebble, or skips (fails under CI) when they are not installed.
    pub(crate) async fn start(opts: PebbleOptions) -> Option<Self> {
        let (Some(_), Some(_)) = (which("pebble"), which("pebble-challtestsrv")) else {
            assert!(!in_ci(), "pebble is missing under CI=true");
            pforte_tests::skip("pebble is not installed (apt-get install -y pebble)");
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let dns_port = free_port();
        let mut dns = Command::new("pebble-challtestsrv");
        dns.args([
            "-defaultIPv4",
            "127.0.0.1",
            "-defaultIPv6",
            "",
            "-dns01",
            &format!("127.0.0.1:{dns_port}"),
            "-http01",
            "",
            "-https01",
            "",
            "-tlsalpn01",
            "",
            "-management",
            &format!("127.0.0.1:{}", free_port()),
        ]);
        let dns = Proc::spawn_logged(dns, &dir.path().join("challtestsrv.log")).unwrap();

        let ck = rcgen::generate_simple_self_signed(vec![
            "127.0.0.1".to_owned(),
            "localhost".to_owned(),
        ])
        .unwrap();
        let https_ca = dir.path().join("pebble-https.pem");
        std::fs::write(&https_ca, ck.cert.pem()).unwrap();
        std::fs::write(
            dir.path().join("pebble-key.pem"),
            ck.signing_key.serialize_pem(),
        )
        .unwrap();
        let port = free_port();
        let management = free_port();
        let config = dir.path().join("pebble.json");
        std::fs::write(
            &config,
            serde_json::json!({"pebble": {
                "listenAddress": format!("127.0.0.1:{port}"),
                "managementListenAddress": format!("127.0.0.1:{management}"),
                "certificate": https_ca,
                "privateKey": dir.path().join("pebble-key.pem"),
                "httpPort": opts.http_port,
                "tlsPort": opts.tls_port,
                "ocspResponderURL": "",
                "externalAccountBindingRequired": false,
                "certificateValidityPeriod": opts.validity_secs,
            }})
            .to_string(),
        )
        .unwrap();
        let mut pebble = Self {
            proc: None,
            _dns: dns,
            directory: format!("https://127.0.0.1:{port}/dir"),
            https_ca,
            management,
            dir,
            config,
            dns_port,
        };
        pebble.run().await;
        Some(pebble)
    }

    /// (Re)starts the pebble process and waits for its directory.
    pub(crate) async fn run(&mut self) {
        let mut cmd = Command::new("pebble");
        cmd.arg("-config")
            .arg(&self.config)
            .arg("-dnsserver")
            .arg(format!("127.0.0.1:{}", self.dns_port))
            // No random validation delays; no rejected nonces (instant-acme retries them, but
            // the run is shorter without); every order validates afresh.
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .env("PEBBLE_AUTHZREUSE", "0");
        self.proc = Some(Proc::spawn_logged(cmd, &self.dir.path().join("pebble.log")).unwrap());
        let client = self.client();
        let url = self.directory.clone();
        let up = eventually(Duration::from_secs(20), || {
            let client = client.clone();
            let url = url.clone();
            async move {
                client
                    .get(&url)
                    .send()
                    .await
                    .is_ok_and(|r| r.status() == 200)
            }
        })
        .await;
        assert!(up, "pebble did not start:\n{}", self.log());
    }

    /// Stops pebble (the CA is down); [`Self::run`] brings it back.
    pub(crate) fn stop(&mut self) {
        self.proc = None;
    }

    /// A client trusting pebble's https certificate.
    fn client(&self) -> reqwest::Client {
        pforte_tests::http_client(Some(&std::fs::read_to_string(&self.https_ca).unwrap()))
    }

    /// The PEM of the root pebble issues under.
    pub(crate) async fn root(&self) -> String {
        self.client()
            .get(format!("https://127.0.0.1:{}/roots/0", self.management))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pebble.log")).unwrap_or_default()
    }
}
