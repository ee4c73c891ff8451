//! Blocking connections with the same profile, for the stores that run on plain threads (the
//! token store: the admin CLI and the refresher thread).

use std::sync::Mutex;

use redis::{
    Client, Connection, ErrorKind, RedisError, RedisResult,
    sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType},
};

use crate::{CONNECT_TIMEOUT, RESPONSE_TIMEOUT, Target};

/// Opens blocking connections to the server a `redis_url` names (with Sentinel, to the master
/// the sentinels name at the moment of each connect).
pub struct Blocking {
    target: Place,
}

enum Place {
    Direct(Client),
    Sentinel(Mutex<SentinelClient>),
}

impl std::fmt::Debug for Blocking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blocking").finish_non_exhaustive()
    }
}

impl Blocking {
    /// Nothing is contacted yet.
    pub fn open(url: &str) -> RedisResult<Self> {
        let target = match Target::parse(url).map_err(|e| {
            RedisError::from((ErrorKind::InvalidClientConfig, "redis_url", e.to_string()))
        })? {
            Target::Direct(info) => Place::Direct(Client::open(info)?),
            Target::Sentinel {
                sentinels,
                master,
                auth,
            } => Place::Sentinel(Mutex::new(SentinelClient::build(
                sentinels,
                master,
                Some(SentinelNodeConnectionInfo::default().set_redis_connection_info(auth)),
                SentinelServerType::Master,
            )?)),
        };
        Ok(Self { target })
    }

    /// A new connection with the profile's connect, read and write timeouts.
    pub fn connect(&self) -> RedisResult<Connection> {
        let client = match &self.target {
            Place::Direct(client) => client.clone(),
            Place::Sentinel(sentinel) => sentinel
                .lock()
                .map_err(|_| RedisError::from((ErrorKind::Client, "sentinel state poisoned")))?
                .get_client()?,
        };
        let conn = client.get_connection_with_timeout(CONNECT_TIMEOUT)?;
        conn.set_read_timeout(Some(RESPONSE_TIMEOUT))?;
        conn.set_write_timeout(Some(RESPONSE_TIMEOUT))?;
        Ok(conn)
    }
}
