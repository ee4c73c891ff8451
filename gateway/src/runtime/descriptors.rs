//! The descriptor budget: at start the soft `RLIMIT_NOFILE` is raised to the hard limit (as
//! nginx's `worker_rlimit_nofile` and Go's runtime do), and the client connections that fit in
//! it are counted — a proxied connection holds two descriptors (client and upstream), after
//! those already open at start (stores, logs) and a reserve for what opens later (the runtimes,
//! listeners, pooled idle upstream connections, stdio children). Past the budget a new
//! connection is closed at once (`crate::conns`), before `accept()` itself starts failing.

use nix::sys::resource::{RLIM_INFINITY, Resource, getrlimit, setrlimit};

/// The most the soft limit is raised to when the hard limit is unlimited (Linux's default
/// `fs.nr_open`).
const UNLIMITED_CAP: u64 = 1_048_576;

/// The process's descriptor limit and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Descriptors {
    /// The soft limit in force.
    pub(crate) limit: u64,
    /// The soft limit before it was raised, when it was.
    pub(crate) raised_from: Option<u64>,
    /// Descriptors already open when the limit was read.
    pub(crate) open: u64,
}

/// Descriptors this process has open now (0 when `/proc` cannot say).
fn open_now() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64)
}

/// Raises the soft limit to the hard one; on any failure the limit stays as it was.
pub(crate) fn raise() -> Descriptors {
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return Descriptors {
            limit: 1024,
            raised_from: None,
            open: open_now(),
        };
    };
    let target = raised_limit(soft, hard);
    if target > soft && setrlimit(Resource::RLIMIT_NOFILE, target, hard).is_ok() {
        Descriptors {
            limit: target,
            raised_from: Some(soft),
            open: open_now(),
        }
    } else {
        Descriptors {
            limit: soft,
            raised_from: None,
            open: open_now(),
        }
    }
}

/// What [`raise`] would give, without raising (`check`).
pub(crate) fn prospect() -> Descriptors {
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) => {
            let limit = raised_limit(soft, hard).max(soft);
            Descriptors {
                limit,
                raised_from: (limit > soft).then_some(soft),
                open: open_now(),
            }
        }
        Err(_) => Descriptors {
            limit: 1024,
            raised_from: None,
            open: open_now(),
        },
    }
}

/// The soft limit to ask for: the hard limit, or [`UNLIMITED_CAP`] when that is unlimited.
fn raised_limit(soft: u64, hard: u64) -> u64 {
    if hard == RLIM_INFINITY {
        UNLIMITED_CAP.max(soft.min(UNLIMITED_CAP))
    } else {
        hard
    }
}

/// Client connections that fit in `limit` descriptors when `open` are open already: two each,
/// after a reserve of an eighth (at least 64, at most 1,024) for what the process opens later
/// (its runtimes' and listeners' descriptors, pooled idle upstream connections, stdio children).
/// A reserve of a fixed share alone was not enough: with a hard limit of 200 the gateway holds
/// about 70 descriptors before its first client, and `accept()` and upstream connects failed
/// with `EMFILE` before the budget was spent (tests/tests/gateway/connections.rs).
pub(crate) fn connection_budget(limit: u64, open: u64) -> u64 {
    let reserve = (limit / 8).clamp(64, 1024);
    limit.saturating_sub(open).saturating_sub(reserve) / 2
}

impl Descriptors {
    /// The budget in words, for the start line and `check`.
    pub(crate) fn describe(&self) -> String {
        let raised = self
            .raised_from
            .map(|from| format!(" (raised from {from})"))
            .unwrap_or_default();
        format!(
            "{} descriptors{raised}: room for {} client connections",
            self.limit,
            self.budget()
        )
    }

    /// The same limit with the descriptors open now.
    pub(crate) fn recounted(self) -> Self {
        Self {
            open: open_now(),
            ..self
        }
    }

    /// Client connections that fit ([`connection_budget`]).
    pub(crate) fn budget(&self) -> u64 {
        connection_budget(self.limit, self.open)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_half_of_what_the_reserve_leaves() {
        assert_eq!(connection_budget(20_000, 0), (20_000 - 1024) / 2);
        assert_eq!(connection_budget(20_000, 40), (20_000 - 40 - 1024) / 2);
        assert_eq!(connection_budget(1024, 30), (1024 - 30 - 128) / 2);
        assert_eq!(connection_budget(200, 30), (200 - 30 - 64) / 2);
        assert_eq!(
            connection_budget(100, 40),
            0,
            "less than the reserve: nothing fits"
        );
    }

    #[test]
    fn the_soft_limit_goes_to_the_hard_one_or_the_cap() {
        assert_eq!(raised_limit(1024, 20_000), 20_000);
        assert_eq!(raised_limit(1024, RLIM_INFINITY), UNLIMITED_CAP);
        assert_eq!(raised_limit(4096, 4096), 4096);
    }

    #[test]
    fn the_start_line_says_the_limit_and_the_room() {
        let d = Descriptors {
            limit: 20_000,
            raised_from: Some(1024),
            open: 24,
        };
        assert_eq!(
            d.describe(),
            "20000 descriptors (raised from 1024): room for 9476 client connections"
        );
    }
}
