//! Starting stdio children so that they never outlive the gateway, without `unsafe`: every child
//! is the gateway's own binary run as the hidden `__stdio-exec` subcommand, which asks the
//! kernel for SIGKILL when its parent goes (`PR_SET_PDEATHSIG`), checks the parent is still the
//! one that started it, moves into its own process group and then `execvp`s the real command
//! (the death signal survives `execve`).
//!
//! The death signal follows the *thread* that forked the child, so every child is forked by one
//! [`Spawner`] thread that lives as long as the bridge (the runtime's blocking threads come and
//! go).

use std::{
    ffi::{CString, OsString},
    os::unix::ffi::OsStrExt as _,
    path::PathBuf,
    process::{ExitCode, Stdio},
};

use nix::{
    sys::{prctl, signal::Signal},
    unistd::{Pid, execvp, getppid, setpgid},
};

/// The hidden subcommand of `pforte` that becomes a stdio child.
pub const EXEC_SUBCOMMAND: &str = "__stdio-exec";

/// Exit status when the command cannot be started (like a shell's "command not found").
const EXEC_FAILED: u8 = 127;

/// Runs as the hidden subcommand: arms the parent-death signal, checks `parent`, takes its own
/// process group and replaces itself with `command`. Returns only on failure.
pub fn exec_child(parent: i32, command: &[OsString]) -> ExitCode {
    if let Err(e) = prctl::set_pdeathsig(Signal::SIGKILL) {
        eprintln!("pforte {EXEC_SUBCOMMAND}: PR_SET_PDEATHSIG: {e}");
        return ExitCode::from(EXEC_FAILED);
    }
    // The parent may have died between fork and prctl: then no signal would ever come.
    if getppid().as_raw() != parent {
        eprintln!("pforte {EXEC_SUBCOMMAND}: the gateway is gone");
        return ExitCode::from(EXEC_FAILED);
    }
    if let Err(e) = setpgid(Pid::from_raw(0), Pid::from_raw(0)) {
        eprintln!("pforte {EXEC_SUBCOMMAND}: setpgid: {e}");
        return ExitCode::from(EXEC_FAILED);
    }
    let args: Result<Vec<CString>, _> =
        command.iter().map(|a| CString::new(a.as_bytes())).collect();
    let args = match args {
        Ok(args) if !args.is_empty() => args,
        Ok(_) => {
            eprintln!("pforte {EXEC_SUBCOMMAND}: no command");
            return ExitCode::from(EXEC_FAILED);
        }
        Err(e) => {
            eprintln!("pforte {EXEC_SUBCOMMAND}: {e}");
            return ExitCode::from(EXEC_FAILED);
        }
    };
    let Err(e) = execvp(&args[0], &args);
    eprintln!(
        "pforte {EXEC_SUBCOMMAND}: {}: {e}",
        command[0].to_string_lossy()
    );
    ExitCode::from(EXEC_FAILED)
}

/// What a child is started from.
#[derive(Debug, Clone)]
pub struct ChildCommand {
    /// The `pforte` binary that has the hidden subcommand.
    pub launcher: PathBuf,
    pub command: Vec<String>,
    /// The child's whole environment.
    pub env: Vec<(String, OsString)>,
    pub cwd: Option<PathBuf>,
}

impl ChildCommand {
    /// The environment a child gets: `PATH` and `HOME` from the gateway's (when set), then the
    /// route's own variables.
    pub fn clean_env(
        route_env: &std::collections::BTreeMap<String, String>,
        path: Option<OsString>,
        home: Option<OsString>,
    ) -> Vec<(String, OsString)> {
        let mut env: Vec<(String, OsString)> = Vec::new();
        if let Some(p) = path {
            env.push(("PATH".to_owned(), p));
        }
        if let Some(h) = home {
            env.push(("HOME".to_owned(), h));
        }
        for (k, v) in route_env {
            env.retain(|(name, _)| name != k);
            env.push((k.clone(), OsString::from(v)));
        }
        env
    }

    fn build(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.launcher);
        cmd.arg(EXEC_SUBCOMMAND)
            .arg(std::process::id().to_string())
            .arg("--")
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
pub struct Spawner {
    jobs: std::sync::mpsc::Sender<Job>,
}

impl Spawner {
    /// Starts the thread; children are registered with the runtime of `handle`.
    pub fn start(handle: tokio::runtime::Handle, route: &str) -> std::io::Result<Self> {
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
    pub async fn spawn(&self, cmd: ChildCommand) -> std::io::Result<tokio::process::Child> {
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
    use super::*;

    #[test]
    fn the_environment_is_path_home_and_the_route() {
        let mut route = std::collections::BTreeMap::new();
        route.insert("RUST_LOG".to_owned(), "warn".to_owned());
        route.insert("HOME".to_owned(), "/srv".to_owned());
        let env = ChildCommand::clean_env(&route, Some("/bin".into()), Some("/root".into()));
        let names: Vec<_> = env.iter().map(|(k, v)| (k.as_str(), v.to_str())).collect();
        assert_eq!(
            names,
            [
                ("PATH", Some("/bin")),
                ("HOME", Some("/srv")),
                ("RUST_LOG", Some("warn"))
            ]
        );
        assert!(ChildCommand::clean_env(&Default::default(), None, None).is_empty());
    }
}
