//! The in-process session table: bindings by hashed id with a sliding expiry, bounded (the one
//! expiring first is evicted), and counted per person. Pure: every operation takes `now`.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Mutex,
};

use super::{Binding, Holder, Key, SessionOptions};

pub(super) fn lock(table: &Mutex<Table>) -> std::sync::MutexGuard<'_, Table> {
    // A panic while holding the lock leaves the table consistent (no multi-step invariants
    // span a panic point), so poisoning is ignored.
    table
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[derive(Debug)]
struct Entry {
    owner: Box<str>,
    person: Box<str>,
    instance: Option<Box<str>>,
    expires_ms: u64,
    /// When the expiry was last written.
    touched_ms: u64,
    seq: u64,
}

/// The in-process table: bindings by hashed id, and an index by expiry for eviction and
/// purging (both O(log n)). Pure: every operation takes `now`.
#[derive(Debug)]
pub(super) struct Table {
    entries: HashMap<Key, Entry>,
    by_expiry: BTreeMap<(u64, u64), Key>,
    /// Live bindings per person (entries with a count of 0 are removed).
    per_person: HashMap<Box<str>, usize>,
    ttl_ms: u64,
    max_entries: usize,
    next_seq: u64,
}

impl Table {
    pub(super) fn new(opts: SessionOptions) -> Self {
        Self {
            entries: HashMap::new(),
            by_expiry: BTreeMap::new(),
            per_person: HashMap::new(),
            ttl_ms: (opts.ttl.as_millis() as u64).max(1),
            max_entries: opts.max_entries.max(1),
            next_seq: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn bind(
        &mut self,
        key: Key,
        holder: Holder<'_>,
        instance: Option<&str>,
        now: u64,
    ) -> Binding {
        self.purge(now);
        if let Some(entry) = self.entries.get(&key) {
            return Binding::of(holder.owner, &entry.owner, entry.instance.as_deref());
        }
        while self.entries.len() >= self.max_entries {
            let Some((_, oldest)) = self.by_expiry.pop_first() else {
                break;
            };
            self.drop_entry(&oldest);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let expires_ms = now.saturating_add(self.ttl_ms);
        self.by_expiry.insert((expires_ms, seq), key);
        *self.per_person.entry(holder.person.into()).or_insert(0) += 1;
        self.entries.insert(
            key,
            Entry {
                owner: holder.owner.into(),
                person: holder.person.into(),
                instance: instance.map(Into::into),
                expires_ms,
                touched_ms: now,
                seq,
            },
        );
        Binding::owner(instance.map(str::to_owned))
    }

    pub(super) fn check(&mut self, key: &Key, owner: &str, now: u64) -> Binding {
        let Some(entry) = self.entries.get_mut(key) else {
            return Binding::UNKNOWN;
        };
        if entry.expires_ms <= now {
            self.remove(key);
            return Binding::UNKNOWN;
        }
        if &*entry.owner != owner {
            return Binding::FOREIGN;
        }
        if now.saturating_sub(entry.touched_ms) >= self.ttl_ms / 4 {
            self.by_expiry.remove(&(entry.expires_ms, entry.seq));
            entry.expires_ms = now.saturating_add(self.ttl_ms);
            entry.touched_ms = now;
            self.by_expiry.insert((entry.expires_ms, entry.seq), *key);
        }
        Binding::owner(entry.instance.as_deref().map(str::to_owned))
    }

    pub(super) fn remove(&mut self, key: &Key) {
        if let Some(entry) = self.drop_entry(key) {
            self.by_expiry.remove(&(entry.expires_ms, entry.seq));
        }
    }

    /// Removes the entry (not its expiry index) and releases its person's count.
    fn drop_entry(&mut self, key: &Key) -> Option<Entry> {
        let entry = self.entries.remove(key)?;
        if let Some(n) = self.per_person.get_mut(&entry.person) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_person.remove(&entry.person);
            }
        }
        Some(entry)
    }

    /// Live bindings of `person` at `now`.
    pub(super) fn count(&mut self, person: &str, now: u64) -> usize {
        self.purge(now);
        self.per_person.get(person).copied().unwrap_or(0)
    }

    /// Drops every binding expired at `now` (each is dropped once: amortised O(log n)).
    /// The bindings alive at `now`.
    pub(super) fn live(&mut self, now: u64) -> usize {
        self.purge(now);
        self.entries.len()
    }

    fn purge(&mut self, now: u64) {
        while let Some(entry) = self.by_expiry.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let key = entry.remove();
            self.drop_entry(&key);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::sessions::{Ownership, has_room, key};

    const HOUR: u64 = 3_600_000;

    /// A holder whose person is itself (one client per person).
    fn h(owner: &str) -> Holder<'_> {
        Holder::new(owner, owner)
    }

    fn table(max: usize) -> Table {
        Table::new(SessionOptions {
            ttl: Duration::from_secs(3600),
            max_entries: max,
        })
    }

    #[test]
    fn first_binding_wins_and_others_are_foreign() {
        let mut t = table(10);
        let k = key("s1");
        assert_eq!(t.check(&k, "alice", 0).ownership, Ownership::Unknown);
        assert_eq!(t.bind(k, h("alice"), None, 0).ownership, Ownership::Owner);
        assert_eq!(t.bind(k, h("bob"), None, 1).ownership, Ownership::Foreign);
        assert_eq!(t.check(&k, "alice", 2).ownership, Ownership::Owner);
        assert_eq!(t.check(&k, "bob", 2).ownership, Ownership::Foreign);
        t.remove(&k);
        assert_eq!(t.check(&k, "bob", 3).ownership, Ownership::Unknown);
        assert!(t.by_expiry.is_empty());
    }

    #[test]
    fn idle_bindings_expire_and_use_slides_at_most_every_quarter_ttl() {
        let mut t = table(10);
        let k = key("s");
        t.bind(k, h("alice"), None, 0);
        // Within ttl/4 the expiry is not rewritten.
        assert_eq!(
            t.check(&k, "alice", HOUR / 4 - 1).ownership,
            Ownership::Owner
        );
        assert_eq!(t.entries[&k].expires_ms, HOUR);
        // After ttl/4 it is.
        assert_eq!(t.check(&k, "alice", HOUR / 2).ownership, Ownership::Owner);
        assert_eq!(t.entries[&k].expires_ms, HOUR / 2 + HOUR);
        // A foreign check does not slide.
        assert_eq!(t.check(&k, "bob", HOUR).ownership, Ownership::Foreign);
        assert_eq!(t.entries[&k].expires_ms, HOUR / 2 + HOUR);
        // Idle for a whole ttl: gone, and free to bind anew.
        assert_eq!(
            t.check(&k, "alice", HOUR / 2 + HOUR).ownership,
            Ownership::Unknown
        );
        assert_eq!(t.len(), 0);
        assert_eq!(
            t.bind(k, h("bob"), None, 2 * HOUR).ownership,
            Ownership::Owner
        );
    }

    #[test]
    fn the_table_is_bounded_and_evicts_the_one_expiring_first() {
        let mut t = table(3);
        for (i, id) in ["a", "b", "c"].into_iter().enumerate() {
            t.bind(key(id), h("o"), None, i as u64);
        }
        // "a" is used after ttl/4 and slides past the others.
        t.check(&key("a"), "o", HOUR / 2);
        t.bind(key("d"), h("o"), None, HOUR / 2);
        assert_eq!(t.len(), 3);
        assert_eq!(
            t.check(&key("b"), "o", HOUR / 2).ownership,
            Ownership::Unknown
        );
        assert_eq!(
            t.check(&key("a"), "o", HOUR / 2).ownership,
            Ownership::Owner
        );
        assert_eq!(t.entries.len(), t.by_expiry.len());
    }

    #[test]
    fn expired_bindings_are_purged_on_bind() {
        let mut t = table(100);
        for i in 0..50 {
            t.bind(key(&i.to_string()), h("o"), None, 0);
        }
        t.bind(key("late"), h("o"), None, HOUR);
        assert_eq!(t.len(), 1);
        assert_eq!(t.by_expiry.len(), 1);
    }

    #[test]
    fn a_persons_clients_share_one_count_but_not_their_sessions() {
        let mut t = table(10);
        let (one, two) = (
            Holder::new("oauth:alice:client-1", "oauth:alice"),
            Holder::new("oauth:alice:client-2", "oauth:alice"),
        );
        t.bind(key("s1"), one, None, 0);
        t.bind(key("s2"), two, None, 0);
        assert_eq!(t.count("oauth:alice", 1), 2);
        assert_eq!(t.count("oauth:alice:client-1", 1), 0);
        // The session stays the client's own: the person's other client is a stranger to it.
        assert_eq!(t.check(&key("s1"), two.owner, 1), Binding::FOREIGN);
        t.remove(&key("s1"));
        assert_eq!(t.count("oauth:alice", 1), 1);
    }

    #[test]
    fn sessions_are_counted_per_owner_and_released_by_delete_expiry_and_eviction() {
        let mut t = table(3);
        t.bind(key("a1"), h("alice"), None, 0);
        t.bind(key("a2"), h("alice"), None, 0);
        t.bind(key("b1"), h("bob"), None, 1);
        assert_eq!(t.count("alice", 1), 2);
        assert_eq!(t.count("bob", 1), 1);
        // A second bind of the same id does not count twice.
        t.bind(key("a1"), h("alice"), None, 2);
        assert_eq!(t.count("alice", 2), 2);
        t.remove(&key("a1"));
        assert_eq!(t.count("alice", 2), 1);
        // Eviction (table full) releases the evicted owner's count.
        t.bind(key("c1"), h("carol"), None, 3);
        t.bind(key("c2"), h("carol"), None, 3);
        assert_eq!(t.count("alice", 3), 0, "a2 expired first and was evicted");
        // Expiry releases it too.
        assert_eq!(t.count("carol", HOUR + 3), 0);
        assert!(t.per_person.is_empty());
        assert!(has_room(63, 64));
        assert!(!has_room(64, 64));
    }

    #[test]
    fn the_instance_is_kept_with_the_binding_and_told_only_to_the_owner() {
        let mut t = table(10);
        let k = key("s");
        let url = "http://127.0.0.1:9001/mcp";
        assert_eq!(
            t.bind(k, h("alice"), Some(url), 0),
            Binding::owner(Some(url.into()))
        );
        // The first binding wins, instance included.
        assert_eq!(
            t.bind(k, h("alice"), Some("http://other/mcp"), 1),
            Binding::owner(Some(url.into()))
        );
        assert_eq!(t.bind(k, h("bob"), Some(url), 1), Binding::FOREIGN);
        assert_eq!(t.check(&k, "alice", 2), Binding::owner(Some(url.into())));
        assert_eq!(t.check(&k, "bob", 2), Binding::FOREIGN);
        // Sliding keeps it.
        assert_eq!(
            t.check(&k, "alice", HOUR / 2).instance.as_deref(),
            Some(url)
        );
        assert_eq!(t.bind(key("n"), h("alice"), None, 3), Binding::owner(None));
        assert_eq!(t.check(&key("n"), "alice", 3), Binding::owner(None));
        assert_eq!(t.count("alice", 3), 2);
    }
}
