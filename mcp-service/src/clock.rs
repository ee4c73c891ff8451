//! Injected time and randomness: the `Clock` that stamps history entries and the `Ids` source
//! that names new documents, with real and deterministic implementations.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

/// Wall-clock time in Unix milliseconds.
pub trait Clock: Send + Sync + 'static {
    fn now_millis(&self) -> u64;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to (tests).
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    pub fn at(millis: u64) -> Self {
        Self(Arc::new(AtomicU64::new(millis)))
    }
    pub fn advance(&self, millis: u64) {
        self.0.fetch_add(millis, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Names new documents.
pub trait Ids: Send + Sync + 'static {
    fn new_uuid(&self) -> String;
}

/// Random v4 uuids.
#[derive(Debug, Clone, Copy, Default)]
pub struct RandomIds;

impl Ids for RandomIds {
    fn new_uuid(&self) -> String {
        uuid::Uuid::new_v4().to_string()
    }
}

/// Predictable uuids `00000000-0000-4000-8000-00000000000N` (tests).
#[derive(Debug, Clone, Default)]
pub struct SequentialIds(Arc<AtomicU64>);

impl Ids for SequentialIds {
    fn new_uuid(&self) -> String {
        let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        format!("00000000-0000-4000-8000-{n:012}")
    }
}

/// Formats Unix milliseconds as an RFC 3339 UTC timestamp (`2026-11-05T09:30:00Z`).
pub fn rfc3339(millis: u64) -> String {
    let secs = millis / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_793_957_405_000), "2026-11-06T09:30:05Z");
    }

    #[test]
    fn manual_clock_and_sequential_ids_are_deterministic() {
        let c = ManualClock::at(5);
        c.advance(7);
        assert_eq!(c.now_millis(), 12);
        let ids = SequentialIds::default();
        assert_eq!(ids.new_uuid(), "00000000-0000-4000-8000-000000000001");
        assert_eq!(ids.new_uuid(), "00000000-0000-4000-8000-000000000002");
    }
}
