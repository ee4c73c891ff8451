//! `mcp-service pull-doc` through the gateway into a throwaway git repo: one commit per change,
//! none without, a body listing the versions with their authors, trailers that parse with
//! `git interpret-trailers`, the next run starting from the last mirrored version, and
//! `--with-history` replaying every version as its own commit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use super::werkbaum_support::{Werkbaum, base_of, call, create, git};
use serde_json::json;

const PLAN: &str = "- [ ] Mirror me #top\n  - [ ] First part (S) #first\n";

fn pull(stack: &Werkbaum, doc: &str, file: &Path, extra: &[&str]) -> String {
    let cert = &stack.gw.cert.as_ref().unwrap().cert;
    let out = Command::new(pforte_tests::bin("mcp-service"))
        .arg("pull-doc")
        .arg(stack.gw.mcp_url())
        .arg(doc)
        .arg(file)
        .args(extra)
        .arg("--ca-cert")
        .arg(cert)
        .env("PFORTE_TOKEN", &stack.token)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pull-doc failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn commits(repo: &Path) -> usize {
    git(repo, &["rev-list", "--count", "HEAD"])
        .trim()
        .parse()
        .unwrap()
}

fn trailers(repo: &Path) -> Vec<(String, String)> {
    let msg = git(repo, &["log", "-1", "--format=%B"]);
    let mut child = Command::new("git")
        .args(["interpret-trailers", "--parse"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(msg.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn new_repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q", "-b", "main"]);
    git(dir.path(), &["config", "user.name", "Mirror Bot"]);
    git(
        dir.path(),
        &["config", "user.email", "mirror@example.invalid"],
    );
    git(dir.path(), &["config", "commit.gpgsign", "false"]);
    std::fs::write(dir.path().join("README"), "repo\n").unwrap();
    git(dir.path(), &["add", "README"]);
    git(dir.path(), &["commit", "-q", "-m", "init"]);
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_doc_commits_each_change_once_with_parseable_trailers() {
    let stack = Werkbaum::start(&[]).await;
    let claude = stack.client_as("Claude Code").await;
    let tests = stack.client().await;
    let (doc, base) = create(&claude, "Mirror", PLAN, false).await;
    let repo = new_repo();
    std::fs::create_dir(repo.path().join("plans")).unwrap();
    let file = repo.path().join("plans/mirror.werkbaum");

    // First mirror: one commit with v1.
    pull(&stack, &doc, &file, &["--git-commit"]);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), PLAN);
    assert_eq!(commits(repo.path()), 2);
    let t = trailers(repo.path());
    assert!(
        t.contains(&("Werkbaum-Version".into(), "1".into())),
        "{t:?}"
    );
    assert!(t.contains(&(
        "Werkbaum-Changed-By".into(),
        "Claude Code · operator".into()
    )));

    // Nothing changed: no commit.
    let out = pull(&stack, &doc, &file, &["--git-commit"]);
    assert!(out.contains("up to date"), "{out}");
    assert_eq!(commits(repo.path()), 2);

    // Two versions by two participants: one commit naming both.
    let r = call(
        &tests,
        "werkbaum_set_status",
        json!({"document": doc, "base": base, "id": "first", "status": "~"}),
    )
    .await
    .ok();
    let base = json!({"version": r["version"], "checksum": r["checksum"]});
    call(&claude, "werkbaum_add_node", json!({"document": doc, "base": base, "parent": "top", "line": "- [ ] Second part (S) #second"})).await.ok();
    pull(&stack, &doc, &file, &["--git-commit"]);
    assert_eq!(commits(repo.path()), 3);
    let subject = git(repo.path(), &["log", "-1", "--format=%s"]);
    assert_eq!(
        subject.trim(),
        "werkbaum: Mirror v3 by Claude Code · operator"
    );
    let body = git(repo.path(), &["log", "-1", "--format=%b"]);
    assert!(
        body.contains("v2 pforte-tests · operator — set_status #first [~]"),
        "{body}"
    );
    assert!(
        body.contains("v3 Claude Code · operator — add_node"),
        "{body}"
    );
    assert!(
        !body.contains("v1 "),
        "only versions since the last mirror: {body}"
    );
    let t = trailers(repo.path());
    let by: Vec<_> = t
        .iter()
        .filter(|(k, _)| k == "Werkbaum-Changed-By")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(by, ["pforte-tests · operator", "Claude Code · operator"]);
    assert!(t.contains(&("Werkbaum-Version".into(), "3".into())));
    assert!(t.contains(&("Werkbaum-Document".into(), doc.clone())));
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        call(&tests, "werkbaum_read", json!({"document": doc}))
            .await
            .ok()["text"]
            .as_str()
            .unwrap()
    );
    // Only the mirrored file is committed.
    let files = git(repo.path(), &["show", "--name-only", "--format=", "HEAD"]);
    assert_eq!(files.trim(), "plans/mirror.werkbaum");
    pull(&stack, &doc, &file, &["--git-commit"]);
    assert_eq!(commits(repo.path()), 3, "no commit without a change");

    // --with-history: one commit per version since the last mirror.
    for (i, id) in ["a", "b", "c"].iter().enumerate() {
        let base = base_of(&tests, &doc).await;
        call(&tests, "werkbaum_add_node", json!({"document": doc, "base": base, "parent": "top", "line": format!("- [ ] Part {i} #{id}")})).await.ok();
    }
    pull(&stack, &doc, &file, &["--with-history"]);
    assert_eq!(commits(repo.path()), 6);
    let subjects = git(repo.path(), &["log", "-3", "--format=%s"]);
    assert_eq!(
        subjects.lines().collect::<Vec<_>>(),
        [
            "werkbaum: Mirror v6 by pforte-tests · operator",
            "werkbaum: Mirror v5 by pforte-tests · operator",
            "werkbaum: Mirror v4 by pforte-tests · operator"
        ]
    );
    let t = trailers(repo.path());
    assert!(t.contains(&("Werkbaum-Version".into(), "6".into())));
    // Without git: just the file.
    let plain = tempfile::tempdir().unwrap();
    let out = pull(&stack, &doc, &plain.path().join("p.werkbaum"), &[]);
    assert!(out.contains("wrote v6"), "{out}");
}

#[test]
fn pull_doc_never_takes_the_token_as_an_argument() {
    let out = Command::new(pforte_tests::bin("mcp-service"))
        .args(["pull-doc", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(!help.contains("--token"), "{help}");
    assert!(help.contains("PFORTE_TOKEN"), "{help}");
}
