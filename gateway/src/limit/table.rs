//! The in-process limiter's memory: theoretical arrival times (or "refused until" times) per
//! key, bounded without ever forgetting every counter at once.

use std::collections::HashMap;
use std::hash::Hash;

/// Times per key, at most `max` of them. When full, expired entries are dropped and, if that
/// is not enough, the entries closest to a full budget (smallest time, the least state lost)
/// until a tenth is free again; so a sweep costs O(n) at most once per `max / 10` inserts
/// (amortised O(1) per decision), and the table is never cleared wholesale.
#[derive(Debug)]
pub(crate) struct TatTable<K> {
    tats: HashMap<K, u64>,
    max: usize,
}

impl<K: Hash + Eq + Clone> TatTable<K> {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            tats: HashMap::new(),
            max: max.max(10),
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.tats.len()
    }

    pub(crate) fn get(&self, key: &K) -> Option<u64> {
        self.tats.get(key).copied()
    }

    pub(crate) fn remove(&mut self, key: &K) {
        self.tats.remove(key);
    }

    /// Stores `tat` for `key`, making room first when the table is full.
    pub(crate) fn insert(&mut self, key: K, tat: u64, now_ms: u64) {
        if self.tats.len() >= self.max && !self.tats.contains_key(&key) {
            self.make_room(now_ms);
        }
        self.tats.insert(key, tat);
    }

    fn make_room(&mut self, now_ms: u64) {
        self.tats.retain(|_, tat| *tat > now_ms);
        let target = self.max - self.max / 10;
        if self.tats.len() <= target {
            return;
        }
        let mut tats: Vec<u64> = self.tats.values().copied().collect();
        let cut = tats.len() - target;
        let (_, threshold, _) = tats.select_nth_unstable(cut - 1);
        let threshold = *threshold;
        let mut to_drop = cut;
        self.tats.retain(|_, tat| {
            if to_drop > 0 && *tat <= threshold {
                to_drop -= 1;
                false
            } else {
                true
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_sweeps_are_amortised() {
        let mut t: TatTable<u32> = TatTable::new(100);
        for i in 0..100 {
            t.insert(i, 1_000 + u64::from(i), 0);
        }
        assert_eq!(t.len(), 100);
        t.insert(1000, 5_000, 0);
        assert_eq!(t.len(), 91, "a sweep frees a tenth");
        assert!(t.get(&0).is_none(), "smallest TATs go first");
        assert!(t.get(&99).is_some());
        for i in 0..9 {
            t.insert(2000 + i, 5_000, 0);
        }
        assert_eq!(t.len(), 100, "no sweep until full again");
        t.insert(3000, 5_000, 2_000);
        assert_eq!(t.len(), 11, "expired entries go first");
    }
}
