//! What the authorization server throttles — registration, failed logins, `GET /authorize` and
//! metadata-document fetches, each per client IP — and the seam to the limiter that counts it:
//! the gateway's (GCRA in the process, or on redis for every gateway at once).
//!
//! Logins count failures only: the server takes one unit before it verifies a password and
//! gives it back ([`RateLimiter::refund`], [`RateLimiter::reset`]) when the password was right.

use std::net::IpAddr;

use async_trait::async_trait;

use crate::config::{Quota, ThrottleConfig};

/// What is being limited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LimitClass {
    /// `/register`, per client IP.
    Register,
    /// Failed logins, per client IP (across usernames).
    LoginIp,
    /// Failed logins, per (username, client IP): guessing one user's password from one place.
    LoginUserIp,
    /// `GET /authorize`, per client IP.
    Authorize,
    /// Client ID Metadata Document fetches (cache misses), per client IP.
    CimdFetch,
}

impl LimitClass {
    /// A short name, e.g. for the limiter's key.
    pub fn name(self) -> &'static str {
        match self {
            Self::Register => "register",
            Self::LoginIp => "login",
            Self::LoginUserIp => "login-user",
            Self::Authorize => "authorize",
            Self::CimdFetch => "cimd-fetch",
        }
    }

    /// This class's quota in `[oauth.throttle]`.
    pub(crate) fn quota(self, cfg: &ThrottleConfig) -> Quota {
        match self {
            Self::Register => cfg.register_per_ip,
            Self::LoginIp => cfg.login_per_ip,
            Self::LoginUserIp => cfg.login_per_user_and_ip,
            Self::Authorize => cfg.authorize_per_ip,
            Self::CimdFetch => cfg.cimd_fetch_per_ip,
        }
    }
}

/// One budget: a class of attempts by one client, and how large it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget<'a> {
    pub class: LimitClass,
    /// The client's IP; `None` when it is unknown (all such requests share one budget).
    pub ip: Option<IpAddr>,
    /// [`LimitClass::LoginUserIp`] only: the username tried, lower-cased, at most 64 characters.
    pub username: Option<&'a str>,
    /// `burst` at once, refilling at `per_minute`; never zero (the server refuses a zero quota
    /// itself, without asking).
    pub quota: Quota,
}

/// The limiter the server asks. It keeps its own time (the gateway's clock, or redis's).
#[async_trait]
pub trait RateLimiter: Send + Sync {
    /// Takes one unit of `budget` if there is one; `Err` holds the milliseconds until there is.
    async fn check(&self, budget: &Budget<'_>) -> Result<(), u64>;
    /// Gives back one unit an allowed [`RateLimiter::check`] took (the attempt succeeded).
    async fn refund(&self, budget: &Budget<'_>);
    /// Forgets `budget`'s use: all of it is available again.
    async fn reset(&self, budget: &Budget<'_>);
}
