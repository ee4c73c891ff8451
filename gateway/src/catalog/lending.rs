//! The catalog of a route whose upstream takes only each person's own credential: the
//! [`Lender`] it borrows one from, and which connected person's it uses.

use std::sync::atomic::Ordering;

use async_trait::async_trait;

use super::{Catalog, CatalogError};

/// People whose credential one refresh tries at most, on a route with a [`Lender`].
const MAX_LENDERS: usize = 3;

/// Where the catalog of a route whose upstream takes only each person's own credential gets
/// one: the people connected to the route, and the headers a request of theirs carries.
#[async_trait]
pub trait Lender: Send + Sync + std::fmt::Debug {
    /// The people with a credential for the route, the most recently connected first.
    async fn people(&self) -> Result<Vec<String>, String>;
    /// The headers the catalog's requests carry as `person`; `Err`: none that works now.
    async fn headers(
        &self,
        person: &str,
    ) -> Result<Vec<(http::HeaderName, http::HeaderValue)>, String>;
}

/// A person's credential the catalog uses: whose, and the headers.
#[derive(Clone)]
pub(super) struct Lent {
    person: String,
    pub(super) headers: Vec<(http::HeaderName, http::HeaderValue)>,
}

impl std::fmt::Debug for Lent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lent")
            .field("person", &self.person)
            .finish_non_exhaustive()
    }
}

impl Catalog {
    /// Whether the catalog learns through a connected person's credential and has found nobody
    /// whose credential works (so it is empty, or as the last person's left it).
    pub(crate) fn awaits_person(&self) -> bool {
        self.awaiting.load(Ordering::Acquire)
    }

    /// `person` just connected to the route: their credential is tried first when the catalog
    /// needs one, and a catalog waiting for anyone refreshes now (a miss may refresh at once).
    pub(crate) fn connected(&self, person: &str) {
        if self.opts.lender.is_none() {
            return;
        }
        if let Ok(mut newest) = self.newest.lock() {
            *newest = Some(person.to_owned());
        }
        if self.awaits_person() {
            self.last_miss_ms.store(0, Ordering::Release);
            self.wake.notify_one();
        }
    }

    /// `tools/list` with a connected person's credential: the one in use, else the person who
    /// connected last here, else the most recently connected ones; a person whose credential
    /// has none that works now, or which the upstream refuses (401, 403), is passed over for
    /// the next (at most [`MAX_LENDERS`] tried).
    pub(super) async fn list_borrowing(
        &self,
        lender: &dyn Lender,
    ) -> Result<super::Snapshot, CatalogError> {
        let mut passed: Vec<String> = Vec::new();
        let mut people: Option<Vec<String>> = None;
        while passed.len() < MAX_LENDERS {
            let current = self.lent().map(|l| l.person);
            let newest = self.newest.lock().ok().and_then(|n| n.clone());
            let mut next = [current, newest]
                .into_iter()
                .flatten()
                .find(|p| !passed.contains(p));
            if next.is_none() {
                if people.is_none() {
                    people = Some(lender.people().await.map_err(CatalogError::Protocol)?);
                }
                next = people
                    .iter()
                    .flatten()
                    .find(|p| !passed.contains(p))
                    .cloned();
            }
            let Some(person) = next else {
                break;
            };
            let headers = match lender.headers(&person).await {
                Ok(h) => h,
                Err(why) => {
                    tracing::debug!(%why, "tool catalog: a connected person's credential does not work now");
                    self.drop_lent(&person);
                    passed.push(person);
                    continue;
                }
            };
            self.lend(Lent {
                person: person.clone(),
                headers,
            });
            match self.list_once().await {
                Err(CatalogError::Status(status))
                    if status == reqwest::StatusCode::UNAUTHORIZED
                        || status == reqwest::StatusCode::FORBIDDEN =>
                {
                    tracing::debug!(%status, "tool catalog: the upstream refused a connected person's credential");
                    self.drop_lent(&person);
                    passed.push(person);
                }
                other => {
                    self.awaiting.store(false, Ordering::Release);
                    return other;
                }
            }
        }
        self.awaiting.store(true, Ordering::Release);
        Err(CatalogError::NoLender)
    }

    /// The credential in use, if any.
    pub(super) fn lent(&self) -> Option<Lent> {
        self.lent.lock().ok().and_then(|l| l.clone())
    }

    /// Uses `lent` from now on; another person's than before needs a session of its own.
    fn lend(&self, lent: Lent) {
        let switched = match self.lent.lock() {
            Ok(mut slot) => {
                let switched = slot.as_ref().is_none_or(|l| l.person != lent.person);
                *slot = Some(lent);
                switched
            }
            Err(_) => true,
        };
        if switched {
            self.set_session(None);
        }
    }

    /// Stops using `person`'s credential (and the session opened with it).
    fn drop_lent(&self, person: &str) {
        if let Ok(mut slot) = self.lent.lock()
            && slot.as_ref().is_some_and(|l| l.person == person)
        {
            *slot = None;
            self.set_session(None);
        }
        if let Ok(mut newest) = self.newest.lock()
            && newest.as_deref() == Some(person)
        {
            *newest = None;
        }
    }
}
