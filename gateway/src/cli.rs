//! What the admin commands print and how they end: times in ISO 8601 UTC with a relative hint,
//! aligned tables, the documented exit codes, and whether a data dir holds a store at all.

use std::path::Path;

use pforte_clock::UtcDateTime;

/// Exit codes of the `pforte` binary (sysexits.h where one fits).
pub mod exit {
    /// A usage error or a configuration that does not validate (EX_USAGE).
    pub const USAGE: u8 = 64;
    /// The data dir holds no Pforte store (EX_NOINPUT).
    pub const NO_STORE: u8 = 66;
    /// The store exists but cannot be used right now: redis down, SQLite locked or unreadable
    /// (EX_UNAVAILABLE).
    pub const UNAVAILABLE: u8 = 69;
    /// Anything else (no such user, a token name taken, …).
    pub const OTHER: u8 = 1;
}

/// The files that make a directory a Pforte store (the gateway creates both on first start).
pub(crate) const STORE_FILES: [&str; 2] = ["pforte.db", "oauth.db"];

/// Whether `dir` holds an embedded Pforte store. Looks only; creates nothing.
pub(crate) fn has_store(dir: &Path) -> bool {
    STORE_FILES.iter().any(|f| dir.join(f).is_file())
}

/// Why `dir` cannot be a data dir: it exists and is not a directory (a file, a socket), said
/// as what to change. `None` when it is a directory or does not exist yet.
pub(crate) fn data_dir_problem(dir: &Path) -> Option<String> {
    let meta = std::fs::metadata(dir).ok()?;
    (!meta.is_dir()).then(|| {
        format!(
            "data_dir {} is a file, not a directory: point data_dir (or --data-dir, \
             PFORTE_DATA_DIR) at a directory, or move the file away",
            dir.display()
        )
    })
}

/// Creates the data dir `dir` unless it exists: a path that is a file, or one that cannot be
/// created, is one line saying what to change.
pub(crate) fn prepare_data_dir(dir: &Path) -> Result<(), String> {
    if let Some(problem) = data_dir_problem(dir) {
        return Err(problem);
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("cannot create data_dir {}: {e}", dir.display()))
}

/// The refusal of a reading command on a dir without a store.
pub(crate) fn no_store_message(dir: &Path) -> String {
    format!(
        "no Pforte store at {} — pass the --data-dir the gateway uses",
        dir.display()
    )
}

/// Why `serve` refuses a data dir without a store, and how to create one there.
pub(crate) fn uninitialised_message(dir: &Path) -> String {
    format!(
        "no Pforte store at {} — pass the --data-dir the gateway uses, or create a new store there with `pforte serve --init` (or PFORTE_INIT=1)",
        dir.display()
    )
}

/// The note an adding command prints after it created a store.
pub(crate) fn new_store_message(dir: &Path) -> String {
    format!(
        "created a new, empty store at {}; no gateway uses it yet",
        dir.display()
    )
}

/// `2026-12-01 19:03Z`
pub(crate) fn utc_minute(secs: u64) -> String {
    let t = UtcDateTime::from_unix_secs(secs);
    format!("{} {:02}:{:02}Z", t.date(), t.hour, t.minute)
}

/// `2027-03-01`
pub(crate) fn utc_date(secs: u64) -> String {
    UtcDateTime::from_unix_secs(secs).date()
}

/// RFC 3339, for `--json`: `2026-12-01T19:03:07Z`
pub(crate) fn rfc3339(secs: u64) -> String {
    UtcDateTime::from_unix_secs(secs).rfc3339()
}

/// How far `at` is from `now`: `in 90 d`, `3 h ago`, `in 5 min`, `now`.
pub(crate) fn relative(at: u64, now: u64) -> String {
    let (delta, future) = if at >= now {
        (at - now, true)
    } else {
        (now - at, false)
    };
    // Rounded to the nearest unit: a token made for 90 days and listed a second later still
    // expires "in 90 d".
    let amount = match delta {
        0..60 => return "now".to_owned(),
        60..7_200 => format!("{} min", (delta + 30) / 60),
        7_200..172_800 => format!("{} h", (delta + 1_800) / 3_600),
        _ => format!("{} d", (delta + 43_200) / 86_400),
    };
    if future {
        format!("in {amount}")
    } else {
        format!("{amount} ago")
    }
}

/// An expiry as listed: `2027-03-01 (in 90 d)`, `2026-11-30 (1 d ago)` or `never`.
pub(crate) fn expiry(at: Option<u64>, now: u64) -> String {
    match at {
        Some(at) => format!("{} ({})", utc_date(at), relative(at, now)),
        None => "never".to_owned(),
    }
}

/// An aligned table: a header row, then one row per item; the last column is not padded.
/// With no rows it is the `empty` line instead ("no clients").
pub(crate) fn table(headers: &[&str], rows: &[Vec<String>], empty: &str) -> String {
    if rows.is_empty() {
        return format!("{empty}\n");
    }
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let last = row.len().saturating_sub(1);
        for (i, cell) in row.iter().enumerate() {
            if i == last {
                out.push_str(cell);
            } else {
                let pad = widths.get(i).copied().unwrap_or(0) - cell.chars().count();
                out.push_str(cell);
                out.push_str(&" ".repeat(pad + 2));
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_iso_utc() {
        assert_eq!(utc_minute(0), "1970-01-01 00:00Z");
        // 2026-12-01 19:03:07 UTC
        assert_eq!(utc_minute(1_796_151_787), "2026-12-01 19:03Z");
        assert_eq!(rfc3339(1_796_151_787), "2026-12-01T19:03:07Z");
        assert_eq!(utc_date(951_782_400), "2000-02-29");
        assert_eq!(utc_date(4_107_542_400), "2100-03-01");
    }

    #[test]
    fn relative_times() {
        let now = 1_000_000_000;
        assert_eq!(relative(now, now), "now");
        assert_eq!(relative(now + 300, now), "in 5 min");
        assert_eq!(relative(now - 3 * 3_600, now), "3 h ago");
        assert_eq!(relative(now + 90 * 86_400, now), "in 90 d");
        assert_eq!(relative(now + 90 * 86_400 - 1, now), "in 90 d");
        assert_eq!(relative(now - 119, now), "2 min ago");
        assert_eq!(expiry(None, now), "never");
        assert_eq!(
            expiry(Some(1_796_151_787 + 90 * 86_400), 1_796_151_787),
            "2027-03-01 (in 90 d)"
        );
    }

    #[test]
    fn tables_align_and_say_when_empty() {
        let rows = vec![
            vec!["a".to_owned(), "longer".to_owned(), "x".to_owned()],
            vec!["bbbb".to_owned(), "s".to_owned(), "y".to_owned()],
        ];
        assert_eq!(
            table(&["name", "state", "scopes"], &rows, "no tokens"),
            "name  state   scopes\na     longer  x\nbbbb  s       y\n"
        );
        assert_eq!(table(&["name"], &[], "no tokens"), "no tokens\n");
    }

    #[test]
    fn a_store_is_found_without_creating_anything() {
        let dir = std::env::temp_dir().join(format!("pforte-no-store-{}", std::process::id()));
        assert!(!has_store(&dir));
        assert!(!dir.exists());
    }
}
