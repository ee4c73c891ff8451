//! Connect links handed out, so that one person gets one link per route while it is fresh:
//! every request of a caller not yet connected asks for a link, and minting (and storing) a
//! new one each time would fill the vault at the person's request rate. Per gateway process;
//! a link taken (used) is forgotten here, and the vault's record stays the one truth.

use std::{collections::HashMap, sync::Mutex, time::Duration};

use crate::vault::LinkGrant;

/// How long a handed-out link is handed out again: half its life, so a link shown still works
/// for at least the other half.
pub(crate) fn reuse_window(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis() / 2).unwrap_or(u64::MAX)
}

/// Whether a link issued at `issued_ms` may be handed out again at `now_ms`.
pub(crate) fn reusable(issued_ms: u64, now_ms: u64, window_ms: u64) -> bool {
    now_ms >= issued_ms && now_ms - issued_ms < window_ms
}

/// The most links remembered; past it, the oldest half is dropped (a link then is minted anew).
const MAX_REMEMBERED: usize = 10_000;

/// Links by whose and which route they are.
#[derive(Debug, Default)]
pub(crate) struct Links {
    issued: Mutex<HashMap<String, (String, u64)>>,
}

fn key(grant: &LinkGrant) -> String {
    format!(
        "{}\n{}\n{:?}\n{}",
        grant.route, grant.person, grant.principal_kind, grant.subject
    )
}

impl Links {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, u64)>> {
        self.issued.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The link handed out for `grant` that may be handed out again at `now_ms`.
    pub(crate) fn fresh(&self, grant: &LinkGrant, now_ms: u64, window_ms: u64) -> Option<String> {
        self.lock()
            .get(&key(grant))
            .filter(|(_, at)| reusable(*at, now_ms, window_ms))
            .map(|(url, _)| url.clone())
    }

    /// Remembers `url` as `grant`'s link, issued at `now_ms`; forgets stale ones.
    pub(crate) fn keep(&self, grant: &LinkGrant, url: String, now_ms: u64, window_ms: u64) {
        let mut issued = self.lock();
        issued.retain(|_, (_, at)| reusable(*at, now_ms, window_ms));
        if issued.len() >= MAX_REMEMBERED {
            let mut ages: Vec<u64> = issued.values().map(|(_, at)| *at).collect();
            ages.sort_unstable();
            let cut = ages[ages.len() / 2];
            issued.retain(|_, (_, at)| *at > cut);
        }
        issued.insert(key(grant), (url, now_ms));
    }

    /// `grant`'s link was taken: hand out a new one next time.
    pub(crate) fn taken(&self, grant: &LinkGrant) {
        self.lock().remove(&key(grant));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::AuthKind;

    fn grant(person: &str) -> LinkGrant {
        LinkGrant {
            route: "search".into(),
            person: person.into(),
            principal_kind: AuthKind::Static,
            subject: person.into(),
        }
    }

    #[test]
    fn one_link_per_person_and_route_while_fresh_and_a_new_one_once_taken() {
        let links = Links::default();
        let window = reuse_window(Duration::from_secs(600));
        assert_eq!(window, 300_000);
        let hana = grant("hana");
        assert_eq!(links.fresh(&hana, 1_000, window), None);
        links.keep(
            &hana,
            "https://gw/connect/search?link=a".into(),
            1_000,
            window,
        );
        assert_eq!(
            links.fresh(&hana, 200_000, window).as_deref(),
            Some("https://gw/connect/search?link=a")
        );
        assert_eq!(links.fresh(&grant("ivo"), 2_000, window), None);
        assert_eq!(links.fresh(&hana, 301_000, window), None, "stale");
        links.taken(&hana);
        assert_eq!(links.fresh(&hana, 2_000, window), None, "taken");
        assert!(!reusable(5, 4, window), "a clock going back");
    }

    #[test]
    fn remembered_links_stay_bounded() {
        let links = Links::default();
        let window = 1_000_000;
        for i in 0..MAX_REMEMBERED + 10 {
            links.keep(&grant(&format!("p{i}")), String::new(), i as u64, window);
        }
        assert!(links.lock().len() <= MAX_REMEMBERED);
    }
}
