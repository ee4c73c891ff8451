//! The stdio bridges' specs: what a `command` route's bridge runs, and whom as (the account
//! decided by `stdio::account`, looked up here as `preflight` did before), said in the log at
//! start.

use super::ServeError;
use crate::{
    config::UpstreamKind,
    stdio::{
        StdioSpec,
        account::{self, Account},
        exec::RunAs,
    },
};

/// The bridge spec of a `command` route (`None` for every other kind), the account its
/// children run as decided (`stdio::account::decide`: the gateway's effective uid `euid`, the
/// route's `user`, `stdio_user`) and looked up (as `preflight` did before).
pub(super) fn stdio_spec(
    route: &crate::config::Route,
    euid: u32,
    defaults: &crate::config::StdioAccount,
) -> Result<Option<(StdioSpec, std::path::PathBuf)>, ServeError> {
    let UpstreamKind::Stdio {
        upstream,
        command,
        env,
        cwd,
        limits,
        run_as,
    } = &route.upstream
    else {
        return Ok(None);
    };
    let Some(socket) = upstream.socket.clone() else {
        return Ok(None);
    };
    let run_as = match account::decide(euid, run_as.as_ref(), &defaults.user) {
        Account::Gateway => None,
        Account::Route(who) => Some(RunAs::resolve(&who.user, who.group.as_deref()).map_err(
            |reason| ServeError::RunAs {
                route: route.name.clone(),
                reason,
            },
        )?),
        Account::Default(user) => Some(
            RunAs::with_own_home(&user, account::home_of(&defaults.home, &route.name)).map_err(
                |reason| ServeError::StdioUser {
                    route: route.name.clone(),
                    reason,
                },
            )?,
        ),
    };
    let mut env = env.clone();
    // A shared credential for everyone goes in the children's environment.
    if let Some(crate::config::UpstreamAuth::Shared {
        file,
        into: crate::config::Injection::Env(variable),
    }) = &route.upstream_auth
    {
        let secret = crate::credentials::read_secret(file).map_err(|reason| {
            crate::credentials::CredentialsError::SharedFile {
                route: route.name.clone(),
                path: file.display().to_string(),
                reason,
            }
        })?;
        env.insert(variable.clone(), secret);
    }
    Ok(Some((
        StdioSpec {
            route: route.name.clone(),
            command: command.clone(),
            env,
            cwd: cwd.clone(),
            max_children: limits.max_children,
            max_children_per_principal: limits.max_children_per_principal,
            idle_timeout: std::time::Duration::from_secs(limits.idle_timeout_secs),
            pool: limits.pool,
            max_line_bytes: limits.max_line_bytes,
            run_as,
        },
        socket,
    )))
}

/// Says whom a bridge's children run as; running them as root beside a root gateway is the
/// opt-out, warned about.
pub(super) fn log_account(spec: &StdioSpec, euid: u32) {
    match &spec.run_as {
        None => {
            tracing::info!(route = %spec.route, uid = euid, "command route children run as the gateway's user")
        }
        Some(who) if who.uid == 0 && euid == 0 => tracing::warn!(
            route = %spec.route,
            "command route children run as root (user = \"root\" or stdio_user = \"root\"): third-party code with the gateway's privileges"
        ),
        Some(who) => tracing::info!(
            route = %spec.route,
            user = %who.user,
            uid = who.uid,
            gid = who.gid,
            home = %who.home.display(),
            "command route children run as another account"
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn command_routes_become_bridge_specs() {
        let text = "data_dir = \"/srv/pf\"\n[upstream]\nurl = \"http://127.0.0.1:1/mcp\"\n[[routes]]\nname = \"plans\"\ncommand = [\"sh\", \"-c\", \"cat\"]\nenv = { RUST_LOG = \"warn\" }\n[routes.stdio]\nidle_timeout_secs = 5\npool = 1";
        let settings = toml::from_str::<crate::config::GatewayConfig>(text)
            .unwrap()
            .validate()
            .unwrap();
        let own = |r| stdio_spec(r, 1000, &settings.stdio_account);
        assert!(own(&settings.routes[0]).unwrap().is_none());
        let (spec, socket) = own(&settings.routes[1]).unwrap().unwrap();
        assert_eq!(socket, std::path::Path::new("/srv/pf/run/stdio/plans.sock"));
        assert_eq!(spec.route, "plans");
        assert_eq!(spec.command, ["sh", "-c", "cat"]);
        assert_eq!(spec.env["RUST_LOG"], "warn");
        assert_eq!(spec.cwd, None);
        assert_eq!(
            (
                spec.max_children,
                spec.max_children_per_principal,
                spec.pool
            ),
            (16, 4, 1)
        );
        assert_eq!(spec.idle_timeout, std::time::Duration::from_secs(5));
        assert_eq!(
            spec.run_as, None,
            "a gateway that is not root: its own user"
        );
        // As root: `stdio_user` (nobody), with the route's own home beside the data dir.
        let (spec, _) = stdio_spec(&settings.routes[1], 0, &settings.stdio_account)
            .unwrap()
            .unwrap();
        let who = spec.run_as.unwrap();
        assert_eq!((who.user.as_str(), who.uid), ("nobody", 65534));
        assert!(who.own_home);
        assert_eq!(who.home, std::path::Path::new("/srv/pf-stdio/plans"));
    }

    #[test]
    fn a_route_user_is_looked_up_for_its_bridge() {
        let text = "[[routes]]\nname = \"p\"\ncommand = [\"sh\"]\nuser = \"root\"";
        let settings = toml::from_str::<crate::config::GatewayConfig>(text)
            .unwrap()
            .validate()
            .unwrap();
        let (spec, _) = stdio_spec(&settings.routes[0], 0, &settings.stdio_account)
            .unwrap()
            .unwrap();
        assert_eq!(spec.run_as.map(|r| (r.uid, r.gid)), Some((0, 0)));
        let text = "[[routes]]\nname = \"p\"\ncommand = [\"sh\"]\nuser = \"no-such-user-pforte\"";
        let settings = toml::from_str::<crate::config::GatewayConfig>(text)
            .unwrap()
            .validate()
            .unwrap();
        let err = stdio_spec(&settings.routes[0], 0, &settings.stdio_account)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("[[routes]] \"p\": user: no user named \"no-such-user-pforte\""),
            "{err}"
        );
    }
}
