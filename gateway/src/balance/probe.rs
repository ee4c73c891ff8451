//! The health prober: a pingora background service that TCP-connects to every instance of the
//! balanced routes when [`Health::due`](super::Health::due) says so (every second while an
//! instance is down, every few seconds while it is up) and records the outcome.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use pingora::{server::ShutdownWatch, services::background::BackgroundService};
use tokio::task::JoinSet;

use super::Instances;
use pforte_clock::Clock;

/// How long one probe may take to connect (below the one-second round).
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_millis(900);
/// How often the prober looks for due probes.
pub(crate) const ROUND_EVERY: Duration = Duration::from_secs(1);

/// Probes the instances of every route given (routes with one instance are never due).
#[derive(Debug)]
pub(crate) struct Prober {
    routes: Vec<Arc<Instances>>,
    clock: Arc<dyn Clock>,
    timeout: Duration,
}

impl Prober {
    pub(crate) fn new(routes: Vec<Arc<Instances>>, clock: Arc<dyn Clock>) -> Self {
        Self {
            routes,
            clock,
            timeout: PROBE_TIMEOUT,
        }
    }

    /// Whether any route has instances to probe at all.
    pub(crate) fn has_work(&self) -> bool {
        self.routes.iter().any(|r| r.len() > 1)
    }

    /// One round: every due instance is probed at once; each outcome is recorded when it is
    /// known. Returns how many instances were probed.
    pub(crate) async fn round(&self) -> usize {
        let now = self.clock.now_ms();
        let mut probes = JoinSet::new();
        for route in &self.routes {
            for i in route.due(now) {
                let Some(instance) = route.get(i) else {
                    continue;
                };
                let authority = instance.authority.clone();
                let route = Arc::clone(route);
                let timeout = self.timeout;
                probes.spawn(async move { (route, i, reachable(&authority, timeout).await) });
            }
        }
        let mut probed = 0;
        while let Some(done) = probes.join_next().await {
            if let Ok((route, i, up)) = done {
                route.probed(i, up, self.clock.now_ms());
                probed += 1;
            }
        }
        probed
    }
}

/// Whether a TCP connection to `authority` (`host:port`, resolved now, every address tried)
/// opens within `timeout`. The connection is closed at once.
pub(crate) async fn reachable(authority: &str, timeout: Duration) -> bool {
    matches!(
        tokio::time::timeout(timeout, tokio::net::TcpStream::connect(authority)).await,
        Ok(Ok(_))
    )
}

#[async_trait]
impl BackgroundService for Prober {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        if !self.has_work() {
            return;
        }
        loop {
            self.round().await;
            tokio::select! {
                _ = shutdown.changed() => return,
                () = tokio::time::sleep(ROUND_EVERY) => {}
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use pforte_clock::ManualClock;

    use crate::balance::PROBE_UP_EVERY_MS;

    /// A port nothing listens on (bound a moment ago, then released).
    fn closed_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[tokio::test]
    async fn a_round_marks_what_answers_up_and_what_does_not_down() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let live = listener.local_addr().unwrap().port();
        let dead = closed_port();
        let urls = [
            format!("http://127.0.0.1:{live}/mcp"),
            format!("http://127.0.0.1:{dead}/mcp"),
        ];
        let route = Arc::new(Instances::new("plans", &urls).unwrap());
        let single =
            Arc::new(Instances::new("one", &[format!("http://127.0.0.1:{dead}/mcp")]).unwrap());
        let clock = ManualClock::at(Duration::from_secs(100));
        let prober = Prober::new(vec![route.clone(), single.clone()], Arc::new(clock.clone()));
        assert!(prober.has_work());

        assert_eq!(
            prober.round().await,
            2,
            "both never checked; the single one never"
        );
        assert!(route.is_healthy(0));
        assert!(!route.is_healthy(1));
        assert_eq!(route.pick(), Some(0));
        assert_eq!(route.pick(), Some(0));

        // Nothing is due within the second; then only the down one.
        assert_eq!(prober.round().await, 0);
        clock.advance(Duration::from_secs(1));
        assert_eq!(prober.round().await, 1);
        assert!(!route.is_healthy(1));

        // The dead one comes back: the next round puts it back.
        let back = tokio::net::TcpListener::bind(("127.0.0.1", dead)).await;
        let Ok(_back) = back else {
            return; // the port was taken meanwhile; nothing to learn here
        };
        clock.advance(Duration::from_secs(1));
        assert_eq!(prober.round().await, 1);
        assert!(route.is_healthy(1));

        // The live one dies: noticed by the slower probe of healthy instances.
        drop(listener);
        clock.advance(Duration::from_millis(PROBE_UP_EVERY_MS));
        prober.round().await;
        assert!(!route.is_healthy(0));
        assert_eq!(route.pick(), Some(1));
    }

    #[tokio::test]
    async fn a_prober_without_balanced_routes_has_nothing_to_do() {
        let one = Arc::new(Instances::new("one", &["http://127.0.0.1:1/mcp"]).unwrap());
        let prober = Prober::new(vec![one], Arc::new(ManualClock::at(Duration::from_secs(1))));
        assert!(!prober.has_work());
        assert_eq!(prober.round().await, 0);
    }

    #[tokio::test]
    async fn reachable_needs_a_listener_in_time() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        assert!(reachable(&addr, PROBE_TIMEOUT).await);
        let dead = format!("127.0.0.1:{}", closed_port());
        assert!(!reachable(&dead, PROBE_TIMEOUT).await);
    }
}
