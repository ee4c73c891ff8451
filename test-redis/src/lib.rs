//! Test support: a real `redis-server` on a free loopback port, in a temp dir, killed on drop.
//! One copy for every crate's tests (store suites, end-to-end tests).

#![allow(clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A real `redis-server` on 127.0.0.1 without persistence; killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts one. `None` (with a SKIP message) when `redis-server` is not installed, unless
    /// `CI=true`, where that is a failure.
    pub fn start() -> Option<Self> {
        let Some(exe) = which("redis-server") else {
            assert!(
                !in_ci(),
                "redis-server is missing under CI=true (apt-get install redis-server)"
            );
            skip("redis-server is not installed (apt-get install redis-server)");
            return None;
        };
        // A port can be taken between probing and binding: retry on a fresh one.
        for _attempt in 0..3 {
            let port = free_port();
            let dir = tempfile::tempdir().expect("temp dir");
            let mut child = Command::new(&exe)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--rdbcompression", "no"])
                .arg("--dir")
                .arg(dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawning redis-server");
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Some(Self { child, port, dir });
                }
                if matches!(child.try_wait(), Ok(Some(_))) || Instant::now() >= deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("redis-server did not start");
    }

    /// `redis://127.0.0.1:PORT/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Everything redis holds, as bytes: `SAVE`, then the (uncompressed) RDB file.
    pub fn dump(&self) -> std::io::Result<Vec<u8>> {
        use std::io::{Read as _, Write as _};
        let mut conn = std::net::TcpStream::connect(("127.0.0.1", self.port))?;
        conn.set_read_timeout(Some(Duration::from_secs(10)))?;
        conn.write_all(b"*1\r\n$4\r\nSAVE\r\n")?;
        let mut reply = [0u8; 5];
        conn.read_exact(&mut reply)?;
        if &reply != b"+OK\r\n" {
            return Err(std::io::Error::other(format!(
                "SAVE answered {:?}",
                String::from_utf8_lossy(&reply)
            )));
        }
        std::fs::read(self.dir.path().join("dump.rdb"))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
