//! A real `redis-server` on 127.0.0.1, in a temp dir, killed on drop: the one starter every
//! crate's tests use. By default without persistence; with [`RedisOptions::append_only`] every
//! write is fsynced to an append-only file, so a test can `kill -9` it and start it again on the
//! same port and directory with nothing acknowledged lost.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::env::{free_port, in_ci, skip, which};

/// How a [`RedisServer`] runs.
#[derive(Debug, Clone, Default)]
pub struct RedisOptions {
    append_only: bool,
    password: Option<String>,
    replica_of: Option<u16>,
}

impl RedisOptions {
    /// An append-only file, fsynced on every write (`--appendonly yes --appendfsync always`).
    pub fn append_only(mut self) -> Self {
        self.append_only = true;
        self
    }

    /// `requirepass` (and `masterauth`, so replicas of a server with the same password sync).
    pub fn password(mut self, password: &str) -> Self {
        self.password = Some(password.to_owned());
        self
    }

    /// A replica of the server on 127.0.0.1:`port` (`--replicaof`).
    pub fn replica_of(mut self, port: u16) -> Self {
        self.replica_of = Some(port);
        self
    }

    /// Starts one. `None` (with a SKIP line) when `redis-server` is not installed, unless
    /// `CI=true`, where that is a failure.
    pub fn start(self) -> Option<RedisServer> {
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
            let mut server = RedisServer {
                exe: exe.clone(),
                child: None,
                port: free_port(),
                dir: tempfile::tempdir().expect("temp dir"),
                options: self.clone(),
            };
            if server.launch() {
                return Some(server);
            }
        }
        panic!("redis-server did not start");
    }
}

/// A running `redis-server` (see the module documentation).
#[derive(Debug)]
pub struct RedisServer {
    exe: PathBuf,
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
    options: RedisOptions,
}

impl RedisServer {
    /// Starts one without persistence; see [`RedisOptions::start`].
    pub fn start() -> Option<Self> {
        RedisOptions::default().start()
    }

    /// Options for a server other than the default.
    pub fn options() -> RedisOptions {
        RedisOptions::default()
    }

    /// `redis://127.0.0.1:PORT/0` (`redis://:PASSWORD@…` with a password).
    pub fn url(&self) -> String {
        match &self.options.password {
            Some(pw) => format!("redis://:{pw}@127.0.0.1:{}/0", self.port),
            None => format!("redis://127.0.0.1:{}/0", self.port),
        }
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

    /// Stops it with SIGKILL; its port and directory stay for [`RedisServer::restart`].
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and directory (from its append-only file, when it
    /// keeps one); panics when it does not come up.
    pub fn restart(&mut self) {
        self.kill9();
        assert!(self.launch(), "redis-server did not start again");
    }

    /// Spawns the server and waits up to 10 s for its port; false (nothing left running) when
    /// it exited or never listened.
    fn launch(&mut self) -> bool {
        let mut cmd = Command::new(&self.exe);
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--rdbcompression", "no"]);
        if self.options.append_only {
            cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            cmd.args(["--appendonly", "no"]);
        }
        if let Some(pw) = &self.options.password {
            cmd.args(["--requirepass", pw, "--masterauth", pw]);
        }
        if let Some(port) = self.options.replica_of {
            cmd.args(["--replicaof", "127.0.0.1", &port.to_string()]);
        }
        let mut child = cmd
            .arg("--dir")
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning redis-server");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                self.child = Some(child);
                return true;
            }
            if matches!(child.try_wait(), Ok(Some(_))) || Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill9();
    }
}
