//! mcp-service's one typed configuration: a TOML file plus `MCP_SERVICE_*` env overrides,
//! validated before the service starts.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
};

use serde::Deserialize;

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("config file {path}: {source}")]
    Parse {
        path: String,
        source: Box<toml::de::Error>,
    },
    #[error("env {name}: {reason}")]
    Env { name: &'static str, reason: String },
    #[error("{0}")]
    Invalid(String),
}

/// The service's settings.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ServiceConfig {
    /// Where streamable HTTP listens. Loopback by default: only the gateway should reach it.
    pub listen: SocketAddr,
    /// `Host` values accepted on `/mcp` (DNS-rebinding protection). The gateway rewrites `Host`
    /// to the upstream authority, so loopback names suffice unless the service runs under another
    /// name (e.g. `mcp-service` in compose).
    pub allowed_hosts: Vec<String>,
    /// Largest accepted JSON-RPC POST body, in bytes.
    pub max_body_bytes: usize,
    /// Where the embedded store keeps its files (`documents.sqlite3`).
    pub data_dir: PathBuf,
    /// Which document store: the embedded one or redis (shared by several replicas).
    pub store: StoreKind,
    /// The redis URL when `store = "redis"`.
    pub redis_url: Option<String>,
    /// Key prefix in redis.
    pub redis_prefix: String,
    /// Largest plan text accepted or produced, in bytes.
    pub max_text_bytes: usize,
    /// Register no write tool at all.
    pub read_only: bool,
    /// Most documents this instance (or, on redis, this prefix) holds; creating one more is
    /// refused with `tooManyDocuments`.
    pub max_documents: u64,
    /// Core calls that may wait for a free runtime; one more gets the tool error `busy`.
    pub engine_queue: usize,
    /// Versions per `werkbaum_history` page when the call names no `limit`.
    pub history_page: usize,
    /// Largest `limit` a `werkbaum_history` call may ask for (at most 100).
    pub history_page_max: usize,
}

/// The most `werkbaum_history` entries one page may ever hold (its input schema's maximum).
pub(crate) const HISTORY_PAGE_CEILING: usize = 100;

/// The document store backend.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// SQLite under `data_dir`.
    #[default]
    Sqlite,
    Redis,
}

impl std::str::FromStr for StoreKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "sqlite" => Ok(StoreKind::Sqlite),
            "redis" => Ok(StoreKind::Redis),
            other => Err(format!("{other:?} is not a store (sqlite or redis)")),
        }
    }
}

impl Default for ServiceConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            max_body_bytes: 4 * 1024 * 1024,
            data_dir: PathBuf::from(".mcp-service"),
            store: StoreKind::Sqlite,
            redis_url: None,
            redis_prefix: crate::store::redis::DEFAULT_PREFIX.to_owned(),
            max_text_bytes: 1024 * 1024,
            read_only: false,
            max_documents: 10_000,
            engine_queue: crate::engine::DEFAULT_QUEUE_CAPACITY,
            history_page: 20,
            history_page_max: HISTORY_PAGE_CEILING,
        }
    }
}

impl ServiceConfig {
    /// Reads the optional file, applies env overrides from `env`, and validates.
    pub fn load(
        file: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let mut cfg = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.display().to_string(),
                    source,
                })?;
                toml::from_str(&text).map_err(|source| ConfigError::Parse {
                    path: path.display().to_string(),
                    source: Box::new(source),
                })?
            }
            None => Self::default(),
        };
        if let Some(v) = env("MCP_SERVICE_LISTEN") {
            cfg.listen = v.parse().map_err(|e| ConfigError::Env {
                name: "MCP_SERVICE_LISTEN",
                reason: format!("{v:?} is not an address: {e}"),
            })?;
        }
        if let Some(v) = env("MCP_SERVICE_ALLOWED_HOSTS") {
            cfg.allowed_hosts = v
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
        }
        if let Some(v) = env("MCP_SERVICE_MAX_BODY_BYTES") {
            cfg.max_body_bytes = v.parse().map_err(|e| ConfigError::Env {
                name: "MCP_SERVICE_MAX_BODY_BYTES",
                reason: format!("{v:?}: {e}"),
            })?;
        }
        if let Some(v) = env("MCP_SERVICE_DATA_DIR").filter(|v| !v.trim().is_empty()) {
            cfg.data_dir = PathBuf::from(v);
        }
        if let Some(v) = env("MCP_SERVICE_STORE") {
            cfg.store = v.parse().map_err(|reason| ConfigError::Env {
                name: "MCP_SERVICE_STORE",
                reason,
            })?;
        }
        if let Some(v) = env("MCP_SERVICE_REDIS_URL") {
            cfg.redis_url = Some(v);
        }
        if let Some(v) = env("MCP_SERVICE_MAX_TEXT_BYTES") {
            cfg.max_text_bytes = v.parse().map_err(|e| ConfigError::Env {
                name: "MCP_SERVICE_MAX_TEXT_BYTES",
                reason: format!("{v:?}: {e}"),
            })?;
        }
        if let Some(v) = env("MCP_SERVICE_MAX_DOCUMENTS") {
            cfg.max_documents = v.parse().map_err(|e| ConfigError::Env {
                name: "MCP_SERVICE_MAX_DOCUMENTS",
                reason: format!("{v:?}: {e}"),
            })?;
        }
        if let Some(v) = env("MCP_SERVICE_ENGINE_QUEUE") {
            cfg.engine_queue = v.parse().map_err(|e| ConfigError::Env {
                name: "MCP_SERVICE_ENGINE_QUEUE",
                reason: format!("{v:?}: {e}"),
            })?;
        }
        if let Some(v) = env("MCP_SERVICE_READ_ONLY") {
            cfg.read_only = matches!(v.trim(), "1" | "true" | "yes");
        }
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.allowed_hosts.is_empty() {
            return Err(ConfigError::Invalid(
                "allowed_hosts is empty: name at least the host the gateway forwards to".into(),
            ));
        }
        if self.max_body_bytes < 1024 {
            return Err(ConfigError::Invalid(
                "max_body_bytes below 1024 cannot carry an MCP request".into(),
            ));
        }
        if self.max_text_bytes == 0 {
            return Err(ConfigError::Invalid(
                "max_text_bytes must be positive".into(),
            ));
        }
        if self.max_documents == 0 {
            return Err(ConfigError::Invalid(
                "max_documents must be positive".into(),
            ));
        }
        if self.engine_queue == 0 {
            return Err(ConfigError::Invalid(
                "engine_queue must be positive: it is how many core calls may wait".into(),
            ));
        }
        if self.history_page_max == 0 || self.history_page_max > HISTORY_PAGE_CEILING {
            return Err(ConfigError::Invalid(format!(
                "history_page_max must be 1..={HISTORY_PAGE_CEILING}"
            )));
        }
        if self.history_page == 0 || self.history_page > self.history_page_max {
            return Err(ConfigError::Invalid(format!(
                "history_page must be 1..={} (history_page_max)",
                self.history_page_max
            )));
        }
        if self.store == StoreKind::Redis && self.redis_url.is_none() {
            return Err(ConfigError::Invalid(
                "store = \"redis\" needs redis_url (or MCP_SERVICE_REDIS_URL)".into(),
            ));
        }
        Ok(())
    }

    /// Checks the settings again after command-line overrides.
    pub fn revalidate(&self) -> Result<(), ConfigError> {
        self.validate()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn defaults_bind_loopback() {
        let cfg = ServiceConfig::load(None, |_| None).unwrap();
        assert!(cfg.listen.ip().is_loopback());
    }

    #[test]
    fn env_overrides_and_rejects_garbage() {
        let cfg = ServiceConfig::load(None, |k| {
            (k == "MCP_SERVICE_ALLOWED_HOSTS").then(|| "mcp-service, localhost".to_owned())
        })
        .unwrap();
        assert_eq!(cfg.allowed_hosts, ["mcp-service", "localhost"]);
        let err = ServiceConfig::load(None, |k| {
            (k == "MCP_SERVICE_LISTEN").then(|| "nope".to_owned())
        })
        .unwrap_err();
        assert!(err.to_string().contains("MCP_SERVICE_LISTEN"));
    }

    #[test]
    fn bounds_have_defaults_and_are_checked() {
        let cfg = ServiceConfig::load(None, |_| None).unwrap();
        assert_eq!(
            (cfg.max_documents, cfg.history_page, cfg.history_page_max),
            (10_000, 20, 100)
        );
        assert_eq!(cfg.engine_queue, crate::engine::DEFAULT_QUEUE_CAPACITY);
        let cfg = ServiceConfig::load(None, |k| match k {
            "MCP_SERVICE_MAX_DOCUMENTS" => Some("3".to_owned()),
            "MCP_SERVICE_ENGINE_QUEUE" => Some("2".to_owned()),
            _ => None,
        })
        .unwrap();
        assert_eq!((cfg.max_documents, cfg.engine_queue), (3, 2));
        let refused = |f: fn(&mut ServiceConfig)| {
            let mut cfg = ServiceConfig::default();
            f(&mut cfg);
            cfg.revalidate().unwrap_err().to_string()
        };
        assert!(refused(|c| c.max_documents = 0).contains("max_documents"));
        assert!(refused(|c| c.engine_queue = 0).contains("engine_queue"));
        assert!(refused(|c| c.history_page_max = 101).contains("history_page_max"));
        assert!(refused(|c| c.history_page = 0).contains("history_page"));
        assert!(
            refused(|c| {
                c.history_page_max = 10;
                c.history_page = 11;
            })
            .contains("history_page")
        );
    }

    #[test]
    fn data_dir_store_and_cap_from_env() {
        let cfg = ServiceConfig::load(None, |k| match k {
            "MCP_SERVICE_DATA_DIR" => Some("/tmp/x".to_owned()),
            "MCP_SERVICE_STORE" => Some("redis".to_owned()),
            "MCP_SERVICE_REDIS_URL" => Some("redis://127.0.0.1:1/0".to_owned()),
            "MCP_SERVICE_MAX_TEXT_BYTES" => Some("2048".to_owned()),
            _ => None,
        })
        .unwrap();
        assert_eq!(cfg.data_dir, PathBuf::from("/tmp/x"));
        assert_eq!(cfg.store, StoreKind::Redis);
        assert_eq!(cfg.max_text_bytes, 2048);
        assert_eq!(
            ServiceConfig::default().data_dir,
            PathBuf::from(".mcp-service")
        );
        let err = ServiceConfig::load(None, |k| {
            (k == "MCP_SERVICE_STORE").then(|| "redis".to_owned())
        })
        .unwrap_err();
        assert!(err.to_string().contains("redis_url"), "{err}");
    }
}
