//! The operator's view, with the real binaries: start-up fails fast with one line, logs are
//! plain (or JSON) when redirected, and the admin CLI reads well and refuses a store that isn't.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    io::Read as _,
    net::TcpListener,
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use pforte_tests::bin;

/// What a finished command printed.
struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `cmd` to completion; fails the test if it is still running after `limit`.
fn run(mut cmd: Command, limit: Duration) -> Out {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{cmd:?} still running after {limit:?}; stdout {:?} stderr {:?}",
                out.join().unwrap(),
                err.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Out {
        code: status.code(),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

fn pforte(args: &[&str]) -> Command {
    let mut cmd = Command::new(bin("pforte"));
    cmd.args(args)
        .env_remove("RUST_LOG")
        .env("PFORTE_MCP_SERVICE_BIN", bin("mcp-service"));
    cmd
}

fn write_config(dir: &Path, extra: &str) -> std::path::PathBuf {
    let path = dir.join("pforte.toml");
    let data = dir.join("data");
    std::fs::write(
        &path,
        format!("listen = \"127.0.0.1:0\"\ndata_dir = {data:?}\n{extra}"),
    )
    .unwrap();
    path
}

#[test]
fn check_refuses_a_certificate_that_is_not_pem() {
    let dir = tempfile::tempdir().unwrap();
    let cert = pforte_tests::TestCert::create(dir.path()).unwrap();
    std::fs::write(&cert.cert, "this is not a certificate\n").unwrap();
    let config = write_config(
        dir.path(),
        &format!("[tls]\ncert = {:?}\nkey = {:?}\n", cert.cert, cert.key),
    );
    let out = run(
        pforte(&["check", "--config", config.to_str().unwrap()]),
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{:?}", out.stderr);
    assert!(out.stderr.contains("tls.cert"), "{}", out.stderr);
    assert!(out.stdout.is_empty(), "{}", out.stdout);

    // `serve` runs the same check: the same line and code, nothing listens.
    let out = run(
        pforte(&["serve", "--config", config.to_str().unwrap()]),
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(out.stderr.contains("tls.cert"), "{}", out.stderr);
}

#[test]
fn check_refuses_a_key_of_another_certificate_and_a_bad_tool_budget() {
    let dir = tempfile::tempdir().unwrap();
    let a = pforte_tests::TestCert::create(dir.path()).unwrap();
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let b = pforte_tests::TestCert::create(&other).unwrap();
    let config = write_config(
        dir.path(),
        &format!("[tls]\ncert = {:?}\nkey = {:?}\n", a.cert, b.key),
    );
    let out = run(
        pforte(&["check", "--config", config.to_str().unwrap()]),
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(out.stderr.contains("does not belong"), "{}", out.stderr);

    let config = write_config(
        dir.path(),
        "[limits.tools.werkbaum_write]\nrate = 0\nperiod_secs = 60\nburst = 1\n",
    );
    let out = run(
        pforte(&["check", "--config", config.to_str().unwrap()]),
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(
        out.stderr.contains("limits.tools.werkbaum_write"),
        "{}",
        out.stderr
    );
}

#[test]
fn serve_and_up_on_a_port_in_use_exit_with_one_line() {
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("pforte.toml");
    std::fs::write(
        &config,
        format!(
            "listen = {addr:?}\ndata_dir = {:?}\n",
            dir.path().join("data")
        ),
    )
    .unwrap();
    let out = run(
        pforte(&["serve", "--config", config.to_str().unwrap()]),
        Duration::from_secs(20),
    );
    assert_ne!(out.code, Some(0));
    assert!(out.stdout.is_empty(), "printed success: {}", out.stdout);
    assert_eq!(
        out.stderr.trim(),
        format!("pforte: {addr} is in use; pass --listen")
    );

    let data = dir.path().join("up");
    let out = run(
        pforte(&[
            "up",
            "--listen",
            &addr,
            "--data-dir",
            data.to_str().unwrap(),
        ]),
        Duration::from_secs(20),
    );
    assert_ne!(out.code, Some(0));
    assert!(out.stdout.is_empty(), "printed success: {}", out.stdout);
    assert_eq!(
        out.stderr.trim(),
        format!("pforte: {addr} is in use; pass --listen")
    );
    assert!(!data.exists(), "up created its data dir before failing");
    drop(held);
}
