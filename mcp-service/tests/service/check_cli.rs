//! `mcp-service check` as a CI job runs it: exit 0 without a blocking finding, 3 with one, 64 on
//! a usage error, 1 on an unreadable file.
use std::process::Command;

fn check(args: &[&str]) -> i32 {
    Command::new(env!("CARGO_BIN_EXE_mcp-service"))
        .arg("check")
        .args(args)
        .output()
        .unwrap()
        .status
        .code()
        .unwrap()
}

#[test]
fn exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    };
    let prod = write(
        "prod.werkbaum",
        "R\n  - [^] Shipped (S)\n  - [ ] Next (S)\n",
    );
    let empty = write(
        "empty.werkbaum",
        "R\n  - [ ] Shipped (S)\n  - [ ] Next (S)\n",
    );
    let dup = write("dup.werkbaum", "- a #x\n- b #x\n");
    let stray = write("stray.werkbaum", "- [@] a\n");
    let single = write("single.werkbaum", "- a #x\n");
    assert_eq!(check(&[&prod]), 0, "an existing [^] is not newly set");
    assert_eq!(
        check(&[&prod, "--against", &empty]),
        3,
        "newly set against OLD"
    );
    assert_eq!(check(&[&prod, "--against", &prod]), 0);
    assert_eq!(check(&[&stray]), 3, "a structural warning blocks");
    assert_eq!(check(&[&stray, "--allow-warnings"]), 0);
    assert_eq!(
        check(&[&dup]),
        0,
        "a duplicate id on its own is reported, not blocking"
    );
    assert_eq!(
        check(&[&dup, "--against", &single]),
        3,
        "a newly introduced duplicate id blocks"
    );
    assert_eq!(check(&[]), 64, "no FILE");
    assert_eq!(check(&[&prod, "--frobnicate"]), 64);
    assert_eq!(check(&["--help"]), 0);
    assert_eq!(check(&["/nonexistent/plan.werkbaum"]), 1);
}
