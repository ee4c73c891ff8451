//! The shared async connection every store clones: a `ConnectionManager` with the profile's
//! timeouts, re-made from the sentinels' answer after the master is lost.

use std::sync::{Arc, Mutex};

use redis::{
    Client, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, Value,
    aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig},
    sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType},
};

use crate::{
    CONNECT_TIMEOUT, RECONNECT_MAX_DELAY, RECONNECT_RETRIES, RESPONSE_TIMEOUT, Target, lost,
};

/// A redis connection to clone per operation (it implements [`ConnectionLike`], so commands,
/// pipelines and scripts run on it as on a `ConnectionManager`). Opened lazily: the gateway
/// starts while redis is down, and calls then fail fast.
#[derive(Clone)]
pub struct Redis {
    inner: Arc<Inner>,
    /// The manager this clone last used, with its generation.
    held: Option<(u64, ConnectionManager)>,
}

struct Inner {
    /// The sentinels to ask, when the target is a Sentinel master.
    sentinel: Option<tokio::sync::Mutex<SentinelClient>>,
    current: Mutex<Current>,
}

struct Current {
    generation: u64,
    manager: Option<ConnectionManager>,
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redis")
            .field("sentinel", &self.inner.sentinel.is_some())
            .finish_non_exhaustive()
    }
}

fn config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_number_of_retries(RECONNECT_RETRIES)
        .set_max_delay(RECONNECT_MAX_DELAY)
}

fn invalid(e: crate::UrlError) -> RedisError {
    RedisError::from((ErrorKind::InvalidClientConfig, "redis_url", e.to_string()))
}

fn poisoned() -> RedisError {
    RedisError::from((ErrorKind::Client, "redis connection state poisoned"))
}

impl Redis {
    /// The connection `url` names (see the crate documentation); nothing is contacted yet.
    pub fn open(url: &str) -> RedisResult<Self> {
        let (sentinel, manager) = match Target::parse(url).map_err(invalid)? {
            Target::Direct(info) => (
                None,
                Some(ConnectionManager::new_lazy_with_config(
                    Client::open(info)?,
                    config(),
                )?),
            ),
            Target::Sentinel {
                sentinels,
                master,
                auth,
            } => {
                let node = SentinelNodeConnectionInfo::default().set_redis_connection_info(auth);
                let client = SentinelClient::build(
                    sentinels,
                    master,
                    Some(node),
                    SentinelServerType::Master,
                )?;
                (Some(tokio::sync::Mutex::new(client)), None)
            }
        };
        Ok(Self {
            inner: Arc::new(Inner {
                sentinel,
                current: Mutex::new(Current {
                    generation: 0,
                    manager,
                }),
            }),
            held: None,
        })
    }

    /// Whether the master is found through Sentinel.
    pub fn is_sentinel(&self) -> bool {
        self.inner.sentinel.is_some()
    }

    /// The manager to use now: the current one, or (Sentinel) one to the master the sentinels
    /// name at this moment.
    async fn manager(&mut self) -> RedisResult<(u64, ConnectionManager)> {
        if let Some(held) = self.current()? {
            return Ok(held);
        }
        let Some(sentinel) = &self.inner.sentinel else {
            return Err(poisoned());
        };
        let mut sentinel = sentinel.lock().await;
        // Another caller may have found the master while this one waited.
        if let Some(held) = self.current()? {
            return Ok(held);
        }
        let client = tokio::time::timeout(CONNECT_TIMEOUT * 2, sentinel.async_get_client())
            .await
            .map_err(|_| {
                RedisError::from((ErrorKind::Io, "no sentinel named the master in time"))
            })??;
        let manager = ConnectionManager::new_lazy_with_config(client, config())?;
        let mut current = self.inner.current.lock().map_err(|_| poisoned())?;
        current.generation += 1;
        current.manager = Some(manager.clone());
        Ok((current.generation, manager))
    }

    fn current(&self) -> RedisResult<Option<(u64, ConnectionManager)>> {
        let current = self.inner.current.lock().map_err(|_| poisoned())?;
        Ok(current
            .manager
            .as_ref()
            .map(|m| (current.generation, m.clone())))
    }

    /// After `e` on the manager of `generation`: with Sentinel, forget it when the master is lost
    /// so the next call asks the sentinels again.
    fn after(&self, generation: u64, e: &RedisError) {
        if self.inner.sentinel.is_none() || !lost(e) {
            return;
        }
        if let Ok(mut current) = self.inner.current.lock()
            && current.generation == generation
        {
            current.manager = None;
        }
    }
}

impl ConnectionLike for Redis {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (generation, mut manager) = self.manager().await?;
            let result = manager.req_packed_command(cmd).await;
            if let Err(e) = &result {
                self.after(generation, e);
            }
            self.held = Some((generation, manager));
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (generation, mut manager) = self.manager().await?;
            let result = manager.req_packed_commands(pipeline, offset, count).await;
            if let Err(e) = &result {
                self.after(generation, e);
            }
            self.held = Some((generation, manager));
            result
        })
    }

    fn get_db(&self) -> i64 {
        self.held.as_ref().map_or(0, |(_, m)| m.get_db())
    }
}
