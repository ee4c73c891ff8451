//! Which account a `command` route's children run as (issue 38, L11): a gateway that runs as
//! root starts them as an unprivileged account by default (`stdio_user`, `nobody` unless set),
//! each route's children with a home of their own (`<stdio_home>/<route>`, 0700, the
//! account's); a route's `user` overrides it (`user = "root"`: the explicit opt-out); a gateway
//! that is not root runs them as itself. The decision ([`decide`]) and the check that the
//! account can reach a path ([`blocked_at`]) are pure; [`prepare_home`] makes the home at start.

use std::{
    io,
    os::unix::fs::{DirBuilderExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
};

/// The account a `command` route's children run as, as written (`user`, `group`): `preflight`
/// checks that this machine knows it, the stdio bridge looks it up when it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunAsName {
    pub(crate) user: String,
    /// Instead of the user's primary group.
    pub(crate) group: Option<String>,
}

/// Where a route's children run, as decided from the gateway's effective uid, the route's
/// `user` and `stdio_user`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Account {
    /// The gateway's own user: it is not root and the route names no `user`.
    Gateway,
    /// The route's `user` (and `group`); its home is the account's own.
    Route(RunAsName),
    /// `stdio_user`: the gateway runs as root and the route names no `user`. The children get
    /// a home of their own per route.
    Default(String),
}

impl Account {
    /// Whether the children run as root while the gateway does (the logged opt-out): a route's
    /// `user = "root"` or `stdio_user = "root"`.
    pub(crate) fn is_root_opt_out(&self, euid: u32) -> bool {
        euid == 0
            && match self {
                Self::Gateway => false,
                Self::Route(who) => who.user == "root",
                Self::Default(user) => user == "root",
            }
    }

    /// Whether the children are processes of the gateway's own user (so they could join its
    /// `SO_REUSEPORT` group).
    pub(crate) fn shares_the_gateways_user(&self, euid: u32) -> bool {
        matches!(self, Self::Gateway) || self.is_root_opt_out(euid)
    }
}

/// The decision: a route's `user` wins; else a gateway running as root (`euid` 0) runs the
/// children as `default_user`; else as itself.
pub(crate) fn decide(euid: u32, route_user: Option<&RunAsName>, default_user: &str) -> Account {
    match route_user {
        Some(who) => Account::Route(who.clone()),
        None if euid == 0 => Account::Default(default_user.to_owned()),
        None => Account::Gateway,
    }
}

/// The home of `route`'s children under `stdio_home`.
pub(crate) fn home_of(stdio_home: &Path, route: &str) -> PathBuf {
    stdio_home.join(route)
}

/// One directory on a path, as the kernel checks it: its mode bits and owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DirAccess {
    pub(crate) mode: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

/// The first of `dirs` (a path's directories, outermost first) the account `uid`/`gid` may not
/// search (no `x` bit for it as owner, group or other), by index; `None`: it reaches the end.
/// Root searches everything; supplementary groups are not counted (the children have only
/// `gid`).
pub(crate) fn blocked_at(dirs: &[DirAccess], uid: u32, gid: u32) -> Option<usize> {
    if uid == 0 {
        return None;
    }
    dirs.iter().position(|d| {
        let bit = if d.uid == uid {
            0o100
        } else if d.gid == gid {
            0o010
        } else {
            0o001
        };
        d.mode & bit == 0
    })
}

/// The existing directories from `/` down to `path`'s parent (`path` absolute) with their
/// access; a missing one ends the list (it will be made by the gateway, searchable).
fn ancestors(path: &Path) -> Vec<(PathBuf, DirAccess)> {
    let mut dirs: Vec<&Path> = path.ancestors().skip(1).collect();
    dirs.reverse();
    dirs.into_iter()
        .filter(|d| !d.as_os_str().is_empty())
        .map_while(|d| access_of(d).map(|a| (d.to_owned(), a)))
        .collect()
}

/// Why the account `user` (`uid`/`gid`) cannot reach `path`: the first directory on its way it
/// may not search (with `run`, also `path` itself when it may not execute it); `None` when it
/// can.
pub(crate) fn unreachable_reason(
    path: &Path,
    user: &str,
    uid: u32,
    gid: u32,
    run: bool,
) -> Option<String> {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    // As written and with its links resolved (a venv's `python` may link under `/root`).
    let resolved = std::fs::canonicalize(&absolute).unwrap_or_else(|_| absolute.clone());
    [&absolute, &resolved].into_iter().find_map(|target| {
        let mut dirs = ancestors(target);
        if run {
            dirs.extend(access_of(target).map(|a| (target.clone(), a)));
        }
        let access: Vec<DirAccess> = dirs.iter().map(|(_, a)| *a).collect();
        blocked_at(&access, uid, gid)
            .and_then(|i| dirs.get(i))
            .map(|(dir, a)| {
                let what = if dir == target { "run" } else { "reach" };
                format!(
                    "{user} (uid {uid}), whom its children run as, cannot {what} {}: {} is \
                     {:o} and owned by uid {}",
                    target.display(),
                    dir.display(),
                    a.mode & 0o7777,
                    a.uid
                )
            })
    })
}

/// The mode and owner of `path` (links followed).
fn access_of(path: &Path) -> Option<DirAccess> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(path).ok().map(|m| DirAccess {
        mode: m.mode(),
        uid: m.uid(),
        gid: m.gid(),
    })
}

/// Mode of `<stdio_home>`: others may pass through (to their own route's home) but not list it.
const HOMES_MODE: u32 = 0o711;
/// Mode of a route's home: its account's alone.
const HOME_MODE: u32 = 0o700;

/// Makes `home` (`<stdio_home>/<route>`) for `uid`/`gid`: `stdio_home` created 0711 when
/// missing (its missing parents with the umask's mode), `home` created 0700 if missing, then (a real directory, not a link)
/// owned by `uid`/`gid` with mode 0700 — on every start, so a changed `stdio_user` takes it
/// over. Files inside are left as they are.
pub(crate) fn prepare_home(home: &Path, uid: u32, gid: u32) -> io::Result<()> {
    if let Some(homes) = home.parent().filter(|p| !p.as_os_str().is_empty()) {
        if let Some(up) = homes.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::DirBuilder::new().recursive(true).create(up)?;
        }
        match std::fs::DirBuilder::new().mode(HOMES_MODE).create(homes) {
            // Made here: 0711 whatever the umask. One that was there keeps its mode.
            Ok(()) => {
                std::fs::set_permissions(homes, std::fs::Permissions::from_mode(HOMES_MODE))?;
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    match std::fs::DirBuilder::new().mode(HOME_MODE).create(home) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    if !std::fs::symlink_metadata(home)?.is_dir() {
        return Err(io::Error::other("exists and is not a directory"));
    }
    std::os::unix::fs::lchown(home, Some(uid), Some(gid))?;
    std::fs::set_permissions(home, std::fs::Permissions::from_mode(HOME_MODE))
}

/// The variables a child with its own home gets unless the route's `env` sets them: `HOME`,
/// the XDG cache and npm's cache under it (npx and Python's tools write there).
pub(crate) fn home_env(home: &Path) -> [(&'static str, PathBuf); 3] {
    [
        ("HOME", home.to_owned()),
        ("XDG_CACHE_HOME", home.join(".cache")),
        ("npm_config_cache", home.join(".npm")),
    ]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn named(user: &str) -> RunAsName {
        RunAsName {
            user: user.to_owned(),
            group: None,
        }
    }

    #[test]
    fn root_runs_command_routes_as_the_default_account_unless_a_route_names_one() {
        assert_eq!(decide(0, None, "nobody"), Account::Default("nobody".into()));
        assert_eq!(
            decide(0, Some(&named("alice")), "nobody"),
            Account::Route(named("alice"))
        );
        let opt_out = decide(0, Some(&named("root")), "nobody");
        assert_eq!(opt_out, Account::Route(named("root")));
        assert!(opt_out.is_root_opt_out(0) && opt_out.shares_the_gateways_user(0));
        assert!(!decide(0, None, "nobody").shares_the_gateways_user(0));
        assert!(decide(0, None, "root").is_root_opt_out(0));
    }

    #[test]
    fn a_gateway_that_is_not_root_runs_them_as_itself() {
        let own = decide(1000, None, "nobody");
        assert_eq!(own, Account::Gateway);
        assert!(own.shares_the_gateways_user(1000) && !own.is_root_opt_out(1000));
        // A route's user stays the route's (preflight refuses it without root).
        assert_eq!(
            decide(1000, Some(&named("nobody")), "nobody"),
            Account::Route(named("nobody"))
        );
    }

    #[test]
    fn a_directory_blocks_an_account_without_its_search_bit() {
        let dir = |mode, uid, gid| DirAccess { mode, uid, gid };
        let open = [dir(0o755, 0, 0), dir(0o711, 0, 0)];
        assert_eq!(blocked_at(&open, 65534, 65534), None);
        let private = [dir(0o755, 0, 0), dir(0o700, 0, 0), dir(0o755, 0, 0)];
        assert_eq!(blocked_at(&private, 65534, 65534), Some(1));
        assert_eq!(blocked_at(&private, 0, 0), None, "root searches anything");
        // Owner and group bits count for their own, and only them.
        assert_eq!(blocked_at(&[dir(0o700, 65534, 0)], 65534, 65534), None);
        assert_eq!(blocked_at(&[dir(0o070, 0, 65534)], 65534, 65534), None);
        assert_eq!(blocked_at(&[dir(0o071, 65534, 0)], 65534, 65534), Some(0));
    }

    #[test]
    fn a_home_is_made_for_its_account_and_its_variables_point_into_it() {
        use std::os::unix::fs::MetadataExt as _;
        let tmp = tempfile::tempdir().unwrap();
        let home = home_of(&tmp.path().join("homes"), "files");
        let (uid, gid) = (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        );
        prepare_home(&home, uid, gid).unwrap();
        prepare_home(&home, uid, gid).unwrap();
        let m = std::fs::metadata(&home).unwrap();
        assert_eq!((m.mode() & 0o7777, m.uid(), m.gid()), (0o700, uid, gid));
        let parent = std::fs::metadata(home.parent().unwrap()).unwrap();
        assert_eq!(parent.mode() & 0o7777, 0o711);
        let link = tmp.path().join("homes/link");
        std::os::unix::fs::symlink(tmp.path(), &link).unwrap();
        assert!(prepare_home(&link, uid, gid).is_err(), "a link is refused");
        let env = home_env(&home);
        assert_eq!(env[0], ("HOME", home.clone()));
        assert_eq!(env[2], ("npm_config_cache", home.join(".npm")));
    }
}
