//! The `redis_url`, parsed: one server, or the sentinels that name the master.

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo as _, RedisConnectionInfo};

/// Why a `redis_url` was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UrlError {
    /// Not a redis URL the crate accepts.
    #[error(
        "expected redis://[:password@]host:port[/db] or redis+sentinel://[:password@]host:port[,host:port…]/master: {0}"
    )]
    Invalid(String),
}

/// Where the stores live.
#[derive(Clone, Debug)]
pub enum Target {
    /// One redis server.
    Direct(ConnectionInfo),
    /// The master named `master` by the sentinels at `sentinels`; `auth` (the password) is used
    /// for the sentinels and for the master alike.
    Sentinel {
        sentinels: Vec<ConnectionInfo>,
        master: String,
        auth: RedisConnectionInfo,
    },
}

const SENTINEL: &str = "redis+sentinel://";

impl Target {
    /// Parses `url` (pure: nothing is contacted).
    pub fn parse(url: &str) -> Result<Self, UrlError> {
        let bad = |why: &str| UrlError::Invalid(why.to_owned());
        if let Some(rest) = url.strip_prefix(SENTINEL) {
            return parse_sentinel(rest).map_err(|why| bad(&why));
        }
        if !url.starts_with("redis://") {
            return Err(bad("unknown scheme"));
        }
        url.into_connection_info()
            .map(Self::Direct)
            .map_err(|e| UrlError::Invalid(e.to_string()))
    }
}

fn parse_sentinel(rest: &str) -> Result<Target, String> {
    let (hosts, master) = rest
        .split_once('/')
        .ok_or("the master's name is missing (…/MASTER)")?;
    if master.is_empty() || master.contains(['/', '?', '#', '@']) {
        return Err("the master's name must be one path segment".to_owned());
    }
    let (password, hosts) = match hosts.rsplit_once('@') {
        Some((userinfo, hosts)) => {
            let password = userinfo
                .strip_prefix(':')
                .ok_or("only a password is accepted before @ (:PASSWORD@)")?;
            if password.is_empty() {
                return Err("the password after : is empty".to_owned());
            }
            (Some(password), hosts)
        }
        None => (None, hosts),
    };
    let mut auth = RedisConnectionInfo::default();
    if let Some(password) = password {
        auth = auth.set_password(password);
    }
    let sentinels = hosts
        .split(',')
        .map(|node| {
            let addr = host_port(node)?;
            Ok(addr
                .into_connection_info()
                .map_err(|e| e.to_string())?
                .set_redis_settings(auth.clone()))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Target::Sentinel {
        sentinels,
        master: master.to_owned(),
        auth,
    })
}

/// `host:port` or `[v6]:port`.
fn host_port(node: &str) -> Result<ConnectionAddr, String> {
    let (host, port) = node
        .rsplit_once(':')
        .ok_or_else(|| format!("sentinel {node:?}: expected host:port"))?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let port: u16 = port
        .parse()
        .map_err(|_| format!("sentinel {node:?}: bad port"))?;
    if host.is_empty() || port == 0 || host.contains(['/', '@', '[', ']']) {
        return Err(format!("sentinel {node:?}: expected host:port"));
    }
    Ok(ConnectionAddr::Tcp(host.to_owned(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sentinel(url: &str) -> (Vec<String>, String, Option<String>) {
        match Target::parse(url) {
            Ok(Target::Sentinel {
                sentinels,
                master,
                auth,
            }) => (
                sentinels.iter().map(|s| s.addr().to_string()).collect(),
                master,
                auth.password().map(str::to_owned),
            ),
            other => panic!("{url}: {other:?}"),
        }
    }

    #[test]
    fn sentinel_urls_name_every_sentinel_the_master_and_the_password() {
        assert_eq!(
            sentinel(
                "redis+sentinel://:s3cret@10.0.0.1:26379,sentinel-1.redis:26379,[::1]:26380/pforte"
            ),
            (
                vec![
                    "10.0.0.1:26379".to_owned(),
                    "sentinel-1.redis:26379".to_owned(),
                    "::1:26380".to_owned()
                ],
                "pforte".to_owned(),
                Some("s3cret".to_owned())
            )
        );
        assert_eq!(sentinel("redis+sentinel://127.0.0.1:26379/m").2, None);
    }

    #[test]
    fn plain_urls_stay_as_the_redis_crate_reads_them() {
        assert!(matches!(
            Target::parse("redis://127.0.0.1:6379/0"),
            Ok(Target::Direct(_))
        ));
        // This build has no TLS to redis: `rediss://` is refused at check, not at first use.
        assert!(Target::parse("rediss://cache.example:6380").is_err());
    }

    #[test]
    fn malformed_urls_are_refused() {
        for url in [
            "http://127.0.0.1:6379",
            "127.0.0.1:6379",
            "redis+sentinel://127.0.0.1:26379",
            "redis+sentinel://127.0.0.1:26379/",
            "redis+sentinel://127.0.0.1/pforte",
            "redis+sentinel://127.0.0.1:0/pforte",
            "redis+sentinel://127.0.0.1:26379,/pforte",
            "redis+sentinel://user:pw@127.0.0.1:26379/pforte",
            "redis+sentinel://:@127.0.0.1:26379/pforte",
            "redis+sentinel://127.0.0.1:26379/pforte/0",
        ] {
            assert!(Target::parse(url).is_err(), "{url} was accepted");
        }
    }
}
