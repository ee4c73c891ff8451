//! Starting stdio children so that no process of theirs outlives the gateway, without
//! `unsafe`: every child is the gateway's own binary run as the hidden `__stdio-exec`
//! subcommand, a small supervisor that stays between the gateway and the real command:
//!
//! - it asks the kernel for SIGTERM when the gateway goes (`PR_SET_PDEATHSIG`, also on
//!   `kill -9`), checks the parent is still the one that started it, takes its own process
//!   group and becomes a child subreaper (`PR_SET_CHILD_SUBREAPER`): every orphan of the
//!   command's tree, also one that left with `setsid`, becomes its child;
//! - it starts the command with `posix_spawn` in a process group of its own, with the
//!   supervisor's stdin/stdout/stderr and no other descriptor (every inherited one closed), the
//!   signal mask and dispositions reset; with a route's `user`, through the hidden
//!   `__stdio-as` step that drops to that user (`setgroups`, `setgid`, `setuid`) and `execvp`s;
//! - when the gateway dies or stops it (SIGTERM, SIGINT, SIGHUP) it sends SIGTERM to the
//!   command's group and waits [`TREE_GRACE`]; when the command has exited (or the grace is
//!   over) it kills the group and every process left that is its child, until none is left, and
//!   exits with the command's status (128 + signal when a signal ended it).
//!
//! The death signal follows the *thread* that forked the child, so every child is forked by one
//! [`Spawner`] thread that lives as long as the bridge (the runtime's blocking threads come and
//! go).

use std::{
    ffi::{CString, OsStr, OsString},
    os::unix::ffi::OsStrExt as _,
    path::PathBuf,
    process::{ExitCode, Stdio},
    time::{Duration, Instant},
};

use nix::{
    errno::Errno,
    spawn::{PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags, posix_spawn, posix_spawnp},
    sys::{
        prctl,
        signal::{SigSet, Signal, kill, killpg},
        wait::{WaitPidFlag, WaitStatus, waitpid},
    },
    unistd::{Gid, Pid, Uid, execvp, getpid, getppid, setgid, setgroups, setpgid, setuid},
};

/// The hidden subcommand of `pforte` that becomes a stdio child's supervisor.
pub const EXEC_SUBCOMMAND: &str = "__stdio-exec";
/// The hidden subcommand that drops to a route's `user` and runs the command.
pub const AS_USER_SUBCOMMAND: &str = "__stdio-as";

/// Exit status when the command cannot be started (like a shell's "command not found").
const EXEC_FAILED: u8 = 127;
/// How long the command's group has between SIGTERM and SIGKILL when the supervisor is told
/// to stop (the gateway waits longer for the supervisor itself).
pub(crate) const TREE_GRACE: Duration = Duration::from_secs(2);
/// How long the supervisor keeps killing what is left of the tree.
const KILL_DEADLINE: Duration = Duration::from_secs(5);
/// Signals that stop the tree: the death signal and the gateway's stop.
const STOP_SIGNALS: [Signal; 3] = [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP];

/// The user (and group) a route's children run as: `user` / `group` resolved once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    pub(crate) user: String,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    /// The user's home directory (the child's `HOME` unless the route's `env` sets one).
    pub(crate) home: PathBuf,
    /// `home` is the route's own under `stdio_home` (the default account's): the bridge makes
    /// it at start, and it is also the children's cache and working directory.
    pub(crate) own_home: bool,
}

impl RunAs {
    /// Looks `user` (and `group`, else the user's primary group) up in the system's user
    /// database; a name that is not there is an error naming it.
    pub(crate) fn resolve(user: &str, group: Option<&str>) -> Result<Self, String> {
        let found = nix::unistd::User::from_name(user)
            .map_err(|e| format!("looking up the user {user:?}: {e}"))?
            .ok_or_else(|| format!("no user named {user:?} on this system"))?;
        let gid = match group {
            None => found.gid,
            Some(name) => {
                nix::unistd::Group::from_name(name)
                    .map_err(|e| format!("looking up the group {name:?}: {e}"))?
                    .ok_or_else(|| format!("no group named {name:?} on this system"))?
                    .gid
            }
        };
        Ok(Self {
            user: user.to_owned(),
            uid: found.uid.as_raw(),
            gid: gid.as_raw(),
            home: found.dir,
            own_home: false,
        })
    }

    /// The default account `user` with `home` of the route's own (see [`RunAs::own_home`]),
    /// made absolute (the children start in it: a relative `HOME` would point elsewhere).
    pub(crate) fn with_own_home(user: &str, home: PathBuf) -> Result<Self, String> {
        Ok(Self {
            home: std::path::absolute(&home).unwrap_or(home),
            own_home: true,
            ..Self::resolve(user, None)?
        })
    }
}

/// Runs as the hidden subcommand: the supervisor described in the module doc. Returns the
/// command's status (or [`EXEC_FAILED`] when it could not be started).
pub fn exec_child(parent: i32, run_as: Option<(u32, u32)>, command: &[OsString]) -> ExitCode {
    match supervise(parent, run_as, command) {
        Ok(code) => ExitCode::from(code),
        Err(message) => {
            eprintln!("pforte {EXEC_SUBCOMMAND}: {message}");
            ExitCode::from(EXEC_FAILED)
        }
    }
}

fn supervise(parent: i32, run_as: Option<(u32, u32)>, command: &[OsString]) -> Result<u8, String> {
    let args = c_strings(command.iter().map(OsString::as_os_str))?;
    if args.is_empty() {
        return Err("no command".to_owned());
    }
    // Blocked first: a stop that comes at any point from here on waits for `sigwait`.
    let mut signals = SigSet::empty();
    for s in STOP_SIGNALS {
        signals.add(s);
    }
    signals.add(Signal::SIGCHLD);
    signals
        .thread_block()
        .map_err(|e| format!("blocking signals: {e}"))?;
    prctl::set_pdeathsig(Signal::SIGTERM).map_err(|e| format!("PR_SET_PDEATHSIG: {e}"))?;
    // The parent may have died between fork and prctl: then no signal would ever come.
    if getppid().as_raw() != parent {
        return Err("the gateway is gone".to_owned());
    }
    setpgid(Pid::from_raw(0), Pid::from_raw(0)).map_err(|e| format!("setpgid: {e}"))?;
    prctl::set_child_subreaper(true).map_err(|e| format!("PR_SET_CHILD_SUBREAPER: {e}"))?;
    let child = spawn_command(&args, run_as, &signals)
        .map_err(|e| format!("{}: {e}", command[0].to_string_lossy()))?;
    let code = wait_for(child, &signals);
    kill_tree(child);
    Ok(code)
}

fn c_strings<'a>(items: impl Iterator<Item = &'a OsStr>) -> Result<Vec<CString>, String> {
    items
        .map(|a| CString::new(a.as_bytes()).map_err(|e| e.to_string()))
        .collect()
}

/// The descriptors above stderr this process holds (none of them is the command's business).
fn inherited_fds() -> Vec<i32> {
    let listed: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
                .filter(|fd| *fd > 2)
                .collect()
        })
        .unwrap_or_default();
    // The listing's own descriptor is closed by now.
    listed
        .into_iter()
        .filter(|fd| std::fs::read_link(format!("/proc/self/fd/{fd}")).is_ok())
        .collect()
}

/// Starts the command (through [`AS_USER_SUBCOMMAND`] with `run_as`) in a process group of its
/// own, with stdin/stdout/stderr only, a clear signal mask and default dispositions.
fn spawn_command(
    args: &[CString],
    run_as: Option<(u32, u32)>,
    blocked: &SigSet,
) -> Result<Pid, Errno> {
    let mut actions = PosixSpawnFileActions::init()?;
    for fd in inherited_fds() {
        actions.add_close(fd)?;
    }
    let mut attr = PosixSpawnAttr::init()?;
    attr.set_flags(
        PosixSpawnFlags::POSIX_SPAWN_SETPGROUP
            | PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK
            | PosixSpawnFlags::POSIX_SPAWN_SETSIGDEF,
    )?;
    attr.set_pgroup(Pid::from_raw(0))?;
    attr.set_sigmask(&SigSet::empty())?;
    let mut defaults = *blocked;
    defaults.add(Signal::SIGPIPE);
    attr.set_sigdefault(&defaults)?;
    let env: Vec<CString> = std::env::vars_os()
        .filter_map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv).ok()
        })
        .collect();
    match run_as {
        None => posix_spawnp(&args[0], &actions, &attr, args, &env),
        Some((uid, gid)) => {
            let exe = c"/proc/self/exe";
            let mut full = vec![
                CString::from(c"pforte"),
                CString::new(AS_USER_SUBCOMMAND).map_err(|_| Errno::EINVAL)?,
                CString::new(uid.to_string()).map_err(|_| Errno::EINVAL)?,
                CString::new(gid.to_string()).map_err(|_| Errno::EINVAL)?,
                CString::from(c"--"),
            ];
            full.extend(args.iter().cloned());
            posix_spawn(exe, &actions, &attr, &full, &env)
        }
    }
}

/// The exit code a wait status stands for (128 + signal for a signal), when it is `child`'s.
fn child_code(status: WaitStatus, child: Pid) -> Option<u8> {
    match status {
        WaitStatus::Exited(pid, code) if pid == child => {
            Some(u8::try_from(code).unwrap_or(EXEC_FAILED))
        }
        WaitStatus::Signaled(pid, signal, _) if pid == child => {
            Some(128u8.saturating_add(u8::try_from(signal as i32).unwrap_or(0)))
        }
        _ => None,
    }
}

/// Reaps every child that has ended (the command, orphans of its tree); the command's code if
/// it was among them.
fn reap(child: Pid) -> Option<u8> {
    let mut code = None;
    for _ in 0..100_000 {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => break,
            Ok(status) => code = code.or(child_code(status, child)),
        }
    }
    code
}

/// Waits until the command exits (its code) or a stop signal comes (then SIGTERM to its group
/// and up to [`TREE_GRACE`] for it to end).
fn wait_for(child: Pid, signals: &SigSet) -> u8 {
    // Anything but SIGCHLD is a stop.
    while let Ok(Signal::SIGCHLD) = signals.wait() {
        if let Some(code) = reap(child) {
            return code;
        }
    }
    let _ = killpg(child, Signal::SIGTERM);
    let deadline = Instant::now() + TREE_GRACE;
    while Instant::now() < deadline {
        if let Some(code) = reap(child) {
            return code;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    128 + Signal::SIGKILL as u8
}

/// The processes whose parent is `parent` (from `/proc`).
pub(crate) fn children_of(parent: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| parent_in_stat(&stat))
                == Some(parent)
        })
        .collect()
}

/// The parent pid field of a `/proc/PID/stat` line (after the command name in parentheses).
fn parent_in_stat(stat: &str) -> Option<i32> {
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(1))
        .and_then(|p| p.parse().ok())
}

/// SIGKILL to the command's group and to every child of this process, reaping them, until this
/// process has no child left (orphans deeper down become its children as their parents die).
fn kill_tree(child: Pid) {
    let me = getpid().as_raw();
    let deadline = Instant::now() + KILL_DEADLINE;
    loop {
        let _ = killpg(child, Signal::SIGKILL);
        for pid in children_of(me) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => break,
                Ok(_) => {}
                // ECHILD: nothing of the tree is left.
                Err(_) => return,
            }
        }
        if Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs as [`AS_USER_SUBCOMMAND`]: drops to `uid`/`gid` (supplementary groups: `gid` only) and
/// replaces itself with `command`. Returns only on failure.
pub fn exec_as(uid: u32, gid: u32, command: &[OsString]) -> ExitCode {
    let fail = |message: String| {
        eprintln!("pforte {AS_USER_SUBCOMMAND}: {message}");
        ExitCode::from(EXEC_FAILED)
    };
    let (uid, gid) = (Uid::from_raw(uid), Gid::from_raw(gid));
    if let Err(e) = setgroups(&[gid]) {
        return fail(format!("setgroups: {e}"));
    }
    if let Err(e) = setgid(gid) {
        return fail(format!("setgid: {e}"));
    }
    if let Err(e) = setuid(uid) {
        return fail(format!("setuid: {e}"));
    }
    if !uid.is_root() && (Uid::effective() != uid || setuid(Uid::from_raw(0)).is_ok()) {
        return fail("the user could not be dropped for good".to_owned());
    }
    let args = match c_strings(command.iter().map(OsString::as_os_str)) {
        Ok(args) if !args.is_empty() => args,
        Ok(_) => return fail("no command".to_owned()),
        Err(e) => return fail(e),
    };
    let Err(e) = execvp(&args[0], &args);
    fail(exec_failure(&command[0].to_string_lossy(), uid.as_raw(), e))
}

/// The line a failed `execvp` as `uid` leaves in the gateway's log: a refusal names what the
/// account needs.
fn exec_failure(program: &str, uid: u32, e: Errno) -> String {
    match e {
        Errno::EACCES => format!(
            "{program}: {e}: uid {uid} may not run it — the account must be able to search \
             every directory above it and execute it (the route's `user`, or `stdio_user` when \
             the gateway runs as root)"
        ),
        e => format!("{program}: {e}"),
    }
}

/// Clears the process's dumpable flag (`PR_SET_DUMPABLE 0`): its `/proc/<pid>/` files become
/// root's, so a process of the same user (a stdio child among them) can neither read its
/// environment nor attach to it, and no core dump is written.
pub(crate) fn not_dumpable() -> nix::Result<()> {
    prctl::set_dumpable(false)
}

/// What a child is started from.
#[derive(Debug, Clone)]
pub(crate) struct ChildCommand {
    /// The `pforte` binary that has the hidden subcommand.
    pub(crate) launcher: PathBuf,
    pub(crate) command: Vec<String>,
    /// The child's whole environment.
    pub(crate) env: Vec<(String, OsString)>,
    pub(crate) cwd: Option<PathBuf>,
    /// Run the command as this user.
    pub(crate) run_as: Option<RunAs>,
    /// The longest line the child may write on stdout (bytes, newline not counted).
    pub(crate) max_line_bytes: usize,
}

impl ChildCommand {
    /// The environment a child gets: `PATH` and `HOME` from the gateway's (when set), with a
    /// route's `own_home` its `HOME` and caches ([`super::account::home_env`]), then the
    /// route's own variables.
    pub(crate) fn clean_env(
        route_env: &std::collections::BTreeMap<String, String>,
        path: Option<OsString>,
        home: Option<OsString>,
        own_home: Option<&std::path::Path>,
    ) -> Vec<(String, OsString)> {
        let mut env: Vec<(String, OsString)> = Vec::new();
        if let Some(p) = path {
            env.push(("PATH".to_owned(), p));
        }
        match own_home {
            Some(dir) => env.extend(
                super::account::home_env(dir).map(|(k, v)| (k.to_owned(), v.into_os_string())),
            ),
            None => env.extend(home.map(|h| ("HOME".to_owned(), h))),
        }
        for (k, v) in route_env {
            env.retain(|(name, _)| name != k);
            env.push((k.clone(), OsString::from(v)));
        }
        env
    }

    fn build(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.launcher);
        cmd.arg(EXEC_SUBCOMMAND).arg(std::process::id().to_string());
        if let Some(who) = &self.run_as {
            cmd.arg("--uid")
                .arg(who.uid.to_string())
                .arg("--gid")
                .arg(who.gid.to_string());
        }
        cmd.arg("--")
            .args(&self.command)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(false);
        if let Some(dir) = &self.cwd {
            cmd.current_dir(dir);
        }
        cmd
    }
}

type Job = (
    ChildCommand,
    tokio::sync::oneshot::Sender<std::io::Result<tokio::process::Child>>,
);

/// The one thread that forks every child of a bridge (see the module doc). It ends when the
/// last handle is dropped.
#[derive(Debug, Clone)]
pub(crate) struct Spawner {
    jobs: std::sync::mpsc::Sender<Job>,
}

impl Spawner {
    /// Starts the thread; children are registered with the runtime of `handle`.
    pub(crate) fn start(handle: tokio::runtime::Handle, route: &str) -> std::io::Result<Self> {
        let (jobs, rx) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name(format!("stdio-spawn-{route}"))
            .spawn(move || {
                let _runtime = handle.enter();
                for (cmd, reply) in rx {
                    let _ = reply.send(cmd.build().spawn());
                }
            })?;
        Ok(Self { jobs })
    }

    /// Forks `cmd` on the spawner thread.
    pub(crate) async fn spawn(&self, cmd: ChildCommand) -> std::io::Result<tokio::process::Child> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.jobs
            .send((cmd, tx))
            .map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
        rx.await
            .map_err(|_| std::io::Error::other("the spawner thread is gone"))?
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_environment_is_path_home_and_the_route() {
        let mut route = std::collections::BTreeMap::new();
        route.insert("RUST_LOG".to_owned(), "warn".to_owned());
        route.insert("HOME".to_owned(), "/srv".to_owned());
        let env = ChildCommand::clean_env(&route, Some("/bin".into()), Some("/root".into()), None);
        let names: Vec<_> = env.iter().map(|(k, v)| (k.as_str(), v.to_str())).collect();
        assert_eq!(
            names,
            [
                ("PATH", Some("/bin")),
                ("HOME", Some("/srv")),
                ("RUST_LOG", Some("warn"))
            ]
        );
        assert!(ChildCommand::clean_env(&Default::default(), None, None, None).is_empty());
        // A route's own home: HOME and the caches there, the route's `env` over them.
        let own = std::path::Path::new("/srv/pf-stdio/files");
        let env = ChildCommand::clean_env(&route, None, Some("/nonexistent".into()), Some(own));
        let names: Vec<_> = env.iter().map(|(k, v)| (k.as_str(), v.to_str())).collect();
        assert_eq!(
            names,
            [
                ("XDG_CACHE_HOME", Some("/srv/pf-stdio/files/.cache")),
                ("npm_config_cache", Some("/srv/pf-stdio/files/.npm")),
                ("HOME", Some("/srv")),
                ("RUST_LOG", Some("warn"))
            ]
        );
    }

    #[test]
    fn the_process_is_not_dumpable_after_hardening() {
        // A thread of this test binary: the flag is the process's, and tests do not dump.
        not_dumpable().unwrap();
        assert!(!prctl::get_dumpable().unwrap());
    }

    #[test]
    fn the_parent_is_read_after_the_command_name() {
        assert_eq!(parent_in_stat("42 (a) b) S 7 42 42 0"), Some(7));
        assert_eq!(parent_in_stat("garbage"), None);
    }

    #[test]
    fn a_user_is_resolved_or_named_as_unknown() {
        let root = RunAs::resolve("root", None).unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        let e = RunAs::resolve("no-such-user-pforte", None).unwrap_err();
        assert!(e.contains("no user named \"no-such-user-pforte\""), "{e}");
        let e = RunAs::resolve("root", Some("no-such-group-pforte")).unwrap_err();
        assert!(e.contains("no group named"), "{e}");
    }

    #[test]
    fn a_refused_exec_says_what_the_account_needs() {
        let line = exec_failure("/root/bin/server", 65534, Errno::EACCES);
        assert!(
            line.starts_with(
                "/root/bin/server: EACCES: Permission denied: uid 65534 may not run it"
            ),
            "{line}"
        );
        assert_eq!(
            exec_failure("srv", 1, Errno::ENOENT),
            "srv: ENOENT: No such file or directory"
        );
    }

    #[test]
    fn a_signal_is_128_plus_its_number() {
        let child = Pid::from_raw(10);
        assert_eq!(child_code(WaitStatus::Exited(child, 3), child), Some(3));
        assert_eq!(
            child_code(WaitStatus::Signaled(child, Signal::SIGTERM, false), child),
            Some(143)
        );
        assert_eq!(
            child_code(WaitStatus::Exited(Pid::from_raw(11), 0), child),
            None
        );
    }
}
