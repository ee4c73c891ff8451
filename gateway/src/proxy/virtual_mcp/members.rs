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

    fn put(&self, downstream: &str, route: usize, member: Option<String>) {
        if let Ok(mut held) = self.held.lock()
            && held.len() < MAX_HELD
        {
            held.insert((downstream.to_owned(), route), member);
        }
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
        let Some(downstream) = downstream else {
            let member = catalog.open_member_session(extra, timeout).await?;
            let answer = catalog
                .member_request(member.as_deref(), body, id, extra, timeout)
                .await;
            if let Some(s) = member {
                catalog.end_member_session(&s, extra).await;
            }
            return answer.map(|(a, _)| a);
        };
        let member = match self.get(downstream, route) {
            Some(member) => member,
            None => {
                let member = catalog.open_member_session(extra, timeout).await?;
                self.put(downstream, route, member.clone());
                member
            }
        };
        match catalog
            .member_request(member.as_deref(), body.clone(), id, extra, timeout)
            .await
        {
            Err(CatalogError::SessionGone) => {
                let member = catalog.open_member_session(extra, timeout).await?;
                self.put(downstream, route, member.clone());
                let (answer, _) = catalog
                    .member_request(member.as_deref(), body, id, extra, timeout)
                    .await?;
                Ok(answer)
            }
            other => other.map(|(a, _)| a),
        }
    }
}
