//! The store's life, with the real binaries: `pforte serve` refuses a data dir that holds no
//! store unless `--init` (or `PFORTE_INIT=1`) tells it to create one; `pforte backup` copies the
//! store while the gateway serves and writes, and `pforte restore` puts it into a fresh data dir
//! that a new gateway serves (never under a running one, over a store only with `--force`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use pforte_tests::{
    Proc, Stack, eventually,
    oauth::{access_token_at, mcp_status},
    pforte_cmd,
};
use reqwest::StatusCode;

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

/// The permission bits of `path`.
fn mode_of(path: &Path) -> std::io::Result<u32> {
    use std::os::unix::fs::PermissionsExt as _;
    Ok(std::fs::metadata(path)?.permissions().mode() & 0o777)
}

/// `pforte ARGS… --config CONFIG --json` parsed.
fn json(args: &[&str], config: &str) -> Vec<serde_json::Value> {
    let mut all = args.to_vec();
    all.push("--json");
    serde_json::from_str(&pforte_cmd(&all, &["--config", config], "").unwrap()).unwrap()
}

fn names(list: &[serde_json::Value], key: &str) -> Vec<String> {
    list.iter()
        .map(|v| v[key].as_str().unwrap().to_owned())
        .collect()
}

/// A copy of the config at `from` with its own data dir (`dir/data`) and a free port.
fn config_beside(from: &Path, dir: &Path) -> PathBuf {
    let mut table: toml::Table = std::fs::read_to_string(from).unwrap().parse().unwrap();
    let data = dir.join("data").display().to_string();
    table.insert("data_dir".into(), data.into());
    table.insert("listen".into(), "127.0.0.1:0".into());
    let path = dir.join("pforte.toml");
    std::fs::write(&path, toml::to_string(&table).unwrap()).unwrap();
    path
}

/// How many tokens the loop beside the backup creates.
const LOOP: usize = 200;

#[tokio::test(flavor = "multi_thread")]
async fn a_backup_taken_while_the_gateway_writes_restores_into_a_gateway_that_works() {
    let s = Stack::builder().plain_http().start().await;
    let config = s.config_path().display().to_string();
    s.add_user("alice", "alice-password-1").unwrap();
    let oauth = access_token_at(&s.mcp_url(), None, "alice", "alice-password-1", "mcp:read")
        .await
        .unwrap();
    assert_eq!(
        mcp_status(&s.http(), &s.mcp_url(), &oauth).await,
        StatusCode::OK
    );
    let before = s.create_token("before").await.unwrap();

    // Tokens are created one after another (a bounded loop) while the backup runs.
    let writer = {
        let config = config.clone();
        std::thread::spawn(move || {
            for i in 0..LOOP {
                pforte_cmd(
                    &["token", "create", &format!("w{i}")],
                    &["--config", &config],
                    "",
                )
                .unwrap();
            }
        })
    };
    let started = eventually(Duration::from_secs(20), || async {
        names(&json(&["token", "list"], &config), "name").len() >= 4
    })
    .await;
    assert!(started, "the token loop never got going");
    let work = tempfile::tempdir().unwrap();
    let dest = work.path().join("backup");
    let out = {
        let (config, dest) = (config.clone(), dest.display().to_string());
        tokio::task::spawn_blocking(move || {
            run(
                pforte(&["backup", &dest, "--config", &config]),
                Duration::from_secs(30),
            )
        })
        .await
        .unwrap()
    };
    let writing = !writer.is_finished();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("backed up pforte.db, oauth.db"),
        "{}",
        out.stderr
    );
    writer.join().unwrap();
    assert_eq!(mode_of(&dest).unwrap(), 0o700);
    for f in ["pforte.db", "oauth.db", "pforte-backup.json"] {
        assert_eq!(mode_of(&dest.join(f)).unwrap(), 0o600, "{f}");
    }

    // Not into the data dir of the running gateway, even with --force.
    let out = run(
        pforte(&[
            "restore",
            dest.to_str().unwrap(),
            "--force",
            "--config",
            &config,
        ]),
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(69), "{}", out.stderr);
    assert!(out.stderr.contains("is using"), "{}", out.stderr);

    // Into a fresh data dir; a second time only with --force.
    let fresh = work.path().join("fresh");
    std::fs::create_dir(&fresh).unwrap();
    let restored = config_beside(&s.config_path(), &fresh);
    let restored = restored.to_str().unwrap();
    let restore = |force: bool| {
        let mut args = vec!["restore", dest.to_str().unwrap(), "--config", restored];
        if force {
            args.push("--force");
        }
        run(pforte(&args), Duration::from_secs(20))
    };
    let out = restore(false);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let data = fresh.join("data");
    for f in ["pforte.db", "oauth.db"] {
        assert_eq!(mode_of(&data.join(f)).unwrap(), 0o600, "{f}");
    }
    let out = restore(false);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("holds a store already"),
        "{}",
        out.stderr
    );
    let out = restore(true);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("replaced files are in"),
        "{}",
        out.stderr
    );

    // A gateway on the restored dir starts without --init and knows what the backup held: the
    // static token, and alice, her client and her grant.
    let (_gw, base) = {
        let restored = restored.to_owned();
        tokio::task::spawn_blocking(move || serving(pforte(&["serve", "--config", &restored])))
            .await
            .unwrap()
    };
    let mcp = format!("{base}/mcp");
    let http = pforte_tests::http_client(None);
    assert_eq!(mcp_status(&http, &mcp, &before).await, StatusCode::OK);
    assert_eq!(
        mcp_status(&http, &mcp, "pft_not-a-token").await,
        StatusCode::UNAUTHORIZED
    );
    // Consistent: the tokens up to some point of the loop, none missing before it.
    let mut tokens = names(&json(&["token", "list"], restored), "name");
    tokens.sort();
    let looped = tokens.len() - 1;
    let mut expected: Vec<String> = std::iter::once("before".to_owned())
        .chain((0..looped).map(|i| format!("w{i}")))
        .collect();
    expected.sort();
    assert_eq!(tokens, expected);
    assert!(looped >= 3, "{tokens:?}");
    eprintln!("backup held {looped} of {LOOP} loop tokens; the loop still ran after it: {writing}");
    assert_eq!(
        names(&json(&["user", "list"], restored), "username"),
        ["alice"]
    );
    assert_eq!(json(&["client", "list"], restored).len(), 1);
    assert_eq!(
        json(&["grant", "list", "--user", "alice"], restored).len(),
        1
    );
    let again = access_token_at(&mcp, None, "alice", "alice-password-1", "mcp:read")
        .await
        .unwrap();
    assert_eq!(mcp_status(&http, &mcp, &again).await, StatusCode::OK);
}

#[test]
fn backup_and_restore_of_a_redis_store_say_what_to_do_instead() {
    let dir = tempfile::tempdir().unwrap();
    for command in ["backup", "restore"] {
        let mut cmd = pforte(&[command, dir.path().to_str().unwrap()]);
        cmd.env("PFORTE_REDIS_URL", "redis://127.0.0.1:1/");
        let out = run(cmd, Duration::from_secs(20));
        assert_eq!(out.code, Some(64), "{}", out.stderr);
        assert!(
            out.stderr.contains("the store is redis") && out.stderr.contains("redis-cli --rdb"),
            "{}",
            out.stderr
        );
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_gateway_does_not_start_while_a_restore_holds_the_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let config = config.to_str().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    // What `pforte restore` holds while it writes: the data dir's lock, exclusively.
    let lock = std::fs::File::create(data.join("pforte.lock")).unwrap();
    lock.try_lock().unwrap();
    let out = run(
        pforte(&["serve", "--init", "--config", config]),
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(69), "{}", out.stderr);
    assert!(out.stdout.is_empty(), "printed success: {}", out.stdout);
    assert!(
        out.stderr
            .trim()
            .starts_with("pforte: the store is being restored: ")
            && out.stderr.trim().lines().count() == 1,
        "{}",
        out.stderr
    );
    drop(lock);
    drop(serving(pforte(&["serve", "--init", "--config", config])));
}
