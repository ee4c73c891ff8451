//! Where the ACME client keeps what must outlive a restart: the account key (credentials
//! JSON), the certificate with its key, and — with several gateways — the challenge answers
//! and the lock that lets one of them order at a time. Files under `<data_dir>/acme/` (0600),
//! or redis when `redis_url` is set (keys under `pforte:acme:`).

use std::{path::PathBuf, time::Duration};

use redis::{AsyncCommands as _, Script};

#[derive(Debug, thiserror::Error)]
pub(crate) enum StateError {
    #[error("{path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
}

/// Releases the lock only when this gateway still holds it.
const UNLOCK: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

#[derive(Clone)]
pub(crate) enum State {
    Files(PathBuf),
    Redis {
        conn: pforte_redis::Redis,
        /// This gateway's lock token.
        token: String,
    },
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Files(dir) => f.debug_tuple("Files").field(dir).finish(),
            Self::Redis { .. } => f.write_str("Redis"),
        }
    }
}

impl State {
    /// Files under `dir` (created 0700 on first write).
    pub(crate) fn files(dir: PathBuf) -> Self {
        Self::Files(dir)
    }

    /// The keys under `pforte:acme:` in the redis at `url` (connected lazily).
    pub(crate) fn redis(url: &str) -> Result<Self, StateError> {
        let conn = pforte_redis::Redis::open(url)?;
        Ok(Self::Redis {
            conn,
            token: uuid::Uuid::new_v4().to_string(),
        })
    }

    /// Whether gateways share this state (then the lock and published challenges matter).
    pub(crate) fn shared(&self) -> bool {
        matches!(self, Self::Redis { .. })
    }

    /// The entry `name`, if any.
    pub(crate) async fn get(&self, name: &str) -> Result<Option<String>, StateError> {
        match self {
            Self::Files(dir) => {
                let path = dir.join(name);
                match std::fs::read_to_string(&path) {
                    Ok(text) => Ok(Some(text)),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    Err(source) => Err(StateError::File { path, source }),
                }
            }
            Self::Redis { conn, .. } => {
                let mut conn = conn.clone();
                Ok(conn.get(format!("pforte:acme:{name}")).await?)
            }
        }
    }

    /// Writes the entry `name` (a file: owner-only, replaced atomically).
    pub(crate) async fn put(&self, name: &str, value: &str) -> Result<(), StateError> {
        match self {
            Self::Files(dir) => write_private(dir, name, value),
            Self::Redis { conn, .. } => {
                let mut conn = conn.clone();
                conn.set::<_, _, ()>(format!("pforte:acme:{name}"), value)
                    .await?;
                Ok(())
            }
        }
    }

    /// Removes the entry `name`.
    pub(crate) async fn remove(&self, name: &str) -> Result<(), StateError> {
        match self {
            Self::Files(dir) => {
                let path = dir.join(name);
                match std::fs::remove_file(&path) {
                    Ok(()) => Ok(()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                    Err(source) => Err(StateError::File { path, source }),
                }
            }
            Self::Redis { conn, .. } => {
                let mut conn = conn.clone();
                conn.del::<_, ()>(format!("pforte:acme:{name}")).await?;
                Ok(())
            }
        }
    }

    /// Takes the lock `name` for `ttl` (it expires if this gateway dies holding it). Files:
    /// one gateway per data dir, always granted.
    pub(crate) async fn lock(&self, name: &str, ttl: Duration) -> Result<bool, StateError> {
        match self {
            Self::Files(_) => Ok(true),
            Self::Redis { conn, token } => {
                let mut conn = conn.clone();
                let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
                let set: Option<String> = redis::cmd("SET")
                    .arg(format!("pforte:acme:lock:{name}"))
                    .arg(token)
                    .arg("NX")
                    .arg("PX")
                    .arg(ms)
                    .query_async(&mut conn)
                    .await?;
                Ok(set.is_some())
            }
        }
    }

    pub(crate) async fn unlock(&self, name: &str) -> Result<(), StateError> {
        match self {
            Self::Files(_) => Ok(()),
            Self::Redis { conn, token } => {
                let mut conn = conn.clone();
                Script::new(UNLOCK)
                    .key(format!("pforte:acme:lock:{name}"))
                    .arg(token)
                    .invoke_async::<i64>(&mut conn)
                    .await?;
                Ok(())
            }
        }
    }
}

/// Writes `dir/name` owner-only through a temporary file and a rename.
fn write_private(dir: &std::path::Path, name: &str, value: &str) -> Result<(), StateError> {
    use std::io::Write as _;
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    let err = |path: PathBuf| move |source| StateError::File { path, source };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(err(dir.to_owned()))?;
    let tmp = dir.join(format!(".{name}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(err(tmp.clone()))?;
    f.write_all(value.as_bytes()).map_err(err(tmp.clone()))?;
    f.sync_all().map_err(err(tmp.clone()))?;
    let path = dir.join(name);
    std::fs::rename(&tmp, &path).map_err(err(path))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn file_entries_are_owner_only_and_survive_a_new_state() {
        let dir = tempfile::tempdir().unwrap();
        let acme = dir.path().join("acme");
        let state = State::files(acme.clone());
        assert_eq!(state.get("cert").await.unwrap(), None);
        state.put("cert", "PEM").await.unwrap();
        assert_eq!(pforte_oauth::mode_of(&acme.join("cert")).unwrap(), 0o600);
        assert_eq!(pforte_oauth::mode_of(&acme).unwrap(), 0o700);
        let again = State::files(acme);
        assert_eq!(again.get("cert").await.unwrap().as_deref(), Some("PEM"));
        assert!(again.lock("x", Duration::from_secs(1)).await.unwrap());
        again.remove("cert").await.unwrap();
        assert_eq!(again.get("cert").await.unwrap(), None);
    }

    #[tokio::test]
    async fn one_redis_lock_holder_at_a_time() {
        let Some(redis) = pforte_test_support::RedisServer::start() else {
            return;
        };
        let a = State::redis(&redis.url()).unwrap();
        let b = State::redis(&redis.url()).unwrap();
        assert!(a.lock("order", Duration::from_secs(30)).await.unwrap());
        assert!(!b.lock("order", Duration::from_secs(30)).await.unwrap());
        b.unlock("order").await.unwrap();
        assert!(!b.lock("order", Duration::from_secs(30)).await.unwrap());
        a.unlock("order").await.unwrap();
        assert!(b.lock("order", Duration::from_secs(30)).await.unwrap());
        a.put("cert", "PEM").await.unwrap();
        assert_eq!(b.get("cert").await.unwrap().as_deref(), Some("PEM"));
    }
}
