//! Test support shared by every crate's tests and depending on none of the programs: a real
//! `redis-server` on a free loopback port (and Sentinels watching one), a visible skip when a tool is missing, and the HTML
//! form scraper that submits login and consent pages the way a browser does.
//!
//! It is a leaf on purpose: the oauth crate's own tests use it, and they cannot depend on the
//! end-to-end crate (`pforte-tests`, which re-exports all of this).

#![allow(clippy::expect_used)]

mod env;
mod form;
mod redis;
mod sentinel;

pub use env::{SKIP_LOG_ENV, free_port, in_ci, skip, which};
pub use form::{Form, tags};
pub use redis::{RedisOptions, RedisServer};
pub use sentinel::Sentinels;
