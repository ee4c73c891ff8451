//! `pforte check` and `pforte serve`: a configuration loaded and validated; `check` describes its
//! routes, `serve` opens the stores and runs the gateway on it. `serve` starts on a data dir
//! without a store only when told to create one (`--init`, `PFORTE_INIT=1`): a mistyped or
//! unmounted data dir is refused instead of becoming a new, empty store where every token fails.

use std::path::{Path, PathBuf};

use crate::{
    cli,
    config::UpstreamKind,
    logging, preflight, runtime,
    stores::{Site, Stores},
};

use super::{CmdResult, Env, Failure, harden_process, settings};

/// The environment variable that does what `serve --init` does (for containers and units).
pub(crate) const INIT_ENV: &str = "PFORTE_INIT";

/// `pforte serve`'s flags.
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub struct ServeArgs {
    /// Create a new, empty store when the data dir holds none (the first start); without it
    /// `serve` refuses such a data dir (exit 66). Also PFORTE_INIT=1. No effect with redis_url.
    #[arg(long)]
    init: bool,
}

/// What `serve` does about the store it is about to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoreStart {
    /// The data dir holds a store: open it.
    Existing,
    /// No store there, and `--init`: create it.
    Create,
    /// redis: the keys are the store, nothing to create or refuse.
    Redis,
}

/// Decides [`StoreStart`] from where the store lives, whether the data dir holds one
/// (`has_store`) and `--init`; refuses a data dir without a store and without `--init`.
fn store_start(
    site: &Site,
    has_store: impl Fn(&Path) -> bool,
    init: bool,
) -> Result<StoreStart, Failure> {
    match site {
        Site::Redis(_) => Ok(StoreStart::Redis),
        Site::Embedded(dir) if has_store(dir) => Ok(StoreStart::Existing),
        Site::Embedded(_) if init => Ok(StoreStart::Create),
        Site::Embedded(dir) => Err(Failure::Uninitialised(dir.clone())),
    }
}

/// `PFORTE_INIT`: `1`/`true` set it, `0`/`false`/empty or unset leave it off.
fn init_from_env(env: &Env) -> Result<bool, Failure> {
    match env.get(INIT_ENV).as_deref() {
        None | Some("" | "0" | "false") => Ok(false),
        Some("1" | "true") => Ok(true),
        Some(other) => Err(Failure::Usage(format!(
            "{INIT_ENV}={other:?}: use 1 (create a store when the data dir has none) or 0"
        ))),
    }
}

/// Validates everything `serve` would and prints each route with its upstream. A data dir
/// without a store is a warning (the dir may be prepared later, or `serve --init` creates it).
pub fn check(config: Option<&Path>, data_dir: Option<PathBuf>, env: &Env) -> CmdResult {
    let s = settings(config, data_dir, env)?;
    let init = init_from_env(env)?;
    match store_start(&s.store, cli::has_store, init) {
        Ok(StoreStart::Create) => eprintln!(
            "note: no Pforte store at {} yet; serve creates one ({INIT_ENV} is set)",
            s.data_dir.display()
        ),
        Ok(StoreStart::Existing | StoreStart::Redis) => {}
        Err(_) => eprintln!("warning: {}", cli::uninitialised_message(&s.data_dir)),
    }
    println!("configuration ok:");
    for route in &s.routes {
        println!(
            "  {} → {}",
            route.resource,
            describe_upstream(&route.upstream)
        );
    }
    Ok(())
}

/// Runs the gateway: refuses a data dir without a store unless `--init`, binds the listener
/// once and opens the stores before it prints success, then serves until stopped.
pub fn serve(
    args: ServeArgs,
    config: Option<&Path>,
    data_dir: Option<PathBuf>,
    env: &Env,
) -> CmdResult {
    harden_process();
    let s = settings(config, data_dir, env)?;
    logging::init(s.log_format);
    let init = args.init || init_from_env(env)?;
    let start = store_start(&s.store, cli::has_store, init)?;
    preflight::check_bind(s.listen.addr, preflight::ListenKnob::Config)
        .map_err(|e| Failure::Other(e.into()))?;
    // Before the success line: a store that cannot be opened (locked by a restore, unreadable)
    // is one line and 69, not a gateway that said it listens and then exits.
    let stores = Stores::open(&s.store)?;
    let resources: Vec<&str> = s.routes.iter().map(|r| r.resource.as_str()).collect();
    println!(
        "pforte listening on {} (MCP: {})",
        s.base_url,
        resources.join(", ")
    );
    if start == StoreStart::Create {
        tracing::info!(data_dir = %s.data_dir.display(), "created a new, empty store");
    }
    runtime::run(s, stores, Vec::new()).map_err(|e| Failure::Other(e.into()))
}

/// How `pforte check` names a route's upstream.
fn describe_upstream(kind: &UpstreamKind) -> String {
    use UpstreamKind as K;
    match kind {
        K::Http(u) | K::Https { upstream: u, .. } => u.http_url(),
        K::Unix(u) => format!(
            "unix:{}",
            u.socket.as_deref().unwrap_or(Path::new("")).display()
        ),
        K::Stdio { command, .. } => format!("stdio: {}", command.join(" ")),
        K::Replicas { instances, .. } => instances
            .iter()
            .map(|u| u.http_url())
            .collect::<Vec<_>>()
            .join(", "),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_data_dir_without_a_store_needs_init() {
        let dir = Site::Embedded(PathBuf::from("/srv/typo"));
        let (none, some) = (|_: &Path| false, |_: &Path| true);
        assert_eq!(
            store_start(&dir, some, false).unwrap(),
            StoreStart::Existing
        );
        assert_eq!(store_start(&dir, some, true).unwrap(), StoreStart::Existing);
        assert_eq!(store_start(&dir, none, true).unwrap(), StoreStart::Create);
        let refused = store_start(&dir, none, false).unwrap_err();
        assert!(
            matches!(&refused, Failure::Uninitialised(d) if d == Path::new("/srv/typo")),
            "{refused:?}"
        );
        // redis is its own store: no data dir to refuse.
        let redis = Site::Redis("redis://127.0.0.1:1/".to_owned());
        assert_eq!(store_start(&redis, none, false).unwrap(), StoreStart::Redis);
    }

    #[test]
    fn pforte_init_is_one_or_zero() {
        let env = |v: &str| {
            Env::from_vars(vec![(INIT_ENV.to_owned(), v.to_owned())], |_| {
                Err(std::io::Error::from(std::io::ErrorKind::NotFound))
            })
            .unwrap()
        };
        assert!(init_from_env(&env("1")).unwrap());
        assert!(init_from_env(&env("true")).unwrap());
        assert!(!init_from_env(&env("0")).unwrap());
        assert!(!init_from_env(&env("")).unwrap());
        assert!(!init_from_env(&Env::default()).unwrap());
        assert!(matches!(init_from_env(&env("yes")), Err(Failure::Usage(_))));
    }
}
