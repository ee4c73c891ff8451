//! What a configuration names on this machine: the TLS files exist, a CA file holds a
//! certificate, a `command` route's program is an executable (looked up on `PATH` when it has
//! no `/`), its `cwd` a directory, its `user` and `group` known, and the account its children
//! run as (`stdio::account`) able to reach the program and its home. A failure is worded as the
//! configuration's own error ([`ConfigError`]): the field it names and why.

use std::{
    ffi::OsStr,
    path::{Path, PathBuf},
};

use crate::{
    config::StdioAccount,
    config::{ConfigError, Route, Settings, UpstreamKind, invalid, route_err},
    stdio::{
        account::{self, Account},
        exec::RunAs,
    },
};

/// The environment variable a route's program is looked up in when it has no `/`.
pub(crate) const PATH_ENV: &str = "PATH";

/// Every file, program, directory and account the settings name. `path_var` is the value of
/// [`PATH_ENV`] the caller read.
pub(super) fn check_named(
    settings: &Settings,
    path_var: Option<&OsStr>,
    euid: u32,
) -> Result<(), ConfigError> {
    if let Some(tls) = &settings.listen.tls {
        for files in &tls.pairs {
            for (field, path) in [("tls.cert", &files.cert), ("tls.key", &files.key)] {
                std::fs::metadata(path)
                    .map_err(|e| invalid(field, format!("{}: {e}", path.display())))?;
            }
        }
        if let Some(path) = tls.acme.as_ref().and_then(|a| a.ca_file.as_ref()) {
            std::fs::metadata(path)
                .map_err(|e| invalid("tls.acme.ca_file", format!("{}: {e}", path.display())))?;
        }
    }
    for route in &settings.routes {
        check_route(route, path_var, euid, &settings.stdio_account)?;
    }
    Ok(())
}

/// What one route names: its CA file, or its program, `cwd` and account — the account its
/// children run as (decided from `euid`, the route's `user` and `stdio_user`) known, and able
/// to reach its program and its home.
fn check_route(
    route: &Route,
    path_var: Option<&OsStr>,
    euid: u32,
    defaults: &StdioAccount,
) -> Result<(), ConfigError> {
    let err = |field: &'static str, reason: String| route_err(&route.name, field, reason);
    if let UpstreamKind::Stdio {
        command,
        cwd,
        run_as,
        ..
    } = &route.upstream
    {
        let program = match command.first() {
            Some(program) => Some(
                find_program(program, cwd.as_deref(), path_var).map_err(|e| err("command", e))?,
            ),
            None => None,
        };
        if let Some(cwd) = cwd
            && !cwd.is_dir()
        {
            return Err(err("cwd", format!("{} is not a directory", cwd.display())));
        }
        let who = match account::decide(euid, run_as.as_ref(), &defaults.user) {
            Account::Gateway => None,
            Account::Route(who) => {
                Some(RunAs::resolve(&who.user, who.group.as_deref()).map_err(|e| err("user", e))?)
            }
            Account::Default(user) => Some(
                RunAs::with_own_home(&user, account::home_of(&defaults.home, &route.name))
                    .map_err(|e| {
                        invalid(
                            "stdio_user",
                            format!(
                                "{e} (the account of command routes without user, such as {:?}, \
                                 when the gateway runs as root)",
                                route.name
                            ),
                        )
                    })?,
            ),
        };
        if let Some(who) = who {
            if let Some(reason) = program
                .as_deref()
                .and_then(|p| account::unreachable_reason(p, &who.user, who.uid, who.gid, true))
            {
                return Err(err("command", reason));
            }
            if who.own_home
                && let Some(reason) =
                    account::unreachable_reason(&who.home, &who.user, who.uid, who.gid, false)
            {
                return Err(invalid(
                    "stdio_home",
                    format!("{reason}; set stdio_home to a directory it can reach"),
                ));
            }
        }
    }
    if let Some(ca) = route.upstream.ca_file() {
        check_ca_file(ca).map_err(|reason| {
            if route.is_upstream_table() {
                invalid("upstream.ca_file", reason)
            } else {
                err("ca_file", reason)
            }
        })?;
    }
    Ok(())
}

/// The program of a `command` route: a path (relative to `cwd` when it has a `/` and is
/// relative), or a name looked up on `path_var`. It must be an executable file.
fn find_program(
    program: &str,
    cwd: Option<&Path>,
    path_var: Option<&OsStr>,
) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt as _;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.is_empty() {
        return Err("the program is empty".to_owned());
    }
    if program.contains('/') {
        let path = match cwd {
            Some(dir) if Path::new(program).is_relative() => dir.join(program),
            _ => PathBuf::from(program),
        };
        return match std::fs::metadata(&path) {
            Err(e) => Err(format!("{}: {e}", path.display())),
            Ok(_) if !executable(&path) => {
                Err(format!("{} is not an executable file", path.display()))
            }
            Ok(_) => Ok(path),
        };
    }
    path_var
        .map(std::env::split_paths)
        .into_iter()
        .flatten()
        .map(|dir| dir.join(program))
        .find(|p| executable(p))
        .ok_or_else(|| format!("{program:?} is not an executable on {PATH_ENV}"))
}

/// A `ca_file`: a PEM file with at least one certificate.
fn check_ca_file(path: &Path) -> Result<(), String> {
    use rustls::pki_types::{CertificateDer, pem::PemObject as _};
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: not PEM ({e})", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{}: no PEM certificate (BEGIN CERTIFICATE) in it",
            path.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

    fn named(text: &str) -> Result<(), String> {
        let settings = toml::from_str::<crate::config::GatewayConfig>(text)
            .unwrap()
            .validate()
            .unwrap();
        check_named(&settings, Some(OsStr::new(PATH)), 0).map_err(|e| e.to_string())
    }

    #[test]
    fn the_default_account_must_exist_and_reach_its_program_and_home() {
        use std::os::unix::fs::PermissionsExt as _;
        let err = named(
            "stdio_user = \"no-such-user-pforte\"\n[[routes]]\nname = \"a\"\ncommand = [\"sh\"]",
        )
        .unwrap_err();
        assert_eq!(
            err,
            "stdio_user: no user named \"no-such-user-pforte\" on this system (the account of \
             command routes without user, such as \"a\", when the gateway runs as root)"
        );
        // A program under a directory only its owner may enter.
        let tmp = tempfile::tempdir().unwrap();
        let private = tmp.path().join("private");
        std::fs::create_dir(&private).unwrap();
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
        let program = private.join("server");
        std::fs::copy("/bin/sh", &program).unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        let homes = tmp.path().join("homes");
        let text = |home: &std::path::Path| {
            format!(
                "stdio_home = {:?}\n[[routes]]\nname = \"a\"\ncommand = [{:?}]",
                home.display().to_string(),
                program.display().to_string()
            )
        };
        let err = named(&text(&homes)).unwrap_err();
        assert!(
            err.starts_with(&format!(
                "[[routes]] \"a\": command: nobody (uid 65534), whom its children run as, cannot \
                 reach {}: {} is 700",
                program.display(),
                private.display()
            )),
            "{err}"
        );
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o711)).unwrap();
        named(&text(&homes)).unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o700)).unwrap();
        let err = named(&text(&homes)).unwrap_err();
        assert!(err.contains("cannot run"), "{err}");
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Homes where the account cannot pass.
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
        let err = named(&format!(
            "stdio_home = {:?}\n[[routes]]\nname = \"a\"\ncommand = [\"sh\"]",
            private.join("homes").display().to_string()
        ))
        .unwrap_err();
        assert!(
            err.starts_with(
                "stdio_home: nobody (uid 65534), whom its children run as, cannot reach"
            ) && err.ends_with("set stdio_home to a directory it can reach"),
            "{err}"
        );
        // A link where the account reaches it, to a program where it does not (a venv's
        // python linked under /root): the link's target counts.
        let link = tmp.path().join("python");
        std::os::unix::fs::symlink(&program, &link).unwrap();
        let err = named(&format!(
            "stdio_home = {:?}\n[[routes]]\nname = \"a\"\ncommand = [{:?}]",
            homes.display().to_string(),
            link.display().to_string()
        ))
        .unwrap_err();
        assert!(
            err.contains(&format!(
                "cannot reach {}: {} is 700",
                program.display(),
                private.display()
            )),
            "{err}"
        );
        // A route of its own user, or a gateway that is not root: nothing to reach.
        let settings = toml::from_str::<crate::config::GatewayConfig>(&text(&homes))
            .unwrap()
            .validate()
            .unwrap();
        check_named(&settings, Some(OsStr::new(PATH)), 1000).unwrap();
    }

    #[test]
    fn command_routes_find_their_program_directory_and_user() {
        named("[[routes]]\nname = \"p\"\ncommand = [\"sh\", \"-c\", \"cat\"]\ncwd = \"/\"\nuser = \"root\"").unwrap();
        for (text, start) in [
            (
                "[[routes]]\nname = \"a\"\ncommand = [\"no-such-program-pforte\"]",
                "[[routes]] \"a\": command: \"no-such-program-pforte\" is not an executable on PATH",
            ),
            (
                "[[routes]]\nname = \"a\"\ncommand = [\"/dev/null\"]",
                "[[routes]] \"a\": command: /dev/null is not an executable file",
            ),
            (
                "[[routes]]\nname = \"a\"\ncommand = [\"sh\"]\ncwd = \"/etc/hostname\"",
                "[[routes]] \"a\": cwd: /etc/hostname is not a directory",
            ),
            (
                "[[routes]]\nname = \"a\"\ncommand = [\"sh\"]\nuser = \"no-such-user-pforte\"",
                "[[routes]] \"a\": user: no user named \"no-such-user-pforte\"",
            ),
            (
                "[[routes]]\nname = \"a\"\ncommand = [\"sh\"]\nuser = \"root\"\ngroup = \"no-such-group-pforte\"",
                "[[routes]] \"a\": user: no group named \"no-such-group-pforte\"",
            ),
        ] {
            let err = named(text).unwrap_err();
            assert!(err.starts_with(start), "{text}: {err}");
        }
        assert!(find_program("/bin/sh", None, None).is_ok());
        assert!(find_program("sh", None, Some(OsStr::new("/nonexistent"))).is_err());
        assert!(find_program("sh", None, None).is_err());
    }

    #[test]
    fn ca_files_hold_a_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let ca = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let pem = dir.path().join("ca.pem");
        std::fs::write(&pem, ca.cert.pem()).unwrap();
        let upstream = format!(
            "[upstream]\nurl = \"https://localhost:8443/mcp\"\nca_file = {:?}",
            pem.display().to_string()
        );
        let route = format!(
            "[[routes]]\nname = \"a\"\nurl = \"https://localhost:8443/mcp\"\nca_file = {:?}",
            pem.display().to_string()
        );
        named(&upstream).unwrap();
        named(&route).unwrap();
        std::fs::write(&pem, "not pem").unwrap();
        let err = named(&upstream).unwrap_err();
        assert!(err.starts_with("upstream.ca_file:"), "{err}");
        let err = named(&route).unwrap_err();
        assert!(err.starts_with("[[routes]] \"a\": ca_file:"), "{err}");
        std::fs::remove_file(&pem).unwrap();
        let err = named(&upstream).unwrap_err();
        assert!(err.starts_with("upstream.ca_file:"), "{err}");
    }

    #[test]
    fn tls_files_must_exist() {
        let err = named("[tls]\ncert = \"/nonexistent/c.pem\"\nkey = \"/nonexistent/k.pem\"")
            .unwrap_err();
        assert!(err.starts_with("tls.cert: /nonexistent/c.pem: "), "{err}");
    }
}
