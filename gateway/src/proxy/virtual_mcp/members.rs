//! The member sessions a virtual server holds (issue 42 point 3): per downstream session and
//! member route, the member's session id (`None`: the member keeps none), opened on the first
//! call to that member and ended with the downstream session; and the way a call reaches its
//! member: on that session (opened again once when the member forgot it), or — a request
//! without a downstream session — on a session of its own, ended after the answer.

use std::{collections::HashMap, sync::Mutex, time::Duration};

use serde_json::Value;

use crate::catalog::{Catalog, CatalogError, Extra};

/// The most member sessions held at once (a loop guard: each downstream session holds at most
/// one per member, and ends them with its `DELETE`).
const MAX_HELD: usize = 10_000;

/// Downstream session id and member route index → the member's session id.
#[derive(Debug, Default)]
pub(crate) struct MemberSessions {
    held: Mutex<HashMap<(String, usize), Option<String>>>,
}

impl MemberSessions {
    fn get(&self, downstream: &str, route: usize) -> Option<Option<String>> {
        let held = self.held.lock().ok()?;
        held.get(&(downstream.to_owned(), route)).cloned()
    }

    /// Keeps `member` for `downstream` and `route`; `false`: the table is full (or its lock
    /// poisoned) and the caller ends the member session itself after its call.
    fn put(&self, downstream: &str, route: usize, member: Option<String>) -> bool {
        let Ok(mut held) = self.held.lock() else {
            return false;
        };
        let key = (downstream.to_owned(), route);
        if held.len() >= MAX_HELD && !held.contains_key(&key) {
            return false;
        }
        held.insert(key, member);
        true
    }

    /// Whether no further member session can be kept.
    fn full(&self) -> bool {
        self.held.lock().map_or(true, |held| held.len() >= MAX_HELD)
    }

    /// Forgets every member session of `downstream`: `(route, member session id)`.
    pub(super) fn take(&self, downstream: &str) -> Vec<(usize, String)> {
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
                held.remove(&k).flatten().map(|s| (route, s))
            })
            .collect()
    }

    /// `body` (one JSON-RPC request with id `id`) sent to the member `route` of `catalog` on
    /// `downstream`'s member session: the member's response message.
    pub(super) async fn call(
        &self,
        catalog: &Catalog,
        (downstream, route): (Option<&str>, usize),
        body: Vec<u8>,
        id: &Value,
        extra: &Extra,
        timeout: Duration,
    ) -> Result<Value, CatalogError> {
        let held = downstream.and_then(|d| self.get(d, route));
        let keep = match downstream {
            Some(d) if held.is_some() || !self.full() => d,
            // No downstream session, or no room to keep another: one of its own.
            _ => {
                let member = catalog.open_member_session(extra, timeout).await?;
                let answer = catalog
                    .member_request(member.as_deref(), body, id, extra, timeout)
                    .await;
                if let Some(s) = member {
                    catalog.end_member_session(&s, extra).await;
                }
                return answer.map(|(a, _)| a);
            }
        };
        let member = match held {
            Some(member) => member,
            None => {
                let member = catalog.open_member_session(extra, timeout).await?;
                self.keep(catalog, (keep, route), member, extra).await
            }
        };
        match catalog
            .member_request(member.as_deref(), body.clone(), id, extra, timeout)
            .await
        {
            Err(CatalogError::SessionGone) => {
                let member = catalog.open_member_session(extra, timeout).await?;
                self.put(keep, route, member.clone());
                let (answer, _) = catalog
                    .member_request(member.as_deref(), body, id, extra, timeout)
                    .await?;
                Ok(answer)
            }
            other => other.map(|(a, _)| a),
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
            let existing = held.get(&key).cloned();
            if existing.is_none() && held.len() < MAX_HELD {
                held.insert(key, member.clone());
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
        held.put("a", 0, Some("m0".to_owned()));
        held.put("a", 1, None);
        held.put("b", 0, Some("other".to_owned()));
        assert_eq!(held.get("a", 1), Some(None));
        let mut ended = held.take("a");
        ended.sort();
        // A member that keeps no session has nothing to end.
        assert_eq!(ended, [(0, "m0".to_owned())]);
        assert_eq!(held.get("a", 0), None);
        assert_eq!(held.get("b", 0), Some(Some("other".to_owned())));
        assert!(held.take("a").is_empty());
    }
}
