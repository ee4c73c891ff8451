//! The store's life, with the real binaries: `pforte serve` refuses a data dir that holds no
//! store unless `--init` (or `PFORTE_INIT=1`) tells it to create one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use pforte_tests::Proc;

use crate::operator::{pforte, run, write_config};

/// Starts `cmd` (a `pforte serve`) and waits until it answers `/healthz` (its stores are open
/// by then); returns it with its base URL.
pub(crate) fn serving(cmd: std::process::Command) -> (Proc, String) {
    let mut gw = Proc::spawn(cmd).unwrap();
    let line = gw
        .wait_line("pforte listening on", Duration::from_secs(20))
        .unwrap();
    let base = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_owned();
    let http = pforte_tests::http_client(None);
    let health = format!("{base}/healthz");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let up = rt.block_on(pforte_tests::eventually(Duration::from_secs(20), || {
        let req = http.get(&health).send();
        async move { req.await.is_ok_and(|r| r.status() == 200) }
    }));
    assert!(up, "{base} never became healthy");
    (gw, base)
}

#[test]
fn serve_refuses_a_data_dir_without_a_store_unless_told_to_create_one() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let config = config.to_str().unwrap();
    let data = dir.path().join("data");
    let line = format!(
        "pforte: no Pforte store at {} — pass the --data-dir the gateway uses, or create a new \
         store there with `pforte serve --init` (or PFORTE_INIT=1)",
        data.display()
    );

    // `check` says so as a warning: the configuration itself is fine.
    let out = run(
        pforte(&["check", "--config", config]),
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr
            .contains(&format!("warning: {}", &line["pforte: ".len()..])),
        "{}",
        out.stderr
    );

    // `serve` refuses: one line, exit 66, nothing listens, nothing is created.
    let out = run(
        pforte(&["serve", "--config", config]),
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(66), "{}", out.stderr);
    assert_eq!(out.stderr.trim(), line);
    assert!(out.stdout.is_empty(), "printed success: {}", out.stdout);
    assert!(!data.exists(), "serve created {}", data.display());

    // With --init it creates the store and serves.
    drop(serving(pforte(&["serve", "--init", "--config", config])));
    assert!(data.join("pforte.db").is_file() && data.join("oauth.db").is_file());

    // The store exists now: a second start needs no --init.
    drop(serving(pforte(&["serve", "--config", config])));
    let out = run(
        pforte(&["check", "--config", config]),
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(!out.stderr.contains("warning"), "{}", out.stderr);

    // PFORTE_INIT=1 does what --init does (for containers); another value is a usage error.
    let fresh = tempfile::tempdir().unwrap();
    let config = write_config(fresh.path(), "");
    let config = config.to_str().unwrap();
    let mut cmd = pforte(&["serve", "--config", config]);
    cmd.env("PFORTE_INIT", "yes");
    let out = run(cmd, Duration::from_secs(20));
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    let mut cmd = pforte(&["serve", "--config", config]);
    cmd.env("PFORTE_INIT", "1");
    drop(serving(cmd));
    assert!(fresh.path().join("data/pforte.db").is_file());
}
