//! The instances of one route (`urls = [...]`: replicas of one MCP server). Which instance a
//! request that opens a session, or a stateless one, goes to (round-robin over the healthy
//! ones); where a session's requests go (the instance recorded with it, or [`Gone`], which the
//! proxy answers 404 so that the client re-initializes); and health: an instance is marked
//! down when connecting to it fails and put back when the prober ([`probe::Prober`]) reaches
//! it again.
//!
//! The decisions live in [`Health`], plain data with `now` passed in; [`Instances`] holds it
//! behind a lock for the request path. A route with a single instance has nothing to balance:
//! every request goes to it whatever its health (its failures are answered as before).

pub(crate) mod probe;

use std::sync::Mutex;

/// Every down instance is probed this often.
pub(crate) const PROBE_DOWN_EVERY_MS: u64 = 1_000;
/// Every healthy instance is probed this often, so a dead one is noticed without traffic.
pub(crate) const PROBE_UP_EVERY_MS: u64 = 5_000;

/// An instance URL the balancer cannot use.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum BalanceError {
    #[error("a route needs at least one instance URL")]
    Empty,
    #[error("instance URL {url:?}: {reason}")]
    Url { url: String, reason: &'static str },
    #[error("instance URL {0:?} is listed twice")]
    Duplicate(String),
}

/// Why a session's requests cannot reach its instance: the client must open a new session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gone {
    /// The session record names no instance (bound on first use, or written before
    /// instances were kept), and the route has several.
    Unrecorded,
    /// The recorded instance is no longer in the route's configuration.
    Removed,
    /// The recorded instance is down.
    Down,
}

impl Gone {
    /// A short reason for logs.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Unrecorded => "session has no recorded instance",
            Self::Removed => "session's instance is no longer configured",
            Self::Down => "session's instance is down",
        }
    }
}

/// One instance: its URL as configured (what session records keep) and where the prober
/// connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Instance {
    pub(crate) url: String,
    /// `host:port` (IPv6 literals in brackets), resolved at every probe.
    pub(crate) authority: String,
}

impl Instance {
    /// An `http://` or `https://` URL with a host; the port defaults to the scheme's.
    pub(crate) fn parse(url: &str) -> Result<Self, BalanceError> {
        let bad = |reason| BalanceError::Url {
            url: url.to_owned(),
            reason,
        };
        let uri: http::Uri = url.parse().map_err(|_| bad("not a URL"))?;
        let default_port = match uri.scheme_str() {
            Some("http") => 80,
            Some("https") => 443,
            _ => return Err(bad("must start with http:// or https://")),
        };
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| bad("has no host"))?;
        let port = uri.port_u16().unwrap_or(default_port);
        Ok(Self {
            url: url.to_owned(),
            authority: format!("{host}:{port}"),
        })
    }
}

/// What a health change was, for the one log line it deserves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// It was up and is now down.
    WentDown,
    /// It was down and is now up; it had been down since this time (ms).
    CameBack { down_since_ms: u64 },
    /// No change.
    Same,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct State {
    /// Down since this time (ms); `None` while healthy.
    down_since_ms: Option<u64>,
    /// The last probe, or the failure that marked it down (ms).
    checked_ms: Option<u64>,
}

/// The health of a route's instances and the round-robin cursor. Pure: every decision takes
/// its inputs and `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Health {
    states: Vec<State>,
    /// The index the next pick starts from.
    next: usize,
}

impl Health {
    /// `n` instances, all healthy.
    pub(crate) fn new(n: usize) -> Self {
        Self {
            states: vec![State::default(); n],
            next: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.states.len()
    }

    /// Whether instance `i` takes requests (out of range: no).
    pub(crate) fn is_healthy(&self, i: usize) -> bool {
        self.states
            .get(i)
            .is_some_and(|s| s.down_since_ms.is_none())
    }

    /// The instance for a request that opens a session or needs none: the next healthy one
    /// after the last pick, round-robin; `None` when every instance is down. A single instance
    /// is always picked.
    pub(crate) fn pick(&mut self) -> Option<usize> {
        let n = self.states.len();
        if n == 1 {
            return Some(0);
        }
        let start = self.next % n.max(1);
        let chosen = (0..n)
            .map(|k| (start + k) % n)
            .find(|&i| self.is_healthy(i))?;
        self.next = (chosen + 1) % n;
        Some(chosen)
    }

    /// Like [`Self::pick`], but never `avoid` (the instance a retried request just failed on)
    /// while another one is healthy.
    pub(crate) fn pick_other(&mut self, avoid: usize) -> Option<usize> {
        let first = self.pick()?;
        if first != avoid {
            return Some(first);
        }
        match self.pick() {
            Some(second) if second != avoid => Some(second),
            _ => Some(first),
        }
    }

    /// Instance `i` failed (a connect failure or a 502-class error) at `now`.
    pub(crate) fn mark_down(&mut self, i: usize, now_ms: u64) -> Change {
        let Some(s) = self.states.get_mut(i) else {
            return Change::Same;
        };
        s.checked_ms = Some(now_ms);
        if s.down_since_ms.is_some() {
            return Change::Same;
        }
        s.down_since_ms = Some(now_ms);
        Change::WentDown
    }

    /// Instance `i` answered again.
    pub(crate) fn mark_up(&mut self, i: usize) -> Change {
        match self.states.get_mut(i).and_then(|s| s.down_since_ms.take()) {
            Some(down_since_ms) => Change::CameBack { down_since_ms },
            None => Change::Same,
        }
    }

    /// The outcome of probing `i` at `now`: answered (`up`) or not.
    pub(crate) fn probed(&mut self, i: usize, up: bool, now_ms: u64) -> Change {
        if let Some(s) = self.states.get_mut(i) {
            s.checked_ms = Some(now_ms);
        }
        if up {
            self.mark_up(i)
        } else {
            self.mark_down(i, now_ms)
        }
    }

    /// The instances to probe at `now`: a down one [`PROBE_DOWN_EVERY_MS`] after it was last
    /// checked, a healthy one every [`PROBE_UP_EVERY_MS`], one never checked at once. A single
    /// instance is never probed (its health decides nothing).
    pub(crate) fn due(&self, now_ms: u64) -> Vec<usize> {
        if self.states.len() < 2 {
            return Vec::new();
        }
        self.states
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                let every = if s.down_since_ms.is_some() {
                    PROBE_DOWN_EVERY_MS
                } else {
                    PROBE_UP_EVERY_MS
                };
                s.checked_ms
                    .is_none_or(|at| now_ms.saturating_sub(at) >= every || now_ms < at)
            })
            .map(|(i, _)| i)
            .collect()
    }
}

/// Where the requests of a session recorded with `instance` go, given the route's instance
/// `urls` and their health: its index, or why it is [`Gone`]. A route with one instance
/// serves every session (whatever the record says: its URL may have been rewritten).
pub(crate) fn route_session(
    urls: &[&str],
    health: &Health,
    instance: Option<&str>,
) -> Result<usize, Gone> {
    if urls.len() == 1 {
        return Ok(0);
    }
    let recorded = instance.ok_or(Gone::Unrecorded)?;
    let i = urls
        .iter()
        .position(|u| *u == recorded)
        .ok_or(Gone::Removed)?;
    if health.is_healthy(i) {
        Ok(i)
    } else {
        Err(Gone::Down)
    }
}

/// Whether a failure talking to an instance takes it out until the prober reaches it again:
/// it could not be connected to, or an established connection to it broke (what is answered
/// 502). A slow answer (504) does not, nor a TLS failure: that is a certificate problem a TCP
/// probe cannot see, so the instance would only flap.
pub(crate) fn marks_down(e: &pingora::Error) -> bool {
    use pingora::ErrorType as T;
    e.esource() == &pingora::ErrorSource::Upstream
        && matches!(
            e.etype(),
            T::ConnectRefused
                | T::ConnectNoRoute
                | T::ConnectTimedout
                | T::ConnectError
                | T::SocketError
                | T::ConnectionClosed
                | T::ReadError
                | T::WriteError
        )
}

/// Whether a request whose connection to an instance failed is tried on another one (pingora's
/// retry, which asks for a peer again): only a request without a session (an `initialize` or
/// a stateless request, which any instance serves alike), and only while some of the route's
/// `instances` are untried (`tried` counts the failed attempts).
pub(crate) fn retries_elsewhere(has_session: bool, instances: usize, tried: usize) -> bool {
    !has_session && tried < instances
}

/// The instances of one route, shared by the request path and the prober
/// (`Arc<Instances>`).
#[derive(Debug)]
pub(crate) struct Instances {
    /// The route's name, for logs.
    route: String,
    instances: Vec<Instance>,
    health: Mutex<Health>,
}

impl Instances {
    /// The instances of route `route`, from its URLs in configuration order; all start
    /// healthy (the prober checks them at once).
    pub(crate) fn new<S: AsRef<str>>(route: &str, urls: &[S]) -> Result<Self, BalanceError> {
        if urls.is_empty() {
            return Err(BalanceError::Empty);
        }
        let mut instances: Vec<Instance> = Vec::with_capacity(urls.len());
        for url in urls {
            let instance = Instance::parse(url.as_ref())?;
            if instances.iter().any(|i| i.url == instance.url) {
                return Err(BalanceError::Duplicate(instance.url));
            }
            instances.push(instance);
        }
        Ok(Self {
            route: route.to_owned(),
            health: Mutex::new(Health::new(instances.len())),
            instances,
        })
    }

    pub(crate) fn route(&self) -> &str {
        &self.route
    }

    pub(crate) fn len(&self) -> usize {
        self.instances.len()
    }

    /// Instance `i` (in configuration order).
    pub(crate) fn get(&self, i: usize) -> Option<&Instance> {
        self.instances.get(i)
    }

    /// Every instance, in configuration order.
    pub(crate) fn all(&self) -> &[Instance] {
        &self.instances
    }

    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        // Every update is a single assignment: a panic cannot leave it half-done.
        self.health
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// See [`Health::pick`].
    pub(crate) fn pick(&self) -> Option<usize> {
        self.health().pick()
    }

    /// See [`Health::pick_other`].
    pub(crate) fn pick_other(&self, avoid: usize) -> Option<usize> {
        self.health().pick_other(avoid)
    }

    /// See [`route_session`].
    pub(crate) fn route_session(&self, instance: Option<&str>) -> Result<usize, Gone> {
        let urls: Vec<&str> = self.instances.iter().map(|i| i.url.as_str()).collect();
        route_session(&urls, &self.health(), instance)
    }

    /// Whether instance `i` takes requests.
    pub(crate) fn is_healthy(&self, i: usize) -> bool {
        self.health().is_healthy(i)
    }

    #[cfg(test)]
    /// Whether any instance takes requests (a route with one instance always does).
    pub(crate) fn any_healthy(&self) -> bool {
        self.healthy_count() > 0
    }

    /// How many instances take requests (a route with one instance: always 1).
    pub(crate) fn healthy_count(&self) -> usize {
        let health = self.health();
        if health.len() == 1 {
            return 1;
        }
        (0..health.len()).filter(|&i| health.is_healthy(i)).count()
    }

    /// Instance `i` failed at `now`; logs the change once.
    pub(crate) fn mark_down(&self, i: usize, now_ms: u64, why: &str) {
        let change = self.health().mark_down(i, now_ms);
        self.log(i, change, now_ms, why);
    }

    #[cfg(test)]
    /// Instance `i` answered again at `now`; logs the change once.
    pub(crate) fn mark_up(&self, i: usize, now_ms: u64) {
        let change = self.health().mark_up(i);
        self.log(i, change, now_ms, "it answers again");
    }

    /// See [`Health::due`].
    pub(crate) fn due(&self, now_ms: u64) -> Vec<usize> {
        self.health().due(now_ms)
    }

    /// Records a probe's outcome; logs a change once.
    pub(crate) fn probed(&self, i: usize, up: bool, now_ms: u64) {
        let change = self.health().probed(i, up, now_ms);
        let why = if up {
            "it answers again"
        } else {
            "the probe could not connect"
        };
        self.log(i, change, now_ms, why);
    }

    fn log(&self, i: usize, change: Change, now_ms: u64, why: &str) {
        let url = self.instances.get(i).map_or("?", |i| i.url.as_str());
        match change {
            Change::WentDown => {
                tracing::warn!(route = %self.route, instance = url, reason = why, "instance down");
            }
            Change::CameBack { down_since_ms } => tracing::info!(
                route = %self.route,
                instance = url,
                down_ms = now_ms.saturating_sub(down_since_ms),
                "instance up"
            ),
            Change::Same => {}
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const A: &str = "http://127.0.0.1:9001/mcp";
    const B: &str = "http://127.0.0.1:9002/mcp";
    const C: &str = "https://mcp-c.internal/mcp";

    #[test]
    fn instance_urls_give_the_probe_target() {
        assert_eq!(Instance::parse(A).unwrap().authority, "127.0.0.1:9001");
        assert_eq!(Instance::parse(C).unwrap().authority, "mcp-c.internal:443");
        assert_eq!(
            Instance::parse("http://svc/mcp").unwrap().authority,
            "svc:80"
        );
        assert_eq!(
            Instance::parse("http://[::1]:8080/mcp").unwrap().authority,
            "[::1]:8080"
        );
        for bad in [
            "unix:/run/mcp.sock",
            "ftp://x/mcp",
            "/mcp",
            "http:///mcp",
            "",
        ] {
            assert!(
                matches!(Instance::parse(bad), Err(BalanceError::Url { .. })),
                "{bad}"
            );
        }
        assert_eq!(
            Instances::new::<&str>("r", &[]).unwrap_err(),
            BalanceError::Empty
        );
        assert_eq!(
            Instances::new("r", &[A, B, A]).unwrap_err(),
            BalanceError::Duplicate(A.into())
        );
    }

    #[test]
    fn pick_goes_round_robin_over_the_healthy_ones() {
        let mut h = Health::new(3);
        let picks: Vec<_> = (0..6).map(|_| h.pick().unwrap()).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
        h.mark_down(1, 10);
        let picks: Vec<_> = (0..4).map(|_| h.pick().unwrap()).collect();
        assert_eq!(picks, [0, 2, 0, 2]);
        h.mark_down(0, 11);
        assert_eq!(h.pick(), Some(2));
        assert_eq!(h.pick(), Some(2));
        h.mark_down(2, 12);
        assert_eq!(h.pick(), None, "every instance down");
        h.mark_up(1);
        assert_eq!(h.pick(), Some(1));
        assert_eq!(h.pick(), Some(1));
    }

    #[test]
    fn a_single_instance_is_always_picked_and_never_probed() {
        let mut h = Health::new(1);
        h.mark_down(0, 5);
        assert_eq!(h.pick(), Some(0));
        assert!(h.due(1_000_000).is_empty());
        assert_eq!(route_session(&[A], &h, None), Ok(0));
        assert_eq!(route_session(&[A], &h, Some(B)), Ok(0));
    }

    #[test]
    fn pick_other_avoids_the_instance_that_just_failed_while_another_is_healthy() {
        let mut h = Health::new(3);
        assert_eq!(h.pick(), Some(0));
        // The cursor is at 1; avoiding 1 skips to 2.
        assert_eq!(h.pick_other(1), Some(2));
        assert_eq!(h.pick_other(1), Some(0));
        h.mark_down(0, 1);
        h.mark_down(2, 1);
        // Only the avoided one is left: it is still better than nothing.
        assert_eq!(h.pick_other(1), Some(1));
        h.mark_down(1, 1);
        assert_eq!(h.pick_other(1), None);
    }

    #[test]
    fn mark_down_and_up_report_changes_once() {
        let mut h = Health::new(2);
        assert!(h.is_healthy(0));
        assert_eq!(h.mark_down(0, 100), Change::WentDown);
        assert_eq!(h.mark_down(0, 200), Change::Same);
        assert!(!h.is_healthy(0));
        assert_eq!(
            h.mark_up(0),
            Change::CameBack { down_since_ms: 100 },
            "down since the first failure"
        );
        assert_eq!(h.mark_up(0), Change::Same);
        assert!(h.is_healthy(0));
        // Out of range: never healthy, changes nothing.
        assert!(!h.is_healthy(7));
        assert_eq!(h.mark_down(7, 1), Change::Same);
        assert_eq!(h.mark_up(7), Change::Same);
    }

    #[test]
    fn probes_are_due_every_second_while_down_and_every_few_seconds_while_up() {
        let mut h = Health::new(2);
        assert_eq!(h.due(0), [0, 1], "never checked: at once");
        h.probed(0, true, 0);
        h.probed(1, true, 0);
        assert!(h.due(PROBE_UP_EVERY_MS - 1).is_empty());
        assert_eq!(h.due(PROBE_UP_EVERY_MS), [0, 1]);
        // Traffic finds 1 dead at 2 000: its next probe is a second later.
        assert_eq!(h.mark_down(1, 2_000), Change::WentDown);
        assert!(h.due(2_999).is_empty());
        assert_eq!(h.due(3_000), [1]);
        // The probe fails: down still, probed again a second later.
        assert_eq!(h.probed(1, false, 3_000), Change::Same);
        assert_eq!(h.due(4_000), [1]);
        // It answers: up, and probed at the slower pace again.
        assert_eq!(
            h.probed(1, true, 4_000),
            Change::CameBack {
                down_since_ms: 2_000
            }
        );
        assert_eq!(h.due(5_000), [0], "0 was checked at 0");
        assert_eq!(h.due(9_000), [0, 1]);
        // A healthy instance whose probe fails goes down.
        assert_eq!(h.probed(0, false, 9_000), Change::WentDown);
        assert!(!h.is_healthy(0));
        // A clock that went backwards probes rather than waiting for it to catch up.
        assert_eq!(h.due(8_000), [0]);
    }

    #[test]
    fn a_session_goes_to_its_instance_or_is_gone() {
        let urls = [A, B];
        let mut h = Health::new(2);
        assert_eq!(route_session(&urls, &h, Some(A)), Ok(0));
        assert_eq!(route_session(&urls, &h, Some(B)), Ok(1));
        assert_eq!(route_session(&urls, &h, None), Err(Gone::Unrecorded));
        assert_eq!(route_session(&urls, &h, Some(C)), Err(Gone::Removed));
        // Exact strings: every gateway with the same config agrees.
        assert_eq!(
            route_session(&urls, &h, Some("http://127.0.0.1:9001/mcp/")),
            Err(Gone::Removed)
        );
        h.mark_down(1, 1);
        assert_eq!(route_session(&urls, &h, Some(B)), Err(Gone::Down));
        assert_eq!(route_session(&urls, &h, Some(A)), Ok(0));
        h.mark_up(1);
        assert_eq!(route_session(&urls, &h, Some(B)), Ok(1));
    }

    #[test]
    fn connect_failures_and_broken_connections_mark_down_timeouts_and_tls_do_not() {
        use pingora::{Error, ErrorType as T};
        for t in [
            T::ConnectRefused,
            T::ConnectNoRoute,
            T::ConnectTimedout,
            T::ConnectError,
            T::ConnectionClosed,
            T::ReadError,
        ] {
            assert!(marks_down(&Error::new_up(t.clone())), "{t:?}");
            assert!(
                !marks_down(&Error::new_down(t.clone())),
                "client side {t:?}"
            );
        }
        for t in [
            T::ReadTimedout,
            T::TLSHandshakeFailure,
            T::InvalidCert,
            T::HTTPStatus(502),
            T::InternalError,
        ] {
            assert!(!marks_down(&Error::new_up(t.clone())), "{t:?}");
        }
    }

    #[test]
    fn only_requests_without_a_session_are_retried_and_only_on_untried_instances() {
        assert!(retries_elsewhere(false, 2, 1));
        assert!(!retries_elsewhere(false, 2, 2));
        assert!(
            !retries_elsewhere(true, 2, 1),
            "a session lives on its instance"
        );
        assert!(!retries_elsewhere(false, 1, 1));
    }

    #[test]
    fn instances_share_one_health_for_the_request_path() {
        let inst = Instances::new("plans", &[A, B]).unwrap();
        assert_eq!(inst.route(), "plans");
        assert_eq!(inst.len(), 2);
        assert_eq!(inst.get(1).unwrap().url, B);
        assert_eq!(inst.pick(), Some(0));
        inst.mark_down(1, 1_000, "connect refused");
        assert_eq!(inst.pick(), Some(0));
        assert_eq!(inst.route_session(Some(B)), Err(Gone::Down));
        assert_eq!(inst.due(1_500), [0], "0 never checked; 1 a second after");
        inst.probed(1, true, 2_000);
        assert!(inst.is_healthy(1));
        assert_eq!(inst.route_session(Some(B)), Ok(1));
        inst.mark_down(0, 3_000, "502");
        inst.mark_up(0, 3_500);
        assert!(inst.is_healthy(0));
        assert!(inst.any_healthy());
        inst.mark_down(0, 4_000, "refused");
        inst.mark_down(1, 4_000, "refused");
        assert!(!inst.any_healthy());
        assert_eq!(inst.pick(), None);
        let one = Instances::new("one", &[A]).unwrap();
        one.mark_down(0, 1, "refused");
        assert!(one.any_healthy(), "a single instance is never taken out");
    }
}
