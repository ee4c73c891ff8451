//! The `pforte` command line as an operator meets it: `check` exits 64 with the reason on a bad
//! config and 0 on a good one; token admin commands work without a running gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn pforte() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pforte"))
}

#[test]
fn check_exits_64_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "listen = \"0.0.0.0:8443\"\n").unwrap();
    let out = pforte()
        .args(["check", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("behind_tls_proxy"), "{err}");

    std::fs::write(&bad, "listen = [\n").unwrap();
    let out = pforte()
        .args(["check", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));

    let good = dir.path().join("good.toml");
    std::fs::write(&good, "listen = \"127.0.0.1:9999\"\n").unwrap();
    let out = pforte()
        .args(["check", "--config"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn token_lifecycle_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        pforte()
            .arg("token")
            .args(args)
            .arg("--data-dir")
            .arg(dir.path())
            .output()
            .unwrap()
    };
    let out = run(&["create", "ci", "--scope", "mcp:read", "--expires", "30d"]);
    assert!(out.status.success());
    let token = String::from_utf8(out.stdout).unwrap();
    assert!(token.trim().starts_with("pft_"));
    let out = run(&["create", "ci"]);
    assert!(!out.status.success(), "duplicate names are refused");
    let out = run(&["create", "x", "--scope", "admin"]);
    assert!(!out.status.success(), "unknown scopes are refused");
    let list = String::from_utf8(run(&["list"]).stdout).unwrap();
    assert!(list.contains("ci") && list.contains("active") && !list.contains(token.trim()));
    assert!(run(&["revoke", "ci"]).status.success());
    assert!(!run(&["revoke", "ci"]).status.success());
    let list = String::from_utf8(run(&["list"]).stdout).unwrap();
    assert!(list.contains("revoked"));
}
