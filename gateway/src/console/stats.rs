//! The console's request statistics: a ring of per-minute buckets over the last hour (requests,
//! 5xx answers, refusals, a fixed latency histogram for p50/p99), recorded from every finished
//! request with a few relaxed atomic adds, and each route's most recent errors (a short list
//! behind a mutex that only failures take).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Buckets in the ring: one per minute over an hour.
pub(crate) const MINUTES: usize = 60;
/// Upper bounds (ms) of the latency histogram's buckets; the last bucket is everything above.
pub(crate) const LATENCY_BOUNDS_MS: [u64; 15] = [
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000,
];
const HISTOGRAM: usize = LATENCY_BOUNDS_MS.len() + 1;
/// Recent errors kept per route.
pub(crate) const RECENT_ERRORS: usize = 20;

/// One minute's counts.
#[derive(Debug, Default)]
struct Bucket {
    /// The minute (ms / 60 000) the counts belong to; another minute's counts are stale.
    minute: AtomicU64,
    requests: AtomicU64,
    server_errors: AtomicU64,
    refusals: AtomicU64,
    latency: [AtomicU64; HISTOGRAM],
}

impl Bucket {
    fn reset(&self) {
        for c in [&self.requests, &self.server_errors, &self.refusals] {
            c.store(0, Relaxed);
        }
        for c in &self.latency {
            c.store(0, Relaxed);
        }
    }
}

/// How a finished request ended, for the statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Answered below 500 by the upstream or the gateway.
    Ok,
    /// A 5xx (or no answer at all).
    ServerError,
    /// The gateway refused it (401, 403, 404, 413, 429, …).
    Refused,
}

impl Outcome {
    /// How a request ended: `refused` by the gateway; else the `status` the client got (0:
    /// none) and, when it failed, whether on our or the upstream's side (`Some(true)`) or the
    /// client's (`Some(false)`: it went away, sent something unusable).
    pub(crate) fn of(refused: bool, status: u16, failure: Option<bool>) -> Self {
        if refused {
            Self::Refused
        } else if status >= 500 || (status == 0 && failure == Some(true)) {
            Self::ServerError
        } else {
            Self::Ok
        }
    }
}

/// One minute as the charts read it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Minute {
    /// Minutes since the Unix epoch.
    pub(crate) minute: u64,
    pub(crate) requests: u64,
    pub(crate) server_errors: u64,
    pub(crate) refusals: u64,
    /// Latency quantiles in ms (the histogram bucket's upper bound); `None` without requests.
    pub(crate) p50_ms: Option<u64>,
    pub(crate) p99_ms: Option<u64>,
}

/// The ring. Recording is lock-free: a request that starts a new minute claims the bucket with
/// a compare-and-swap on its minute and zeroes it (a request of the same instant on another
/// thread may lose its count: the charts are a view, not an account).
#[derive(Debug)]
pub(crate) struct RequestStats {
    buckets: [Bucket; MINUTES],
}

impl Default for RequestStats {
    fn default() -> Self {
        Self {
            buckets: std::array::from_fn(|_| Bucket::default()),
        }
    }
}

fn histogram_index(ms: u64) -> usize {
    LATENCY_BOUNDS_MS
        .iter()
        .position(|&b| ms <= b)
        .unwrap_or(LATENCY_BOUNDS_MS.len())
}

/// The upper bound (ms) under which a share `q` of the histogram's counts lie.
pub(crate) fn quantile(counts: &[u64], q: f64) -> Option<u64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = ((total as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, c) in counts.iter().enumerate() {
        seen += c;
        if seen >= rank {
            return Some(
                LATENCY_BOUNDS_MS
                    .get(i)
                    .copied()
                    .unwrap_or(2 * LATENCY_BOUNDS_MS[LATENCY_BOUNDS_MS.len() - 1]),
            );
        }
    }
    None
}

impl RequestStats {
    /// Counts one finished request at `now_ms` that took `took_ms`.
    pub(crate) fn record(&self, now_ms: u64, took_ms: u64, outcome: Outcome) {
        // Minute 0 marks an unused bucket; real minutes are far past it.
        let minute = now_ms / 60_000;
        let bucket = &self.buckets[(minute % MINUTES as u64) as usize];
        let seen = bucket.minute.load(Relaxed);
        if seen != minute {
            if seen > minute {
                return; // a late request of a minute already overwritten
            }
            if bucket
                .minute
                .compare_exchange(seen, minute, Relaxed, Relaxed)
                .is_ok()
            {
                bucket.reset();
            }
        }
        bucket.requests.fetch_add(1, Relaxed);
        match outcome {
            Outcome::Ok => {}
            Outcome::ServerError => {
                bucket.server_errors.fetch_add(1, Relaxed);
            }
            Outcome::Refused => {
                bucket.refusals.fetch_add(1, Relaxed);
            }
        }
        bucket.latency[histogram_index(took_ms)].fetch_add(1, Relaxed);
    }

    /// The last hour up to `now_ms`, oldest first: `MINUTES` entries, zero where nothing was
    /// recorded.
    pub(crate) fn last_hour(&self, now_ms: u64) -> Vec<Minute> {
        let current = now_ms / 60_000;
        let first = current.saturating_sub(MINUTES as u64 - 1);
        (first..=current)
            .map(|minute| {
                let b = &self.buckets[(minute % MINUTES as u64) as usize];
                if b.minute.load(Relaxed) != minute {
                    return Minute {
                        minute,
                        ..Minute::default()
                    };
                }
                let counts: Vec<u64> = b.latency.iter().map(|c| c.load(Relaxed)).collect();
                Minute {
                    minute,
                    requests: b.requests.load(Relaxed),
                    server_errors: b.server_errors.load(Relaxed),
                    refusals: b.refusals.load(Relaxed),
                    p50_ms: quantile(&counts, 0.50),
                    p99_ms: quantile(&counts, 0.99),
                }
            })
            .collect()
    }
}

/// One failed request of a route, as the route page lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecentError {
    pub(crate) time_ms: u64,
    pub(crate) request_id: String,
    pub(crate) status: u16,
    /// A refusal's reason, or the failure (upstream connect, timeout …), already made safe for
    /// one line.
    pub(crate) what: String,
}

/// The most recent errors of each route (newest first, at most [`RECENT_ERRORS`]).
#[derive(Debug)]
pub(crate) struct RecentErrors {
    routes: Vec<Mutex<VecDeque<RecentError>>>,
}

impl RecentErrors {
    pub(crate) fn new(routes: usize) -> Self {
        Self {
            routes: (0..routes).map(|_| Mutex::default()).collect(),
        }
    }

    pub(crate) fn push(&self, route: usize, error: RecentError) {
        if let Some(Ok(mut list)) = self.routes.get(route).map(Mutex::lock) {
            if list.len() >= RECENT_ERRORS {
                list.pop_back();
            }
            list.push_front(error);
        }
    }

    pub(crate) fn of(&self, route: usize) -> Vec<RecentError> {
        match self.routes.get(route).map(Mutex::lock) {
            Some(Ok(list)) => list.iter().cloned().collect(),
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_800_000_000_000;

    #[test]
    fn counts_land_in_their_minute_and_an_hour_later_are_gone() {
        let s = RequestStats::default();
        s.record(T0, 3, Outcome::Ok);
        s.record(T0 + 1_000, 40, Outcome::ServerError);
        s.record(T0 + 61_000, 7, Outcome::Refused);
        let hour = s.last_hour(T0 + 61_000);
        assert_eq!(hour.len(), MINUTES);
        let (prev, last) = (hour[MINUTES - 2], hour[MINUTES - 1]);
        assert_eq!(
            (prev.requests, prev.server_errors, prev.refusals),
            (2, 1, 0)
        );
        assert_eq!(
            (last.requests, last.server_errors, last.refusals),
            (1, 0, 1)
        );
        assert_eq!(last.minute, (T0 + 61_000) / 60_000);
        // An hour on, the bucket is reused and the old counts are not read as new ones.
        let later = T0 + 60 * 60_000;
        assert!(
            s.last_hour(later)
                .iter()
                .all(|m| m.requests == 0 || m.minute > T0 / 60_000)
        );
        s.record(later, 1, Outcome::Ok);
        let now = s.last_hour(later);
        assert_eq!(now[MINUTES - 1].requests, 1);
        assert_eq!(
            now[MINUTES - 1].server_errors,
            0,
            "the old minute's counts were reset"
        );
        // A straggler from a minute already overwritten is dropped, not miscounted.
        s.record(T0, 1, Outcome::Ok);
        assert_eq!(s.last_hour(later)[MINUTES - 1].requests, 1);
    }

    #[test]
    fn outcomes_separate_refusals_server_errors_and_clients_leaving() {
        assert_eq!(Outcome::of(true, 401, None), Outcome::Refused);
        assert_eq!(
            Outcome::of(true, 503, None),
            Outcome::Refused,
            "a refusal is one whatever its status"
        );
        assert_eq!(Outcome::of(false, 502, Some(true)), Outcome::ServerError);
        assert_eq!(
            Outcome::of(false, 500, None),
            Outcome::ServerError,
            "the upstream's own 500"
        );
        assert_eq!(
            Outcome::of(false, 0, Some(true)),
            Outcome::ServerError,
            "no answer, our side"
        );
        assert_eq!(
            Outcome::of(false, 0, Some(false)),
            Outcome::Ok,
            "the client went away"
        );
        assert_eq!(Outcome::of(false, 404, None), Outcome::Ok);
    }

    #[test]
    fn quantiles_are_histogram_bounds() {
        assert_eq!(quantile(&[0; HISTOGRAM], 0.5), None);
        let mut counts = [0u64; HISTOGRAM];
        counts[histogram_index(3)] = 98; // ≤ 5 ms
        counts[histogram_index(150)] = 2; // ≤ 200 ms
        assert_eq!(quantile(&counts, 0.5), Some(5));
        assert_eq!(quantile(&counts, 0.99), Some(200));
        assert_eq!(histogram_index(0), 0);
        assert_eq!(histogram_index(1), 0);
        assert_eq!(histogram_index(999_999), LATENCY_BOUNDS_MS.len());
        let mut slow = [0u64; HISTOGRAM];
        slow[LATENCY_BOUNDS_MS.len()] = 1;
        assert_eq!(quantile(&slow, 0.99), Some(120_000));
    }

    #[test]
    fn recent_errors_are_bounded_newest_first() {
        let r = RecentErrors::new(2);
        for i in 0..(RECENT_ERRORS as u64 + 5) {
            r.push(
                1,
                RecentError {
                    time_ms: i,
                    request_id: i.to_string(),
                    status: 502,
                    what: "connect".into(),
                },
            );
        }
        let list = r.of(1);
        assert_eq!(list.len(), RECENT_ERRORS);
        assert_eq!(list[0].time_ms, RECENT_ERRORS as u64 + 4);
        assert!(r.of(0).is_empty() && r.of(7).is_empty());
        r.push(9, list[0].clone()); // an unknown route is ignored
    }
}
