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
pub(crate) struct Out {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Runs `cmd` to completion; fails the test if it is still running after `limit`.
pub(crate) fn run(mut cmd: Command, limit: Duration) -> Out {
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

pub(crate) fn pforte(args: &[&str]) -> Command {
    let mut cmd = Command::new(bin("pforte"));
    cmd.args(args)
        .env_remove("RUST_LOG")
        .env("PFORTE_MCP_SERVICE_BIN", bin("mcp-service"));
    cmd
}

pub(crate) fn write_config(dir: &Path, extra: &str) -> std::path::PathBuf {
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
        pforte(&["serve", "--init", "--config", config.to_str().unwrap()]),
        Duration::from_secs(20),
    );
    assert_ne!(out.code, Some(0));
    assert!(out.stdout.is_empty(), "printed success: {}", out.stdout);
    assert_eq!(
        out.stderr.trim(),
        format!("pforte: {addr} is in use; set `listen` in the config file or PFORTE_LISTEN")
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

/// Runs `pforte serve` with stderr redirected to a file, sends an unauthenticated `/mcp`
/// request, stops it with SIGINT and returns what it logged.
fn serve_log(format: Option<&str>) -> String {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let log_path = dir.path().join("pforte.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut cmd = pforte(&["serve", "--init", "--config", config.to_str().unwrap()]);
    if let Some(f) = format {
        cmd.env("PFORTE_LOG_FORMAT", f);
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut first = String::new();
    {
        use std::io::BufRead as _;
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        out.read_line(&mut first).unwrap();
    }
    let base = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {first:?}"))
        .to_owned();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let http = pforte_tests::http_client(None);
        let ok = pforte_tests::eventually(Duration::from_secs(20), || {
            let req = http
                .get(format!("{base}/mcp"))
                .header("user-agent", "log-test/1.0")
                .send();
            async move { req.await.is_ok_and(|r| r.status() == 401) }
        })
        .await;
        assert!(ok, "the gateway never answered 401 on /mcp");
    });
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "serve did not stop after SIGINT");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    std::fs::read_to_string(&log_path).unwrap()
}

#[test]
fn redirected_logs_have_no_colour_and_say_start_and_stop() {
    let log = serve_log(None);
    assert!(
        !log.contains('\u{1b}'),
        "ANSI escape in a redirected log:\n{log}"
    );
    assert!(log.contains("pforte started"), "{log}");
    assert!(
        log.contains("request") && log.contains("status=401"),
        "{log}"
    );
    assert!(
        log.lines()
            .last()
            .unwrap_or("")
            .contains("stopped after SIGINT"),
        "{log}"
    );
}

#[test]
fn json_logs_are_one_object_per_line_with_the_request_fields() {
    let log = serve_log(Some("json"));
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    let request = lines
        .iter()
        .find(|v| v["message"] == "request")
        .unwrap_or_else(|| panic!("no request line in {log}"));
    assert_eq!(request["status"], 401, "{request}");
    assert_eq!(request["reason"], "unauthenticated", "{request}");
    assert_eq!(
        request["error"], "-",
        "a refusal names no upstream error: {request}"
    );
    assert_eq!(request["client_ip"], "127.0.0.1", "{request}");
    assert_eq!(request["user_agent"], "log-test/1.0", "{request}");
    // docs/configuration.md documents exactly the fields the request line has (beside the JSON
    // layer's own: timestamp, level, target, message).
    let reference = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/configuration.md"
    ))
    .unwrap();
    let documented = reference
        .split_once("(the request line's fields: ")
        .and_then(|(_, rest)| rest.split_once(';'))
        .map(|(list, _)| list)
        .expect("docs/configuration.md lists the request line's fields");
    let mut documented: Vec<&str> = documented
        .split(", ")
        .map(|f| f.trim_matches('`'))
        .collect();
    let mut emitted: Vec<&str> = request
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .filter(|k| !["timestamp", "level", "target", "message"].contains(k))
        .collect();
    documented.sort_unstable();
    emitted.sort_unstable();
    assert_eq!(
        documented, emitted,
        "docs/configuration.md's request line fields vs the log"
    );
    assert!(
        lines.iter().any(|v| v["message"] == "stopped after SIGINT"),
        "{log}"
    );
}

#[test]
fn reading_admin_commands_refuse_a_missing_store_and_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("typo");
    let t = typo.to_str().unwrap();
    for args in [
        vec!["token", "list", "--data-dir", t],
        vec!["--data-dir", t, "token", "list"],
        vec!["--data-dir", t, "token", "revoke", "x"],
        vec!["user", "list", "--data-dir", t],
        vec!["user", "remove", "alice", "--data-dir", t],
        vec!["client", "list", "--json", "--data-dir", t],
        vec!["grant", "list", "--data-dir", t],
        vec!["grant", "revoke", "--user", "alice", "--data-dir", t],
        vec!["backup", "/nonexistent/backup", "--data-dir", t],
    ] {
        let out = run(pforte(&args), Duration::from_secs(20));
        assert_eq!(out.code, Some(66), "{args:?}: {}", out.stderr);
        assert_eq!(
            out.stderr.trim(),
            format!("pforte: no Pforte store at {t} — pass the --data-dir the gateway uses"),
            "{args:?}"
        );
        assert!(!typo.exists(), "{args:?} created {t}");
    }
    // Run from an empty directory without flags: refused, and no ./.pforte appears.
    let mut cmd = pforte(&["token", "list"]);
    cmd.current_dir(dir.path()).env_remove("PFORTE_DATA_DIR");
    let out = run(cmd, Duration::from_secs(20));
    assert_eq!(out.code, Some(66), "{}", out.stderr);
    assert!(!dir.path().join(".pforte").exists());

    let out = run(
        pforte(&["mcp-service-is-not-a-command"]),
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(64), "usage errors exit 64: {}", out.stderr);
}

#[test]
fn adding_commands_create_a_store_and_say_so_then_lists_read_well() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("new");
    let d = data.to_str().unwrap();
    let out = run(
        pforte(&[
            "--data-dir",
            d,
            "token",
            "create",
            "laptop",
            "--expires",
            "90d",
        ]),
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.trim().starts_with("pft_"), "{}", out.stdout);
    assert!(
        out.stderr.contains(&format!(
            "created a new, empty store at {d}; no gateway uses it yet"
        )),
        "{}",
        out.stderr
    );
    // The second add finds the store: no note.
    let out = run(
        pforte(&["token", "create", "desk", "--data-dir", d]),
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(!out.stderr.contains("created a new"), "{}", out.stderr);

    let out = run(
        pforte(&["--data-dir", d, "token", "list"]),
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[0].starts_with("name "), "{}", out.stdout);
    let laptop = lines.iter().find(|l| l.starts_with("laptop")).unwrap();
    // `2026-12-01 19:03Z` and `2027-03-01 (in 90 d)`.
    let iso = laptop
        .split_whitespace()
        .any(|w| w.len() == 10 && w.as_bytes()[4] == b'-' && w.as_bytes()[7] == b'-');
    assert!(
        iso && laptop.contains("Z ") && laptop.contains("(in 90 d)"),
        "{laptop}"
    );
    let desk = lines.iter().find(|l| l.starts_with("desk")).unwrap();
    assert!(desk.contains("never"), "{desk}");

    let out = run(
        pforte(&["token", "list", "--json", "--data-dir", d]),
        Duration::from_secs(20),
    );
    let list: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 2, "{list}");
    assert!(
        list[0]["created_at"].as_str().unwrap().ends_with('Z'),
        "{list}"
    );

    // The OAuth lists on the same store: headers or a "no …" line, never silence.
    let out = run(
        pforte(&["client", "list", "--data-dir", d]),
        Duration::from_secs(20),
    );
    assert_eq!((out.code, out.stdout.as_str()), (Some(0), "no clients\n"));
    let out = run(
        pforte(&["--data-dir", d, "user", "list", "--json"]),
        Duration::from_secs(20),
    );
    assert_eq!(out.stdout.trim(), "[]");
    let out = run(
        pforte(&["token", "revoke", "nosuch", "--data-dir", d]),
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(1), "{}", out.stderr);
}

#[test]
fn up_without_mcp_service_says_where_it_looked() {
    let dir = tempfile::tempdir().unwrap();
    // The build dir has mcp-service beside pforte: run a copy of pforte alone.
    let lonely = dir.path().join("pforte");
    // A hard link, not a copy: a copy's open write descriptor, inherited by a process another
    // test forks at that moment, makes exec fail with "Text file busy" (ETXTBSY).
    if std::fs::hard_link(bin("pforte"), &lonely).is_err() {
        std::fs::copy(bin("pforte"), &lonely).unwrap();
    }
    let mut cmd2 = Command::new(&lonely);
    cmd2.args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("up"))
        .env_remove("PFORTE_MCP_SERVICE_BIN")
        .env("PATH", dir.path().join("empty-path"));
    let out = run(cmd2, Duration::from_secs(20));
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert!(
        out.stderr
            .contains(&lonely.with_file_name("mcp-service").display().to_string())
            && out.stderr.contains("on PATH"),
        "{}",
        out.stderr
    );
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
}

#[test]
fn file_variables_are_read_and_a_missing_one_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let url_file = dir.path().join("url");
    std::fs::write(&url_file, "http://not-redis\n").unwrap();
    // A secret file readable by others is refused, as every secret file (issue 37).
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&url_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut cmd = pforte(&["check", "--config", config.to_str().unwrap()]);
    cmd.env_remove("PFORTE_REDIS_URL")
        .env("PFORTE_REDIS_URL_FILE", &url_file);
    let out = run(cmd, Duration::from_secs(20));
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert_eq!(
        out.stderr.trim(),
        format!(
            "pforte: PFORTE_REDIS_URL_FILE={}: is readable by group or others (mode 644); \
             `chmod 600` it (and `chown` it to the user the gateway runs as)",
            url_file.display()
        )
    );
    std::fs::set_permissions(&url_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut cmd = pforte(&["check", "--config", config.to_str().unwrap()]);
    cmd.env_remove("PFORTE_REDIS_URL")
        .env("PFORTE_REDIS_URL_FILE", &url_file);
    let out = run(cmd, Duration::from_secs(20));
    // The file's value is used: it is not a redis URL, so check refuses it.
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(out.stderr.contains("redis_url"), "{}", out.stderr);

    let mut cmd = pforte(&["check", "--config", config.to_str().unwrap()]);
    cmd.env_remove("PFORTE_REDIS_URL")
        .env("PFORTE_REDIS_URL_FILE", dir.path().join("nosuch"));
    let out = run(cmd, Duration::from_secs(20));
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert!(
        out.stderr.contains("PFORTE_REDIS_URL_FILE"),
        "{}",
        out.stderr
    );
}

#[test]
fn help_describes_every_subcommand_and_flag() {
    let out = run(pforte(&["--help"]), Duration::from_secs(20));
    assert_eq!(out.code, Some(0));
    for word in [
        "serve",
        "check",
        "up",
        "user",
        "client",
        "grant",
        "token",
        "backup",
        "restore",
        "--config",
        "--data-dir",
        "Exit codes",
    ] {
        assert!(out.stdout.contains(word), "{word} missing:\n{}", out.stdout);
    }
    let out = run(
        pforte(&["token", "list", "--help"]),
        Duration::from_secs(20),
    );
    assert!(
        out.stdout.contains("--json") && out.stdout.contains("--data-dir"),
        "{}",
        out.stdout
    );
    // Every subcommand has a line of its own help text.
    for cmd in [&["user"][..], &["client"], &["grant"], &["token"]] {
        let mut args = cmd.to_vec();
        args.push("--help");
        let out = run(pforte(&args), Duration::from_secs(20));
        let commands = out
            .stdout
            .split("Commands:")
            .nth(1)
            .unwrap_or_else(|| panic!("{args:?}: {}", out.stdout));
        for line in commands.lines().take_while(|l| !l.trim().is_empty()) {
            assert!(
                line.split_whitespace().count() >= 2,
                "{args:?}: undocumented {line:?}"
            );
        }
    }
}

#[test]
fn doc_commands_refuse_a_missing_store_and_speak_cli() {
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("typo");
    let svc = |args: &[&str]| {
        let mut cmd = Command::new(bin("mcp-service"));
        cmd.args(args)
            .arg("--data-dir")
            .arg(&typo)
            .env_remove("MCP_SERVICE_DATA_DIR");
        run(cmd, Duration::from_secs(30))
    };
    for args in [&["doc", "list"][..], &["doc", "export", "nosuch"]] {
        let out = svc(args);
        assert_eq!(out.code, Some(66), "{args:?}: {}", out.stderr);
        assert!(
            out.stderr.contains("no document store at"),
            "{}",
            out.stderr
        );
        assert!(!typo.exists(), "{args:?} created the store");
    }
    let plan = dir.path().join("plan.werkbaum");
    std::fs::write(&plan, "Zeta plan\n").unwrap();
    let out = svc(&["doc", "import", plan.to_str().unwrap(), "--title", "Zeta"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("created a new, empty store"),
        "{}",
        out.stderr
    );
    let out = svc(&["doc", "import", plan.to_str().unwrap(), "--title", "Alpha"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(!out.stderr.contains("created a new"), "{}", out.stderr);

    let out = svc(&["doc", "list"]);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[0].starts_with("title"), "{}", out.stdout);
    assert!(
        lines[1].starts_with("Alpha") && lines[2].starts_with("Zeta"),
        "{}",
        out.stdout
    );
    assert!(lines[1].contains("Z "), "an ISO time: {}", lines[1]);

    let out = svc(&["doc", "export", "nosuch"]);
    assert_eq!(out.code, Some(66), "{}", out.stderr);
    assert!(
        !out.stderr.contains("resources/list") && out.stderr.contains("doc list"),
        "{}",
        out.stderr
    );
}

#[test]
fn mcp_service_does_not_dump_the_handshake_at_the_default_level() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("svc.log");
    let mut child = Command::new(bin("mcp-service"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let mut first = String::new();
    {
        use std::io::BufRead as _;
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        out.read_line(&mut first).unwrap();
    }
    let url = first.trim().rsplit(' ').next().unwrap().to_owned();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let status = rt.block_on(async {
        pforte_tests::McpClient::new(reqwest::Client::new(), &url)
            .client_name("handshake-dump-probe")
            .initialize()
            .await
            .status()
    });
    assert!(status.is_success(), "{status}");
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        !log.contains("handshake-dump-probe"),
        "handshake logged:\n{log}"
    );
    assert!(
        !log.contains('\u{1b}'),
        "ANSI escape in a redirected log:\n{log}"
    );
}
