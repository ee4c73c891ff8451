//! The `pforte` commands, one module per group, and what they share: how a command fails and
//! so how the process exits ([`Failure`]), the environment read once at start ([`Env`]),
//! reading a configuration file and checking its settings as `serve` would, and the run every
//! command but the stdio bridge's goes through ([`run`]).

pub(crate) mod admin;
pub(crate) mod backup;
pub(crate) mod client;
pub(crate) mod grant;
pub(crate) mod serve;
pub(crate) mod token;
pub(crate) mod tools;
pub(crate) mod up;
pub(crate) mod user;
pub(crate) mod vault;

use std::{
    collections::HashMap,
    ffi::{OsStr, OsString},
    path::{Path, PathBuf},
    process::ExitCode,
};

use crate::{
    cli,
    config::{ConfigError, GatewayConfig, Settings},
    logging, preflight, runtime, tokens,
};
use pforte_oauth::AdminError;

/// How a command failed, and so how the process exits.
#[derive(Debug)]
pub enum Failure {
    /// Usage or configuration (64).
    Usage(String),
    /// The data dir holds no store (66).
    NoStore(PathBuf),
    /// `serve` without `--init` on a data dir that holds no store (66).
    Uninitialised(PathBuf),
    /// The store cannot be used right now (69).
    Unavailable(String),
    /// Anything else (1).
    Other(anyhow::Error),
}

impl Failure {
    /// Prints the one line and returns the exit code.
    pub fn report(self) -> ExitCode {
        let (code, line) = match self {
            Self::Usage(m) => (cli::exit::USAGE, m),
            Self::NoStore(dir) => (cli::exit::NO_STORE, cli::no_store_message(&dir)),
            Self::Uninitialised(dir) => (cli::exit::NO_STORE, cli::uninitialised_message(&dir)),
            Self::Unavailable(m) => (cli::exit::UNAVAILABLE, m),
            Self::Other(e) => (cli::exit::OTHER, format!("{e:#}")),
        };
        eprintln!("pforte: {line}");
        ExitCode::from(code)
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Self::Other(e)
    }
}

impl From<AdminError> for Failure {
    fn from(e: AdminError) -> Self {
        match e {
            AdminError::Store(e) => Self::Unavailable(e.to_string()),
            other => Self::Other(other.into()),
        }
    }
}

impl From<crate::stores::StoresError> for Failure {
    fn from(e: crate::stores::StoresError) -> Self {
        Self::Unavailable(e.to_string())
    }
}

impl From<tokens::StoreError> for Failure {
    fn from(e: tokens::StoreError) -> Self {
        use tokens::StoreError as E;
        match e {
            E::Sqlite(_) | E::Redis(_) | E::Poisoned | E::DataDir { .. } => {
                Self::Unavailable(e.to_string())
            }
            other => Self::Other(other.into()),
        }
    }
}

pub(crate) type CmdResult = Result<(), Failure>;

/// `PFORTE_*_FILE` variables that are settings naming a file (a CA certificate, compose's config
/// file), not a secret to read into `PFORTE_*`.
const PATH_SETTINGS: [&str; 2] = ["PFORTE_ACME_CA_FILE", "PFORTE_CONFIG_FILE"];

/// The environment the gateway reads, read once at start: the `PFORTE_*` variables, each as set
/// or else the content of the file its `PFORTE_*_FILE` names (a secret such as a redis URL with
/// its password, mounted as a file), and `PATH` (where a `command` route's program is looked
/// up). Passed to whatever reads the environment; no global holds it.
#[derive(Debug, Default)]
pub struct Env {
    vars: HashMap<String, String>,
    path: Option<OsString>,
}

impl Env {
    /// The process's `PFORTE_*` variables, with every `PFORTE_X_FILE` read into `PFORTE_X`
    /// (unless `PFORTE_X` itself is set), and its `PATH`.
    pub(crate) fn from_process() -> Result<Self, Failure> {
        // Each file as every secret file: owner-only, not empty.
        let env = Self::from_vars(std::env::vars(), |path| {
            pforte_oauth::read_secret_file(Path::new(path)).map_err(|e| e.to_string())
        })?;
        Ok(Self {
            path: std::env::var_os(preflight::PATH_ENV),
            ..env
        })
    }

    /// [`Env::from_process`] over given variables and a given file reader.
    fn from_vars(
        vars: impl IntoIterator<Item = (String, String)>,
        read: impl Fn(&str) -> Result<String, String>,
    ) -> Result<Self, Failure> {
        let given: Vec<(String, String)> = vars
            .into_iter()
            .filter(|(key, _)| key.starts_with("PFORTE_"))
            .collect();
        let mut set: HashMap<String, String> = given.iter().cloned().collect();
        for (key, path) in &given {
            let Some(name) = key
                .strip_suffix("_FILE")
                .filter(|n| n.starts_with("PFORTE_"))
                .filter(|_| !PATH_SETTINGS.contains(&key.as_str()))
            else {
                continue;
            };
            if set.contains_key(name) {
                continue;
            }
            let value = read(path).map_err(|e| Failure::Usage(format!("{key}={path}: {e}")))?;
            set.insert(
                name.to_owned(),
                value.trim_end_matches(['\r', '\n']).to_owned(),
            );
        }
        Ok(Self {
            vars: set,
            path: None,
        })
    }

    /// The value of `name`, e.g. `PFORTE_REDIS_URL`.
    pub(crate) fn get(&self, name: &str) -> Option<String> {
        self.vars.get(name).cloned()
    }

    /// The value of `PATH`.
    pub(crate) fn path(&self) -> Option<&OsStr> {
        self.path.as_deref()
    }
}

/// Runs a command as every command but the stdio bridge's runs: a startup panic reported as one
/// line, the environment read once, logging started (unless the command starts it itself, as
/// `serve` does with its configured format), and the last log lines flushed before the outcome.
pub fn run(logs_itself: bool, command: impl FnOnce(&Env) -> Result<ExitCode, Failure>) -> ExitCode {
    install_panic_hook();
    let env = match Env::from_process() {
        Ok(env) => env,
        Err(failure) => return failure.report(),
    };
    if !logs_itself {
        let format = env
            .get("PFORTE_LOG_FORMAT")
            .and_then(|v| v.parse().ok())
            .unwrap_or_default();
        logging::init(format);
    }
    let result = command(&env);
    // Log lines are written in batches; the last ones before the outcome.
    logging::flush();
    result.unwrap_or_else(Failure::report)
}

/// Pingora reports a listener or TLS file it cannot use by panicking on one of its threads; those
/// are operator errors: one line and exit 1, not a backtrace and a process that listens nowhere.
fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        logging::flush();
        if preflight::is_startup_panic(message) {
            let first = message.lines().next().unwrap_or(message);
            eprintln!("pforte: cannot start: {first}");
            std::process::exit(1);
        }
        default(info);
    }));
}

/// `serve` and `up` hold secrets (token and OAuth stores, keys, the environment): nobody but
/// root may read their memory or `/proc/<pid>/environ`, and they leave no core dump.
pub(crate) fn harden_process() {
    if let Err(e) = crate::stdio::exec::not_dumpable() {
        eprintln!("pforte: PR_SET_DUMPABLE: {e}");
    }
}

pub(crate) fn bad_config(e: impl std::fmt::Display) -> Failure {
    Failure::Usage(format!("bad configuration: {e}"))
}

/// The configuration file (read here; or the defaults without one) with the environment over
/// it: no validation yet.
pub(crate) fn read_config(config: Option<&Path>, env: &Env) -> Result<GatewayConfig, ConfigError> {
    let text = match config {
        Some(path) => Some(
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.display().to_string(),
                source,
            })?,
        ),
        None => None,
    };
    GatewayConfig::load(config.zip(text.as_deref()), |name| env.get(name))
}

/// [`read_config`], a failure of it a usage error.
pub(crate) fn load_config(config: Option<&Path>, env: &Env) -> Result<GatewayConfig, Failure> {
    read_config(config, env).map_err(bad_config)
}

/// Loads and validates everything `serve` would, without listening.
pub(crate) fn settings(
    config: Option<&Path>,
    data_dir: Option<PathBuf>,
    env: &Env,
) -> Result<Settings, Failure> {
    let mut cfg = load_config(config, env)?;
    if let Some(dir) = data_dir {
        cfg.data_dir = dir;
    }
    data_dir_usable(&cfg)?;
    cfg.listen = runtime::resolve_port(cfg.listen).map_err(bad_config)?;
    validated(cfg, env)
}

/// The embedded store's data dir is a directory or does not exist yet: a file there is a usage
/// error (64) naming it, not the `File exists` of a failed create (69).
pub(crate) fn data_dir_usable(cfg: &GatewayConfig) -> Result<(), Failure> {
    match cli::data_dir_problem(&cfg.data_dir) {
        Some(problem) if cfg.redis_url.is_none() => Err(Failure::Usage(problem)),
        _ => Ok(()),
    }
}

/// The one way from a configuration to settings, for `check`, `serve` and `up`: the pure
/// validation, then the preflight checks of what it names on this machine.
pub(crate) fn validated(cfg: GatewayConfig, env: &Env) -> Result<Settings, Failure> {
    let settings = cfg.validate().map_err(bad_config)?;
    preflight::check(&settings, env.path()).map_err(bad_config)?;
    Ok(settings)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_file_variable_gives_its_content_unless_the_variable_is_set() {
        let read = |path: &str| match path {
            "/run/secrets/redis" => Ok("redis://:pw@db/0\r\n".to_owned()),
            "/run/secrets/listen" => Ok("0.0.0.0:1\n".to_owned()),
            _ => Err("No such file or directory (os error 2)".to_owned()),
        };
        let env = Env::from_vars(
            vars(&[
                ("PFORTE_REDIS_URL_FILE", "/run/secrets/redis"),
                ("PFORTE_LISTEN", "127.0.0.1:2"),
                ("PFORTE_LISTEN_FILE", "/run/secrets/listen"),
                ("PFORTE_ACME_CA_FILE", "/etc/ssl/ca.pem"),
                ("HOME", "/root"),
            ]),
            read,
        )
        .unwrap();
        assert_eq!(
            env.get("PFORTE_REDIS_URL").as_deref(),
            Some("redis://:pw@db/0")
        );
        assert_eq!(env.get("PFORTE_LISTEN").as_deref(), Some("127.0.0.1:2"));
        assert_eq!(env.get("HOME"), None);
        // A setting that names a file is not read as a secret.
        assert_eq!(
            env.get("PFORTE_ACME_CA_FILE").as_deref(),
            Some("/etc/ssl/ca.pem")
        );
        assert_eq!(env.get("PFORTE_ACME_CA"), None);
        assert_eq!(env.get("PFORTE_DATA_DIR"), None);
    }

    #[test]
    fn an_unreadable_file_variable_is_a_usage_error_naming_it() {
        let err = Env::from_vars(vars(&[("PFORTE_REDIS_URL_FILE", "/nope")]), |_| {
            Err("No such file or directory (os error 2)".to_owned())
        })
        .unwrap_err();
        assert!(
            matches!(&err, Failure::Usage(m) if m.starts_with("PFORTE_REDIS_URL_FILE=/nope: ")),
            "{err:?}"
        );
    }
}
