//! Wall-clock time as an injected dependency, so that every expiry and timestamp decision is
//! testable: the `Clock` trait, the system clock (the workspace's one reader of
//! `SystemTime::now`), a manual clock for tests, and UTC date formatting.

mod utc;

use std::{
    fmt,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

pub use utc::UtcDateTime;

/// A source of wall-clock time since the Unix epoch.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;

    /// Whole seconds since the Unix epoch (rounded down).
    fn now_secs(&self) -> u64 {
        self.now_ms() / 1000
    }
}

/// Whole milliseconds of `d`, saturating at `u64::MAX`.
fn whole_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The operating system's clock. A time before the epoch reads as 0.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(
        clippy::disallowed_methods,
        reason = "the one place in the workspace that reads the system clock"
    )]
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(whole_ms)
            .unwrap_or(0)
    }
}

/// A clock that moves only when told to (tests). Clones share one time, so a test can keep a
/// handle and give another to the code under test.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock standing `since_epoch` after the Unix epoch (whole milliseconds).
    pub fn at(since_epoch: Duration) -> Self {
        Self(Arc::new(AtomicU64::new(whole_ms(since_epoch))))
    }

    /// Moves the clock forward by `by` (whole milliseconds), saturating at `u64::MAX` ms.
    pub fn advance(&self, by: Duration) {
        let by = whole_ms(by);
        // Never fails: the closure always returns `Some`.
        let _ = self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |ms| {
                Some(ms.saturating_add(by))
            });
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_starts_where_told_and_moves_only_when_told() {
        let clock = ManualClock::at(Duration::from_secs(1_000));
        assert_eq!(clock.now_ms(), 1_000_000);
        assert_eq!(clock.now_secs(), 1_000);
        clock.advance(Duration::from_millis(999));
        assert_eq!(clock.now_ms(), 1_000_999);
        assert_eq!(clock.now_secs(), 1_000, "seconds round down");
        clock.advance(Duration::from_millis(1));
        assert_eq!(clock.now_secs(), 1_001);
        clock.advance(Duration::from_secs(59));
        assert_eq!(clock.now_ms(), 1_060_000);
    }

    #[test]
    fn manual_clock_clones_share_one_time() {
        let clock = ManualClock::at(Duration::from_millis(5));
        let shared: Arc<dyn Clock> = Arc::new(clock.clone());
        clock.advance(Duration::from_millis(7));
        assert_eq!(shared.now_ms(), 12);
    }

    #[test]
    fn manual_clock_counts_whole_milliseconds_and_saturates() {
        let clock = ManualClock::at(Duration::from_micros(1_999));
        assert_eq!(clock.now_ms(), 1);
        clock.advance(Duration::from_micros(999));
        assert_eq!(
            clock.now_ms(),
            1,
            "less than a millisecond does not move it"
        );
        clock.advance(Duration::MAX);
        assert_eq!(clock.now_ms(), u64::MAX);
        clock.advance(Duration::from_secs(1));
        assert_eq!(clock.now_ms(), u64::MAX);
        assert_eq!(ManualClock::default().now_ms(), 0);
    }

    #[test]
    fn system_clock_is_after_2025_and_does_not_go_backwards() {
        let a = SystemClock.now_ms();
        let b = SystemClock.now_ms();
        // 2025-01-01T00:00:00Z
        assert!(a >= 1_735_689_600_000, "{a}");
        assert!(b >= a);
    }
}
