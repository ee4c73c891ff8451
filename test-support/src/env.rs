//! What the machine offers a test: CI or not, a program on `PATH`, a free port; and the one way
//! a test says it skips itself because something is missing.

use std::path::PathBuf;

/// Whether the CI environment demands that optional inputs (redis-server, fixtures) exist.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Environment variable naming a file where every skipped test adds one line (`./test.sh` sets
/// it and lists the file at the end, since the test runner hides a passing test's output).
pub const SKIP_LOG_ENV: &str = "PFORTE_SKIP_LOG";

/// Reports that the running test skips itself because `why` (a tool or input is missing): a
/// `SKIP test: why` line on stderr and, when [`SKIP_LOG_ENV`] is set, in that file. Call it only
/// outside CI; under `CI=true` a missing input is a failure.
pub fn skip(why: &str) {
    use std::io::Write as _;
    let thread = std::thread::current();
    let line = format!("SKIP {}: {why}", thread.name().unwrap_or("?"));
    eprintln!("{line}");
    if let Some(path) = std::env::var_os(SKIP_LOG_ENV)
        && let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    {
        let _ = writeln!(file, "{line}");
    }
}

/// The first `name` executable on `PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    })
}

/// A port that was free a moment ago on 127.0.0.1, and never handed out before in this process:
/// the kernel may offer a port again as soon as its probe closes, so a test that asks for
/// several ports (or two tests on other threads) could otherwise be given the same one twice.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
        let mut given = GIVEN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if given.insert(port) {
            return port;
        }
    }
}
