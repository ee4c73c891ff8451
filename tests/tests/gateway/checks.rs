//! Start-up checks that speak (issue 37): a `data_dir` that is a file is one line naming it and
//! exit 64 for every command that would use it; a busy `metrics_listen` fails `serve` before it
//! says it listens; `check` names sign-in, TLS and the vault. Issue 41: an audit log that
//! cannot be opened is one line naming its path, in the gateway's words (not "pingora: …").
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{net::TcpListener, time::Duration};

use crate::operator::{pforte, run, write_config};

#[test]
fn a_data_dir_that_is_a_file_is_named_and_exit_64() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let config = dir.path().join("pforte.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\ndata_dir = {:?}\n",
            file.display().to_string()
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let file_arg = file.to_str().unwrap();
    for args in [
        vec!["check", "--config", config],
        vec!["serve", "--init", "--config", config],
        vec!["user", "list", "--config", config],
        vec!["token", "create", "t", "--config", config],
        vec!["up", "--listen", "127.0.0.1:0", "--data-dir", file_arg],
    ] {
        let out = run(pforte(&args), Duration::from_secs(20));
        assert_eq!(out.code, Some(64), "{args:?}: {}", out.stderr);
        assert_eq!(
            out.stderr.trim(),
            format!(
                "pforte: data_dir {file_arg} is a file, not a directory: point data_dir (or \
                 --data-dir, PFORTE_DATA_DIR) at a directory, or move the file away"
            ),
            "{args:?}"
        );
        assert!(
            !out.stdout.contains("listening"),
            "{args:?}: {}",
            out.stdout
        );
    }
}

#[test]
fn a_busy_metrics_listen_fails_serve_before_it_says_it_listens() {
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = held.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &format!("metrics_listen = \"{busy}\"\n"));
    let out = run(
        pforte(&["serve", "--init", "--config", config.to_str().unwrap()]),
        Duration::from_secs(30),
    );
    assert_ne!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.is_empty(), "printed success: {}", out.stdout);
    assert!(
        out.stderr.contains(&format!("metrics_listen {busy}")),
        "{}",
        out.stderr
    );
    drop(held);
}

#[test]
fn an_audit_log_that_cannot_be_opened_is_one_line_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    // A path under a regular file: no directory can be made there.
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let audit = file.join("audit.jsonl");
    let config = write_config(
        dir.path(),
        &format!("audit_log = {:?}\n", audit.display().to_string()),
    );
    let out = run(
        pforte(&["serve", "--init", "--config", config.to_str().unwrap()]),
        Duration::from_secs(30),
    );
    assert_ne!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.is_empty(), "printed success: {}", out.stdout);
    let last = out.stderr.trim().lines().last().unwrap_or_default();
    assert!(
        last.starts_with(&format!(
            "pforte: cannot open the audit log {}: ",
            audit.display()
        )),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("pingora"), "{}", out.stderr);
}

#[test]
fn check_names_sign_in_tls_and_the_vault() {
    let dir = tempfile::tempdir().unwrap();
    let key = pforte_tests::write_vault_key(dir.path()).unwrap();
    let config = write_config(
        dir.path(),
        &format!("[vault]\nkey_file = {:?}\n", key.display().to_string()),
    );
    let out = run(
        pforte(&["check", "--config", config.to_str().unwrap()]),
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    for line in [
        "  sign-in: local passwords".to_owned(),
        "  TLS: off (plain HTTP on loopback)".to_owned(),
        format!(
            "  vault: key file {}; keys k1 (k1 seals); 0 stored credential(s) open",
            key.display()
        ),
    ] {
        assert!(
            out.stdout.lines().any(|l| l == line),
            "{line:?} not in {}",
            out.stdout
        );
    }
}

/// Issue 43 point 2: `pforte check` names a `[[policy]]` rule that does not compile, reads an
/// unknown variable (with the line and column within `when`, and a caret line), repeats a
/// name or names an unknown route — exit 64, nothing started; a good rule passes.
#[test]
fn check_names_a_bad_policy_rule_and_where() {
    let rule = |name: &str, when: &str, more: &str| {
        format!("[[policy]]\nname = {name:?}\nwhen = '''{when}'''\neffect = \"deny\"\n{more}")
    };
    let cases = [
        (
            rule("typo", "tool.name == \"x\" && arg.doc == \"s\"", ""),
            vec![
                "[[policy]] \"typo\": when:1:21: unknown variable `arg` (known: user, client, route, tool, args, method, request)",
                "  | tool.name == \"x\" && arg.doc == \"s\"",
                "  |                     ^",
            ],
        ),
        (
            rule("broken", "tool.name ==\n  (\"x\"", ""),
            vec!["[[policy]] \"broken\": when:2:", "Syntax error"],
        ),
        (
            rule("twice", "true", "") + &rule("twice", "false", ""),
            vec!["[[policy]] \"twice\": name: another rule before it has this name"],
        ),
        (
            rule("lost", "true", "routes = [\"nowhere\"]\n"),
            vec!["[[policy]] \"lost\": routes: no route is named \"nowhere\""],
        ),
    ];
    for (extra, wanted) in cases {
        let dir = tempfile::tempdir().unwrap();
        let config = write_config(dir.path(), &extra);
        let out = run(
            pforte(&["check", "--config", config.to_str().unwrap()]),
            Duration::from_secs(20),
        );
        assert_eq!(out.code, Some(64), "{extra}: {}", out.stderr);
        for want in wanted {
            assert!(out.stderr.contains(want), "{want:?} not in {}", out.stderr);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let good = rule(
        "no-secret-docs",
        "tool.name == \"werkbaum_read\" && args.document.startsWith(\"secret-\")",
        "message = \"Secret documents are read by hand.\"\n",
    );
    let config = write_config(dir.path(), &good);
    let out = run(
        pforte(&["check", "--config", config.to_str().unwrap()]),
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let line = "  policy: 1 rule(s) in order: no-secret-docs (deny, every route)";
    assert!(
        out.stdout.lines().any(|l| l == line),
        "{line:?} not in {}",
        out.stdout
    );
}
