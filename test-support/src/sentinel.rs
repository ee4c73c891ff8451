//! Real `redis-server --sentinel` processes on 127.0.0.1 watching one master, killed on drop,
//! with failover timings small enough for a test (down after 1 s). Asked through `redis-cli`.

use std::fmt::Write as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::env::{free_port, which};

/// The sentinels (see the module documentation).
#[derive(Debug)]
pub struct Sentinels {
    children: Vec<Child>,
    pub ports: Vec<u16>,
    master: String,
    password: Option<String>,
    dir: tempfile::TempDir,
}

impl Sentinels {
    /// `count` sentinels (quorum 2) watching the master `name` on 127.0.0.1:`master_port`,
    /// all speaking `password` when given. `None` when `redis-server` or `redis-cli` is missing
    /// (the caller's [`crate::RedisServer`] already said why).
    pub fn start(
        master_port: u16,
        name: &str,
        password: Option<&str>,
        count: usize,
    ) -> Option<Self> {
        let exe = which("redis-server")?;
        which("redis-cli")?;
        let mut me = Self {
            children: Vec::new(),
            ports: Vec::new(),
            master: name.to_owned(),
            password: password.map(str::to_owned),
            dir: tempfile::tempdir().expect("temp dir"),
        };
        for i in 0..count {
            let port = free_port();
            let mut conf = format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                 sentinel monitor {name} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {name} 1000\n\
                 sentinel failover-timeout {name} 3000\n\
                 sentinel parallel-syncs {name} 1\n",
                dir = me.dir.path().display()
            );
            if let Some(pw) = password {
                let _ = write!(conf, "sentinel auth-pass {name} {pw}\nrequirepass {pw}\n");
            }
            let path = me.dir.path().join(format!("sentinel-{i}.conf"));
            std::fs::write(&path, conf).expect("sentinel config");
            let child = Command::new(&exe)
                .arg(&path)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawning redis-server --sentinel");
            me.children.push(child);
            me.ports.push(port);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for port in me.ports.clone() {
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(Instant::now() < deadline, "a sentinel did not listen");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Some(me)
    }

    /// `redis+sentinel://[:PASSWORD@]127.0.0.1:P1,…/NAME`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let auth = self
            .password
            .as_ref()
            .map(|pw| format!(":{pw}@"))
            .unwrap_or_default();
        format!("redis+sentinel://{auth}{}/{}", hosts.join(","), self.master)
    }

    /// `redis-cli` against sentinel `i`: its output lines.
    pub fn ask(&self, i: usize, args: &[&str]) -> Vec<String> {
        let mut cmd = Command::new("redis-cli");
        cmd.args(["-h", "127.0.0.1", "-p", &self.ports[i].to_string()]);
        if let Some(pw) = &self.password {
            cmd.args(["--no-auth-warning", "-a", pw]);
        }
        let out = cmd.args(args).output().expect("redis-cli");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The master's port as sentinel `i` names it now.
    pub fn master_port(&self, i: usize) -> Option<u16> {
        self.ask(i, &["SENTINEL", "get-master-addr-by-name", &self.master])
            .get(1)
            .and_then(|p| p.parse().ok())
    }

    /// A field of `SENTINEL master NAME` as sentinel `i` sees it.
    pub fn master_field(&self, i: usize, field: &str) -> Option<String> {
        let lines = self.ask(i, &["SENTINEL", "master", &self.master]);
        lines
            .chunks(2)
            .find(|kv| kv.first().is_some_and(|k| k == field))
            .and_then(|kv| kv.get(1).cloned())
    }

    /// Whether every sentinel sees the others and `replicas` replicas (a failover needs both).
    pub fn ready(&self, replicas: usize) -> bool {
        let others = (self.ports.len() - 1).to_string();
        let replicas = replicas.to_string();
        (0..self.ports.len()).all(|i| {
            self.master_field(i, "num-other-sentinels").as_ref() == Some(&others)
                && self.master_field(i, "num-slaves").as_ref() == Some(&replicas)
        })
    }
}

impl Drop for Sentinels {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
