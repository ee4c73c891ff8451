//! System calls per call: `strace -f -y` attached to a running target (and its child processes,
//! nginx's workers) while a fixed number of calls go through it one after another on one
//! kept-alive connection, counting the write-family and the read-family system calls whose file
//! descriptor is a socket (a read that finds nothing, `EAGAIN`, counts: it is a system call, and
//! is also counted apart) and every other system call by name. The measured rounds run without
//! it (tracing slows a process several-fold); one call at a time on one connection makes the
//! socket counts repeatable — what a call costs, not how the calls happened to overlap.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};

/// The system calls that put bytes on a socket.
const SEND_CALLS: [&str; 6] = ["write", "writev", "send", "sendto", "sendmsg", "sendmmsg"];

/// The system calls that take bytes from a socket.
const READ_CALLS: [&str; 6] = ["read", "readv", "recv", "recvfrom", "recvmsg", "recvmmsg"];

/// The strace binary on `PATH`.
pub(crate) struct Strace(PathBuf);

/// What one traced run of calls made.
#[derive(Debug, Default)]
pub(crate) struct Counted {
    sends: u64,
    reads: u64,
    /// Of `sends` and `reads`, those on connections to the upstream.
    upstream_sends: u64,
    upstream_reads: u64,
    /// Socket reads that found nothing (`EAGAIN`), also in `reads`.
    empty_reads: u64,
    /// Every system call by name (the socket ones included).
    by_name: BTreeMap<String, u64>,
    calls: u64,
}

/// System calls per proxied call.
#[derive(Debug, Clone)]
pub(crate) struct PerCall {
    /// Write-family calls on sockets.
    pub(crate) sends: f64,
    /// Read-family calls on sockets, empty ones included.
    pub(crate) reads: f64,
    /// Of `sends` and `reads`, those on connections to the upstream (the rest: the client's).
    pub(crate) upstream_sends: f64,
    pub(crate) upstream_reads: f64,
    /// Of `reads`, those that found nothing.
    pub(crate) empty_reads: f64,
    /// Every system call.
    pub(crate) all: f64,
    /// Every system call by name, per call.
    pub(crate) by_name: Vec<(String, f64)>,
    /// CPU µs of the process per call, measured untraced (set by the caller).
    pub(crate) cpu_us: f64,
}

impl Counted {
    /// Counts the lines of `strace -f -yy` output for `calls` calls; a socket whose peer's
    /// port is `upstream_port` leads to the upstream.
    fn of_trace(text: &str, calls: u64, upstream_port: u16) -> Self {
        let upstream = format!(":{upstream_port}]>");
        let mut c = Self {
            calls,
            ..Self::default()
        };
        for line in text.lines() {
            let Some(name) = call_name(line) else {
                continue;
            };
            *c.by_name.entry(name.to_owned()).or_default() += 1;
            let up = line.split_once("->").is_some_and(|(_, peer)| {
                peer.starts_with(|c: char| c.is_ascii_digit() || c == '[')
                    && peer.contains(&upstream)
            });
            if is_socket_send(line) {
                c.sends += 1;
                c.upstream_sends += u64::from(up);
            } else if is_socket_read(line) {
                c.reads += 1;
                c.upstream_reads += u64::from(up);
                c.empty_reads += u64::from(line.contains("= -1 EAGAIN"));
            }
        }
        c
    }

    pub(crate) fn per_call(&self) -> PerCall {
        let calls = self.calls.max(1) as f64;
        PerCall {
            sends: self.sends as f64 / calls,
            reads: self.reads as f64 / calls,
            upstream_sends: self.upstream_sends as f64 / calls,
            upstream_reads: self.upstream_reads as f64 / calls,
            empty_reads: self.empty_reads as f64 / calls,
            all: self.by_name.values().sum::<u64>() as f64 / calls,
            by_name: self
                .by_name
                .iter()
                .map(|(name, n)| (name.clone(), *n as f64 / calls))
                .collect(),
            cpu_us: f64::NAN,
        }
    }
}

impl Strace {
    pub(crate) fn find() -> Option<Self> {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|d| d.join("strace"))
            .find(|p| p.is_file())
            .map(Self)
    }

    /// Traces every system call of `pid` and its child processes (nginx's workers) while `load`
    /// runs; `load` answers how many calls it made; the upstream listens on `upstream_port`.
    pub(crate) async fn count(
        &self,
        work: &Path,
        pid: u32,
        upstream_port: u16,
        load: impl Future<Output = anyhow::Result<u64>>,
    ) -> anyhow::Result<Counted> {
        let out = work.join(format!("strace-{pid}.txt"));
        let pids: Vec<u32> = std::iter::once(pid).chain(children(pid)).collect();
        let mut cmd = Command::new(&self.0);
        cmd.args(["-f", "-yy", "-qq", "-s", "0", "-e", "signal=none", "-o"])
            .arg(&out);
        for p in &pids {
            cmd.arg("-p").arg(p.to_string());
        }
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting strace")?;
        // Attached when every thread of every traced process has a tracer.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !pids.iter().all(|p| traced(*p)) {
            if Instant::now() > deadline || matches!(child.try_wait(), Ok(Some(_))) {
                let _ = child.kill();
                let err = child
                    .wait_with_output()
                    .map(|o| o.stderr)
                    .unwrap_or_default();
                bail!(
                    "strace did not attach to {pid}: {}",
                    String::from_utf8_lossy(&err).trim()
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let calls = load.await;
        let strace_pid = Pid::from_raw(i32::try_from(child.id()).context("strace pid")?);
        let _ = kill(strace_pid, Signal::SIGINT);
        child.wait().context("waiting for strace")?;
        let calls = calls?;
        let text = std::fs::read_to_string(&out).context("reading strace's output")?;
        Ok(Counted::of_trace(&text, calls, upstream_port))
    }
}

/// Whether every thread of `pid` is being traced.
fn traced(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("status")).is_ok_and(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("TracerPid:"))
                .is_some_and(|v| v.trim() != "0")
        })
    })
}

/// The processes whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|s| {
                    let rest = s.rsplit_once(')')?.1.to_owned();
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// Whether a line of `strace -f -yy` output is a send on a socket, e.g.
/// `4242  writev(12<TCP:[127.0.0.1:80->127.0.0.1:5555]>, …) = 230` (a call that strace split
/// in two is counted by its first half; its `<... resumed>` half has no descriptor).
fn is_socket_send(line: &str) -> bool {
    is_socket_call(line, &SEND_CALLS)
}

/// Whether a line of `strace -f -y` output is a read on a socket (as [`is_socket_send`]).
fn is_socket_read(line: &str) -> bool {
    is_socket_call(line, &READ_CALLS)
}

/// The line without its leading process id.
fn without_pid(line: &str) -> &str {
    let line = line.trim_start();
    match line.split_once(' ') {
        Some((pid, rest)) if pid.bytes().all(|b| b.is_ascii_digit()) => rest.trim_start(),
        _ => line,
    }
}

/// The system call a line of `strace -f` output starts (`None` for the second half of a split
/// call, `<... resumed>`, and for signal and exit lines).
fn call_name(line: &str) -> Option<&str> {
    let (name, _) = without_pid(line).split_once('(')?;
    (!name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .then_some(name)
}

fn is_socket_call(line: &str, calls: &[&str]) -> bool {
    let Some((name, args)) = without_pid(line).split_once('(') else {
        return false;
    };
    if !calls.contains(&name) {
        return false;
    }
    let Some((_fd, path)) = args.split_once('<') else {
        return false;
    };
    ["TCP", "UDP", "UNIX", "socket:"]
        .iter()
        .any(|kind| path.starts_with(kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_writes_to_sockets_count() {
        assert!(is_socket_send(
            "4242  writev(12<TCP:[127.0.0.1:80->127.0.0.1:5555]>, [...], 2) = 230"
        ));
        assert!(is_socket_send(
            "sendto(7<TCPv6:[::1]>, \"\"..., 5, MSG_NOSIGNAL, NULL, 0) = 5"
        ));
        assert!(is_socket_send(
            "17 write(9<socket:[1234]>, \"\"..., 8 <unfinished ...>"
        ));
        assert!(!is_socket_send(
            "17 write(4<anon_inode:[eventfd]>, \"\"..., 8) = 8"
        ));
        assert!(!is_socket_send(
            "17 write(2</tmp/pforte.log>, \"\"..., 80) = 80"
        ));
        assert!(!is_socket_send("17 <... writev resumed>) = 230"));
        assert!(!is_socket_send("17 read(12<TCP:[1]>, \"\"..., 8) = 8"));
    }

    #[test]
    fn only_reads_from_sockets_count_eagain_included() {
        assert!(is_socket_read("17 read(12<TCP:[1]>, \"\"..., 8) = 8"));
        assert!(is_socket_read(
            "17 recvfrom(9<TCP:[1]>, 0x7f, 4096, 0, NULL, NULL) = -1 EAGAIN (Resource temporarily unavailable)"
        ));
        assert!(!is_socket_read("17 read(5</etc/hosts>, \"\"..., 8) = 8"));
        assert!(!is_socket_read(
            "4242  writev(12<TCP:[127.0.0.1:80->127.0.0.1:5555]>, [...], 2) = 230"
        ));
    }

    #[test]
    fn every_call_is_counted_by_name_once() {
        let trace = "\
            17 recvfrom(9<TCP:[127.0.0.1:80->127.0.0.1:5555]>, \"\"..., 4096, 0, NULL, NULL) = 312\n\
            17 recvfrom(9<TCP:[127.0.0.1:80->127.0.0.1:5555]>, 0x7f, 4096, 0, NULL, NULL) = -1 EAGAIN (Resource temporarily unavailable)\n\
            17 sendto(10<TCP:[127.0.0.1:5556->127.0.0.1:8080]>, \"\"..., 400, MSG_NOSIGNAL, NULL, 0) = 400\n\
            18 epoll_wait(3<anon_inode:[eventpoll]>, [], 1024, 5 <unfinished ...>\n\
            17 write(4<anon_inode:[eventfd]>, \"\"..., 8) = 8\n\
            18 <... epoll_wait resumed>) = 0\n\
            18 +++ exited with 0 +++\n";
        let per = Counted::of_trace(trace, 2, 8080).per_call();
        assert_eq!(
            (per.sends, per.reads, per.empty_reads, per.all),
            (0.5, 1.0, 0.5, 2.5)
        );
        assert_eq!((per.upstream_sends, per.upstream_reads), (0.5, 0.0));
        let names: Vec<&str> = per.by_name.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["epoll_wait", "recvfrom", "sendto", "write"]);
    }
}
