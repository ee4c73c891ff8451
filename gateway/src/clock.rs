//! Time as an injected dependency, so that expiry decisions are testable.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{SystemTime, UNIX_EPOCH},
};

/// A source of wall-clock time since the Unix epoch.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Milliseconds.
    fn now_ms(&self) -> u64;
    /// Whole seconds.
    fn now(&self) -> u64 {
        self.now_ms() / 1000
    }
}

/// A UTC wall-clock time split into fields: year, month, day, hour, minute, second.
pub fn utc_fields(secs: u64) -> (i64, u32, u32, u64, u64, u64) {
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
    let rest = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    (y, m, d, rest / 3_600, rest % 3_600 / 60, rest % 60)
}

/// Days since 1970-01-01 → (year, month, day) in the proleptic Gregorian calendar (era
/// arithmetic on 400-year cycles).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month as u32, day as u32)
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// A clock that tests move by hand (milliseconds inside).
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    pub fn at(secs: u64) -> Self {
        Self(Arc::new(AtomicU64::new(secs * 1000)))
    }
    pub fn advance(&self, secs: u64) {
        self.advance_ms(secs * 1000);
    }
    pub fn advance_ms(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}
