//! Wiring the service from its configuration: the document store (embedded or redis), the core
//! engine, the real clock and id source, and the `Planner` the MCP sessions share.

use std::sync::Arc;

use pforte_clock::SystemClock;

use crate::config::{ServiceConfig, StoreKind};
use crate::engine::{Engine, EngineConfig, EngineError};
use crate::ids::RandomIds;
use crate::store::{RedisStore, SqliteStore, Store, StoreError};
use crate::tools::{Bounds, Planner};

/// The embedded store's file name inside the data dir.
pub(crate) const SQLITE_FILE: &str = "documents.sqlite3";

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot create the data dir {path}: {source}")]
    DataDir {
        path: String,
        source: std::io::Error,
    },
    #[error("document store: {0}")]
    Store(#[from] StoreError),
    #[error("core engine: {0}")]
    Engine(#[from] EngineError),
}

/// Opens the configured store. Blocking (SQLite opens the file): call before serving.
pub(crate) fn open_store(cfg: &ServiceConfig) -> Result<Arc<dyn Store>, StartError> {
    match cfg.store {
        StoreKind::Sqlite => {
            crate::store::sqlite::private_dir(&cfg.data_dir).map_err(|source| {
                StartError::DataDir {
                    path: cfg.data_dir.display().to_string(),
                    source,
                }
            })?;
            Ok(Arc::new(SqliteStore::open(
                &cfg.data_dir.join(SQLITE_FILE),
            )?))
        }
        StoreKind::Redis => {
            let url = cfg.redis_url.as_deref().unwrap_or_default();
            Ok(Arc::new(RedisStore::connect(url, &cfg.redis_prefix)?))
        }
    }
}

/// The planner for a configured service: its store, a fresh engine, the system clock.
pub fn planner(cfg: &ServiceConfig) -> Result<Arc<Planner>, StartError> {
    let store = open_store(cfg)?;
    let engine = Engine::new(EngineConfig {
        queue_capacity: cfg.engine_queue,
        ..EngineConfig::default()
    })?;
    Ok(Arc::new(
        Planner::new(
            engine,
            store,
            Arc::new(SystemClock),
            Arc::new(RandomIds),
            cfg.max_text_bytes,
        )
        .with_bounds(Bounds::of(cfg)),
    ))
}
