//! The in-process session table: bindings by hashed id with a sliding expiry, bounded (the one
//! expiring first is evicted), and counted per person; a person's least recently used idle
//! session found for eviction at their cap. With a store behind it (`disk.rs`), every change
//! is also noted in a journal the caller writes out. Pure: every operation takes `now`.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::Mutex,
};

use super::{Binding, Holder, Key, SessionOptions};

/// One record as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Record {
    pub(super) owner: String,
    pub(super) person: String,
    pub(super) instance: Option<String>,
    pub(super) expires_ms: u64,
    pub(super) last_used_ms: u64,
}

/// A change to write to the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Write {
    /// A new binding.
    Put(Key, Record),
    /// The expiry slid (written at most every ttl/4 per session) and the last use.
    Touch {
        key: Key,
        expires_ms: u64,
        last_used_ms: u64,
    },
    /// The binding ended (deleted, expired, evicted).
    Delete(Key),
}

/// A session closed to make room at its person's cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Evicted {
    pub(super) key: Key,
    /// How long it had been idle.
    pub(super) idle_ms: u64,
}

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
    /// The owner's last use (least recently used idle sessions are evicted first).
    last_used_ms: u64,
    seq: u64,
}

/// The in-process table: bindings by hashed id, and an index by expiry for eviction and
/// purging (both O(log n)). Pure: every operation takes `now`.
#[derive(Debug)]
pub(super) struct Table {
    entries: HashMap<Key, Entry>,
    by_expiry: BTreeMap<(u64, u64), Key>,
    /// Live bindings per person (a person without any is removed).
    per_person: HashMap<Box<str>, HashSet<Key>>,
    ttl_ms: u64,
    max_entries: usize,
    next_seq: u64,
    /// Changes not yet written to the store; `None` without a store.
    journal: Option<Vec<Write>>,
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
            journal: None,
        }
    }

    /// A table whose changes are journaled for a store, holding `records` (read from it).
    pub(super) fn journaled(
        opts: SessionOptions,
        records: impl IntoIterator<Item = (Key, Record)>,
        now: u64,
    ) -> Self {
        let mut table = Self::new(opts);
        for (key, r) in records {
            if r.expires_ms <= now || table.entries.contains_key(&key) {
                continue;
            }
            if table.entries.len() >= table.max_entries {
                break;
            }
            table.insert(key, r);
        }
        table.journal = Some(Vec::new());
        table
    }

    /// The changes since the last call, to write to the store.
    pub(super) fn take_journal(&mut self) -> Vec<Write> {
        self.journal
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    fn note(&mut self, write: impl FnOnce() -> Write) {
        if let Some(journal) = &mut self.journal {
            journal.push(write());
        }
    }

    fn insert(&mut self, key: Key, r: Record) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.by_expiry.insert((r.expires_ms, seq), key);
        self.per_person
            .entry(r.person.as_str().into())
            .or_default()
            .insert(key);
        self.entries.insert(
            key,
            Entry {
                owner: r.owner.into(),
                person: r.person.into(),
                instance: r.instance.map(Into::into),
                expires_ms: r.expires_ms,
                touched_ms: r.last_used_ms,
                last_used_ms: r.last_used_ms,
                seq,
            },
        );
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
        let record = Record {
            owner: holder.owner.to_owned(),
            person: holder.person.to_owned(),
            instance: instance.map(str::to_owned),
            expires_ms: now.saturating_add(self.ttl_ms),
            last_used_ms: now,
        };
        self.note(|| Write::Put(key, record.clone()));
        self.insert(key, record);
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
        entry.last_used_ms = entry.last_used_ms.max(now);
        let binding = Binding::owner(entry.instance.as_deref().map(str::to_owned));
        if now.saturating_sub(entry.touched_ms) >= self.ttl_ms / 4 {
            self.by_expiry.remove(&(entry.expires_ms, entry.seq));
            entry.expires_ms = now.saturating_add(self.ttl_ms);
            entry.touched_ms = now;
            self.by_expiry.insert((entry.expires_ms, entry.seq), *key);
            let expires_ms = entry.expires_ms;
            self.note(|| Write::Touch {
                key: *key,
                expires_ms,
                last_used_ms: now,
            });
        }
        binding
    }

    /// Makes room for one more session of `person` holding at most `max`: while they hold
    /// `max` or more, their least recently used session that is not `busy` is dropped. `Err`,
    /// with nothing dropped, when too few of theirs are idle (a call in flight, an open
    /// stream).
    pub(super) fn make_room(
        &mut self,
        person: &str,
        max: usize,
        busy: &dyn Fn(&Key) -> bool,
        now: u64,
    ) -> Result<Vec<Evicted>, ()> {
        self.purge(now);
        let Some(keys) = self.per_person.get(person) else {
            return Ok(Vec::new());
        };
        let needed = (keys.len() + 1).saturating_sub(max.max(1));
        if needed == 0 {
            return Ok(Vec::new());
        }
        let mut idle: Vec<(u64, Key)> = keys
            .iter()
            .filter(|k| !busy(k))
            .filter_map(|k| self.entries.get(k).map(|e| (e.last_used_ms, *k)))
            .collect();
        if idle.len() < needed {
            return Err(());
        }
        idle.sort_unstable();
        let mut evicted = Vec::with_capacity(needed);
        for (last_used_ms, key) in idle.into_iter().take(needed) {
            self.remove(&key);
            evicted.push(Evicted {
                key,
                idle_ms: now.saturating_sub(last_used_ms),
            });
        }
        Ok(evicted)
    }

    /// Who owns the binding of `key`, if any.
    /// Whether `key` is bound and not expired at `now_ms` (nothing changed).
    pub(super) fn is_live(&self, key: &Key, now_ms: u64) -> bool {
        self.entries.get(key).is_some_and(|e| e.expires_ms > now_ms)
    }

    pub(super) fn owner_of(&self, key: &Key) -> Option<&str> {
        self.entries.get(key).map(|e| &*e.owner)
    }

    pub(super) fn remove(&mut self, key: &Key) {
        if let Some(entry) = self.drop_entry(key) {
            self.by_expiry.remove(&(entry.expires_ms, entry.seq));
        }
    }

    /// Removes the entry (not its expiry index) and releases its person's count.
    fn drop_entry(&mut self, key: &Key) -> Option<Entry> {
        let entry = self.entries.remove(key)?;
        if let Some(keys) = self.per_person.get_mut(&entry.person) {
            keys.remove(key);
            if keys.is_empty() {
                self.per_person.remove(&entry.person);
            }
        }
        self.note(|| Write::Delete(*key));
        Some(entry)
    }

    /// Live bindings of `person` at `now`.
    pub(super) fn count(&mut self, person: &str, now: u64) -> usize {
        self.purge(now);
        self.per_person.get(person).map_or(0, HashSet::len)
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

    #[test]
    fn make_room_closes_the_least_recently_used_idle_one_and_journals_it() {
        let mut t = Table::journaled(
            SessionOptions {
                ttl: Duration::from_secs(3600),
                max_entries: 10,
            },
            [],
            0,
        );
        t.bind(key("a"), h("alice"), None, 0);
        t.bind(key("b"), h("alice"), None, 1);
        t.bind(key("c"), h("alice"), None, 2);
        // "a" is used again: "b" is now the least recently used.
        t.check(&key("a"), "alice", 5);
        assert_eq!(
            t.take_journal().len(),
            3,
            "three puts, no slide within ttl/4"
        );
        let none = |_: &Key| false;
        assert_eq!(
            t.make_room("alice", 3, &none, 10),
            Ok(vec![Evicted {
                key: key("b"),
                idle_ms: 9
            }])
        );
        assert_eq!(t.take_journal(), vec![Write::Delete(key("b"))]);
        // Too few idle ones: nothing is closed in vain.
        let a_busy = |k: &Key| *k == key("a");
        assert_eq!(t.make_room("alice", 1, &a_busy, 11), Err(()));
        assert_eq!(t.count("alice", 11), 2);
        // The one in use is spared.
        let evicted = t.make_room("alice", 2, &a_busy, 11).unwrap();
        assert_eq!(evicted.len(), 1);
        assert_eq!(evicted[0].key, key("c"));
        assert_eq!(t.count("alice", 12), 1);
        // Over a lowered cap as many as needed go.
        t.bind(key("d"), h("alice"), None, 13);
        t.bind(key("e"), h("alice"), None, 14);
        assert_eq!(t.make_room("alice", 1, &none, 15).unwrap().len(), 3);
        assert_eq!(t.make_room("bob", 1, &none, 12), Ok(vec![]));
    }
}
