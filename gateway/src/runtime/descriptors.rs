//! The descriptor budget: at start the soft `RLIMIT_NOFILE` is raised to the hard limit (as
//! nginx's `worker_rlimit_nofile` and Go's runtime do), and the client connections that fit in
//! it are counted — a proxied connection holds two descriptors (client and upstream), and a
//! reserve stays for stores, logs, listeners and stdio children. Past the budget a new
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
}

/// Raises the soft limit to the hard one; on any failure the limit stays as it was.
pub(crate) fn raise() -> Descriptors {
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return Descriptors {
            limit: 1024,
            raised_from: None,
        };
    };
    let target = raised_limit(soft, hard);
    if target > soft && setrlimit(Resource::RLIMIT_NOFILE, target, hard).is_ok() {
        Descriptors {
            limit: target,
            raised_from: Some(soft),
        }
    } else {
        Descriptors {
            limit: soft,
            raised_from: None,
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
            }
        }
        Err(_) => Descriptors {
            limit: 1024,
            raised_from: None,
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

/// Client connections that fit in `limit` descriptors: two each, after a reserve of an eighth
/// (at least 32, at most 1,024) for everything else the process holds.
pub(crate) fn connection_budget(limit: u64) -> u64 {
    let reserve = (limit / 8).clamp(32, 1024);
    limit.saturating_sub(reserve) / 2
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
            connection_budget(self.limit)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_half_of_what_the_reserve_leaves() {
        assert_eq!(connection_budget(20_000), (20_000 - 1024) / 2);
        assert_eq!(connection_budget(1024), (1024 - 128) / 2);
        assert_eq!(connection_budget(256), (256 - 32) / 2);
        assert_eq!(
            connection_budget(10),
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
        };
        assert_eq!(
            d.describe(),
            "20000 descriptors (raised from 1024): room for 9488 client connections"
        );
    }
}
