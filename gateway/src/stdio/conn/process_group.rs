//! Signals to a child's process group: stopping it (SIGTERM, then SIGKILL) and what is left of it.

use nix::{
    sys::signal::{Signal, kill, killpg},
    unistd::Pid,
};

use super::SUPERVISOR_GRACE;

/// Sends `signal` to the process group of the child `pid` (before the child's setpgid there
/// is no such group: then to the child alone).
pub(crate) fn signal_group(pid: u32, signal: Signal) {
    if let Ok(pid) = i32::try_from(pid) {
        let pid = Pid::from_raw(pid);
        if killpg(pid, signal).is_err() {
            let _ = kill(pid, signal);
        }
    }
}

/// Whether the process `pid` has ended (gone, or a zombie waiting to be reaped).
pub(crate) fn has_exited(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    stat.rsplit_once(')')
        .map(|(_, rest)| rest.trim_start())
        .is_some_and(|state| state.starts_with('Z') || state.starts_with('X'))
}

/// SIGTERM to the child's process group, SIGKILL after [`SUPERVISOR_GRACE`]; reaps it.
pub(super) async fn terminate(pid: Option<u32>, child: &mut tokio::process::Child) {
    let signal_all = |signal: Signal| {
        if let Some(pid) = pid {
            signal_group(pid, signal);
        }
    };
    signal_all(Signal::SIGTERM);
    if tokio::time::timeout(SUPERVISOR_GRACE, child.wait())
        .await
        .is_err()
    {
        signal_all(Signal::SIGKILL);
        let _ = child.wait().await;
    }
    kill_group(pid);
}

/// SIGKILL to what is left of an exited child's process group (its own children).
pub(super) fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
}
