//! One redis connection profile for every store (tokens, OAuth, sessions, limits, vault, ACME,
//! mcp-service documents): the same timeouts and reconnect backoff everywhere, and `redis_url`s
//! of two kinds — `redis://` (one server) and
//! `redis+sentinel://[:PASSWORD@]HOST:PORT[,HOST:PORT…]/MASTER` (the master Sentinel names, asked
//! again after the connection to it is lost, so a failover is followed).

mod blocking;
mod connection;
mod target;

use std::time::Duration;

pub use blocking::Blocking;
pub use connection::Redis;
pub use target::{Target, UrlError};

/// Time to open a TCP connection (and to ask the sentinels for the master).
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(1000);
/// Time for one answer.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_millis(1000);
/// Reconnect attempts the connection manager makes for one broken connection.
pub const RECONNECT_RETRIES: usize = 1;
/// The longest wait between two reconnect attempts.
pub const RECONNECT_MAX_DELAY: Duration = Duration::from_millis(500);

/// Checks a `redis_url` without connecting (`pforte check`, configuration loading).
pub fn validate(url: &str) -> Result<(), UrlError> {
    Target::parse(url).map(|_| ())
}

/// Whether `e` means the server behind the connection is gone or no longer the master: the
/// connection is dropped and, with Sentinel, the master is asked for again.
pub fn lost(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || matches!(
            e.kind(),
            redis::ErrorKind::Server(
                redis::ServerErrorKind::ReadOnly | redis::ServerErrorKind::MasterDown
            )
        )
}
