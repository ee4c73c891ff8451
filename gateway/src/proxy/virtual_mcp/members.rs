//! The member sessions a virtual server holds (issue 42 point 3): per downstream session and
//! member route, the member's session id (`None`: the member keeps none) with the headers it
//! was opened with, opened on the first call to that member and ended with the downstream
//! session — its `DELETE`, or, found by a sweep, its expiry or eviction; and the way a call
//! reaches its member: on that session (opened again once when the member forgot it; `send`
//! hands the answer on as it comes, `call` reads it whole), or — a request without a downstream
//! session — on a session of its own, ended after the answer.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use serde_json::Value;

use crate::catalog::{Catalog, CatalogError, Extra, MemberAnswer};

/// The most member sessions held at once (a loop guard: each downstream session holds at most
/// one per member, and ends them with its `DELETE`).
const MAX_HELD: usize = 10_000;

/// How often the held downstream sessions are looked up, to end the member sessions of those
/// that expired or were evicted (also at once after a virtual server's session opened, which
/// may have evicted one).
pub(super) const SWEEP_EVERY_MS: u64 = 60_000;

/// The most downstream sessions one sweep looks up.
pub(super) const SWEEP_MAX: usize = 64;

/// A member session held: its id (`None`: the member keeps none) and the headers it was opened
/// with (the caller's identity, a per-user credential), which end it.
#[derive(Debug, Clone)]
struct Held {
    member: Option<String>,
    extra: Vec<(http::HeaderName, http::HeaderValue)>,
}

/// A member session to end: its route index, its id, the headers it was opened with.
pub(super) type Ended = (usize, String, Vec<(http::HeaderName, http::HeaderValue)>);

/// Downstream session id and member route index → the member's session.
#[derive(Debug, Default)]
pub(crate) struct MemberSessions {
    held: Mutex<HashMap<(String, usize), Held>>,
    /// When the last sweep began (ms; 0: never).
    swept_ms: AtomicU64,
}

/// Whether a sweep is due at `now_ms` after the last one at `last_ms` (`opened`: a downstream
/// session just opened, which may have evicted another) — pure.
pub(super) fn sweep_due(now_ms: u64, last_ms: u64, opened: bool) -> bool {
    opened || now_ms.saturating_sub(last_ms) >= SWEEP_EVERY_MS
}

impl MemberSessions {
    fn get(&self, downstream: &str, route: usize) -> Option<Option<String>> {
        let held = self.held.lock().ok()?;
        held.get(&(downstream.to_owned(), route))
            .map(|h| h.member.clone())
    }

    /// Keeps `member` for `downstream` and `route`; `false`: the table is full (or its lock
    /// poisoned) and the caller ends the member session itself after its call.
    fn put(&self, downstream: &str, route: usize, member: Option<String>, extra: &Extra) -> bool {
        let Ok(mut held) = self.held.lock() else {
            return false;
        };
        let key = (downstream.to_owned(), route);
        if held.len() >= MAX_HELD && !held.contains_key(&key) {
            return false;
        }
        let extra = extra.to_vec();
        held.insert(key, Held { member, extra });
        true
    }

    /// Whether to sweep now (and if so, the sweep counted as begun at `now_ms`).
    pub(super) fn start_sweep(&self, now_ms: u64, opened: bool) -> bool {
        let last = self.swept_ms.load(Ordering::Relaxed);
        sweep_due(now_ms, last, opened)
            && !self.is_empty()
            && self
                .swept_ms
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    fn is_empty(&self) -> bool {
        self.held.lock().map_or(true, |held| held.is_empty())
    }

    /// Up to `max` of the downstream sessions that hold member sessions.
    pub(super) fn downstreams(&self, max: usize) -> Vec<String> {
        let Ok(held) = self.held.lock() else {
            return Vec::new();
        };
        let ids: BTreeSet<&String> = held.keys().map(|(d, _)| d).collect();
        ids.into_iter().take(max).cloned().collect()
    }

    /// The member sessions `downstream` holds: `(route, member session id, headers)`.
    pub(super) fn held_by(&self, downstream: &str) -> Vec<Ended> {
        let Ok(held) = self.held.lock() else {
            return Vec::new();
        };
        held.iter()
            .filter(|((d, _), _)| d == downstream)
            .filter_map(|((_, route), h)| Some((*route, h.member.clone()?, h.extra.clone())))
            .collect()
    }

    /// Whether no further member session can be kept.
    fn full(&self) -> bool {
        self.held.lock().map_or(true, |held| held.len() >= MAX_HELD)
    }

    /// Forgets every member session of `downstream`: `(route, member session id, headers)`.
    pub(super) fn take(&self, downstream: &str) -> Vec<Ended> {
        let Ok(mut held) = self.held.lock() else {
            return Vec::new();
        };
        let keys: Vec<(String, usize)> = held
            .keys()
            .filter(|(d, _)| d == downstream)
            .cloned()
            .collect();
        keys.into_iter()
            .filter_map(|k| {
                let route = k.1;
                let h = held.remove(&k)?;
                h.member.map(|s| (route, s, h.extra))
            })
            .collect()
    }

    /// `body` (one JSON-RPC request with id `id`) sent to the member `route` of `catalog` on
    /// `downstream`'s member session: the member's response message (an event stream read on
    /// to it).
    pub(super) async fn call(
        &self,
        catalog: &Catalog,
        (downstream, route): (Option<&str>, usize),
        body: Vec<u8>,
        id: &Value,
        extra: &Extra,
        timeout: Duration,
    ) -> Result<Value, CatalogError> {
        if let Some(d) = downstream {
            match self
                .send(catalog, (d, route), body.clone(), extra, timeout)
                .await?
            {
                Some((MemberAnswer::Whole(answer), _)) => return Ok(answer),
                Some((MemberAnswer::Events(events), _)) => return events.response(id).await,
                None => {}
            }
        }
        // No downstream session, or no room to keep another: one of its own.
        let member = catalog.open_member_session(extra, timeout).await?;
        let answer = catalog
            .member_request(member.as_deref(), body, id, extra, timeout)
            .await;
        if let Some(s) = member {
            catalog.end_member_session(&s, extra).await;
        }
        answer.map(|(a, _)| a)
    }

    /// `body` sent to the member `route` of `catalog` on `downstream`'s member session (opened
    /// on the first call, opened again once when the member forgot it): the member's answer as
    /// it comes, and the member session it went on; `None` when no further member session can
    /// be kept (the caller opens one of its own).
    pub(super) async fn send(
        &self,
        catalog: &Catalog,
        (downstream, route): (&str, usize),
        body: Vec<u8>,
        extra: &Extra,
        timeout: Duration,
    ) -> Result<Option<(MemberAnswer, Option<String>)>, CatalogError> {
        let held = self.get(downstream, route);
        if held.is_none() && self.full() {
            return Ok(None);
        }
        let member = match held {
            Some(member) => member,
            None => {
                let member = catalog.open_member_session(extra, timeout).await?;
                self.keep(catalog, (downstream, route), member, extra).await
            }
        };
        match catalog
            .member_send(member.as_deref(), body.clone(), extra, timeout)
            .await
        {
            Err(CatalogError::SessionGone) => {
                let member = catalog.open_member_session(extra, timeout).await?;
                self.put(downstream, route, member.clone(), extra);
                let (answer, _) = catalog
                    .member_send(member.as_deref(), body, extra, timeout)
                    .await?;
                Ok(Some((answer, member)))
            }
            other => other.map(|(answer, _)| Some((answer, member))),
        }
    }

    /// Keeps a newly opened member session, unless a concurrent first call on the same
    /// downstream session and member kept one meanwhile: then that one is used and the new one
    /// ended. The member session to use.
    async fn keep(
        &self,
        catalog: &Catalog,
        (downstream, route): (&str, usize),
        member: Option<String>,
        extra: &Extra,
    ) -> Option<String> {
        let existing = {
            let Ok(mut held) = self.held.lock() else {
                return member;
            };
            let key = (downstream.to_owned(), route);
            let existing = held.get(&key).map(|h| h.member.clone());
            if existing.is_none() && held.len() < MAX_HELD {
                let extra = extra.to_vec();
                let member = member.clone();
                held.insert(key, Held { member, extra });
            }
            existing
        };
        match (existing, member) {
            (Some(kept), Some(ours)) => {
                catalog.end_member_session(&ours, extra).await;
                kept
            }
            (Some(kept), None) => kept,
            (None, member) => member,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_downstream_session_ends_only_its_own_member_sessions() {
        let held = MemberSessions::default();
        held.put("a", 0, Some("m0".to_owned()), &[]);
        held.put("a", 1, None, &[]);
        held.put("b", 0, Some("other".to_owned()), &[]);
        assert_eq!(held.get("a", 1), Some(None));
        assert_eq!(held.downstreams(10), ["a", "b"]);
        assert_eq!(held.downstreams(1), ["a"]);
        let ended: Vec<(usize, String)> =
            held.take("a").into_iter().map(|(r, s, _)| (r, s)).collect();
        // A member that keeps no session has nothing to end.
        assert_eq!(ended, [(0, "m0".to_owned())]);
        assert_eq!(held.get("a", 0), None);
        assert_eq!(held.get("b", 0), Some(Some("other".to_owned())));
        assert!(held.take("a").is_empty());
    }

    #[test]
    fn a_sweep_is_due_every_minute_and_after_a_session_opened() {
        assert!(sweep_due(60_000, 0, false));
        assert!(!sweep_due(119_999, 60_000, false));
        assert!(sweep_due(120_000, 60_000, false));
        assert!(sweep_due(60_001, 60_000, true));
        // Nothing held: nothing to sweep, and the clock is not taken.
        let held = MemberSessions::default();
        assert!(!held.start_sweep(120_000, true));
        held.put("a", 0, Some("m0".to_owned()), &[]);
        assert!(held.start_sweep(120_000, false));
        assert!(!held.start_sweep(120_001, false), "begun a moment ago");
        assert!(held.start_sweep(120_002, true));
    }
}
