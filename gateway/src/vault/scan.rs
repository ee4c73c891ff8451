//! Reads over every record's metadata: whether the key ring opens them all, and who is
//! connected to a route.

use super::{State, Vault, VaultError, backend::Row, record_context};

impl Vault {
    /// Whether the ring opens every stored record: how many there are, or [`VaultError::Ring`]
    /// naming the first that does not open. Run at start (`check`, `serve`), so a wrong key
    /// is refused there rather than answered 503 at each person's first call.
    pub(crate) async fn check_ring(&self) -> Result<usize, VaultError> {
        let rows = self.backend.all().await?;
        let total = rows.len();
        let mut first = None;
        let mut opened = 0;
        for row in rows {
            match self
                .ring
                .open(&record_context(&row.route, &row.person), &row.sealed)
            {
                Ok(_) => opened += 1,
                Err(reason) => {
                    first.get_or_insert((row.route, reason));
                }
            }
        }
        match first {
            None => Ok(total),
            Some((route, reason)) => Err(VaultError::Ring {
                opened,
                total,
                route,
                reason,
            }),
        }
    }

    /// The people with a working credential for `route`, the most recently connected first
    /// (the tool catalog borrows one; asked only when it needs another). Reads every record's
    /// metadata, no secret.
    pub(crate) async fn connected(&self, route: &str) -> Result<Vec<String>, VaultError> {
        let rows = self.backend.all().await?;
        Ok(newest_connected(rows, route))
    }
}

/// The people of `rows` connected to `route` (not waiting to reconnect), the most recently
/// connected first.
pub(super) fn newest_connected(rows: Vec<Row>, route: &str) -> Vec<String> {
    let mut mine: Vec<Row> = rows
        .into_iter()
        .filter(|r| r.route == route && r.state == State::Connected)
        .collect();
    mine.sort_by_key(|r| std::cmp::Reverse(r.connected_ms));
    mine.into_iter().map(|r| r.person).collect()
}
